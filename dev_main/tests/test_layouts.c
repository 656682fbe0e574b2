/*
 * test_layouts.c — the memory layouts engines really pass: QKV slices of one projection, in-place
 * q/k, a pool that is one layer of a bigger cache, k and v interleaved, negative slots, T = 0,
 * pools beyond 2^31 elements, non-contiguous head_dim (reference fallback), reversed tokens.
 * Every case is checked against the float64 formula, and memory the call must not touch is
 * compared byte for byte.
 */
#include "test_verify.h"

#include <sys/mman.h>

static test_rng rng = {31337};
static rp_context *ctx;

static const rp_dtype dtypes[3] = {RP_F32, RP_F16, RP_BF16};

static void call_ok(rp_rope_pool_args *a, const char *what)
{
    call_ok_on(ctx, a, what);
}

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
        call_ok(a, "fused QKV slices");
        verify_outputs(a, a, "fused QKV slices");
        free(qkv);
        fixture_free(&f);
    }
}

/* q_rot = q and k_rot = k, both slices of one buffer: the in-place call. */
static void test_in_place_on_a_fused_projection(void)
{
    for (int d = 0; d < 3; d++) {
        const int64_t T = 29, Hq = 4, Hk = 2, D = 128, P = 40, W = (Hq + 2 * Hk) * D;
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
        call_ok(&a, "in place");
        verify_outputs(&in, &a, "in place");
        CHECK(memcmp((char *)qkv + (Hq + Hk) * D * e, (char *)orig + (Hq + Hk) * D * e, Hk * D * e) == 0,
              "v was modified by an in-place call");
        free(qkv);
        free(orig);
        fixture_free(&f);
    }
}

/* The pool is layer 2 of a [L, P, Hk, D] cache; and k and v interleaved as [P, 2, Hk, D]. */
static void test_pool_is_one_layer_of_a_larger_cache(void)
{
    for (int d = 0; d < 3; d++) {
        const int64_t T = 21, Hq = 4, Hk = 2, D = 64, P = 50, L = 4, layer = 2;
        const size_t e = rp_dtype_size(dtypes[d]);
        const int64_t layer_elems = P * Hk * D;
        fixture f;
        fixture_init(&f, &rng, T, Hq, Hk, D, P, dtypes[d], RP_I32, 100000, 1);
        void *kc = test_alloc((size_t)(L * layer_elems) * e), *vc = test_alloc((size_t)(L * layer_elems) * e);
        fill_random(&rng, kc, dtypes[d], L * layer_elems, -9, 9);
        fill_random(&rng, vc, dtypes[d], L * layer_elems, -9, 9);
        void *kc0 = test_alloc((size_t)(L * layer_elems) * e), *vc0 = test_alloc((size_t)(L * layer_elems) * e);
        memcpy(kc0, kc, (size_t)(L * layer_elems) * e);
        memcpy(vc0, vc, (size_t)(L * layer_elems) * e);
        f.args.k_pool = rp_tensor_3d((char *)kc + layer * layer_elems * e, dtypes[d], P, Hk, D);
        f.args.v_pool = rp_tensor_3d((char *)vc + layer * layer_elems * e, dtypes[d], P, Hk, D);
        call_ok(&f.args, "layer of a cache");
        verify_outputs(&f.args, &f.args, "layer of a cache");
        for (int64_t l = 0; l < L; l++) {
            if (l == layer)
                continue;
            CHECK(memcmp((char *)kc + l * layer_elems * e, (char *)kc0 + l * layer_elems * e, layer_elems * e) == 0 &&
                      memcmp((char *)vc + l * layer_elems * e, (char *)vc0 + l * layer_elems * e, layer_elems * e) == 0,
                  "layer %lld was touched", (long long)l);
        }
        /* Rows of the written layer that no token names are untouched too. */
        int64_t touched = 0;
        for (int64_t s = 0; s < P; s++) {
            int named = 0;
            for (int64_t t = 0; t < T; t++)
                named |= ((int32_t *)f.slots)[t] == s;
            const size_t off = (size_t)(layer * layer_elems + s * Hk * D) * e;
            if (!named)
                CHECK(memcmp((char *)kc + off, (char *)kc0 + off, Hk * D * e) == 0, "unnamed row %lld written", (long long)s);
            touched += named;
        }
        CHECK(touched > 0, "no slot was written");
        free(kc); free(vc); free(kc0); free(vc0);
        fixture_free(&f);
    }
}

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
    call_ok(&f.args, "interleaved [P, 2, Hk, D]");
    verify_outputs(&f.args, &f.args, "interleaved [P, 2, Hk, D]");
    free(kv);
    fixture_free(&f);
}

static void test_negative_slots_write_no_pool_row(void)
{
    fixture f;
    fixture_init(&f, &rng, 12, 4, 2, 64, 20, RP_F16, RP_I64, 1 << 16, 0);
    for (int t = 0; t < 12; t++)
        ((int64_t *)f.slots)[t] = t % 3 == 0 ? INT64_MIN + t : -1 - t;
    const size_t pool_bytes = 20 * 2 * 64 * 2;
    void *k0 = test_alloc(pool_bytes), *v0 = test_alloc(pool_bytes);
    memcpy(k0, f.k_pool, pool_bytes);
    memcpy(v0, f.v_pool, pool_bytes);
    call_ok(&f.args, "all slots negative");
    CHECK(memcmp(k0, f.k_pool, pool_bytes) == 0 && memcmp(v0, f.v_pool, pool_bytes) == 0,
          "a negative slot wrote the pool");
    verify_outputs(&f.args, &f.args, "all slots negative");
    free(k0);
    free(v0);
    fixture_free(&f);
}

static void test_zero_tokens_is_a_no_op(void)
{
    fixture f;
    fixture_init(&f, &rng, 0, 4, 2, 64, 8, RP_F32, RP_I32, 10, 0);
    snapshot s;
    snapshot_take(&s, &f);
    f.args.q.data = f.args.k.data = f.args.v.data = NULL; /* empty tensors need no memory */
    f.args.q_rot.data = f.args.k_rot.data = f.args.positions.data = f.args.slots.data = NULL;
    call_ok(&f.args, "T = 0");
    CHECK(snapshot_unchanged(&s, &f), "T = 0 wrote memory");
    /* Shapes are still checked with zero tokens. */
    f.args.k.shape[1] = 3;
    char msg[256];
    CHECK(rp_rope_pool_fused(ctx, &f.args, msg, sizeof msg) == RP_ERR_INVALID_ARGUMENT &&
              strcmp(msg, "k shape must be [num_tokens, num_kv_heads, head_dim], got (0, 3, 64)") == 0,
          "T = 0 skipped the shape checks: %s", msg);
    fixture_free(&f);
}

/* A pool of 2^32 + elements: offsets past 2^31 elements must not wrap. The pool is reserved, not
 * committed: only the rows written are ever touched. */
static void test_pool_beyond_2_pow_31_elements(void)
{
    const int64_t Hk = 1, D = 256, P = ((int64_t)1 << 24) + 8; /* 2^32 + 2048 elements, 16 GiB of f32 */
    const size_t bytes = (size_t)(P * Hk * D) * 4;
    void *k_mem = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    void *v_mem = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (k_mem == MAP_FAILED || v_mem == MAP_FAILED) {
        printf("skip: cannot reserve 2 x %zu bytes of address space for a pool beyond 2^31 elements\n", bytes);
        if (k_mem != MAP_FAILED) munmap(k_mem, bytes);
        if (v_mem != MAP_FAILED) munmap(v_mem, bytes);
        return;
    }
    fixture f;
    fixture_init(&f, &rng, 4, 2, Hk, D, 4, RP_F32, RP_I64, 1 << 20, 0);
    const int64_t slots[4] = {P - 1, ((int64_t)1 << 23) + 5, 3, P - 7};
    memcpy(f.slots, slots, sizeof slots);
    f.args.k_pool = rp_tensor_3d(k_mem, RP_F32, P, Hk, D);
    f.args.v_pool = rp_tensor_3d(v_mem, RP_F32, P, Hk, D);
    call_ok(&f.args, "pool beyond 2^31 elements");
    verify_outputs(&f.args, &f.args, "pool beyond 2^31 elements");
    /* The row next to the last one written stays zero. */
    const float *kp = k_mem;
    CHECK(kp[(P - 2) * D] == 0.0f && kp[(P - 2) * D + D - 1] == 0.0f, "neighbouring row written");
    munmap(k_mem, bytes);
    munmap(v_mem, bytes);
    fixture_free(&f);
}

/* head_dim with stride 2 (every other element of a wider buffer): the reference kernel runs. */
static void test_non_contiguous_head_dim_uses_the_reference(void)
{
    const int64_t T = 5, Hq = 2, Hk = 1, D = 16, P = 8;
    fixture f;
    fixture_init(&f, &rng, T, Hq, Hk, D, P, RP_F32, RP_I32, 1000, 0);
    float *wide = test_alloc((size_t)(T * Hq * D * 2) * 4);
    fill_random(&rng, wide, RP_F32, T * Hq * D * 2, -2, 2);
    f.args.q = rp_tensor_3d(wide, RP_F32, T, Hq, D);
    f.args.q.strides[0] = Hq * D * 2;
    f.args.q.strides[1] = D * 2;
    f.args.q.strides[2] = 2;
    call_ok(&f.args, "strided head_dim");
    verify_outputs(&f.args, &f.args, "strided head_dim");
    free(wide);
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
    call_ok(&f.args, "negative token stride");
    verify_outputs(&f.args, &f.args, "negative token stride");
    fixture_free(&f);
}

/* One token at a time and large batches, every head layout the presets use. */
static void test_model_shapes(void)
{
    static const int64_t shapes[][3] = {{32, 8, 128}, {8, 1, 128}, {28, 4, 128}, {16, 8, 256},
                                        {32, 32, 96}, {16, 4, 64}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int d = 0; d < 3; d++) {
            const int64_t Ts[] = {1, 40, 3};
            for (int i = 0; i < (test_quick() ? 2 : 3); i++) {
                fixture f;
                fixture_init(&f, &rng, Ts[i], shapes[s][0], shapes[s][1], shapes[s][2], 64, dtypes[d],
                             RP_I32, 131072, 1);
                call_ok(&f.args, "model shape");
                char what[96];
                snprintf(what, sizeof what, "%lld/%lld/%lld %s T=%lld", (long long)shapes[s][0],
                         (long long)shapes[s][1], (long long)shapes[s][2], rp_dtype_name(dtypes[d]),
                         (long long)Ts[i]);
                verify_outputs(&f.args, &f.args, what);
                fixture_free(&f);
            }
        }
}

int main(void)
{
    check_forced_level();
    char msg[256];
    rp_context_options o = {0};
    o.num_threads = 3;
    if (rp_context_create(&o, &ctx, msg, sizeof msg) != RP_OK) {
        fprintf(stderr, "context: %s\n", msg);
        return 1;
    }
    RUN(test_qkv_slices_of_a_fused_projection);
    RUN(test_in_place_on_a_fused_projection);
    RUN(test_pool_is_one_layer_of_a_larger_cache);
    RUN(test_k_and_v_pools_interleaved);
    RUN(test_negative_slots_write_no_pool_row);
    RUN(test_zero_tokens_is_a_no_op);
    RUN(test_pool_beyond_2_pow_31_elements);
    RUN(test_non_contiguous_head_dim_uses_the_reference);
    RUN(test_negative_token_stride);
    RUN(test_model_shapes);
    rp_context_destroy(ctx);
    return test_summary("test_layouts");
}
