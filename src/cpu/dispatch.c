/*
 * dispatch.c — picks the CPU kernel level once per process.
 *
 * The table starts as the reference kernel; the best level the CPU supports then replaces its
 * entries. ROPEPOOL_CPU=avx512|avx2|portable|reference caps the level (a level the CPU lacks is
 * refused with a warning, never executed), and ROPEPOOL_VERBOSE=1 prints the choice.
 */
#include "kernels.h"

#ifdef RP_HAVE_X86_KERNELS
#  include <cpuid.h>
#endif
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum level { LEVEL_REFERENCE, LEVEL_PORTABLE, LEVEL_AVX2, LEVEL_AVX512 };
static const char *const level_names[] = {"reference", "portable", "avx2", "avx512"};

static rp_cpu_kernels table;
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

#ifdef RP_HAVE_X86_KERNELS
/* CPUID leaf 1, ECX bit 29: __builtin_cpu_supports has no "f16c" before clang 15. F16C needs
 * the same OS support as AVX, which the "avx2" check already requires. */
static int has_f16c(void)
{
    unsigned eax, ebx, ecx, edx;
    return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C);
}
#endif

static enum level best_supported(void)
{
#ifdef RP_HAVE_X86_KERNELS
    __builtin_cpu_init();
    /* What src/CMakeLists.txt compiles each level's file for (AVX-512 builds on AVX2). */
    const int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c();
    if (avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
        return LEVEL_AVX512;
    if (avx2)
        return LEVEL_AVX2;
#endif
    return LEVEL_PORTABLE;
}

static void fill_table(void)
{
    enum level level = best_supported();
    const char *forced = getenv("ROPEPOOL_CPU");
    if (forced && *forced) {
        int found = -1;
        for (int i = 0; i < 4; i++)
            if (strcmp(forced, level_names[i]) == 0)
                found = i;
        if (found < 0)
            fprintf(stderr, "ropepool: ROPEPOOL_CPU=%s is not one of avx512, avx2, portable, "
                            "reference; using %s\n", forced, level_names[level]);
        else if ((enum level)found > level)
            fprintf(stderr, "ropepool: ROPEPOOL_CPU=%s is not supported by this CPU; using %s\n",
                    forced, level_names[level]);
        else
            level = (enum level)found;
    }
    table.name = level_names[LEVEL_REFERENCE];
    table.rope_pool[RP_F32] = table.rope_pool[RP_F16] = table.rope_pool[RP_BF16] = rp_ref_rope_pool;
    if (level >= LEVEL_PORTABLE)
        rp_cpu_fill_portable(&table);
#ifdef RP_HAVE_X86_KERNELS
    if (level >= LEVEL_AVX2)
        rp_cpu_fill_avx2(&table);
    if (level >= LEVEL_AVX512)
        rp_cpu_fill_avx512(&table);
#endif
    const char *verbose = getenv("ROPEPOOL_VERBOSE");
    if (verbose && *verbose && strcmp(verbose, "0") != 0)
        fprintf(stderr, "ropepool: CPU kernels: %s\n", table.name);
}

const rp_cpu_kernels *rp_cpu_kernel_table(void)
{
    pthread_once(&table_once, fill_table);
    return &table;
}

int rp_cpu_level_supported(const char *level)
{
    for (int i = 0; i < 4; i++)
        if (strcmp(level, level_names[i]) == 0)
            return (enum level)i <= best_supported();
    return 0;
}

const char *rp_cpu_kernel_name(void)
{
    return rp_cpu_kernel_table()->name;
}
