/*
 * test_qk_norm.c — per-head QK RMSNorm in front of RoPE (q_norm_weight, k_norm_weight, norm_eps,
 * norm_weight_offset): every output against the float64 formula and the header's bound, on the
 * level ROPEPOOL_CPU forces (tests/CMakeLists.txt runs this suite once per level), and the
 * validator's refusals, which write nothing.
 */
#include "test_verify.h"

static test_rng rng = {0x514e4f524du};
static rp_context *ctx;
static const rp_dtype dtypes[3] = {RP_F32, RP_F16, RP_BF16};

static void call_ok(rp_rope_pool_args *a, const char *what)
{
    call_ok_on(ctx, a, what);
}

/* Makes f's call, checks every output against the float64 formula, and frees f and w. */
static void call_verify_free(fixture *f, norm_weights *w, const char *what)
{
    call_ok(&f->args, what);
    verify_outputs(&f->args, &f->args, what);
    free(w->q);
    free(w->k);
    fixture_free(f);
}

static void run_case(rp_dtype dt, rp_dtype wdt, int which, double offset, int64_t D, const rope_variant *v)
{
    fixture f;
    norm_weights w;
    fixture_init(&f, &rng, test_quick() ? 5 : 13, 5, 2, D, 32, dt, RP_I64, 100000, 1);
    scale_heads(&f);
    if (v)
        fixture_set_variant(&f, &rng, v);
    set_norm(&rng, &f, &w, which, wdt, offset);
    char what[200], vname[64];
    snprintf(what, sizeof what, "%s weights %s %s offset %g D %lld %s", rp_dtype_name(dt), rp_dtype_name(wdt),
             which == NORM_BOTH ? "q+k" : which == NORM_Q ? "q only" : "k only", offset, (long long)D,
             v ? variant_name(v, D, vname, sizeof vname) : "");
    call_verify_free(&f, &w, what);
}

static void test_normalised_heads_match_the_float64_formula_with_every_variant(void)
{
    for (int v = 0; v < NUM_TEST_VARIANTS; v++)
        for (int d = 0; d < 3; d++)
            for (int which = 0; which < 3; which++)
                run_case(dtypes[d], (v + which) % 2 ? RP_F32 : dtypes[d], which, (double)((v + d) % 2),
                         v % 3 ? 64 : 40, &test_variants[v]);
}

static void test_float32_weights_and_gemma_offset_at_qwen3_head_size(void)
{
    for (int d = 0; d < 3; d++)
        for (int off = 0; off < 2; off++)
            run_case(dtypes[d], RP_F32, NORM_BOTH, (double)off, 128, NULL);
}

/* Values, weights, offsets and eps outside the float32 path's range (16-bit inputs, kernels.h)
 * take the float64 path, within the same bound: heads of 1e35 and 1e-20, a vector of 1e-30 beside
 * the rest, bfloat16's smallest subnormals, all-zero heads with eps 1e-300 (rstd 1e150), an offset
 * of 1e30 (not a float32); weights times 2^60 and 2^90 (the float32 path's largest products) and
 * 1e-30 (below what it stages). */
static void test_extreme_magnitudes_within_bound(void)
{
    static const struct {
        int extreme_values;
        double eps, weight_scale;
    } cases[] = {{1, 0.0, 0.0}, {1, 1e-300, 0.0}, {0, 1e-300, 0.0}, {0, 0.0, 0x1p60}, {0, 0.0, 0x1p90}, {0, 0.0, 1e-30}};
    static const double offsets[] = {0.0, 1.0, 1e30};
    for (int d = 0; d < 3; d++)
        for (int c = 0; c < 6; c++)
            for (int o = 0; o < 3; o++) {
                if (c >= 3 && o == 2)
                    continue; /* weights near -1e30 times those factors: not float32 values */
                /* an offset of 1e30 or those factors in f16 weights would be out of range */
                const rp_dtype wdt = (c + d) % 2 || o == 2 || (c >= 3 && dtypes[d] == RP_F16) ? RP_F32 : dtypes[d];
                fixture f;
                norm_weights w;
                fixture_init(&f, &rng, 6, 8, 2, 128, 32, dtypes[d], RP_I64, 100000, 1);
                (cases[c].extreme_values ? extreme_heads : scale_heads)(&f);
                set_norm(&rng, &f, &w, NORM_BOTH, wdt, offsets[o]);
                if (cases[c].eps)
                    f.args.norm_eps = cases[c].eps;
                if (cases[c].weight_scale)
                    scale_weights(&f, &w, wdt, cases[c].weight_scale);
                char what[160];
                snprintf(what, sizeof what, "extremes %d %s weights %s offset %g", c, rp_dtype_name(dtypes[d]),
                         rp_dtype_name(wdt), offsets[o]);
                call_verify_free(&f, &w, what);
            }
}

/* A NaN weight whose float32 bits are all ones: its dimension's outputs are NaN in q_rot, k_rot and
 * the pool (and only those: the reference checks every other one). Rounded to bf16 without the
 * NaN test, those bits carry into the sign bit and give -0. */
static void test_nan_weights_give_nan_outputs(void)
{
    static const uint32_t nan_bits = 0xffffffffu >> 1;
    for (int d = 1; d < 3; d++) {
        fixture f;
        norm_weights w;
        fixture_init(&f, &rng, 5, 4, 2, 64, 16, dtypes[d], RP_I32, 4096, 1);
        set_norm(&rng, &f, &w, NORM_BOTH, RP_F32, 0.0);
        memcpy((float *)w.q + 5, &nan_bits, sizeof nan_bits);
        memcpy((float *)w.k + 40, &nan_bits, sizeof nan_bits);
        char what[64];
        snprintf(what, sizeof what, "NaN weights, %s", rp_dtype_name(dtypes[d]));
        call_verify_free(&f, &w, what);
    }
}

/* head_dim > RP_CPU_NORM_MAX_DIM: the reference kernel takes the call, with the same contract. */
static void test_wide_normalised_heads_take_the_reference_kernel(void)
{
    run_case(RP_BF16, RP_BF16, NORM_BOTH, 0.0, 520, NULL);
    run_case(RP_F32, RP_F32, NORM_K, 1.0, 1030, NULL);
}

/* q_rot = q and k_rot = k: every head is read whole before it is written. */
static void test_in_place_normalised_call(void)
{
    for (int d = 0; d < 3; d++) {
        fixture f, orig;
        norm_weights w;
        fixture_init(&f, &rng, 11, 4, 2, 64, 16, dtypes[d], RP_I32, 4096, 1);
        fixture_set_variant(&f, &rng, &test_variants[4 + d]);
        set_norm(&rng, &f, &w, NORM_BOTH, dtypes[d], 0.0);
        orig = f;
        const size_t qb = (size_t)(f.T * f.Hq * f.D) * rp_dtype_size(dtypes[d]), kb = qb / 2;
        orig.args.q.data = test_alloc(qb);
        orig.args.k.data = test_alloc(kb);
        memcpy(orig.args.q.data, f.q, qb);
        memcpy(orig.args.k.data, f.k, kb);
        f.args.q_rot = f.args.q;
        f.args.k_rot = f.args.k;
        call_ok(&f.args, "in place");
        verify_outputs(&orig.args, &f.args, "in place");
        free(orig.args.q.data);
        free(orig.args.k.data);
        free(w.q);
        free(w.k);
        fixture_free(&f);
    }
}

/* q, k and v as views of one fused QKV projection output [T, (Hq + 2 Hk) * D], the engines' layout. */
static void test_normalised_fused_qkv_views(void)
{
    for (int d = 0; d < 3; d++) {
        fixture f;
        norm_weights w;
        const int64_t T = 9, Hq = 4, Hk = 2, D = 64, row = (Hq + 2 * Hk) * D;
        fixture_init(&f, &rng, T, Hq, Hk, D, 16, dtypes[d], RP_I64, 70000, 1);
        const size_t e = rp_dtype_size(dtypes[d]);
        char *qkv = test_alloc((size_t)(T * row) * e);
        fill_random(&rng, qkv, dtypes[d], T * row, -3, 3);
        rp_rope_pool_args *a = &f.args;
        const rp_tensor views[3] = {rp_tensor_3d(qkv, dtypes[d], T, Hq, D),
                                    rp_tensor_3d(qkv + Hq * D * e, dtypes[d], T, Hk, D),
                                    rp_tensor_3d(qkv + (Hq + Hk) * D * e, dtypes[d], T, Hk, D)};
        a->q = views[0];
        a->k = views[1];
        a->v = views[2];
        a->q.strides[0] = a->k.strides[0] = a->v.strides[0] = row;
        fixture_set_variant(&f, &rng, &test_variants[d]);
        set_norm(&rng, &f, &w, d == 2 ? NORM_K : NORM_BOTH, RP_F32, (double)(d % 2));
        call_ok(a, "fused qkv");
        verify_outputs(a, a, "fused qkv");
        free(qkv);
        free(w.q);
        free(w.k);
        fixture_free(&f);
    }
}

/* fp8 pools (uint8 with pool_dtype, and typed), scaled: k_pool holds fp8 of the float64 rotation
 * of the normalised k, its pass-through dims fp8 of the normalised values. */
static void test_normalised_keys_into_fp8_pools(void)
{
    for (int c = 0; c < 6; c++) {
        fixture f;
        norm_weights w;
        const rp_dtype dt = dtypes[c % 3], fmt = c % 2 ? RP_F8_E5M2 : RP_F8_E4M3;
        const int64_t T = 17, Hk = 2, D = c < 3 ? 64 : 128, P = 24;
        fixture_init(&f, &rng, T, 4, Hk, D, P, dt, RP_I32, 9000, 1);
        fixture_set_variant(&f, &rng, &test_variants[c % 2 ? 2 : 5]);
        uint8_t *pools = test_alloc((size_t)(2 * P * Hk * D));
        for (int64_t i = 0; i < 2 * P * Hk * D; i++)
            pools[i] = (uint8_t)rng_next(&rng);
        rp_rope_pool_args *a = &f.args;
        a->k_pool = rp_tensor_3d(pools, c < 3 ? RP_U8 : fmt, P, Hk, D);
        a->v_pool = rp_tensor_3d(pools + P * Hk * D, c < 3 ? RP_U8 : fmt, P, Hk, D);
        a->pool_dtype = c < 3 ? fmt : 0;
        a->k_scale = c % 3 ? 0.37 : 0.0;
        a->v_scale = c % 3 ? 2.5 : 0.0;
        set_norm(&rng, &f, &w, c == 4 ? NORM_Q : NORM_BOTH, c % 2 ? RP_F32 : dt, (double)(c / 3));
        call_ok(a, "fp8 pools");
        verify_outputs(a, a, "fp8 pools");
        free(pools);
        free(w.q);
        free(w.k);
        fixture_free(&f);
    }
}

/* The same inputs give the same bits with 1 and 2 threads, normalised heads included. */
static void test_normalised_outputs_do_not_depend_on_threads(void)
{
    fixture f;
    norm_weights w;
    fixture_init(&f, &rng, 300, 8, 2, 128, 320, RP_BF16, RP_I64, 1 << 20, 1);
    set_norm(&rng, &f, &w, NORM_BOTH, RP_BF16, 0.0);
    const size_t qb = (size_t)(f.T * f.Hq * f.D) * 2;
    void *first = test_alloc(qb);
    f.args.num_threads = 1;
    call_ok(&f.args, "one thread");
    memcpy(first, f.q_rot, qb);
    f.args.num_threads = 0;
    call_ok(&f.args, "threads");
    CHECK(memcmp(first, f.q_rot, qb) == 0, "q_rot differs between thread counts");
    verify_outputs(&f.args, &f.args, "threads");
    free(first);
    free(w.q);
    free(w.k);
    fixture_free(&f);
}

/* ---- refusals ------------------------------------------------------------------------------------ */

static float weight_cells[2 * 64 + 1];

static void with_q_weight(fixture *f)
{
    f->args.q_norm_weight = weight_cells;
    f->args.norm_eps = 1e-6;
}
static void wrong_weight_dtype(fixture *f)
{
    with_q_weight(f);
    f->args.q_norm_weight_dtype = RP_BF16;
}
static void eps_zero(fixture *f)
{
    with_q_weight(f);
    f->args.norm_eps = 0.0;
}
static void eps_nan(fixture *f)
{
    f->args.k_norm_weight = weight_cells;
    f->args.norm_eps = NAN;
}
static void eps_without_weight(fixture *f)
{
    f->args.norm_eps = 1e-5;
}
static void offset_infinite(fixture *f)
{
    with_q_weight(f);
    f->args.norm_weight_offset = INFINITY;
}
static void dtype_without_weight(fixture *f)
{
    f->args.k_norm_weight_dtype = RP_F32;
}
static void misaligned_weight(fixture *f)
{
    with_q_weight(f);
    f->args.q_norm_weight = (const char *)weight_cells + 2;
}
static void output_over_weight(fixture *f)
{
    f->args.k_norm_weight = (const float *)f->k_rot + 5;
    f->args.norm_eps = 1e-6;
}

static void test_bad_norm_arguments_are_rejected_and_write_nothing(void)
{
    const rp_status bad = RP_ERR_INVALID_ARGUMENT;
    expect_call_error(&rng, "weight dtype", wrong_weight_dtype, bad,
                      "q_norm_weight dtype must be q's dtype float32, got bfloat16");
    expect_call_error(&rng, "eps 0", eps_zero, bad,
                      "norm_eps must be a positive finite number with a QK-norm weight (the model's "
                      "rms_norm_eps, e.g. 1e-06), got 0");
    expect_call_error(&rng, "eps nan", eps_nan, bad, "norm_eps must be a positive finite number*");
    expect_call_error(&rng, "eps alone", eps_without_weight, bad,
                      "norm_eps 1e-05 needs q_norm_weight or k_norm_weight, and neither is given");
    expect_call_error(&rng, "offset inf", offset_infinite, bad,
                      "norm_weight_offset must be finite (0, or 1 for (1 + w) weights), got inf");
    expect_call_error(&rng, "dtype alone", dtype_without_weight, bad,
                      "k_norm_weight_dtype is float32 but k_norm_weight is NULL");
    expect_call_error(&rng, "misaligned", misaligned_weight, bad, "q_norm_weight 0x*");
    expect_call_error(&rng, "overlap", output_over_weight, RP_ERR_OVERLAP,
                      "k_rot overlaps k_norm_weight: outputs must not share memory with inputs");
}

int main(void)
{
    ctx = level_suite_context();
    RUN(test_normalised_heads_match_the_float64_formula_with_every_variant);
    RUN(test_float32_weights_and_gemma_offset_at_qwen3_head_size);
    RUN(test_extreme_magnitudes_within_bound);
    RUN(test_nan_weights_give_nan_outputs);
    RUN(test_wide_normalised_heads_take_the_reference_kernel);
    RUN(test_in_place_normalised_call);
    RUN(test_normalised_fused_qkv_views);
    RUN(test_normalised_keys_into_fp8_pools);
    RUN(test_normalised_outputs_do_not_depend_on_threads);
    RUN(test_bad_norm_arguments_are_rejected_and_write_nothing);
    rp_context_destroy(ctx);
    return test_summary("qk_norm");
}
