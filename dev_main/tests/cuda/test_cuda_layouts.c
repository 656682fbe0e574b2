/*
 * test_cuda_layouts.c — the layouts engines pass, on the GPU: QKV slices of one projection,
 * in-place q/k, a pool that is one layer of a larger cache, k and v interleaved, negative slots,
 * T = 0, non-contiguous head_dim, rows that are not 16-byte aligned, reversed tokens. Each runs on
 * the vectorized or the strided kernel and is checked against the float64 formula; memory the call
 * must not touch is compared byte for byte.
 */
#include "cuda_test_util.h"

static test_rng rng = {31337};
static rp_context *ctx;

static const rp_dtype dtypes[3] = {RP_F32, RP_F16, RP_BF16};

/* q, k, v as slices of one fused projection [T, (Hq + 2Hk) * D]. */
static void test_qkv_slices_of_a_fused_projection(void)
{
    for (int d = 0; d < 3; d++) {
        const int64_t T = 37, Hq = 8, Hk = 2, D = 64, P = 64, W = (Hq + 2 * Hk) * D;
        const size_t e = rp_dtype_size(dtypes[d]);
        fixture f;
        fixture_init(&f, &rng, T, Hq, Hk, D, P, dtypes[d], RP_I32, 1 << 20, 1);
        void *qkv = test_alloc((size_t)(T * W) * e);
        fill_random(&rng, qkv, dtypes[d], T * W, -2, 2);
        rp_rope_pool_args *a = &f.args;
        a->q = rp_tensor_3d(qkv, dtypes[d], T, Hq, D);
        a->k = rp_tensor_3d((char *)qkv + Hq * D * e, dtypes[d], T, Hk, D);
        a->v = rp_tensor_3d((char *)qkv + (Hq + Hk) * D * e, dtypes[d], T, Hk, D);
        a->q.strides[0] = a->k.strides[0] = a->v.strides[0] = W;
        mirror m = {0};
        mirror_fixture(&m, &f);
        mirror_add(&m, qkv, (size_t)(T * W) * e);
        run_on_device(ctx, &m, a, "fused QKV slices");
        verify_outputs(a, a, "fused QKV slices");
        mirror_free(&m);
        free(qkv);
        fixture_free(&f);
    }
}

/* q_rot = q and k_rot = k, both slices of one buffer: the in-place call; v is left alone. */
static void test_in_place_on_a_fused_projection(void)
{
    for (int d = 0; d < 3; d++)
        for (int vec = 0; vec < 2; vec++) {
            const int64_t T = 29, Hq = 4, Hk = 2, D = vec ? 128 : 12, P = 40, W = (Hq + 2 * Hk) * D;
            const size_t e = rp_dtype_size(dtypes[d]);
            fixture f;
            fixture_init(&f, &rng, T, Hq, Hk, D, P, dtypes[d], RP_I64, 1 << 30, 1);
            void *qkv = test_alloc((size_t)(T * W) * e), *orig = test_alloc((size_t)(T * W) * e);
            fill_random(&rng, qkv, dtypes[d], T * W, -2, 2);
            memcpy(orig, qkv, (size_t)(T * W) * e);
            rp_rope_pool_args a = f.args, in;
            a.q = rp_tensor_3d(qkv, dtypes[d], T, Hq, D);
            a.k = rp_tensor_3d((char *)qkv + Hq * D * e, dtypes[d], T, Hk, D);
            a.v = rp_tensor_3d((char *)qkv + (Hq + Hk) * D * e, dtypes[d], T, Hk, D);
            a.q.strides[0] = a.k.strides[0] = a.v.strides[0] = W;
            a.q_rot = a.q;
            a.k_rot = a.k;
            in = a;
            in.q.data = orig;
            in.k.data = (char *)orig + Hq * D * e;
            in.v.data = (char *)orig + (Hq + Hk) * D * e;
            mirror m = {0};
            mirror_fixture(&m, &f);
            mirror_add(&m, qkv, (size_t)(T * W) * e);
            run_on_device(ctx, &m, &a, "in place");
            verify_outputs(&in, &a, vec ? "in place (vectorized)" : "in place (strided)");
            for (int64_t t = 0; t < T; t++)
                CHECK(memcmp((char *)qkv + (t * W + (Hq + Hk) * D) * e, (char *)orig + (t * W + (Hq + Hk) * D) * e,
                             (size_t)(Hk * D) * e) == 0,
                      "v of token %lld was modified by an in-place call", (long long)t);
            mirror_free(&m);
            free(qkv);
            free(orig);
            fixture_free(&f);
        }
}

/* The pool is layer 2 of a [L, P, Hk, D] cache: other layers and unnamed rows stay as they were. */
static void test_pool_is_one_layer_of_a_larger_cache(void)
{
    for (int d = 0; d < 3; d++) {
        const int64_t T = 21, Hq = 4, Hk = 2, D = 64, P = 50, L = 4, layer = 2, layer_elems = P * Hk * D;
        const size_t e = rp_dtype_size(dtypes[d]), cache_bytes = (size_t)(L * layer_elems) * e;
        fixture f;
        fixture_init(&f, &rng, T, Hq, Hk, D, P, dtypes[d], RP_I32, 100000, 1);
        void *kc = test_alloc(cache_bytes), *vc = test_alloc(cache_bytes);
        fill_random(&rng, kc, dtypes[d], L * layer_elems, -9, 9);
        fill_random(&rng, vc, dtypes[d], L * layer_elems, -9, 9);
        void *kc0 = test_alloc(cache_bytes), *vc0 = test_alloc(cache_bytes);
        memcpy(kc0, kc, cache_bytes);
        memcpy(vc0, vc, cache_bytes);
        f.args.k_pool = rp_tensor_3d((char *)kc + layer * layer_elems * e, dtypes[d], P, Hk, D);
        f.args.v_pool = rp_tensor_3d((char *)vc + layer * layer_elems * e, dtypes[d], P, Hk, D);
        mirror m = {0};
        mirror_fixture(&m, &f);
        mirror_add(&m, kc, cache_bytes);
        mirror_add(&m, vc, cache_bytes);
        run_on_device(ctx, &m, &f.args, "layer of a cache");
        verify_outputs(&f.args, &f.args, "layer of a cache");
        int64_t touched = 0;
        for (int64_t l = 0; l < L; l++)
            for (int64_t s = 0; s < P; s++) {
                int named = 0;
                for (int64_t t = 0; t < T; t++)
                    named |= l == layer && ((int32_t *)f.slots)[t] == s;
                const size_t off = (size_t)(l * layer_elems + s * Hk * D) * e;
                if (!named)
                    CHECK(memcmp((char *)kc + off, (char *)kc0 + off, (size_t)(Hk * D) * e) == 0 &&
                              memcmp((char *)vc + off, (char *)vc0 + off, (size_t)(Hk * D) * e) == 0,
                          "layer %lld row %lld written though no token names it", (long long)l, (long long)s);
                touched += named;
            }
        CHECK(touched > 0, "no slot was written");
        mirror_free(&m);
        free(kc); free(vc); free(kc0); free(vc0);
        fixture_free(&f);
    }
}

/* k and v interleaved as [P, 2, Hk, D]. */
static void test_k_and_v_pools_interleaved(void)
{
    const int64_t T = 16, Hq = 8, Hk = 4, D = 32, P = 24;
    fixture f;
    fixture_init(&f, &rng, T, Hq, Hk, D, P, RP_BF16, RP_I32, 5000, 1);
    uint16_t *kv = test_alloc((size_t)(P * 2 * Hk * D) * 2);
    fill_random(&rng, kv, RP_BF16, P * 2 * Hk * D, -9, 9);
    f.args.k_pool = rp_tensor_3d(kv, RP_BF16, P, Hk, D);
    f.args.v_pool = rp_tensor_3d(kv + Hk * D, RP_BF16, P, Hk, D);
    f.args.k_pool.strides[0] = f.args.v_pool.strides[0] = 2 * Hk * D;
    mirror m = {0};
    mirror_fixture(&m, &f);
    mirror_add(&m, kv, (size_t)(P * 2 * Hk * D) * 2);
    run_on_device(ctx, &m, &f.args, "interleaved [P, 2, Hk, D]");
    verify_outputs(&f.args, &f.args, "interleaved [P, 2, Hk, D]");
    mirror_free(&m);
    free(kv);
    fixture_free(&f);
}

static void test_negative_slots_write_no_pool_row(void)
{
    for (int vec = 0; vec < 2; vec++) {
        const int64_t D = vec ? 64 : 18;
        fixture f;
        fixture_init(&f, &rng, 12, 4, 2, D, 20, RP_F16, RP_I64, 1 << 16, 0);
        for (int t = 0; t < 12; t++)
            ((int64_t *)f.slots)[t] = t % 3 == 0 ? INT64_MIN + t : -1 - t;
        const size_t pool_bytes = (size_t)(20 * 2 * D) * 2;
        void *k0 = test_alloc(pool_bytes), *v0 = test_alloc(pool_bytes);
        memcpy(k0, f.k_pool, pool_bytes);
        memcpy(v0, f.v_pool, pool_bytes);
        mirror m = {0};
        mirror_fixture(&m, &f);
        run_on_device(ctx, &m, &f.args, "all slots negative");
        CHECK(memcmp(k0, f.k_pool, pool_bytes) == 0 && memcmp(v0, f.v_pool, pool_bytes) == 0,
              "a negative slot wrote the pool");
        verify_outputs(&f.args, &f.args, "all slots negative");
        mirror_free(&m);
        free(k0);
        free(v0);
        fixture_free(&f);
    }
}

static void test_zero_tokens_is_a_no_op(void)
{
    fixture f;
    fixture_init(&f, &rng, 0, 4, 2, 64, 8, RP_F32, RP_I32, 10, 0);
    mirror m = {0};
    mirror_fixture(&m, &f);
    snapshot s;
    snapshot_take(&s, &f);
    rp_rope_pool_args a = mirror_args(&m, &f.args, 0);
    a.q.data = a.k.data = a.v.data = a.q_rot.data = a.k_rot.data = a.positions.data = a.slots.data = NULL;
    char msg[256];
    CHECK(rp_rope_pool_fused(ctx, &a, msg, sizeof msg) == RP_OK, "T = 0: %s", msg);
    mirror_download(&m);
    CHECK(snapshot_unchanged(&s, &f), "T = 0 wrote memory");
    a.k.shape[1] = 3;
    CHECK(rp_rope_pool_fused(ctx, &a, msg, sizeof msg) == RP_ERR_INVALID_ARGUMENT &&
              strcmp(msg, "k shape must be [num_tokens, num_kv_heads, head_dim], got (0, 3, 64)") == 0,
          "T = 0 skipped the shape checks: %s", msg);
    mirror_free(&m);
    fixture_free(&f);
}

/* head_dim with stride 2 (every other element of a wider buffer): the strided kernel. */
static void test_non_contiguous_head_dim(void)
{
    for (int d = 0; d < 3; d++) {
        const int64_t T = 5, Hq = 2, Hk = 1, D = 16, P = 8;
        const size_t e = rp_dtype_size(dtypes[d]);
        fixture f;
        fixture_init(&f, &rng, T, Hq, Hk, D, P, dtypes[d], RP_I32, 1000, 0);
        void *wide = test_alloc((size_t)(T * Hq * D * 2) * e);
        fill_random(&rng, wide, dtypes[d], T * Hq * D * 2, -2, 2);
        f.args.q = rp_tensor_3d(wide, dtypes[d], T, Hq, D);
        f.args.q.strides[0] = Hq * D * 2;
        f.args.q.strides[1] = D * 2;
        f.args.q.strides[2] = 2;
        mirror m = {0};
        mirror_fixture(&m, &f);
        mirror_add(&m, wide, (size_t)(T * Hq * D * 2) * e);
        run_on_device(ctx, &m, &f.args, "strided head_dim");
        verify_outputs(&f.args, &f.args, "strided head_dim");
        mirror_free(&m);
        free(wide);
        fixture_free(&f);
    }
}

/* Rows that do not start on 16 bytes (q one element past an aligned address, k_pool rows of 40
 * bf16 = 80 bytes): the strided kernel, same results. */
static void test_rows_not_16_byte_aligned(void)
{
    for (int d = 1; d < 3; d++) {
        const int64_t T = 33, Hq = 4, Hk = 2, D = 128, P = 48;
        const size_t e = rp_dtype_size(dtypes[d]);
        fixture f;
        fixture_init(&f, &rng, T, Hq, Hk, D, P, dtypes[d], RP_I32, 1 << 17, 1);
        void *shifted = test_alloc((size_t)(T * Hq * D + 1) * e);
        fill_random(&rng, shifted, dtypes[d], T * Hq * D + 1, -2, 2);
        f.args.q = rp_tensor_3d((char *)shifted + e, dtypes[d], T, Hq, D);
        mirror m = {0};
        mirror_fixture(&m, &f);
        mirror_add(&m, shifted, (size_t)(T * Hq * D + 1) * e);
        run_on_device(ctx, &m, &f.args, "q shifted by one element");
        verify_outputs(&f.args, &f.args, "q shifted by one element");
        mirror_free(&m);
        free(shifted);
        fixture_free(&f);
    }
    fixture f;
    fixture_init(&f, &rng, 9, 3, 2, 40, 16, RP_BF16, RP_I64, 1 << 17, 1);
    run_and_verify_fixture(ctx, &f, "80-byte rows");
    fixture_free(&f);
}

/* Tokens in reverse order through a negative stride. */
static void test_negative_token_stride(void)
{
    const int64_t T = 9, Hq = 4, Hk = 2, D = 32, P = 16;
    fixture f;
    fixture_init(&f, &rng, T, Hq, Hk, D, P, RP_F16, RP_I32, 1 << 20, 1);
    f.args.q.data = (uint16_t *)f.q + (T - 1) * Hq * D;
    f.args.q.strides[0] = -Hq * D;
    run_and_verify_fixture(ctx, &f, "negative token stride");
    fixture_free(&f);
}

int main(void)
{
    if (cuda_test_no_gpu())
        return CUDA_TEST_SKIP;
    ctx = cuda_test_context(0);
    RUN(test_qkv_slices_of_a_fused_projection);
    RUN(test_in_place_on_a_fused_projection);
    RUN(test_pool_is_one_layer_of_a_larger_cache);
    RUN(test_k_and_v_pools_interleaved);
    RUN(test_negative_slots_write_no_pool_row);
    RUN(test_zero_tokens_is_a_no_op);
    RUN(test_non_contiguous_head_dim);
    RUN(test_rows_not_16_byte_aligned);
    RUN(test_negative_token_stride);
    rp_context_destroy(ctx);
    return test_summary("test_cuda_layouts");
}
