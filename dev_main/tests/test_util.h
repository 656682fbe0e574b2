/*
 * test_util.h — the small harness the C tests share: checks that count failures, a seeded random
 * generator, and a fixture that owns one call's buffers.
 */
#ifndef RP_TEST_UTIL_H
#define RP_TEST_UTIL_H

#include "ropepool.h"
#include "dtype.h" /* exact decoding of f16/bf16/fp8 inputs and codes */

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int test_failures;

#define CHECK(cond, ...)                                                                          \
    do {                                                                                          \
        if (!(cond)) {                                                                            \
            test_failures++;                                                                      \
            fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, #cond);              \
            fprintf(stderr, __VA_ARGS__);                                                         \
            fputc('\n', stderr);                                                                  \
        }                                                                                         \
    } while (0)

#define RUN(test)                                                                                 \
    do {                                                                                          \
        int before_ = test_failures;                                                              \
        test();                                                                                   \
        printf("%s %s\n", test_failures == before_ ? "ok  " : "FAIL", #test);                     \
    } while (0)

static inline int test_summary(const char *suite)
{
    if (test_failures)
        fprintf(stderr, "%s: %d check(s) failed\n", suite, test_failures);
    else
        printf("%s: all passed\n", suite);
    return test_failures ? 1 : 0;
}

/* 1 when ROPEPOOL_TEST_QUICK is set (and not "0"): the long suites run at reduced sizes and
 * counts, for emulated (make test-aarch64) and instrumented (compute-sanitizer) runs. */
static inline int test_quick(void)
{
    const char *q = getenv("ROPEPOOL_TEST_QUICK");
    return q && *q && strcmp(q, "0") != 0;
}

/* splitmix64: small, seeded, reproducible. */
typedef struct test_rng {
    uint64_t state;
} test_rng;

static inline uint64_t rng_next(test_rng *r)
{
    uint64_t z = (r->state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [lo, hi). */
static inline double rng_uniform(test_rng *r, double lo, double hi)
{
    return lo + (hi - lo) * ((double)(rng_next(r) >> 11) * 0x1p-53);
}

static inline uint16_t test_float_to_f16(float f);
static inline uint16_t test_float_to_bf16(float f);

/* Stores `value` (already representable enough) as element i of a buffer of dtype. */
static inline void test_store(void *buf, rp_dtype dtype, int64_t i, double value)
{
    switch (dtype) {
    case RP_F32: ((float *)buf)[i] = (float)value; break;
    case RP_F16: ((uint16_t *)buf)[i] = test_float_to_f16((float)value); break;
    case RP_BF16: ((uint16_t *)buf)[i] = test_float_to_bf16((float)value); break;
    case RP_I32: ((int32_t *)buf)[i] = (int32_t)value; break;
    case RP_I64: ((int64_t *)buf)[i] = (int64_t)value; break;
    default: break;
    }
}

/* Element i of a buffer of dtype, exactly (inputs, positions, slots). */
static inline double test_load(const void *buf, rp_dtype dtype, int64_t i)
{
    switch (dtype) {
    case RP_F32: return ((const float *)buf)[i];
    case RP_F16: return rp_f16_bits_to_double(((const uint16_t *)buf)[i]);
    case RP_BF16: return rp_bf16_bits_to_float(((const uint16_t *)buf)[i]);
    case RP_I32: return ((const int32_t *)buf)[i];
    case RP_I64: return (double)((const int64_t *)buf)[i];
    default: return NAN;
    }
}

/* Address of element (slot, head h, dim i) of a pool tensor in layout kv_layout, written out from
 * the header's definitions (not the library's address helper). */
static inline char *test_pool_element(const rp_tensor *t, int32_t kv_layout, int64_t slot, int64_t h, int64_t i)
{
    int64_t offset;
    if (kv_layout == RP_KV_FLAT) {
        offset = slot * t->strides[0] + h * t->strides[1] + i * t->strides[2];
    } else {
        const int64_t bs = kv_layout == RP_KV_NHD ? t->shape[1] : t->shape[2];
        const int64_t row_dim = kv_layout == RP_KV_NHD ? 1 : 2, head_dim = kv_layout == RP_KV_NHD ? 2 : 1;
        offset = (slot / bs) * t->strides[0] + (slot % bs) * t->strides[row_dim] + h * t->strides[head_dim] +
                 i * t->strides[3];
    }
    return (char *)t->data + offset * (int64_t)rp_dtype_size((rp_dtype)t->dtype);
}

/* Truncating conversions are fine for generating inputs: the inputs are whatever they are. */
static inline uint16_t test_float_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)(u >> 16);
}

static inline uint16_t test_float_to_f16(float f)
{
    /* Inputs are drawn in normal f16 range; truncate the mantissa. */
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000u;
    int32_t e = (int32_t)((u >> 23) & 0xff) - 127 + 15;
    if ((u & 0x7fffffffu) == 0 || e <= 0)
        return (uint16_t)sign;
    if (e >= 31)
        return (uint16_t)(sign | 0x7bffu);
    return (uint16_t)(sign | ((uint32_t)e << 10) | ((u >> 13) & 0x3ffu));
}

/* One call's buffers, contiguous, host memory. */
typedef struct fixture {
    int64_t T, Hq, Hk, D, P;
    rp_dtype dtype, index_dtype;
    void *q, *k, *v, *q_rot, *k_rot, *k_pool, *v_pool, *positions, *slots;
    double *inv_freq; /* the caller's table when a test sets one (fixture_set_variant), or NULL */
    rp_rope_pool_args args;
} fixture;

static inline void *test_alloc(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "test: out of memory (%zu bytes)\n", bytes);
        exit(2);
    }
    return p;
}

static inline void fill_random(test_rng *r, void *buf, rp_dtype dtype, int64_t n, double lo, double hi)
{
    for (int64_t i = 0; i < n; i++)
        test_store(buf, dtype, i, rng_uniform(r, lo, hi));
}

/* Random q/k/v in [-2, 2), positions in [0, max_pos), distinct slots in [0, P) with every
 * fourth token (when skip_some) skipping the pool write; pools filled with random garbage. */
static inline void fixture_init(fixture *f, test_rng *r, int64_t T, int64_t Hq, int64_t Hk,
                                int64_t D, int64_t P, rp_dtype dtype, rp_dtype index_dtype,
                                int64_t max_pos, int skip_some)
{
    memset(f, 0, sizeof *f);
    f->T = T; f->Hq = Hq; f->Hk = Hk; f->D = D; f->P = P;
    f->dtype = dtype;
    f->index_dtype = index_dtype;
    const size_t e = rp_dtype_size(dtype), ie = rp_dtype_size(index_dtype);
    f->q = test_alloc((size_t)(T * Hq * D) * e);
    f->q_rot = test_alloc((size_t)(T * Hq * D) * e);
    f->k = test_alloc((size_t)(T * Hk * D) * e);
    f->k_rot = test_alloc((size_t)(T * Hk * D) * e);
    f->v = test_alloc((size_t)(T * Hk * D) * e);
    f->k_pool = test_alloc((size_t)(P * Hk * D) * e);
    f->v_pool = test_alloc((size_t)(P * Hk * D) * e);
    f->positions = test_alloc((size_t)T * ie);
    f->slots = test_alloc((size_t)T * ie);
    fill_random(r, f->q, dtype, T * Hq * D, -2, 2);
    fill_random(r, f->k, dtype, T * Hk * D, -2, 2);
    fill_random(r, f->v, dtype, T * Hk * D, -2, 2);
    fill_random(r, f->q_rot, dtype, T * Hq * D, -9, 9);
    fill_random(r, f->k_rot, dtype, T * Hk * D, -9, 9);
    fill_random(r, f->k_pool, dtype, P * Hk * D, -9, 9);
    fill_random(r, f->v_pool, dtype, P * Hk * D, -9, 9);
    /* Distinct slots: a partial Fisher-Yates shuffle of [0, P). */
    int64_t *perm = test_alloc((size_t)P * sizeof *perm);
    for (int64_t i = 0; i < P; i++)
        perm[i] = i;
    for (int64_t t = 0; t < T; t++) {
        int64_t slot = -1;
        if (t < P) {
            int64_t j = t + (int64_t)(rng_next(r) % (uint64_t)(P - t));
            int64_t tmp = perm[t]; perm[t] = perm[j]; perm[j] = tmp;
            slot = perm[t];
        }
        if (skip_some && t % 4 == 3)
            slot = -1 - (int64_t)(rng_next(r) % 1000);
        test_store(f->slots, index_dtype, t, (double)slot);
        test_store(f->positions, index_dtype, t, (double)(rng_next(r) % (uint64_t)max_pos));
    }
    free(perm);

    rp_rope_pool_args *a = &f->args;
    a->q = rp_tensor_3d(f->q, dtype, T, Hq, D);
    a->k = rp_tensor_3d(f->k, dtype, T, Hk, D);
    a->v = rp_tensor_3d(f->v, dtype, T, Hk, D);
    a->q_rot = rp_tensor_3d(f->q_rot, dtype, T, Hq, D);
    a->k_rot = rp_tensor_3d(f->k_rot, dtype, T, Hk, D);
    a->k_pool = rp_tensor_3d(f->k_pool, dtype, P, Hk, D);
    a->v_pool = rp_tensor_3d(f->v_pool, dtype, P, Hk, D);
    a->positions = rp_tensor_1d(f->positions, index_dtype, T);
    a->slots = rp_tensor_1d(f->slots, index_dtype, T);
    a->head_dim = D;
    a->num_qo_heads = Hq;
    a->num_kv_heads = Hk;
    a->rope_base = 500000.0;
}

static inline void fixture_free(fixture *f)
{
    void *bufs[] = {f->q, f->k, f->v, f->q_rot, f->k_rot, f->k_pool, f->v_pool, f->positions, f->slots,
                    f->inv_freq};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        free(bufs[i]);
    memset(f, 0, sizeof *f);
}

/* A copy of every buffer a call may write, to prove a failed call wrote nothing. */
typedef struct snapshot {
    void *bufs[4];
    size_t sizes[4];
} snapshot;

static inline void snapshot_take(snapshot *s, const fixture *f)
{
    const size_t e = rp_dtype_size(f->dtype);
    void *src[4] = {f->q_rot, f->k_rot, f->k_pool, f->v_pool};
    size_t sizes[4] = {(size_t)(f->T * f->Hq * f->D) * e, (size_t)(f->T * f->Hk * f->D) * e,
                       (size_t)(f->P * f->Hk * f->D) * e, (size_t)(f->P * f->Hk * f->D) * e};
    for (int i = 0; i < 4; i++) {
        s->sizes[i] = sizes[i];
        s->bufs[i] = test_alloc(sizes[i]);
        memcpy(s->bufs[i], src[i], sizes[i]);
    }
}

/* 1 if no output byte changed since the snapshot; frees it. */
static inline int snapshot_unchanged(snapshot *s, const fixture *f)
{
    void *now[4] = {f->q_rot, f->k_rot, f->k_pool, f->v_pool};
    int same = 1;
    for (int i = 0; i < 4; i++) {
        same &= memcmp(s->bufs[i], now[i], s->sizes[i]) == 0;
        free(s->bufs[i]);
    }
    return same;
}

/* A call that must succeed. */
static inline void call_ok_on(rp_context *ctx, rp_rope_pool_args *a, const char *what)
{
    char msg[512];
    rp_status st = rp_rope_pool_fused(ctx, a, msg, sizeof msg);
    CHECK(st == RP_OK, "%s: %s: %s", what, rp_status_name(st), msg);
}

typedef void (*fixture_mutator)(fixture *f);

/* The error-check harness: a fixture of 6 tokens (Hq 8, Hk 2, D 64, f32, a pool of 16 slots,
 * slots 1, 3, 5, ... that mutators may edit) changed by `mutate` must fail with want_status and
 * want_msg (ending in '*': a prefix) and leave every output byte as it was. */
static inline void expect_call_error(test_rng *rng, const char *name, fixture_mutator mutate,
                                     rp_status want_status, const char *want_msg)
{
    fixture f;
    fixture_init(&f, rng, 6, 8, 2, 64, 16, RP_F32, RP_I32, 4096, 0);
    for (int t = 0; t < 6; t++)
        test_store(f.slots, RP_I32, t, 2 * t + 1);
    mutate(&f);
    snapshot s;
    snapshot_take(&s, &f);
    char msg[512] = "";
    rp_status st = rp_rope_pool_fused(NULL, &f.args, msg, sizeof msg);
    size_t n = strlen(want_msg);
    int prefix = n > 0 && want_msg[n - 1] == '*';
    int match = prefix ? strncmp(msg, want_msg, n - 1) == 0 : strcmp(msg, want_msg) == 0;
    CHECK(st == want_status, "%s: status %s, want %s (msg: %s)", name, rp_status_name(st),
          rp_status_name(want_status), msg);
    CHECK(match, "%s: message\n  got:  %s\n  want: %s", name, msg, want_msg);
    CHECK(snapshot_unchanged(&s, &f), "%s: a failed call wrote output memory", name);
    fixture_free(&f);
}

#endif /* RP_TEST_UTIL_H */
