/*
 * test_verify.h — what the CPU and GPU suites both check a finished call with: the float64
 * formula's bound (rp_ref_verify) on host copies, and the positions that stress range reduction.
 */
#ifndef RP_TEST_VERIFY_H
#define RP_TEST_VERIFY_H

#include "test_util.h"

#include "cpu/kernels.h"
#include "internal.h"
#include "ref/verify.h"

/* A suite run with ROPEPOOL_CPU=<level> (tests/CMakeLists.txt) must test that level: dispatch only
 * warns and runs a lower one when the CPU lacks it. Exits 77 (ctest's skip) in that case; a level
 * the CPU has that did not run is a failure. Call before the first kernel call. */
static inline void check_forced_level(void)
{
    const char *forced = getenv("ROPEPOOL_CPU");
    if (!forced || !*forced)
        return;
    if (!rp_cpu_level_supported(forced)) {
        printf("skip: ROPEPOOL_CPU=%s, which this CPU or build cannot run\n", forced);
        exit(77);
    }
    CHECK(strcmp(rp_cpu_kernel_name(), forced) == 0, "ROPEPOOL_CPU=%s but the %s kernels run", forced,
          rp_cpu_kernel_name());
}

/* The start of a per-level suite: check_forced_level, then a context of two threads (exits 2 when
 * it cannot be made), and the level that runs, printed. */
static inline rp_context *level_suite_context(void)
{
    check_forced_level();
    rp_context_options o = {0};
    o.num_threads = 2;
    char msg[256];
    rp_context *ctx = NULL;
    if (rp_context_create(&o, &ctx, msg, sizeof msg) != RP_OK) {
        fprintf(stderr, "context: %s\n", msg);
        exit(2);
    }
    printf("CPU kernels: %s\n", rp_cpu_kernel_name());
    return ctx;
}

/* Checks finished outputs (described by `out`, host memory) against inputs described by `in`
 * (the same call, except the original q and k for an in-place call) with the float64 formula. */
static inline void verify_outputs(const rp_rope_pool_args *in, const rp_rope_pool_args *out, const char *what)
{
    rp_problem p;
    rp_err err = {NULL, 0};
    CHECK(rp_validate(out, &p, &err) == RP_OK && rp_resolve_host_scales(&p, &err) == RP_OK,
          "%s: outputs do not validate", what);
    p.q = in->q.data;
    p.k = in->k.data;
    p.v = in->v.data;
    for (int d = 0; d < 3; d++) {
        p.q_stride[d] = in->q.strides[d];
        p.k_stride[d] = in->k.strides[d];
        p.v_stride[d] = in->v.strides[d];
    }
    double *freq = test_alloc((size_t)(out->head_dim / 2 + 1) * sizeof *freq);
    rp_problem_fill_freq(&p, freq);
    rp_verify_result r;
    rp_ref_verify(&p, &r);
    CHECK(r.failures == 0, "%s: %lld of %lld wrong; first: %s", what, (long long)r.failures,
          (long long)r.checked, r.first_failure);
    CHECK(r.checked > 0 || out->q.shape[0] == 0, "%s: nothing was checked", what);
    free(freq);
}

/* ---- RoPE variants ---------------------------------------------------------------------------- */

/* Where a variant's frequencies come from. */
enum {
    TABLE_DEFAULT = 0, /* rope_base^(-2j/R), inv_freq NULL                                      */
    TABLE_F64 = 1,     /* the caller's float64 table: rope_base's scaled per entry (llama3/YaRN-like) */
    TABLE_F32 = 2,     /* the caller's table of float32 values (as transformers keeps it), every
                          fifth entry 0 (transformers' "proportional" padding)                  */
    TABLE_ZERO = 3     /* all zeros: nothing rotates                                              */
};

typedef struct rope_variant {
    int32_t style;
    int64_t rotary_dim; /* > 0: R; <= 0: D + rotary_dim (0 = the whole head), resolved per D */
    int table;          /* TABLE_* */
    double attention_scaling;
} rope_variant;

/* The variants every suite runs: both styles, R in {2, D - 2, D/2, D} (D/2 when even), each
 * table kind, and attention scaling. */
static const rope_variant test_variants[] = {
    {RP_ROPE_NEOX, 0, TABLE_DEFAULT, 0.0},    {RP_ROPE_GPTJ, 0, TABLE_DEFAULT, 0.0},
    {RP_ROPE_NEOX, 2, TABLE_F64, 1.2},        {RP_ROPE_GPTJ, 2, TABLE_DEFAULT, 0.0},
    {RP_ROPE_NEOX, -2, TABLE_F32, 0.0},       {RP_ROPE_GPTJ, -2, TABLE_F64, 0.75},
    {RP_ROPE_NEOX, -1, TABLE_DEFAULT, 1.0},   {RP_ROPE_GPTJ, -1, TABLE_F32, 1.3},
    {RP_ROPE_NEOX, 0, TABLE_F64, 1.0986},     {RP_ROPE_GPTJ, 0, TABLE_F32, 0.0},
    {RP_ROPE_NEOX, -1, TABLE_ZERO, 0.0},
};
enum { NUM_TEST_VARIANTS = sizeof test_variants / sizeof test_variants[0] };

/* R of variant v for head_dim D; -1 means D/2 (or D when D/2 is odd). */
static inline int64_t variant_rotary_dim(const rope_variant *v, int64_t D)
{
    if (v->rotary_dim == -1)
        return (D / 2) % 2 == 0 ? D / 2 : D;
    const int64_t R = v->rotary_dim > 0 ? v->rotary_dim : D + v->rotary_dim;
    return R < 2 ? 2 : R > D ? D : R;
}

/* Sets f's call to variant v: style, rotary_dim, attention_scaling and (TABLE_F64/F32/ZERO) a
 * caller table drawn from rng, owned by f. */
static inline void fixture_set_variant(fixture *f, test_rng *rng, const rope_variant *v)
{
    rp_rope_pool_args *a = &f->args;
    const int64_t R = variant_rotary_dim(v, f->D);
    a->style = v->style;
    a->rotary_dim = R == f->D && v->rotary_dim == 0 ? 0 : R;
    a->attention_scaling = v->attention_scaling;
    free(f->inv_freq);
    f->inv_freq = NULL;
    a->inv_freq = NULL;
    if (v->table == TABLE_DEFAULT)
        return;
    f->inv_freq = test_alloc((size_t)(R / 2) * sizeof *f->inv_freq);
    for (int64_t j = 0; j < R / 2; j++) {
        double freq = pow(a->rope_base, -(double)(2 * j) / (double)R) * rng_uniform(rng, 0.125, 1.0);
        if (v->table == TABLE_F32)
            freq = j % 5 == 4 ? 0.0 : (double)(float)freq;
        f->inv_freq[j] = v->table == TABLE_ZERO ? 0.0 : freq;
    }
    a->inv_freq = f->inv_freq;
}

/* "gptj R=64/128 f64-table s=1.2" */
static inline const char *variant_name(const rope_variant *v, int64_t D, char *buf, size_t size)
{
    static const char *const tables[] = {"rope_base", "f64-table", "f32-table", "zero-table"};
    snprintf(buf, size, "%s R=%lld/%lld %s s=%g", v->style == RP_ROPE_GPTJ ? "gptj" : "neox",
             (long long)variant_rotary_dim(v, D), (long long)D, tables[v->table],
             v->attention_scaling == 0.0 ? 1.0 : v->attention_scaling);
    return buf;
}

/* Position t of a sweep that stresses the range reduction: 0, tiny, 2^24 (where float32 stops
 * counting), the int32 extremes, values near multiples of pi/2 for the first frequency; then
 * random int32 values from rng. */
static inline int64_t extreme_position(test_rng *rng, int64_t t)
{
    static const int64_t fixed[] = {0, 1, -1, 2, 3, 7, 1 << 24, (1 << 24) + 1, 2147483647,
                                    -2147483647 - 1, 2147483646, 1000000, 1686629713, 710, 355,
                                    104348, 1073741824, -1073741823};
    if (t < (int64_t)(sizeof fixed / sizeof fixed[0]))
        return fixed[t];
    return (int64_t)(int32_t)(uint32_t)rng_next(rng);
}

/* The extreme-position case both suites run: 61 tokens of shape dims = {Hq, Hk, D}, a pool of 64
 * slots (some tokens skip it), positions from extreme_position. */
static inline void fixture_init_extreme(fixture *f, test_rng *rng, const int64_t dims[3], rp_dtype dtype,
                                        rp_dtype index_dtype)
{
    const int64_t T = 61;
    fixture_init(f, rng, T, dims[0], dims[1], dims[2], 64, dtype, index_dtype, 1000, 1);
    for (int64_t t = 0; t < T; t++)
        test_store(f->positions, index_dtype, t, (double)extreme_position(rng, t));
}

enum { POS_IMAGE, POS_EXTREME, POS_EQUAL }; /* how the three rows are drawn */

/* Outputs and pools of two fixtures of one shape, byte for byte (pool_elem: bytes per pool element). */
static inline int fixtures_same_outputs(const fixture *a, const fixture *b, size_t pool_elem)
{
    const size_t elem = rp_dtype_size(a->dtype);
    return memcmp(a->q_rot, b->q_rot, (size_t)(a->T * a->Hq * a->D) * elem) == 0 &&
           memcmp(a->k_rot, b->k_rot, (size_t)(a->T * a->Hk * a->D) * elem) == 0 &&
           memcmp(a->k_pool, b->k_pool, (size_t)(a->P * a->Hk * a->D) * pool_elem) == 0 &&
           memcmp(a->v_pool, b->v_pool, (size_t)(a->P * a->Hk * a->D) * pool_elem) == 0;
}

/* ---- mRoPE ------------------------------------------------------------------------------------ */

/* Replaces f's positions by [3, T] rows t, h, w stored token-major ([T, 3] memory, strides
 * {1, 3}: any strides are allowed). IMAGE: t constant, h and w a grid of 8 columns from a base;
 * EXTREME: each row from extreme_position; EQUAL: the three rows are the old positions. */
static inline void fixture_use_mrope_rows(fixture *f, test_rng *rng, int kind)
{
    const int64_t T = f->T;
    void *rows = test_alloc((size_t)(3 * T) * rp_dtype_size(f->index_dtype));
    const int64_t base = 1000 + (int64_t)(rng_next(rng) % 100000);
    for (int64_t t = 0; t < T; t++)
        for (int r = 0; r < 3; r++) {
            int64_t v = (int64_t)test_load(f->positions, f->index_dtype, t);
            if (kind == POS_IMAGE)
                v = base + (r == 0 ? 0 : r == 1 ? t / 8 : t % 8);
            else if (kind == POS_EXTREME)
                v = extreme_position(rng, (t + 7 * r) % (T + 11));
            test_store(rows, f->index_dtype, 3 * t + r, (double)v);
        }
    free(f->positions);
    f->positions = rows;
    rp_tensor *p = &f->args.positions;
    *p = rp_tensor_1d(rows, f->index_dtype, 3);
    p->ndim = 2;
    p->shape[1] = T;
    p->strides[0] = 1;
    p->strides[1] = 3;
}

/* Section kinds for R/2 = H: three chunked (one with an empty h, one with an empty w) and three
 * interleaved (Qwen3-VL-like, an empty h, all t). */
enum { NUM_SECTIONS = 6 };
static inline int mrope_section_for(int kind, int64_t H, int32_t s[3])
{
    const int32_t h = (int32_t)H;
    switch (kind) {
    case 0: s[0] = h / 4; s[1] = (h - h / 4) / 2; s[2] = h - s[0] - s[1]; return 0; /* [16, 24, 24] */
    case 1: s[0] = h / 2; s[1] = 0; s[2] = h - h / 2; return 0;
    case 2: s[0] = h / 2; s[1] = h - h / 2; s[2] = 0; return 0;
    case 3: s[1] = s[2] = h / 3; s[0] = h - 2 * (h / 3); return 1;          /* [24, 20, 20] */
    case 4: s[0] = h - h / 3; s[1] = 0; s[2] = h / 3; return 1;
    default: s[0] = h; s[1] = s[2] = 0; return 1;
    }
}

/* ---- QK-norm ------------------------------------------------------------------------------------ */

/* Which weights a case gives. */
enum { NORM_BOTH = 0, NORM_Q = 1, NORM_K = 2 };

/* A QK-norm case's weights, owned by the caller: [D] of dtype wdt, values around 1 - offset (so
 * that w + offset is of order 1, as in trained models), some negative and one exactly -offset. */
typedef struct norm_weights {
    void *q, *k;
} norm_weights;

static inline void set_norm(test_rng *rng, fixture *f, norm_weights *w, int which, rp_dtype wdt, double offset)
{
    rp_rope_pool_args *a = &f->args;
    const size_t e = rp_dtype_size(wdt);
    w->q = test_alloc((size_t)f->D * e);
    w->k = test_alloc((size_t)f->D * e);
    for (int64_t i = 0; i < f->D; i++) {
        test_store(w->q, wdt, i, i == 3 ? -offset : 1.0 - offset + rng_uniform(rng, -0.9, 0.9));
        test_store(w->k, wdt, i, 1.0 - offset + rng_uniform(rng, -1.5, 1.5));
    }
    a->q_norm_weight = which == NORM_K ? NULL : w->q;
    a->k_norm_weight = which == NORM_Q ? NULL : w->k;
    a->q_norm_weight_dtype = which == NORM_K || wdt == f->dtype ? 0 : wdt;
    a->k_norm_weight_dtype = which == NORM_Q ? 0 : wdt;
    a->norm_eps = 1e-6;
    a->norm_weight_offset = offset;
}

/* Heads of very different scales (the norm must remove it): head h of every token times 10^(h % 5
 * - 2), and one all-zero head (rstd = 1 / sqrt(eps)). */
static inline void scale_heads(fixture *f)
{
    for (int64_t t = 0; t < f->T; t++) {
        for (int64_t h = 0; h < f->Hq; h++)
            for (int64_t i = 0; i < f->D; i++) {
                const int64_t at = (t * f->Hq + h) * f->D + i;
                const double x = test_load(f->q, f->dtype, at);
                test_store(f->q, f->dtype, at, t == 1 && h == 0 ? 0.0 : x * pow(10.0, (double)(h % 5) - 2));
            }
        for (int64_t at = t * f->Hk * f->D; at < (t + 1) * f->Hk * f->D; at++)
            test_store(f->k, f->dtype, at, test_load(f->k, f->dtype, at) * (t % 2 ? 300.0 : 0.004));
    }
}

/* Heads of extreme magnitudes (the float64 paths: CUDA's items.cuh, the CPU's kernels.h): per
 * head, values times 1e35, 1e-20, or one 16-byte vector of the head 1e-30 beside the rest (a lane's squares
 * underflowing float32 while the head's sum does not), or 1e9 with one vector 1e-49 (in bfloat16
 * its smallest subnormals: x / rms near 2^-163, the float32 path's smallest), or an all-zero head;
 * f16 cannot hold them and keeps its values. */
static inline void extreme_heads(fixture *f)
{
    static const double factors[] = {1e35, 1e-20, 1.0, 0.0, 1.0, 1e9};
    const int big = f->dtype != RP_F16;
    for (int64_t t = 0; t < f->T; t++)
        for (int64_t h = 0; h < f->Hq + f->Hk; h++) {
            void *x = h < f->Hq ? f->q : f->k;
            const int64_t row = (t * (h < f->Hq ? f->Hq : f->Hk) + (h < f->Hq ? h : h - f->Hq)) * f->D;
            const int kind = (int)((t + h) % 6);
            for (int64_t i = 0; i < f->D; i++) {
                double factor = big || factors[kind] == 0.0 ? factors[kind] : 1.0;
                if ((kind == 2 || kind == 5) && big && i < 16 / (int64_t)rp_dtype_size(f->dtype))
                    factor = kind == 2 ? 1e-30 : 1e-49;
                test_store(x, f->dtype, row + i, test_load(x, f->dtype, row + i) * factor);
            }
        }
}

/* Every weight of w (q's and k's) times factor. */
static inline void scale_weights(const fixture *f, const norm_weights *w, rp_dtype wdt, double factor)
{
    for (int64_t i = 0; i < f->D; i++) {
        test_store(w->q, wdt, i, test_load(w->q, wdt, i) * factor);
        test_store(w->k, wdt, i, test_load(w->k, wdt, i) * factor);
    }
}

#endif /* RP_TEST_VERIFY_H */
