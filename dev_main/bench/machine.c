/*
 * machine.c — what ran where: CPU model, cores, last-level cache, memory, OS, compiler, build.
 * Read from the OS once; anything it cannot tell is reported as unknown, never guessed.
 */
#include "bench.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

#ifndef RP_BENCH_BUILD_TYPE
#  define RP_BENCH_BUILD_TYPE "unknown"
#endif

static void read_cpu_model(char *out, size_t size)
{
    snprintf(out, size, "unknown CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (!colon || (strncmp(line, "model name", 10) != 0 && strncmp(line, "Model", 5) != 0))
            continue;
        char *value = colon + 1;
        value += strspn(value, " \t");
        value[strcspn(value, "\n")] = '\0';
        snprintf(out, size, "%s", value);
        break;
    }
    fclose(f);
}

/* sysfs first: under a hypervisor sysconf's cache sizes can be wrong by 10x. */
static double last_level_cache_bytes(void)
{
    int best_level = 0;
    double best = 0;
    for (int i = 0; i < 8; i++) {
        char path[128], text[32];
        int level = 0;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/level", i);
        FILE *f = fopen(path, "r");
        if (!f)
            break;
        if (fscanf(f, "%d", &level) != 1)
            level = 0;
        fclose(f);
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        if (!(f = fopen(path, "r")))
            continue;
        if (fgets(text, sizeof text, f)) {
            char *unit;
            double size = strtod(text, &unit);
            size *= *unit == 'K' ? 1024.0 : *unit == 'M' ? 1048576.0 : 1.0;
            if (level > best_level) {
                best_level = level;
                best = size;
            }
        }
        fclose(f);
    }
#ifdef _SC_LEVEL3_CACHE_SIZE
    if (best <= 0)
        best = (double)sysconf(_SC_LEVEL3_CACHE_SIZE);
#endif
    return best > 0 ? best : 32.0 * 1048576.0;
}

const bench_machine *bench_machine_info(void)
{
    static bench_machine m;
    static int ready;
    if (ready)
        return &m;
    read_cpu_model(m.cpu, sizeof m.cpu);
    const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    m.online_cpus = cpus < 1 ? 1 : (int)cpus;
    m.llc_bytes = last_level_cache_bytes();
    m.memory_bytes = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
    struct utsname u;
    if (uname(&u) == 0)
        snprintf(m.os, sizeof m.os, "%s %s %s", u.sysname, u.release, u.machine);
    else
        snprintf(m.os, sizeof m.os, "unknown OS");
#if defined(__clang__)
    snprintf(m.compiler, sizeof m.compiler, "clang %s", __clang_version__);
#elif defined(__GNUC__)
    snprintf(m.compiler, sizeof m.compiler, "gcc %s", __VERSION__);
#else
    snprintf(m.compiler, sizeof m.compiler, "unknown compiler");
#endif
    snprintf(m.build_type, sizeof m.build_type, "%s", RP_BENCH_BUILD_TYPE);
#ifdef RP_BENCH_HAVE_CUDA
    m.cuda_compiled = 1;
#endif
    ready = 1;
    return &m;
}
