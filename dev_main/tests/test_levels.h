/*
 * test_levels.h — running a validated call on each CPU kernel level directly (the dispatch
 * table filled by hand, the reference first), and checking it against the float64 formula:
 * shared by the suites that test every level in one process (numerics, mrope).
 */
#ifndef RP_TEST_LEVELS_H
#define RP_TEST_LEVELS_H

#include "test_verify.h"

#include "cpu/kernels.h"
#include "dtype.h"
#include "internal.h"
#include "ref/verify.h"

typedef struct level {
    const char *name;
    void (*fill)(rp_cpu_kernels *table);
    int supported;
} level;

static inline void fill_reference(rp_cpu_kernels *t)
{
    t->name = "reference";
    t->rope_pool[RP_F32] = t->rope_pool[RP_F16] = t->rope_pool[RP_BF16] = rp_ref_rope_pool;
}

static level levels[4];
static int num_levels;

static inline void find_levels(void)
{
    levels[num_levels++] = (level){"reference", fill_reference, 1};
    levels[num_levels++] = (level){"portable", rp_cpu_fill_portable, 1};
#ifdef RP_HAVE_X86_KERNELS
    levels[num_levels++] = (level){"avx2", rp_cpu_fill_avx2, rp_cpu_level_supported("avx2")};
    levels[num_levels++] = (level){"avx512", rp_cpu_fill_avx512, rp_cpu_level_supported("avx512")};
#endif
#ifdef RP_HAVE_NEON_KERNELS
    levels[num_levels++] = (level){"neon", rp_cpu_fill_neon, rp_cpu_level_supported("neon")};
#endif
    for (int i = 0; i < num_levels; i++)
        if (!levels[i].supported)
            printf("skip: this CPU cannot run the %s kernels\n", levels[i].name);
}

/* Validates f's args into a problem with its frequency table. */
static inline rp_problem problem_of(fixture *f, double *freq)
{
    rp_problem p;
    rp_err err = {NULL, 0};
    rp_status st = rp_validate(&f->args, &p, &err);
    CHECK(st == RP_OK, "fixture does not validate: %s", rp_status_name(st));
    rp_problem_fill_freq(&p, freq);
    return p;
}

static inline void run_level(const level *lv, fixture *f, rp_parts parts)
{
    rp_cpu_kernels table = {0};
    fill_reference(&table);
    lv->fill(&table);
    double freq[512];
    rp_problem p = problem_of(f, freq);
    table.rope_pool[f->dtype](&p, parts, 0, f->T);
}

static inline void verify_fixture(fixture *f, const char *what, double *worst)
{
    double freq[512];
    rp_problem p = problem_of(f, freq);
    rp_verify_result r;
    rp_ref_verify(&p, &r);
    CHECK(r.failures == 0, "%s: %lld of %lld outside the bound; first: %s", what,
          (long long)r.failures, (long long)r.checked, r.first_failure);
    if (r.worst_ratio > *worst)
        *worst = r.worst_ratio;
}

static const rp_dtype dtypes[3] = {RP_F32, RP_F16, RP_BF16};

/* Prints a level's worst error over the bound; the reference's must be 0. */
static inline void report_worst(const level *lv, double worst)
{
    printf("  %-9s worst |error|/bound = %.3f\n", lv->name, worst);
    if (strcmp(lv->name, "reference") == 0)
        CHECK(worst == 0.0, "the reference must be the float64 formula rounded once, worst %g", worst);
}

/* Makes f's pools uint8 arrays of fp8 codes (format fmt, random garbage) with scales that push
 * k past the format's range (saturation) and v into its subnormals. */
static inline void fixture_use_fp8_pools(fixture *f, rp_dtype fmt)
{
    const int64_t n = f->P * f->Hk * f->D;
    free(f->k_pool);
    free(f->v_pool);
    f->k_pool = test_alloc((size_t)n);
    f->v_pool = test_alloc((size_t)n);
    for (int64_t i = 0; i < n; i++) {
        ((uint8_t *)f->k_pool)[i] = (uint8_t)(i * 37);
        ((uint8_t *)f->v_pool)[i] = (uint8_t)(i * 91);
    }
    f->args.k_pool = rp_tensor_3d(f->k_pool, RP_U8, f->P, f->Hk, f->D);
    f->args.v_pool = rp_tensor_3d(f->v_pool, RP_U8, f->P, f->Hk, f->D);
    f->args.pool_dtype = fmt;
    f->args.k_scale = fmt == RP_F8_E4M3 ? 0x1p-8 : 0x1p-15;
    f->args.v_scale = fmt == RP_F8_E4M3 ? 64.0 : 4096.0;
}

#endif /* RP_TEST_LEVELS_H */
