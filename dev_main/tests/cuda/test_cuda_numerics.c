/*
 * test_cuda_numerics.c — the GPU's results against the float64 formula (rp_ref_verify) for every
 * dtype, index dtype and model shape, decode and prefill sizes, extreme positions, every RoPE variant
 * (style, rotary_dim, caller tables, attention scaling); agreement with
 * the CPU backend on the same inputs; rotate + scatter equal to the fused call; results that do
 * not depend on the launch geometry.
 */
#include "cuda_test_util.h"

static test_rng rng = {4242};
static rp_context *ctx;

static const rp_dtype dtypes[3] = {RP_F32, RP_F16, RP_BF16};

/* Elements of two outputs that are bit-identical, and the largest distance in units of the
 * dtype's spacing at the CPU's value (a measure printed for the record; the contract is checked
 * against float64 by rp_ref_verify). */
static void compare_with_cpu(const void *gpu, const void *cpu, rp_dtype dt, int64_t n, int64_t *same, double *worst_ulps)
{
    const size_t e = rp_dtype_size(dt);
    for (int64_t i = 0; i < n; i++) {
        if (memcmp((const char *)gpu + i * (int64_t)e, (const char *)cpu + i * (int64_t)e, e) == 0) {
            (*same)++;
            continue;
        }
        double a, b;
        if (dt == RP_F32) {
            a = ((const float *)gpu)[i];
            b = ((const float *)cpu)[i];
        } else {
            /* 16-bit patterns are sign + magnitude, and magnitudes are ordered like the values:
             * their distance counts ulps */
            const uint16_t ga = ((const uint16_t *)gpu)[i], cb = ((const uint16_t *)cpu)[i];
            const double ma = (double)(ga & 0x7fff), mb = (double)(cb & 0x7fff);
            a = (ga & 0x8000) ? -ma : ma;
            b = (cb & 0x8000) ? -mb : mb;
            if (fabs(a - b) > *worst_ulps)
                *worst_ulps = fabs(a - b);
            continue;
        }
        const double ulp = fabs(nextafterf((float)b, INFINITY) - (float)b);
        if (fabs(a - b) / ulp > *worst_ulps)
            *worst_ulps = fabs(a - b) / ulp;
    }
}

/* Model head layouts plus odd ones (strided kernel: D/2 not a multiple of the vector). */
static const int64_t shapes[][3] = {{32, 8, 128}, {8, 1, 128}, {28, 4, 128}, {16, 8, 256}, {32, 32, 96},
                                    {32, 4, 64},  {64, 8, 128}, {4, 2, 1024}, {3, 1, 6},  {2, 2, 2},
                                    {1, 1, 34},   {5, 3, 40}};

static void test_every_dtype_and_shape_agrees_with_float64_and_the_cpu(void)
{
    const int64_t Ts_full[] = {1, 7, 64, 300, 700, 1500};
    const int64_t Ts_quick[] = {1, 7, 40};
    const int quick = test_quick();
    const int64_t *Ts = quick ? Ts_quick : Ts_full;
    const int nT = quick ? 3 : 6;
    int64_t total = 0, same = 0;
    double worst[3] = {0, 0, 0};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int d = 0; d < 3; d++)
            for (int i = 0; i < nT; i++) {
                const int64_t T = Ts[i], Hq = shapes[s][0], Hk = shapes[s][1], D = shapes[s][2];
                if (T * (Hq + Hk) * D > ((int64_t)1 << 24))
                    continue; /* keep the float64 check fast */
                const rp_dtype idx = (i + d) % 2 ? RP_I64 : RP_I32;
                fixture f, c;
                test_rng r1 = rng, r2 = rng;
                rng_next(&rng);
                fixture_init(&f, &r1, T, Hq, Hk, D, T + 64, dtypes[d], idx, 131072, 1);
                fixture_init(&c, &r2, T, Hq, Hk, D, T + 64, dtypes[d], idx, 131072, 1);
                char what[128];
                snprintf(what, sizeof what, "%lld/%lld/%lld %s %s T=%lld", (long long)Hq, (long long)Hk,
                         (long long)D, rp_dtype_name(dtypes[d]), rp_dtype_name(idx), (long long)T);
                run_and_verify_fixture(ctx, &f, what);
                char msg[256];
                CHECK(rp_rope_pool_fused(NULL, &c.args, msg, sizeof msg) == RP_OK, "cpu: %s", msg);
                compare_with_cpu(f.q_rot, c.q_rot, dtypes[d], T * Hq * D, &same, &worst[d]);
                compare_with_cpu(f.k_rot, c.k_rot, dtypes[d], T * Hk * D, &same, &worst[d]);
                total += T * (Hq + Hk) * D;
                const size_t pool_bytes = (size_t)((T + 64) * Hk * D) * rp_dtype_size(dtypes[d]);
                CHECK(memcmp(f.v_pool, c.v_pool, pool_bytes) == 0, "%s: v_pool differs from the CPU's", what);
                fixture_free(&f);
                fixture_free(&c);
            }
    printf("  cpu vs gpu: %lld of %lld rotated elements bit-identical; largest difference in ulps: "
           "f32 %.0f, f16 %.0f, bf16 %.0f\n", (long long)same, (long long)total, worst[0], worst[1], worst[2]);
}

static void test_extreme_positions_within_bound(void)
{
    static const int64_t dims[][3] = {{8, 2, 128}, {4, 4, 64}, {2, 1, 256}, {3, 1, 96}, {2, 2, 2}, {1, 1, 34}};
    for (int d = 0; d < 3; d++)
        for (size_t s = 0; s < sizeof dims / sizeof dims[0]; s++)
            for (int idx = 0; idx < 2; idx++) {
                fixture f;
                fixture_init_extreme(&f, &rng, dims[s], dtypes[d], idx ? RP_I64 : RP_I32);
                char what[96];
                snprintf(what, sizeof what, "extreme positions %s D=%lld %s", rp_dtype_name(dtypes[d]),
                         (long long)dims[s][2], idx ? "int64" : "int32");
                run_and_verify_fixture(ctx, &f, what);
                fixture_free(&f);
            }
}

/* Both styles, R in {2, D - 2, D/2, D}, each table kind and attention scaling (test_variants), on
 * head dims that do and do not fit the vectorized kernels (80, 96, R = 2), at extreme positions,
 * for decode (T = 1), a small call and a prefill-sized one: within the bound, pass-through dims
 * exact (rp_ref_verify checks the float64 formula of the variant). */
static void test_every_variant_within_bound(void)
{
    static const int64_t dims[][3] = {{3, 1, 80}, {2, 2, 96}, {4, 2, 128}, {2, 1, 256}, {1, 1, 64}, {32, 8, 128}};
    const int64_t big_T = test_quick() ? 40 : 700;
    for (int d = 0; d < 3; d++)
        for (size_t s = 0; s < sizeof dims / sizeof dims[0]; s++)
            for (int v = 0; v < NUM_TEST_VARIANTS; v++)
                for (int size = 0; size < 3; size++) {
                    const rp_dtype idx = v % 2 ? RP_I64 : RP_I32;
                    fixture f;
                    if (size == 0) {
                        fixture_init_extreme(&f, &rng, dims[s], dtypes[d], idx);
                    } else {
                        const int64_t T = size == 1 ? 1 : big_T;
                        if (size == 2 && s != 5)
                            continue; /* one prefill shape keeps the float64 check quick */
                        fixture_init(&f, &rng, T, dims[s][0], dims[s][1], dims[s][2], T + 16, dtypes[d], idx, 131072, 1);
                    }
                    fixture_set_variant(&f, &rng, &test_variants[v]);
                    char what[160], name[64];
                    snprintf(what, sizeof what, "%lld/%lld/%lld %s T=%lld %s", (long long)dims[s][0],
                             (long long)dims[s][1], (long long)dims[s][2], rp_dtype_name(dtypes[d]), (long long)f.T,
                             variant_name(&test_variants[v], dims[s][2], name, sizeof name));
                    run_and_verify_fixture(ctx, &f, what);
                    fixture_free(&f);
                }
}

/* int64 positions beyond int32 take the exact fallback of the device sin/cos. */
static void test_int64_positions_beyond_int32(void)
{
    static const int64_t big[] = {(int64_t)1 << 31, (int64_t)1 << 40, ((int64_t)1 << 53) - 1,
                                  -((int64_t)1 << 45) + 12345, INT64_MAX, INT64_MIN};
    for (int d = 0; d < 6; d++)
        for (int vec = 0; vec < 2; vec++) {
            fixture f;
            fixture_init(&f, &rng, 6, 2, 1, vec ? 64 : 6, 8, dtypes[d % 3], RP_I64, 10, 0);
            if (d >= 3) /* GPT-J R = D/2 with a float32 table and attention scaling */
                fixture_set_variant(&f, &rng, &test_variants[7]);
            for (int t = 0; t < 6; t++)
                ((int64_t *)f.positions)[t] = big[t];
            run_and_verify_fixture(ctx, &f, vec ? "int64 positions (vectorized)" : "int64 positions (strided)");
            fixture_free(&f);
        }
}

/* Rotate, then scatter (two launches, the benchmark's unfused baseline) equals the fused call
 * bit for bit, on both kernels, for the seed's call and for GPT-J partial and NeoX partial ones. */
static void test_rotate_then_scatter_equals_fused(void)
{
    static const rope_variant variants[3] = {{RP_ROPE_NEOX, 0, TABLE_DEFAULT, 0.0},
                                             {RP_ROPE_GPTJ, -1, TABLE_F64, 1.2},
                                             {RP_ROPE_NEOX, -2, TABLE_F32, 0.75}};
    for (int d = 0; d < 9; d++)
        for (int vec = 0; vec < 2; vec++) {
            const int64_t T = 37, Hq = 4, Hk = 2, D = vec ? 128 : 10, P = 64;
            fixture f, g;
            test_rng r1 = {99 + (uint64_t)d}, r2 = {99 + (uint64_t)d};
            fixture_init(&f, &r1, T, Hq, Hk, D, P, dtypes[d % 3], RP_I32, 50000, 1);
            fixture_init(&g, &r2, T, Hq, Hk, D, P, dtypes[d % 3], RP_I32, 50000, 1);
            fixture_set_variant(&f, &r1, &variants[d / 3]);
            fixture_set_variant(&g, &r2, &variants[d / 3]);
            mirror mf = {0}, mg = {0};
            mirror_fixture(&mf, &f);
            mirror_fixture(&mg, &g);
            run_on_device(ctx, &mf, &f.args, "fused");
            rp_rope_pool_args a = mirror_args(&mg, &g.args, 0);
            char msg[256];
            CHECK(rp_rope_pool_run(ctx, &a, RP_PARTS_ROTATE, msg, sizeof msg) == RP_OK, "rotate: %s", msg);
            CHECK(rp_rope_pool_run(ctx, &a, RP_PARTS_SCATTER, msg, sizeof msg) == RP_OK, "scatter: %s", msg);
            mirror_download(&mg);
            const size_t e = rp_dtype_size(dtypes[d % 3]);
            CHECK(memcmp(f.q_rot, g.q_rot, (size_t)(T * Hq * D) * e) == 0 &&
                      memcmp(f.k_rot, g.k_rot, (size_t)(T * Hk * D) * e) == 0 &&
                      memcmp(f.k_pool, g.k_pool, (size_t)(P * Hk * D) * e) == 0 &&
                      memcmp(f.v_pool, g.v_pool, (size_t)(P * Hk * D) * e) == 0,
                  "%s D=%lld variant %d: rotate + scatter differs from the fused call", rp_dtype_name(dtypes[d % 3]),
                  (long long)D, d / 3);
            verify_outputs(&g.args, &g.args, "rotate + scatter");
            mirror_free(&mf);
            mirror_free(&mg);
            fixture_free(&f);
            fixture_free(&g);
        }
}

/* A token's outputs do not depend on the call's size: the plan puts one token per block for small
 * calls and several for large ones. The first tokens of a large call equal a small call's. */
static void test_results_do_not_depend_on_launch_geometry(void)
{
    const int64_t big_T = test_quick() ? 600 : 20000, small_T = 5, Hq = 32, Hk = 8, D = 128;
    for (int d = 0; d < 3; d++) {
        fixture big;
        fixture_init(&big, &rng, big_T, Hq, Hk, D, big_T + 8, dtypes[d], RP_I32, 131072, 0);
        fixture small = big;
        small.T = small_T;
        small.args.q.shape[0] = small.args.k.shape[0] = small.args.v.shape[0] = small_T;
        small.args.q_rot.shape[0] = small.args.k_rot.shape[0] = small_T;
        small.args.positions.shape[0] = small.args.slots.shape[0] = small_T;
        const size_t e = rp_dtype_size(dtypes[d]);
        const size_t q_bytes = (size_t)(small_T * Hq * D) * e, k_bytes = (size_t)(small_T * Hk * D) * e;
        mirror m = {0};
        mirror_fixture(&m, &big);
        run_on_device(ctx, &m, &small.args, "small call");
        unsigned char *q_small = test_alloc(q_bytes), *k_small = test_alloc(k_bytes);
        memcpy(q_small, big.q_rot, q_bytes);
        memcpy(k_small, big.k_rot, k_bytes);
        run_on_device(ctx, &m, &big.args, "large call");
        CHECK(memcmp(q_small, big.q_rot, q_bytes) == 0 && memcmp(k_small, big.k_rot, k_bytes) == 0,
              "%s: the first tokens differ between a %lld-token and a %lld-token call",
              rp_dtype_name(dtypes[d]), (long long)small_T, (long long)big_T);
        verify_outputs(&big.args, &big.args, "large call");
        /* And the same call twice gives the same bits. */
        unsigned char *q_first = test_alloc((size_t)(big_T * Hq * D) * e);
        memcpy(q_first, big.q_rot, (size_t)(big_T * Hq * D) * e);
        run_on_device(ctx, &m, &big.args, "large call again");
        CHECK(memcmp(q_first, big.q_rot, (size_t)(big_T * Hq * D) * e) == 0, "%s: two runs differ",
              rp_dtype_name(dtypes[d]));
        free(q_small);
        free(k_small);
        free(q_first);
        mirror_free(&m);
        fixture_free(&big);
    }
}

int main(void)
{
    if (cuda_test_no_gpu())
        return CUDA_TEST_SKIP;
    ctx = cuda_test_context(0);
    RUN(test_every_dtype_and_shape_agrees_with_float64_and_the_cpu);
    RUN(test_extreme_positions_within_bound);
    RUN(test_every_variant_within_bound);
    RUN(test_int64_positions_beyond_int32);
    RUN(test_rotate_then_scatter_equals_fused);
    RUN(test_results_do_not_depend_on_launch_geometry);
    rp_context_destroy(ctx);
    return test_summary("test_cuda_numerics");
}
