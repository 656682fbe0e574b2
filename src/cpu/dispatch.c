/*
 * dispatch.c — picks the CPU kernel level once per process.
 *
 * The table starts as the reference kernel; the levels up to the best one the CPU supports then
 * replace its entries in order (x86-64: portable, avx2, avx512; aarch64: portable, neon).
 * ROPEPOOL_CPU=<level> caps the level; a name that is no level, or a level the CPU or this build
 * lacks, is never run instead by another: every CPU call is then refused with a message naming it
 * (rp_cpu_check_settings) and rp_cpu_kernel_name says "none". ROPEPOOL_VERBOSE=1 prints the
 * choice, or the refusal; a ROPEPOOL_VERBOSE other than 0 or 1 (say "false", meant as off) is
 * refused the same way rather than read as either.
 */
#include "kernels.h"

#ifdef RP_HAVE_X86_KERNELS
#  include <cpuid.h>
#endif
#if defined(RP_HAVE_NEON_KERNELS) && defined(__linux__)
#  include <sys/auxv.h>
#endif
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void fill_reference(rp_cpu_kernels *t)
{
    t->name = "reference";
    t->rope_pool[RP_F32] = t->rope_pool[RP_F16] = t->rope_pool[RP_BF16] = rp_ref_rope_pool;
}

/* This build's levels, lowest first: each one's fill replaces the entries it improves on. */
static const struct {
    const char *name;
    void (*fill)(rp_cpu_kernels *table);
} levels[] = {
    {"reference", fill_reference},
    {"portable", rp_cpu_fill_portable},
#ifdef RP_HAVE_X86_KERNELS
    {"avx2", rp_cpu_fill_avx2},
    {"avx512", rp_cpu_fill_avx512},
#endif
#ifdef RP_HAVE_NEON_KERNELS
    {"neon", rp_cpu_fill_neon},
#endif
};
enum { NUM_LEVELS = (int)(sizeof levels / sizeof levels[0]) };

static rp_cpu_kernels table;
static pthread_once_t table_once = PTHREAD_ONCE_INIT;
/* The settings as read by fill_table: OK, or ROPEPOOL_CPU names a level this process cannot run
 * (forced_name), or ROPEPOOL_VERBOSE is neither 0 nor 1 (verbose_text). */
static enum { SETTINGS_OK, FORCED_UNKNOWN, FORCED_UNSUPPORTED, VERBOSE_UNKNOWN } settings_state;
static char forced_name[64], verbose_text[64];

#ifdef RP_HAVE_X86_KERNELS
/* CPUID leaf 1, ECX bit 29: __builtin_cpu_supports has no "f16c" before clang 15. F16C needs
 * the same OS support as AVX, which the "avx2" check already requires. */
static int has_f16c(void)
{
    unsigned eax, ebx, ecx, edx;
    return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C);
}
#endif

static int level_index(const char *name)
{
    for (int i = 0; i < NUM_LEVELS; i++)
        if (strcmp(name, levels[i].name) == 0)
            return i;
    return -1;
}

/* The index in levels[] of the best level this CPU runs. */
static int best_supported(void)
{
#ifdef RP_HAVE_X86_KERNELS
    __builtin_cpu_init();
    /* What src/CMakeLists.txt compiles each level's file for (AVX-512 builds on AVX2). */
    const int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c();
    if (avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
        return level_index("avx512");
    if (avx2)
        return level_index("avx2");
#endif
#ifdef RP_HAVE_NEON_KERNELS
    /* Advanced SIMD (with its float16 conversions) is part of the aarch64 base ISA; Linux still
     * reports it, so a kernel that disabled it is noticed. */
#  ifdef __linux__
    if (!(getauxval(AT_HWCAP) & HWCAP_ASIMD))
        return level_index("portable");
#  endif
    return level_index("neon");
#endif
    return level_index("portable");
}

/* The refusal of the settings (settings_state, once read). */
static rp_status settings_refusal(rp_err *err)
{
    if (settings_state == VERBOSE_UNKNOWN)
        return rp_fail(err, RP_ERR_INVALID_ARGUMENT,
                       "ROPEPOOL_VERBOSE=%s is neither 0 nor 1 (1 prints the CPU kernel choice to stderr); "
                       "set it to 0 or 1, or unset it", verbose_text);
    char names[128] = "";
    for (int i = NUM_LEVELS - 1; i >= 0; i--) {
        const size_t used = strlen(names);
        snprintf(names + used, sizeof names - used, "%s%s", levels[i].name, i ? ", " : "");
    }
    if (settings_state == FORCED_UNKNOWN)
        return rp_fail(err, RP_ERR_INVALID_ARGUMENT,
                       "ROPEPOOL_CPU=%s is not a CPU kernel level of this build (%s); unset it for the "
                       "best this CPU runs", forced_name, names);
    return rp_fail(err, RP_ERR_INVALID_ARGUMENT,
                   "ROPEPOOL_CPU=%s is a level this CPU cannot run: it runs at most %s (levels of this "
                   "build: %s)", forced_name, levels[best_supported()].name, names);
}

static void fill_table(void)
{
    int level = best_supported();
    const char *forced = getenv("ROPEPOOL_CPU");
    if (forced && *forced) {
        const int found = level_index(forced);
        settings_state = found < 0 ? FORCED_UNKNOWN : found > level ? FORCED_UNSUPPORTED : SETTINGS_OK;
        snprintf(forced_name, sizeof forced_name, "%s", forced);
        if (settings_state == SETTINGS_OK)
            level = found;
    }
    const char *verbose = getenv("ROPEPOOL_VERBOSE");
    const int print = verbose != NULL && strcmp(verbose, "1") == 0;
    if (verbose != NULL && *verbose && !print && strcmp(verbose, "0") != 0 && settings_state == SETTINGS_OK) {
        settings_state = VERBOSE_UNKNOWN;
        snprintf(verbose_text, sizeof verbose_text, "%s", verbose);
    }
    for (int i = 0; i <= level; i++)
        levels[i].fill(&table);
    if (print || settings_state == VERBOSE_UNKNOWN) {
        if (settings_state == SETTINGS_OK) {
            fprintf(stderr, "ropepool: CPU kernels: %s\n", table.name);
        } else {
            char message[256];
            rp_err err = {message, sizeof message};
            settings_refusal(&err); /* not rp_cpu_check_settings: this runs inside its pthread_once */
            fprintf(stderr, "ropepool: CPU kernels: none, every CPU call is refused: %s\n", message);
        }
    }
}

const rp_cpu_kernels *rp_cpu_kernel_table(void)
{
    pthread_once(&table_once, fill_table);
    return &table;
}

rp_status rp_cpu_check_settings(rp_err *err)
{
    rp_cpu_kernel_table();
    return settings_state == SETTINGS_OK ? RP_OK : settings_refusal(err);
}

int rp_cpu_level_supported(const char *level)
{
    const int i = level_index(level);
    return i >= 0 && i <= best_supported();
}

const char *rp_cpu_kernel_name(void)
{
    const char *name = rp_cpu_kernel_table()->name;
    return settings_state == SETTINGS_OK ? name : "none"; /* what runs: nothing (rp_cpu_check_settings) */
}
