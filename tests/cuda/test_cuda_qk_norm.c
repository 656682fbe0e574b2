/*
 * test_cuda_qk_norm.c — QK-norm on the GPU: every output against the float64 formula and the
 * header's bound (rp_ref_verify), decode and prefill sizes, both weights and one alone, weight
 * dtypes, offset 0 and 1, the RoPE variants, fp8 pools, magnitudes and offsets that take the
 * kernels' float64 paths; agreement with the CPU backend; and the
 * layouts the CUDA kernels cannot normalise refused with RP_ERR_UNSUPPORTED, writing nothing.
 */
#include "cuda_test_util.h"

static test_rng rng = {0x714e4f524du};
static rp_context *ctx;

static const rp_dtype dtypes[3] = {RP_F32, RP_F16, RP_BF16};

/* The device copy of host pointer p (inside a mirrored region), or p. */
static const void *mirror_pointer(const mirror *m, const void *p)
{
    rp_tensor t = rp_tensor_1d((void *)p, RP_U8, 1);
    mirror_tensor(m, &t, 0);
    return p ? t.data : NULL;
}

/* Whether the CUDA backend normalises this call (plan.cu): whole 16-byte groups of rotated pairs,
 * a power of two of them up to 32 per head row. Others are refused (RP_ERR_UNSUPPORTED). */
static int cuda_normalises(int64_t D, rp_dtype dt, const rope_variant *v)
{
    const int64_t per_vector = 16 / (int64_t)rp_dtype_size(dt), groups = D / 2 / per_vector;
    const int64_t half = (v ? variant_rotary_dim(v, D) : D) / 2;
    return (D / 2) % per_vector == 0 && half % per_vector == 0 && (!v || v->style != RP_ROPE_GPTJ || half % 2 == 0) &&
           groups <= 32 && (groups & (groups - 1)) == 0;
}

/* One normalised call of shape (T, Hq, Hk, D) on the device, verified; with cpu_same, the count
 * of outputs bit-identical to the CPU backend's is added to *same / *total. A call the backend
 * does not normalise must be refused, writing nothing. */
/* Extremes for run_case: the heads' values (NULL: scale_heads), norm_eps (0: set_norm's), a
 * factor on every weight (0: none), weights one element past a 16-byte boundary (misaligned). */
typedef struct norm_extremes {
    void (*values)(fixture *);
    double eps, weight_scale;
    int misaligned;
} norm_extremes;

/* Moves a case's weights one element into fresh buffers (base[0], base[1] receive them, to free):
 * element-aligned views off every 16-byte boundary, as a weight sliced from a larger tensor is. */
static void misalign_weights(fixture *f, norm_weights *w, rp_dtype wdt, void **base)
{
    const size_t e = rp_dtype_size(wdt), bytes = (size_t)f->D * e;
    void **weights[2] = {&w->q, &w->k};
    const void **args[2] = {&f->args.q_norm_weight, &f->args.k_norm_weight};
    for (int i = 0; i < 2; i++) {
        base[i] = test_alloc(bytes + e);
        memcpy((char *)base[i] + e, *weights[i], bytes);
        if (*args[i])
            *args[i] = (char *)base[i] + e;
        free(*weights[i]);
        *weights[i] = (char *)base[i] + e;
    }
}

static void run_case_with(int64_t T, int64_t Hq, int64_t Hk, int64_t D, rp_dtype dt, rp_dtype wdt, int which,
                          double offset, const rope_variant *v, int fp8, const norm_extremes *x, int64_t *same,
                          int64_t *total)
{
    fixture f, c;
    norm_weights w, wc; /* the same values, from the same generator state */
    test_rng r1 = rng, r2 = rng;
    rng_next(&rng);
    fixture_init(&f, &r1, T, Hq, Hk, D, T + 16, dt, RP_I64, 1 << 20, 1);
    fixture_init(&c, &r2, T, Hq, Hk, D, T + 16, dt, RP_I64, 1 << 20, 1);
    fixture *both[2] = {&f, &c};
    test_rng rv = rng, rw = rng;
    rng_next(&rng);
    norm_weights *ws[2] = {&w, &wc};
    void *base[2][2] = {{NULL, NULL}, {NULL, NULL}}; /* misaligned weights' buffers */
    for (int i = 0; i < 2; i++) {
        test_rng a = rv, b = rw;
        (x && x->values ? x->values : scale_heads)(both[i]);
        if (v)
            fixture_set_variant(both[i], &a, v);
        set_norm(&b, both[i], ws[i], which, wdt, offset);
        if (x && x->eps)
            both[i]->args.norm_eps = x->eps;
        if (x && x->weight_scale)
            scale_weights(both[i], ws[i], wdt, x->weight_scale);
        if (x && x->misaligned)
            misalign_weights(both[i], ws[i], wdt, base[i]);
    }
    uint8_t *pools = NULL;
    const int64_t pool_elems = (T + 16) * Hk * D;
    if (fp8) {
        pools = test_alloc((size_t)(2 * pool_elems));
        memset(pools, 0x5a, (size_t)(2 * pool_elems));
        for (int i = 0; i < 2; i++) {
            rp_rope_pool_args *a = &both[i]->args;
            a->k_pool = rp_tensor_3d(pools, RP_U8, T + 16, Hk, D);
            a->v_pool = rp_tensor_3d(pools + pool_elems, RP_U8, T + 16, Hk, D);
            a->pool_dtype = fp8 == 1 ? RP_F8_E4M3 : RP_F8_E5M2;
            a->k_scale = 0.37;
            a->v_scale = 2.5;
        }
    }
    char what[200], vname[64];
    snprintf(what, sizeof what, "%lld/%lld/%lld T=%lld %s w %s %s off %g%s %s", (long long)Hq, (long long)Hk,
             (long long)D, (long long)T, rp_dtype_name(dt), rp_dtype_name(wdt),
             which == NORM_BOTH ? "q+k" : which == NORM_Q ? "q" : "k", offset, fp8 ? " fp8" : "",
             v ? variant_name(v, D, vname, sizeof vname) : "");
    mirror m = {0};
    mirror_fixture(&m, &f);
    if (fp8)
        mirror_add(&m, pools, (size_t)(2 * pool_elems));
    const size_t weight_bytes = (size_t)(D + (base[0][0] ? 1 : 0)) * rp_dtype_size(wdt);
    mirror_add(&m, base[0][0] ? base[0][0] : w.q, weight_bytes);
    mirror_add(&m, base[0][1] ? base[0][1] : w.k, weight_bytes);
    rp_rope_pool_args host = f.args;
    host.q_norm_weight = mirror_pointer(&m, f.args.q_norm_weight);
    host.k_norm_weight = mirror_pointer(&m, f.args.k_norm_weight);
    const int normalised = cuda_normalises(D, dt, v);
    if (normalised) {
        run_on_device(ctx, &m, &host, what);
        verify_outputs(&f.args, &f.args, what);
    } else {
        snapshot s;
        snapshot_take(&s, &f);
        rp_rope_pool_args d = mirror_args(&m, &host, 0);
        char msg[512];
        const rp_status st = rp_rope_pool_fused(ctx, &d, msg, sizeof msg);
        CHECK(st == RP_ERR_UNSUPPORTED, "%s: status %s: %s", what, rp_status_name(st), msg);
        mirror_download(&m);
        CHECK(snapshot_unchanged(&s, &f), "%s: a refused call wrote output memory", what);
    }
    mirror_free(&m);
    if (!fp8 && normalised) { /* the CPU on the same inputs (weights identical: same generator state) */
        char msg[256];
        CHECK(rp_rope_pool_fused(NULL, &c.args, msg, sizeof msg) == RP_OK, "cpu: %s", msg);
        const size_t e = rp_dtype_size(dt);
        for (int64_t i = 0; i < T * Hq * D; i++)
            *same += memcmp((char *)f.q_rot + i * (int64_t)e, (char *)c.q_rot + i * (int64_t)e, e) == 0;
        for (int64_t i = 0; i < T * Hk * D; i++)
            *same += memcmp((char *)f.k_rot + i * (int64_t)e, (char *)c.k_rot + i * (int64_t)e, e) == 0;
        *total += T * (Hq + Hk) * D;
    }
    free(pools);
    for (int i = 0; i < 2; i++) {
        if (base[i][0])
            free(base[i][0]), free(base[i][1]);
        else
            free(ws[i]->q), free(ws[i]->k);
    }
    fixture_free(&f);
    fixture_free(&c);
}

static void run_case(int64_t T, int64_t Hq, int64_t Hk, int64_t D, rp_dtype dt, rp_dtype wdt, int which,
                     double offset, const rope_variant *v, int fp8, int64_t *same, int64_t *total)
{
    run_case_with(T, Hq, Hk, D, dt, wdt, which, offset, v, fp8, NULL, same, total);
}

static void test_normalised_calls_match_float64_and_the_cpu(void)
{
    /* 12/4/128: 20 heads, which the decode kernel splits into two blocks of 12 (plan.cu), the last
     * part empty. T = 160: the decode kernel past a token a multiprocessor (132 on an H200), its
     * blocks in head chunks. The ends of the head_dim range the README names: 16 and 512 in 16-bit
     * types (one and 32 lanes a head), 8 and 256 in float32; 8 in 16-bit types and 512 in float32
     * are refused. */
    static const int64_t shapes[][3] = {{32, 8, 128}, {16, 8, 256}, {12, 4, 128}, {8, 1, 64}, {4, 2, 32},
                                        {2, 1, 512}, {4, 2, 16}, {4, 2, 8}};
    const int64_t Ts[] = {1, 7, 160, 300, 1500};
    int64_t same = 0, total = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int d = 0; d < 3; d++)
            for (int i = 0; i < (test_quick() ? 3 : 5); i++)
                run_case(Ts[i], shapes[s][0], shapes[s][1], shapes[s][2], dtypes[d], (i + d) % 2 ? RP_F32 : dtypes[d],
                         (int)((s + i) % 3), (double)(i % 2), NULL, 0, &same, &total);
    printf("  %lld of %lld normalised outputs bit-identical to the CPU's\n", (long long)same, (long long)total);
}

static void test_normalised_variants_and_fp8_pools(void)
{
    int64_t same = 0, total = 0;
    for (int v = 0; v < NUM_TEST_VARIANTS; v++)
        for (int d = 0; d < 3; d++)
            run_case(v % 2 ? 600 : 9, 8, 2, 128, dtypes[d], RP_F32, (v + d) % 3, (double)(v % 2), &test_variants[v],
                     (v + d) % 3 == 0 ? 1 + v % 2 : 0, &same, &total);
    /* the kernels compiled for NeoX over heads of 128 and 256 with fp8 pools (Qwen3, Gemma 3 with
     * an fp8 cache): decode (T = 9) and prefill (T = 600), e4m3 and e5m2, every dtype */
    for (int64_t D = 128; D <= 256; D *= 2)
        for (int d = 0; d < 3; d++)
            for (int i = 0; i < 2; i++)
                run_case(i ? 600 : 9, 8, 2, D, dtypes[d], d % 2 ? RP_F32 : dtypes[d], NORM_BOTH, (double)i, NULL,
                         1 + (i + d) % 2, &same, &total);
}

/* The decode kernel's resident build (80 registers, cuda_backend.h), which the plan takes where only
 * its blocks all fit at once: Qwen3-8B's heads at two tokens a multiprocessor (test_cuda_plan
 * checks that choice), every dtype, float32 weights of 16-bit inputs (which it reads at use), fp8
 * pools of both formats, GPT-J pairs; heads of 256 at 1.5 tokens a multiprocessor. */
static void test_resident_decode_build(void)
{
    int sms = 0;
    CUDA_OK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    int64_t same = 0, total = 0;
    for (int d = 0; d < 3; d++)
        for (int i = 0; i < 2; i++)
            run_case(2 * sms, 32, 8, 128, dtypes[d], i ? RP_F32 : dtypes[d], NORM_BOTH, (double)i, NULL,
                     (i + d) % 3, &same, &total);
    run_case(2 * sms, 32, 8, 128, RP_BF16, RP_BF16, NORM_BOTH, 0.0, NULL, 0, &same, &total); /* Qwen3-8B's own */
    run_case(2 * sms, 32, 8, 128, RP_BF16, RP_BF16, NORM_K, 0.0, &test_variants[1], 0, &same, &total);
    run_case(3 * sms / 2, 16, 8, 256, RP_BF16, RP_F32, NORM_BOTH, 1.0, NULL, 1, &same, &total);
}

/* Values, weights, offsets and eps outside the float32 path's range take the float64 paths, within
 * the same bound: heads of 1e35 and 1e-20, a lane of 1e-30, all-zero heads with eps 1e-300 (rstd
 * 1e150), an offset of 1e30 (not a float32); weights times 2^60 (the float32 path's large
 * products), 2^90 (unstaged, the decode kernel's, products overflow: float64) and 1e-30 (below
 * what the prefill kernel stages: from memory); decode and prefill kernels, fp8 pools once. */
static void test_extreme_magnitudes_within_bound(void)
{
    static const norm_extremes cases[] = {{extreme_heads, 0.0, 0.0, 0}, {extreme_heads, 1e-300, 0.0, 0},
                                          {NULL, 1e-300, 0.0, 0},       {NULL, 0.0, 0x1p60, 0},
                                          {NULL, 0.0, 0x1p90, 0},       {NULL, 0.0, 1e-30, 0}};
    static const double offsets[] = {0.0, 1.0, 1e30};
    int64_t same = 0, total = 0;
    for (int d = 0; d < 3; d++)
        for (int c = 0; c < 6; c++)
            for (int o = 0; o < 3; o++) {
                if (c >= 3 && o == 2)
                    continue; /* weights near -1e30 times those factors: not float32 values */
                const int64_t T = (c + o) % 2 ? 5 : 600;
                /* an offset of 1e30 or those factors in f16 weights would be out of range: float32
                 * weights there */
                const rp_dtype wdt = (c + d) % 2 || o == 2 || (c >= 3 && dtypes[d] == RP_F16) ? RP_F32 : dtypes[d];
                run_case_with(T, 8, 2, 128, dtypes[d], wdt, NORM_BOTH, offsets[o],
                              NULL, c == 0 && o == 1 && d ? 1 : 0, &cases[c], &same, &total);
            }
    printf("  %lld of %lld normalised outputs bit-identical to the CPU's\n", (long long)same, (long long)total);
}

/* Weights one element off every 16-byte boundary (the kernels' unaligned loads, and the prefill
 * kernel's staging of them): every dtype, weights in q's dtype and float32, decode and prefill. */
static void test_weights_off_16_byte_boundaries(void)
{
    static const norm_extremes misaligned = {NULL, 0.0, 0.0, 1};
    int64_t same = 0, total = 0;
    for (int d = 0; d < 3; d++)
        for (int i = 0; i < 4; i++)
            run_case_with(i % 2 ? 600 : 5, 8, 2, 128, dtypes[d], i / 2 ? RP_F32 : dtypes[d], (d + i) % 3,
                          (double)(i % 2), NULL, 0, &misaligned, &same, &total);
    printf("  %lld of %lld normalised outputs bit-identical to the CPU's\n", (long long)same, (long long)total);
}

/* D = 40 in 16-bit types (20 pairs: no 16-byte groups) takes the strided kernel, which cannot
 * normalise: refused, nothing written. */
static void test_unvectorizable_normalised_call_is_refused(void)
{
    fixture f;
    norm_weights w;
    fixture_init(&f, &rng, 5, 3, 1, 40, 8, RP_BF16, RP_I32, 100, 0);
    set_norm(&rng, &f, &w, NORM_BOTH, RP_BF16, 0.0);
    mirror m = {0};
    mirror_fixture(&m, &f);
    mirror_add(&m, w.q, 80);
    mirror_add(&m, w.k, 80);
    rp_rope_pool_args d = mirror_args(&m, &f.args, 0);
    d.q_norm_weight = mirror_pointer(&m, w.q);
    d.k_norm_weight = mirror_pointer(&m, w.k);
    snapshot s;
    snapshot_take(&s, &f);
    char msg[512];
    const rp_status st = rp_rope_pool_fused(ctx, &d, msg, sizeof msg);
    CHECK(st == RP_ERR_UNSUPPORTED, "status %s: %s", rp_status_name(st), msg);
    CHECK(starts_with(msg, "q_norm_weight / k_norm_weight (QK-norm) on CUDA need the vectorized kernels"),
          "message: %s", msg);
    mirror_download(&m);
    CHECK(snapshot_unchanged(&s, &f), "a refused call wrote output memory");
    mirror_free(&m);
    free(w.q);
    free(w.k);
    fixture_free(&f);
}

int main(void)
{
    if (cuda_test_no_gpu())
        return CUDA_TEST_SKIP;
    ctx = cuda_test_context(0);
    RUN(test_normalised_calls_match_float64_and_the_cpu);
    RUN(test_normalised_variants_and_fp8_pools);
    RUN(test_resident_decode_build);
    RUN(test_extreme_magnitudes_within_bound);
    RUN(test_weights_off_16_byte_boundaries);
    RUN(test_unvectorizable_normalised_call_is_refused);
    rp_context_destroy(ctx);
    return test_summary("test_cuda_qk_norm");
}
