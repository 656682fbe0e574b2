/*
 * test_numerics.c — accuracy against the float64 formula for every kernel level and dtype, at
 * extreme positions; bit-identical results for any thread count.
 */
#include "test_util.h"

#include "cpu/kernels.h"
#include "internal.h"
#include "ref/verify.h"

static test_rng rng = {2024};

typedef struct level {
    const char *name;
    void (*fill)(rp_cpu_kernels *table);
    int supported;
} level;

static int x86_supports(const char *what)
{
#ifdef RP_HAVE_X86_KERNELS
    __builtin_cpu_init();
    if (strcmp(what, "avx2") == 0)
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("fma");
#else
    (void)what;
    return 0;
#endif
}

static void fill_reference(rp_cpu_kernels *t)
{
    t->name = "reference";
    t->rope_pool[RP_F32] = t->rope_pool[RP_F16] = t->rope_pool[RP_BF16] = rp_ref_rope_pool;
}

static level levels[4];
static int num_levels;

static void find_levels(void)
{
    levels[num_levels++] = (level){"reference", fill_reference, 1};
    levels[num_levels++] = (level){"portable", rp_cpu_fill_portable, 1};
#ifdef RP_HAVE_X86_KERNELS
    levels[num_levels++] = (level){"avx2", rp_cpu_fill_avx2, x86_supports("avx2")};
    levels[num_levels++] = (level){"avx512", rp_cpu_fill_avx512, x86_supports("avx512")};
#endif
    for (int i = 0; i < num_levels; i++)
        if (!levels[i].supported)
            printf("skip: this CPU cannot run the %s kernels\n", levels[i].name);
}

/* Validates f's args into a problem with its frequency table. */
static rp_problem problem_of(fixture *f, double *freq)
{
    rp_problem p;
    rp_err err = {NULL, 0};
    rp_status st = rp_validate(&f->args, &p, &err);
    CHECK(st == RP_OK, "fixture does not validate: %s", rp_status_name(st));
    rp_compute_inv_freq(f->args.rope_base, f->D, freq);
    p.inv_freq = freq;
    return p;
}

static void run_level(const level *lv, fixture *f, rp_parts parts)
{
    rp_cpu_kernels table = {0};
    fill_reference(&table);
    lv->fill(&table);
    double freq[512];
    rp_problem p = problem_of(f, freq);
    table.rope_pool[f->dtype](&p, parts, 0, f->T);
}

static void verify_fixture(fixture *f, const char *what, double *worst)
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

/* Positions that stress the range reduction: 0, tiny, 2^24 (float32 stops counting), the int32
 * extremes, and values just around multiples of pi/2 for the first frequency. */
static int64_t extreme_position(int64_t t, int64_t T)
{
    static const int64_t fixed[] = {0, 1, -1, 2, 3, 7, 1 << 24, (1 << 24) + 1, 2147483647,
                                    -2147483647 - 1, 2147483646, 1000000, 1686629713, 710, 355,
                                    104348, 1073741824, -1073741823};
    const int64_t n = (int64_t)(sizeof fixed / sizeof fixed[0]);
    if (t < n)
        return fixed[t];
    (void)T;
    return (int64_t)(int32_t)(uint32_t)rng_next(&rng); /* any int32 */
}

static void test_every_level_within_bound_at_extreme_positions(void)
{
    static const int64_t dims[][3] = {{8, 2, 128}, {4, 4, 64}, {2, 1, 256}, {3, 1, 96}, {2, 2, 2}, {1, 1, 34}};
    for (int l = 0; l < num_levels; l++) {
        if (!levels[l].supported)
            continue;
        double worst = 0.0;
        for (int d = 0; d < 3; d++)
            for (size_t s = 0; s < sizeof dims / sizeof dims[0]; s++)
                for (int idx = 0; idx < 2; idx++) {
                    fixture f;
                    const int64_t T = 61;
                    fixture_init(&f, &rng, T, dims[s][0], dims[s][1], dims[s][2], 64, dtypes[d],
                                 idx ? RP_I64 : RP_I32, 1000, 1);
                    for (int64_t t = 0; t < T; t++)
                        test_store(f.positions, f.index_dtype, t, (double)extreme_position(t, T));
                    run_level(&levels[l], &f, RP_PARTS_ALL);
                    char what[96];
                    snprintf(what, sizeof what, "%s %s D=%lld %s", levels[l].name,
                             rp_dtype_name(dtypes[d]), (long long)dims[s][2], idx ? "int64" : "int32");
                    verify_fixture(&f, what, &worst);
                    fixture_free(&f);
                }
        printf("  %-9s worst |error|/bound = %.3f\n", levels[l].name, worst);
        if (strcmp(levels[l].name, "reference") == 0)
            CHECK(worst == 0.0, "the reference must be the float64 formula rounded once, worst %g", worst);
    }
}

/* int64 positions beyond int32 take the exact libm path in the fast kernels. */
static void test_int64_positions_beyond_int32(void)
{
    static const int64_t big[] = {(int64_t)1 << 31, (int64_t)1 << 40, ((int64_t)1 << 53) - 1,
                                  -((int64_t)1 << 45) + 12345, INT64_MAX, INT64_MIN};
    for (int l = 0; l < num_levels; l++) {
        if (!levels[l].supported)
            continue;
        double worst = 0.0;
        fixture f;
        fixture_init(&f, &rng, 6, 2, 1, 64, 8, RP_F32, RP_I64, 10, 0);
        for (int t = 0; t < 6; t++)
            ((int64_t *)f.positions)[t] = big[t];
        run_level(&levels[l], &f, RP_PARTS_ALL);
        verify_fixture(&f, levels[l].name, &worst);
        fixture_free(&f);
    }
}

/* The checker itself must be able to fail: a result two bounds away is caught. */
static void test_verifier_catches_a_wrong_element(void)
{
    fixture f;
    fixture_init(&f, &rng, 3, 2, 1, 16, 4, RP_F32, RP_I32, 100000, 0);
    run_level(&levels[0], &f, RP_PARTS_ALL);
    float *q_rot = f.q_rot;
    q_rot[5] += 4e-6f * (1.0f + fabsf(q_rot[5]));
    double freq[512];
    rp_problem p = problem_of(&f, freq);
    rp_verify_result r;
    rp_ref_verify(&p, &r);
    CHECK(r.failures == 1, "verifier missed a wrong element (failures %lld)", (long long)r.failures);
    /* An angle formed in float32, as peers do, is caught at large positions. */
    ((int32_t *)f.positions)[0] = 1000000;
    run_level(&levels[0], &f, RP_PARTS_ALL);
    for (int i = 0; i < 8; i++) {
        const float *q = f.q;
        float angle = (float)1000000 * (float)freq[i];
        float c = cosf(angle), s = sinf(angle);
        q_rot[i] = q[i] * c - q[i + 8] * s;
        q_rot[i + 8] = q[i + 8] * c + q[i] * s;
    }
    rp_ref_verify(&p, &r);
    CHECK(r.failures > 0, "verifier accepted float32 angles at position 1e6");
    fixture_free(&f);
}

static void test_split_parts_equal_fused(void)
{
    for (int l = 1; l < num_levels; l++) {
        if (!levels[l].supported)
            continue;
        for (int d = 0; d < 3; d++) {
            fixture f, g;
            test_rng r1 = {99}, r2 = {99};
            fixture_init(&f, &r1, 9, 4, 2, 64, 32, dtypes[d], RP_I32, 50000, 1);
            fixture_init(&g, &r2, 9, 4, 2, 64, 32, dtypes[d], RP_I32, 50000, 1);
            run_level(&levels[l], &f, RP_PARTS_ALL);
            run_level(&levels[l], &g, RP_PARTS_ROTATE);
            run_level(&levels[l], &g, RP_PARTS_SCATTER);
            const size_t e = rp_dtype_size(dtypes[d]);
            CHECK(memcmp(f.q_rot, g.q_rot, 9 * 4 * 64 * e) == 0 && memcmp(f.k_rot, g.k_rot, 9 * 2 * 64 * e) == 0 &&
                      memcmp(f.k_pool, g.k_pool, 32 * 2 * 64 * e) == 0 && memcmp(f.v_pool, g.v_pool, 32 * 2 * 64 * e) == 0,
                  "%s %s: rotate + scatter differs from the fused call", levels[l].name, rp_dtype_name(dtypes[d]));
            fixture_free(&f);
            fixture_free(&g);
        }
    }
}

static void test_bit_identical_for_any_thread_count(void)
{
    for (int d = 0; d < 3; d++) {
        unsigned char *first[4] = {0};
        size_t sizes[4] = {0};
        for (int threads = 1; threads <= 5; threads++) {
            rp_context_options o = {0};
            o.num_threads = threads;
            rp_context *ctx;
            char msg[256];
            CHECK(rp_context_create(&o, &ctx, msg, sizeof msg) == RP_OK, "%s", msg);
            fixture f;
            test_rng r = {5};
            fixture_init(&f, &r, 301, 8, 2, 128, 400, dtypes[d], RP_I32, 1 << 20, 1);
            CHECK(rp_rope_pool_fused(ctx, &f.args, msg, sizeof msg) == RP_OK, "%s", msg);
            const size_t e = rp_dtype_size(dtypes[d]);
            void *outs[4] = {f.q_rot, f.k_rot, f.k_pool, f.v_pool};
            size_t n[4] = {301 * 8 * 128 * e, 301 * 2 * 128 * e, 400 * 2 * 128 * e, 400 * 2 * 128 * e};
            for (int i = 0; i < 4; i++) {
                if (threads == 1) {
                    first[i] = test_alloc(n[i]);
                    memcpy(first[i], outs[i], n[i]);
                    sizes[i] = n[i];
                } else {
                    CHECK(memcmp(first[i], outs[i], sizes[i]) == 0, "%s output %d differs at %d threads",
                          rp_dtype_name(dtypes[d]), i, threads);
                }
            }
            fixture_free(&f);
            rp_context_destroy(ctx);
        }
        for (int i = 0; i < 4; i++)
            free(first[i]);
    }
}

int main(void)
{
    find_levels();
    printf("dispatch chose: %s\n", rp_cpu_kernel_name());
    RUN(test_every_level_within_bound_at_extreme_positions);
    RUN(test_int64_positions_beyond_int32);
    RUN(test_verifier_catches_a_wrong_element);
    RUN(test_split_parts_equal_fused);
    RUN(test_bit_identical_for_any_thread_count);
    return test_summary("test_numerics");
}
