/*
 * test_pools.c — how pool rows are addressed and stored: paged pools (NHD, HND, any block size,
 * vLLM's allocations), fp8 pools (e4m3fn, e5m2, scales) and v_head_dim (MLA's latent row), on the
 * CPU level that ROPEPOOL_CPU selects (CMake runs this suite once per level).
 *
 * fp8 pools are checked against a float64 quantiser written here: round to nearest-even over the
 * format's table of values, saturating. K's stored code must be that of the float64 rotation, or
 * a neighbour when the value lies within the kernel's arithmetic error of a midpoint (the
 * header's exactness statement); V's must be exact when the scale is 1. Paged calls must give the
 * same bytes as the same call on a flat pool, and leave every other byte of the allocation as it
 * was.
 */
#include "test_verify.h"

static test_rng rng = {424242};
static rp_context *ctx;
static const rp_dtype dtypes[3] = {RP_F32, RP_F16, RP_BF16};

static void call_ok(rp_rope_pool_args *a, const char *what)
{
    call_ok_on(ctx, a, what);
}

/* ---- the float64 fp8 quantiser ------------------------------------------------------------------ */

/* Value of code c (0..127, sign clear) in the format, NAN for NaN/inf codes. */
static double fp8_table_value(int e5m2, int c)
{
    const int mant_bits = e5m2 ? 2 : 3, bias = e5m2 ? 15 : 7;
    const int exp = c >> mant_bits, mant = c & ((1 << mant_bits) - 1);
    if ((e5m2 && exp == 31) || (!e5m2 && c == 0x7f))
        return NAN;
    if (exp == 0)
        return ldexp(mant, 1 - bias - mant_bits);
    return ldexp(mant + (1 << mant_bits), exp - bias - mant_bits);
}

static double fp8_value(int e5m2, uint8_t code)
{
    const double v = fp8_table_value(e5m2, code & 0x7f);
    return code & 0x80 ? -v : v;
}

/* x rounded to the nearest finite value of the table, ties to the even code, beyond the largest
 * value saturating; NaN to NaN (returned as the value: the code's bits are not the contract). */
static double fp8_quantise(int e5m2, double x)
{
    if (isnan(x))
        return NAN;
    const double a = fabs(x), max = e5m2 ? 57344.0 : 448.0;
    if (a >= max)
        return signbit(x) ? -max : max;
    int best = 0;
    for (int c = 1; c < 128; c++) {
        const double v = fp8_table_value(e5m2, c);
        if (isnan(v))
            break; /* codes grow with value: past the last finite one */
        const double d = fabs(v - a), db = fabs(fp8_table_value(e5m2, best) - a);
        if (d < db || (d == db && c % 2 == 0))
            best = c;
    }
    const double v = fp8_table_value(e5m2, best);
    return signbit(x) ? -v : v;
}

/* Code `got` against fp8(value / scale) where the kernel may err by err (in value's units). */
static int fp8_code_ok(int e5m2, uint8_t got, double value, double err, double scale)
{
    const double g = fp8_value(e5m2, got);
    if (isnan(value) || isnan(g))
        return isnan(value) && isnan(g);
    if (err == 0.0 || isinf(value))
        return g == fp8_quantise(e5m2, value / scale) &&
               signbit(g) == signbit(fp8_quantise(e5m2, value / scale));
    return fp8_quantise(e5m2, (value - err) / scale) <= g && g <= fp8_quantise(e5m2, (value + err) / scale);
}

static void test_quantiser_matches_the_library_converter(void)
{
    /* The library's converter is what the reference kernel and the verifier use: it must be the
     * test's quantiser exactly, at every code, every midpoint and just off it, and beyond. */
    for (int e5m2 = 0; e5m2 < 2; e5m2++) {
        int bad = 0;
        const double max = e5m2 ? 57344.0 : 448.0;
        for (int c = 0; c < 128 && !bad; c++) {
            const double v = fp8_table_value(e5m2, c), next = fp8_table_value(e5m2, c + 1);
            if (isnan(v))
                break;
            double probes[7] = {v, -v, v * (1 + 0x1p-40), 0, 0, 0, 0};
            int n = 3;
            if (!isnan(next)) {
                const double mid = (v + next) / 2;
                probes[n++] = mid;
                probes[n++] = -mid;
                probes[n++] = nextafter(mid, 0);
                probes[n++] = nextafter(mid, INFINITY);
            }
            for (int i = 0; i < n; i++) {
                const double want = fp8_quantise(e5m2, probes[i]);
                const double got = rp_fp8_bits_to_double(rp_double_to_fp8_bits(probes[i], e5m2), e5m2);
                if (got != want || signbit(got) != signbit(want)) {
                    bad = 1;
                    CHECK(0, "e5m2=%d: fp8(%.17g) = %.17g, table says %.17g", e5m2, probes[i], got, want);
                }
            }
        }
        const double extremes[] = {max * 1.03, -max * 1.2, 1e300, -INFINITY, INFINITY, 1e-300, -0.0, 0x1p-30};
        for (size_t i = 0; i < sizeof extremes / sizeof extremes[0]; i++) {
            const double want = fp8_quantise(e5m2, extremes[i]);
            const uint8_t code = rp_double_to_fp8_bits(extremes[i], e5m2);
            CHECK(rp_fp8_bits_to_double(code, e5m2) == want && signbit(want) == ((code & 0x80) != 0),
                  "e5m2=%d: fp8(%g) gave code 0x%02x, want %g", e5m2, extremes[i], code, want);
        }
        CHECK(isnan(rp_fp8_bits_to_double(rp_double_to_fp8_bits(NAN, e5m2), e5m2)), "NaN must stay NaN");
        CHECK(isnan(rp_fp8_bits_to_double(rp_double_to_fp8_bits(-NAN, e5m2), e5m2)), "-NaN must stay NaN");
    }
}

/* ---- the float64 rotation, written out for the fp8 check --------------------------------------- */

/* Element i of token t, head h of the float64 formula for k (every style, rotary_dim, table and
 * attention scaling the header defines), and the kernel's allowed error on it. */
static double rotated_k(const rp_rope_pool_args *a, int64_t t, int64_t h, int64_t i, double *err)
{
    const int64_t D = a->head_dim, R = a->rotary_dim ? a->rotary_dim : D;
    const double s = a->attention_scaling ? a->attention_scaling : 1.0;
    const rp_tensor *k = &a->k;
    const size_t e = rp_dtype_size((rp_dtype)k->dtype);
    double x[2];
    int64_t idx[2], j;
    if (i >= R) {
        *err = 0.0;
        return test_load(k->data, (rp_dtype)k->dtype, t * k->strides[0] + h * k->strides[1] + i);
    }
    if (a->style == RP_ROPE_GPTJ) {
        j = i / 2;
        idx[0] = 2 * j;
        idx[1] = 2 * j + 1;
    } else {
        j = i % (R / 2);
        idx[0] = j;
        idx[1] = j + R / 2;
    }
    for (int m = 0; m < 2; m++)
        x[m] = test_load(k->data, (rp_dtype)k->dtype, t * k->strides[0] + h * k->strides[1] + idx[m]);
    (void)e;
    const double freq = a->inv_freq ? a->inv_freq[j] : pow(a->rope_base, -(double)(2 * j) / (double)R);
    const double pos = test_load(a->positions.data, (rp_dtype)a->positions.dtype, t * a->positions.strides[0]);
    const double c = s * cos(pos * freq), n = s * sin(pos * freq);
    const double y = i == idx[0] ? x[0] * c - x[1] * n : x[1] * c + x[0] * n;
    /* The contract's rotation error, the float32 rounding of the result, and the scaling's. */
    *err = 0x1p-21 * s * (fabs(x[0]) + fabs(x[1])) + 0x1p-20 * fabs(y);
    return y;
}

/* Every written fp8 pool element of a finished call against the quantiser; v exact at scale 1. */
static void check_fp8_pools(const rp_rope_pool_args *a, double k_scale, double v_scale, const char *what)
{
    const int e5m2 = (a->k_pool.dtype == RP_U8 ? a->pool_dtype : a->k_pool.dtype) == RP_F8_E5M2;
    const int64_t T = a->q.shape[0], Hk = a->num_kv_heads, D = a->head_dim;
    const int64_t Dv = a->v_head_dim ? a->v_head_dim : D;
    int64_t failures = 0, checked = 0;
    for (int64_t t = 0; t < T; t++) {
        const int64_t slot = (int64_t)test_load(a->slots.data, (rp_dtype)a->slots.dtype, t * a->slots.strides[0]);
        if (slot < 0)
            continue;
        for (int64_t h = 0; h < Hk; h++) {
            for (int64_t i = 0; i < D; i++) {
                double err;
                const double y = rotated_k(a, t, h, i, &err);
                const uint8_t got = *(const uint8_t *)test_pool_element(&a->k_pool, a->kv_layout, slot, h, i);
                const double scale_err = k_scale == 1.0 ? 0.0 : 0x1p-21 * fabs(y);
                checked++;
                if (!fp8_code_ok(e5m2, got, y, err + scale_err, k_scale) && failures++ == 0)
                    CHECK(0, "%s: k_pool[token %lld, head %lld, dim %lld] = %g, fp8 of %.9g / %g is %g", what,
                          (long long)t, (long long)h, (long long)i, fp8_value(e5m2, got), y, k_scale,
                          fp8_quantise(e5m2, y / k_scale));
            }
            for (int64_t i = 0; i < Dv; i++) {
                const double x = test_load(a->v.data, (rp_dtype)a->v.dtype,
                                           t * a->v.strides[0] + h * a->v.strides[1] + i);
                const uint8_t got = *(const uint8_t *)test_pool_element(&a->v_pool, a->kv_layout, slot, h, i);
                checked++;
                if (!fp8_code_ok(e5m2, got, x, v_scale == 1.0 ? 0.0 : 0x1p-21 * fabs(x), v_scale) &&
                    failures++ == 0)
                    CHECK(0, "%s: v_pool[token %lld, head %lld, dim %lld] = %g, fp8 of %.9g / %g is %g", what,
                          (long long)t, (long long)h, (long long)i, fp8_value(e5m2, got), x, v_scale,
                          fp8_quantise(e5m2, x / v_scale));
            }
        }
    }
    CHECK(failures == 0, "%s: %lld of %lld fp8 codes wrong", what, (long long)failures, (long long)checked);
}

/* ---- fp8 pools ------------------------------------------------------------------------------------ */

/* Values of dtype dt that stress the quantiser for format e5m2 at scale s: exact midpoints (ties),
 * values a hair off them, subnormals, the largest values and beyond (saturation), zeros, NaN. */
static double adversarial_value(test_rng *r, rp_dtype dt, int e5m2, double s, int64_t i)
{
    const double max = e5m2 ? 57344.0 : 448.0;
    const int c = (int)(rng_next(r) % (e5m2 ? 123 : 126));
    const double lo = fp8_table_value(e5m2, c), hi = fp8_table_value(e5m2, c + 1), mid = (lo + hi) / 2;
    const double sign = rng_next(r) & 1 ? -1.0 : 1.0;
    double v;
    switch (i % 9) {
    case 0: v = mid; break;
    case 1: v = nextafter(mid, 0); break;
    case 2: v = nextafter(mid, 1e9); break;
    case 3: v = fp8_table_value(e5m2, (int)(rng_next(r) % 8)); break; /* subnormals, 0 */
    case 4: v = max * rng_uniform(r, 0.9, 1.2); break;
    case 5: v = rng_uniform(r, 0, 1) < 0.02 ? NAN : lo; break;
    case 6: v = 1e6; break;
    default: v = rng_uniform(r, -3, 3); break;
    }
    (void)dt; /* test_store rounds to the dtype; the checks read back what was stored */
    return sign * v * s;
}

typedef struct fp8_case {
    int e5m2, typed;   /* typed: RP_F8_* pools; else uint8 with pool_dtype */
    int scale_kind;    /* 0: none (1.0), 1: k_scale/v_scale doubles, 2: k_scale_ptr/v_scale_ptr */
} fp8_case;

/* One call: T tokens with adversarial v and k values, fp8 pools that are layer 1 of a [3, P, Hk, D]
 * uint8 cache, negative slots; checked by the quantiser, and nothing outside the rows changed. */
static void run_fp8_case(rp_dtype dt, fp8_case c, const rope_variant *variant)
{
    /* D = 40 with scales: 20 pairs, the vector kernels' tails and masks */
    const int64_t T = test_quick() ? 9 : 29, Hq = 4, Hk = 2, D = c.scale_kind == 1 ? 40 : 64, P = 40, layers = 3;
    const int64_t layer_elems = P * Hk * D;
    fixture f;
    fixture_init(&f, &rng, T, Hq, Hk, D, P, dt, RP_I64, 5000, 1);
    const double k_scale = c.scale_kind ? 0.37 : 1.0, v_scale = c.scale_kind ? 2.5 : 1.0;
    for (int64_t i = 0; i < T * Hk * D; i++) {
        test_store(f.v, dt, i, adversarial_value(&rng, dt, c.e5m2, v_scale, i));
        if (i % 3 == 0) /* k: rotated, so only its magnitude stresses (saturation, subnormals) */
            test_store(f.k, dt, i, adversarial_value(&rng, dt, c.e5m2, k_scale, i) * (i % 2 ? 1 : 1e-3));
    }
    if (variant)
        fixture_set_variant(&f, &rng, variant);
    uint8_t *cache = test_alloc((size_t)(2 * layers * layer_elems)), *before = test_alloc((size_t)(2 * layers * layer_elems));
    for (int64_t i = 0; i < 2 * layers * layer_elems; i++)
        cache[i] = (uint8_t)rng_next(&rng);
    memcpy(before, cache, (size_t)(2 * layers * layer_elems));
    rp_rope_pool_args *a = &f.args;
    const rp_dtype fmt = c.e5m2 ? RP_F8_E5M2 : RP_F8_E4M3, storage = c.typed ? fmt : RP_U8;
    a->k_pool = rp_tensor_3d(cache + layer_elems, storage, P, Hk, D);
    a->v_pool = rp_tensor_3d(cache + (layers + 1) * layer_elems, storage, P, Hk, D);
    a->pool_dtype = c.typed ? 0 : fmt;
    float k_cell = (float)k_scale, v_cell = (float)v_scale;
    if (c.scale_kind == 1) {
        a->k_scale = k_scale;
        a->v_scale = v_scale;
    } else if (c.scale_kind == 2) {
        a->k_scale_ptr = &k_cell;
        a->v_scale_ptr = &v_cell;
    }
    char what[160], vname[64];
    snprintf(what, sizeof what, "%s %s %s scale %d%s%s", rp_dtype_name(dt), rp_dtype_name(fmt),
             c.typed ? "typed" : "uint8", c.scale_kind, variant ? " " : "",
             variant ? variant_name(variant, D, vname, sizeof vname) : "");
    call_ok(a, what);
    check_fp8_pools(a, (double)(float)k_scale == k_scale || c.scale_kind != 2 ? k_scale : (double)k_cell,
                    c.scale_kind == 2 ? (double)v_cell : v_scale, what);
    /* Only the rows named by slots >= 0 may differ from the bytes before the call. */
    for (int64_t t = 0; t < T; t++) {
        const int64_t slot = (int64_t)test_load(f.slots, RP_I64, t);
        if (slot < 0)
            continue;
        for (int pool = 0; pool < 2; pool++) {
            const int64_t at = (pool ? (layers + 1) : 1) * layer_elems + slot * Hk * D;
            memcpy(before + at, cache + at, (size_t)(Hk * D));
        }
    }
    CHECK(memcmp(before, cache, (size_t)(2 * layers * layer_elems)) == 0,
          "%s: bytes outside the written rows changed", what);
    verify_outputs(a, a, what); /* q_rot, k_rot and the library verifier's view of the pools */
    free(cache);
    free(before);
    fixture_free(&f);
}

static void test_fp8_pools_hold_the_correctly_rounded_rotation(void)
{
    for (int d = 0; d < 3; d++)
        for (int e5m2 = 0; e5m2 < 2; e5m2++)
            for (int typed = 0; typed < 2; typed++)
                for (int scale_kind = 0; scale_kind < 3; scale_kind++)
                    run_fp8_case(dtypes[d], (fp8_case){e5m2, typed, scale_kind}, NULL);
}

static void test_fp8_pools_with_every_rope_variant(void)
{
    for (int v = 0; v < NUM_TEST_VARIANTS; v++)
        run_fp8_case(dtypes[v % 3], (fp8_case){v % 2, v % 3 == 0, v % 3}, &test_variants[v]);
}

/* Long rows: one call of 300 tokens (60 in quick runs: still threaded), D = 128 (every vector
 * step, streaming stores and the threads), random values. */
static void test_fp8_pools_at_llama_shapes(void)
{
    for (int e5m2 = 0; e5m2 < 2; e5m2++) {
        fixture f;
        fixture_init(&f, &rng, test_quick() ? 60 : 300, 8, 2, 128, 512, RP_BF16, RP_I32, 1 << 17, 1);
        rp_rope_pool_args *a = &f.args;
        /* Pools on cache lines: the kernels' streaming fp8 stores. */
        void *bufs[2] = {&f.k_pool, &f.v_pool};
        for (int i = 0; i < 2; i++) {
            void **slot = bufs[i];
            free(*slot);
            *slot = aligned_alloc(64, 512 * 2 * 128);
            memset(*slot, 0x5a, 512 * 2 * 128);
        }
        a->k_pool.data = f.k_pool;
        a->v_pool.data = f.v_pool;
        a->k_pool.dtype = a->v_pool.dtype = RP_U8;
        a->pool_dtype = e5m2 ? RP_F8_E5M2 : RP_F8_E4M3;
        a->k_scale = 0.125;
        call_ok(a, "fp8 at Llama shapes");
        check_fp8_pools(a, 0.125, 1.0, e5m2 ? "e5m2 at Llama shapes" : "e4m3 at Llama shapes");
        fixture_free(&f);
    }
}

/* Every bf16 bit pattern as v, at scale 1 (where the AVX2 kernel converts on 16-bit lanes
 * without a float32 product): each code byte for byte the library converter's, NaNs included,
 * in both formats, in pool rows that stream and in rows that do not. */
static void test_fp8_codes_of_every_bf16_value(void)
{
    const int64_t T = 512, D = 128, P = 600; /* T * D = 65,536 values, one head */
    for (int e5m2 = 0; e5m2 < 2; e5m2++)
        for (int on_lines = 0; on_lines < 2; on_lines++) {
            fixture f;
            fixture_init(&f, &rng, T, 1, 1, D, P, RP_BF16, RP_I32, 1 << 16, 0);
            for (int64_t i = 0; i < T * D; i++)
                ((uint16_t *)f.v)[i] = (uint16_t)i;
            rp_rope_pool_args *a = &f.args;
            const rp_dtype fmt = e5m2 ? RP_F8_E5M2 : RP_F8_E4M3;
            uint8_t *pools = aligned_alloc(64, (size_t)(2 * P * D + 64));
            memset(pools, 0x5a, (size_t)(2 * P * D + 64));
            const int64_t shift = on_lines ? 0 : 16; /* rows off cache lines take ordinary stores */
            a->k_pool = rp_tensor_3d(pools + shift, fmt, P, 1, D);
            a->v_pool = rp_tensor_3d(pools + shift + P * D, fmt, P, 1, D);
            const char *what = e5m2 ? "every bf16 value to e5m2" : "every bf16 value to e4m3";
            call_ok(a, what);
            check_fp8_pools(a, 1.0, 1.0, what);
            int64_t wrong = 0;
            for (int64_t t = 0; t < T; t++) {
                const int64_t slot = (int64_t)test_load(f.slots, RP_I32, t);
                for (int64_t i = 0; slot >= 0 && i < D; i++) {
                    const uint8_t want = rp_double_to_fp8_bits(test_load(f.v, RP_BF16, t * D + i), e5m2);
                    const uint8_t got = pools[shift + P * D + slot * D + i];
                    if (got != want && wrong++ == 0)
                        CHECK(0, "%s: bf16 bits 0x%04x gave code 0x%02x, want 0x%02x", what,
                              (unsigned)(t * D + i), got, want);
                }
            }
            CHECK(wrong == 0, "%s: %lld codes differ from the library converter's", what, (long long)wrong);
            free(pools);
            fixture_free(&f);
        }
}

/* ---- paged pools ------------------------------------------------------------------------------------ */

typedef enum alloc_kind {
    ALLOC_SEPARATE,  /* two [num_blocks, bs, Hk, D] (NHD) or [num_blocks, Hk, bs, D] (HND) arrays */
    ALLOC_VLLM_FA,   /* NHD: vLLM's FlashAttention [num_blocks, 2, bs, Hk, D], unbind(1)         */
    ALLOC_PACKED     /* HND: vLLM's packed (num_blocks, Hk, bs, 2 * D), split on the last dim     */
} alloc_kind;

/* Paged views of one allocation `base` (bytes, pool element size e) for layout, and its size. */
static size_t paged_views(void *base, rp_dtype storage, int32_t layout, alloc_kind kind, int64_t nb,
                          int64_t bs, int64_t Hk, int64_t D, rp_tensor *k_pool, rp_tensor *v_pool)
{
    const size_t e = rp_dtype_size(storage);
    const int64_t block = bs * Hk * D; /* elements of one pool's block */
    rp_tensor t = {0};
    t.ndim = 4;
    t.dtype = storage;
    t.shape[0] = nb;
    t.shape[1] = layout == RP_KV_NHD ? bs : Hk;
    t.shape[2] = layout == RP_KV_NHD ? Hk : bs;
    t.shape[3] = D;
    int64_t v_offset;
    if (kind == ALLOC_PACKED) { /* (nb, Hk, bs, 2D): rows 2D apart, V after K in each row */
        t.strides[0] = 2 * block;
        t.strides[1] = bs * 2 * D;
        t.strides[2] = 2 * D;
        v_offset = D;
    } else {
        const int64_t s0 = kind == ALLOC_VLLM_FA ? 2 * block : block;
        t.strides[0] = s0;
        t.strides[1] = layout == RP_KV_NHD ? Hk * D : bs * D;
        t.strides[2] = layout == RP_KV_NHD ? D : D;
        if (layout == RP_KV_HND)
            t.strides[1] = bs * D;
        v_offset = kind == ALLOC_VLLM_FA ? block : nb * block;
    }
    t.strides[3] = 1;
    t.data = base;
    *k_pool = t;
    t.data = (char *)base + v_offset * (int64_t)e;
    *v_pool = t;
    return (size_t)(2 * nb * block) * e;
}

/* Slots: distinct, the last row of the last block among them, every fifth token skipping. */
static void paged_slots(fixture *f, int64_t P)
{
    int64_t *perm = test_alloc((size_t)P * sizeof *perm);
    for (int64_t i = 0; i < P; i++)
        perm[i] = P - 1 - i; /* perm[0] = the last slot */
    for (int64_t t = 1; t < f->T && t < P; t++) {
        const int64_t j = t + (int64_t)(rng_next(&rng) % (uint64_t)(P - t));
        const int64_t x = perm[t];
        perm[t] = perm[j];
        perm[j] = x;
    }
    for (int64_t t = 0; t < f->T; t++)
        test_store(f->slots, RP_I32, t, t % 5 == 4 || t >= P ? -1.0 - (double)t : (double)perm[t]);
    free(perm);
}

/* The same call on a flat pool and on a paged one: q_rot, k_rot and the written rows must be the
 * same bytes, and no other byte of the paged allocation may change. */
static void run_paged_case(rp_dtype dt, rp_dtype fmt, int32_t layout, alloc_kind kind, int64_t bs,
                           const rope_variant *variant)
{
    const int64_t T = 23, Hq = 4, Hk = 2, D = 64, nb = (T + bs - 1) / bs + 2, P = nb * bs;
    const rp_dtype storage = fmt == dt ? dt : RP_U8;
    const size_t pe = rp_dtype_size(storage), row = (size_t)(Hk * D) * pe;
    fixture f;
    fixture_init(&f, &rng, T, Hq, Hk, D, P, dt, RP_I32, 1 << 16, 0);
    if (variant)
        fixture_set_variant(&f, &rng, variant);
    paged_slots(&f, P);
    rp_rope_pool_args *a = &f.args;
    a->k_pool.dtype = a->v_pool.dtype = storage;
    a->pool_dtype = storage == RP_U8 ? fmt : 0;
    a->k_scale = storage == RP_U8 ? 0.75 : 0.0;

    const size_t bytes = (size_t)(2 * P * Hk * D) * pe;
    unsigned char *alloc = test_alloc(bytes), *expect = test_alloc(bytes);
    for (size_t i = 0; i < bytes; i++)
        alloc[i] = (unsigned char)rng_next(&rng);
    memcpy(expect, alloc, bytes);
    rp_rope_pool_args paged = *a;
    paged.kv_layout = layout;
    paged_views(alloc, storage, layout, kind, nb, bs, Hk, D, &paged.k_pool, &paged.v_pool);
    void *q_rot = test_alloc((size_t)(T * Hq * D) * rp_dtype_size(dt)), *k_rot = test_alloc((size_t)(T * Hk * D) * rp_dtype_size(dt));
    paged.q_rot.data = q_rot;
    paged.k_rot.data = k_rot;

    char what[160], vname[64];
    snprintf(what, sizeof what, "%s pools %s %s bs %lld alloc %d%s%s", rp_dtype_name(dt), rp_dtype_name(fmt),
             layout == RP_KV_NHD ? "NHD" : "HND", (long long)bs, (int)kind, variant ? " " : "",
             variant ? variant_name(variant, D, vname, sizeof vname) : "");
    call_ok(a, what);
    call_ok(&paged, what);
    verify_outputs(&paged, &paged, what);
    CHECK(memcmp(q_rot, f.q_rot, (size_t)(T * Hq * D) * rp_dtype_size(dt)) == 0, "%s: q_rot differs from flat", what);
    CHECK(memcmp(k_rot, f.k_rot, (size_t)(T * Hk * D) * rp_dtype_size(dt)) == 0, "%s: k_rot differs from flat", what);
    /* Expected allocation: the bytes before, with each written row's heads copied from the flat
     * result into the places the paged views give them. */
    for (int64_t t = 0; t < T; t++) {
        const int64_t slot = (int64_t)test_load(f.slots, RP_I32, t);
        if (slot < 0)
            continue;
        for (int pool = 0; pool < 2; pool++)
            for (int64_t h = 0; h < Hk; h++) {
                const rp_tensor *view = pool ? &paged.v_pool : &paged.k_pool;
                const char *flat = (const char *)(pool ? f.v_pool : f.k_pool) + (size_t)slot * row + (size_t)(h * D) * pe;
                char *at = test_pool_element(view, layout, slot, h, 0);
                memcpy(expect + (at - (char *)alloc), flat, (size_t)D * pe);
            }
    }
    CHECK(memcmp(expect, alloc, bytes) == 0, "%s: the paged allocation differs from the flat rows "
          "(or a byte outside them changed)", what);
    free(alloc);
    free(expect);
    free(q_rot);
    free(k_rot);
    fixture_free(&f);
}

static void test_paged_pools_match_flat_ones_byte_for_byte(void)
{
    static const int64_t block_sizes[] = {1, 13, 16, 32};
    for (int b = 0; b < 4; b++)
        for (int d = 0; d < 3; d++) {
            run_paged_case(dtypes[d], dtypes[d], RP_KV_NHD, ALLOC_SEPARATE, block_sizes[b], NULL);
            run_paged_case(dtypes[d], dtypes[d], RP_KV_HND, ALLOC_SEPARATE, block_sizes[b], NULL);
            run_paged_case(dtypes[d], dtypes[d], RP_KV_NHD, ALLOC_VLLM_FA, block_sizes[b], NULL);
            run_paged_case(dtypes[d], dtypes[d], RP_KV_HND, ALLOC_PACKED, block_sizes[b], NULL);
        }
}

static void test_paged_fp8_pools_and_rope_variants(void)
{
    for (int v = 0; v < NUM_TEST_VARIANTS; v++) {
        const int32_t layout = v % 2 ? RP_KV_HND : RP_KV_NHD;
        const alloc_kind kind = v % 2 ? ALLOC_PACKED : ALLOC_VLLM_FA;
        const int64_t bs = v % 3 == 0 ? 16 : v % 3 == 1 ? 13 : 1;
        run_paged_case(dtypes[v % 3], dtypes[v % 3], layout, kind, bs, &test_variants[v]);
        run_paged_case(dtypes[(v + 1) % 3], v % 2 ? RP_F8_E5M2 : RP_F8_E4M3, layout, kind, bs, &test_variants[v]);
    }
}

/* ---- v_head_dim: MLA's latent row --------------------------------------------------------------------- */

/* DeepSeek's cache row [c_kv (512) | k_pe (64)] as one [P, 576] allocation: v_pool = columns
 * 0..511, k_pool = columns 512..575 (Hk = 1), flat and paged NHD [P / 64, 64, 1, .], bf16/f16/f32
 * and fp8. c_kv is copied bit for bit (or quantised), k_pe rotated; no other byte changes. */
static void run_mla_case(rp_dtype dt, rp_dtype fmt, int64_t bs)
{
    const int64_t T = 19, Hq = 16, D = 64, Dv = 512, W = Dv + D, P = 128;
    const rp_dtype storage = fmt == dt ? dt : RP_U8;
    const size_t e = rp_dtype_size(dt), pe = rp_dtype_size(storage);
    fixture f;
    fixture_init(&f, &rng, T, Hq, 1, D, P, dt, RP_I64, 1 << 15, 1);
    rp_rope_pool_args *a = &f.args;
    void *v = test_alloc((size_t)(T * Dv) * e);
    fill_random(&rng, v, dt, T * Dv, -3, 3);
    a->v = rp_tensor_3d(v, dt, T, 1, Dv);
    a->v_head_dim = Dv;
    a->style = RP_ROPE_GPTJ; /* DeepSeek's rope_interleave */
    unsigned char *cache = test_alloc((size_t)(P * W) * pe), *before = test_alloc((size_t)(P * W) * pe);
    for (int64_t i = 0; i < P * W * (int64_t)pe; i++)
        cache[i] = (unsigned char)rng_next(&rng);
    memcpy(before, cache, (size_t)(P * W) * pe);
    a->v_pool = rp_tensor_3d(cache, storage, P, 1, Dv);
    a->k_pool = rp_tensor_3d(cache + Dv * pe, storage, P, 1, D);
    a->v_pool.strides[0] = a->k_pool.strides[0] = W;
    if (bs > 1) { /* [P / bs, bs, 1, width] views of the same rows */
        a->kv_layout = RP_KV_NHD;
        rp_tensor *pools[2] = {&a->k_pool, &a->v_pool};
        for (int i = 0; i < 2; i++) {
            rp_tensor *t = pools[i];
            const int64_t width = t->shape[2];
            t->ndim = 4;
            t->shape[0] = P / bs;
            t->shape[1] = bs;
            t->shape[2] = 1;
            t->shape[3] = width;
            t->strides[0] = bs * W;
            t->strides[1] = W;
            t->strides[2] = width;
            t->strides[3] = 1;
        }
    }
    if (storage == RP_U8) {
        a->pool_dtype = fmt;
        a->k_scale = 0.5;
        a->v_scale = 0.25;
    }
    char what[128];
    snprintf(what, sizeof what, "MLA %s pool %s block %lld", rp_dtype_name(dt), rp_dtype_name(fmt), (long long)bs);
    call_ok(a, what);
    verify_outputs(a, a, what);
    if (storage == RP_U8)
        check_fp8_pools(a, 0.5, 0.25, what);
    for (int64_t t = 0; t < T; t++) { /* c_kv bit for bit (non-fp8), and nothing else changed */
        const int64_t slot = (int64_t)test_load(f.slots, RP_I64, t);
        if (slot < 0)
            continue;
        if (storage != RP_U8)
            CHECK(memcmp(cache + (size_t)(slot * W) * pe, (char *)v + (size_t)(t * Dv) * e, (size_t)Dv * e) == 0,
                  "%s: c_kv of token %lld is not v", what, (long long)t);
        memcpy(before + (size_t)(slot * W) * pe, cache + (size_t)(slot * W) * pe, (size_t)W * pe);
    }
    CHECK(memcmp(before, cache, (size_t)(P * W) * pe) == 0, "%s: bytes outside the written rows changed", what);
    free(v);
    free(cache);
    free(before);
    fixture_free(&f);
}

static void test_v_head_dim_writes_mla_latent_rows(void)
{
    for (int d = 0; d < 3; d++) {
        run_mla_case(dtypes[d], dtypes[d], 1);
        run_mla_case(dtypes[d], dtypes[d], 64);
    }
    run_mla_case(RP_BF16, RP_F8_E4M3, 1);
    run_mla_case(RP_F16, RP_F8_E5M2, 64);
}

int main(void)
{
    ctx = level_suite_context();
    RUN(test_quantiser_matches_the_library_converter);
    RUN(test_fp8_pools_hold_the_correctly_rounded_rotation);
    RUN(test_fp8_pools_with_every_rope_variant);
    RUN(test_fp8_pools_at_llama_shapes);
    RUN(test_fp8_codes_of_every_bf16_value);
    RUN(test_paged_pools_match_flat_ones_byte_for_byte);
    RUN(test_paged_fp8_pools_and_rope_variants);
    RUN(test_v_head_dim_writes_mla_latent_rows);
    rp_context_destroy(ctx);
    return test_summary("pools");
}
