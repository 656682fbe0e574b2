/*
 * test_cuda_pools.c — pool rows on the GPU: paged pools (NHD as vLLM's FlashAttention allocation,
 * HND as its packed split; block sizes 1, 13, 16, 32), fp8 pools (e4m3fn, e5m2, scales by value
 * and as one-element device floats), v_head_dim (MLA's latent row), each with RoPE variants and
 * decode and prefill sizes, checked against the float64 formula (rp_ref_verify, which quantises
 * fp8 itself), every byte of the allocation outside the written rows unchanged; a captured graph
 * replayed after the device scales changed; calls deep enough for the few-heads geometry.
 */
#include "cuda_test_util.h"

static test_rng rng = {77177};
static rp_context *ctx;
static const rp_dtype dtypes[3] = {RP_F32, RP_F16, RP_BF16};

typedef struct pool_case {
    rp_dtype dt;
    rp_dtype fmt;       /* dt, RP_F8_E4M3 or RP_F8_E5M2 (stored as uint8 with pool_dtype) */
    int32_t layout;     /* RP_KV_FLAT, RP_KV_NHD (vLLM FA allocation), RP_KV_HND (packed split) */
    int64_t bs;         /* rows per block (paged) */
    int64_t T, Hq, Hk, D, Dv;
    int device_scales;  /* fp8: 1 = k_scale_ptr / v_scale_ptr in device memory */
    const rope_variant *variant;
    int latent;         /* 1: MLA's cache, one row [Hk, Dv + D] a slot: v = [.., :Dv], k = [.., Dv:] */
} pool_case;

/* K and V views of one allocation of nb * bs * Hk * (D + Dv) elements for the layout: the latent
 * row of MLA's cache (flat or NHD), K and V of vLLM's NHD or HND allocation (Dv = D), or two flat
 * pools [P, Hk, D] and [P, Hk, Dv] one after the other. */
static void pool_views(void *base, rp_dtype storage, const pool_case *c, int64_t nb, rp_tensor *k, rp_tensor *v)
{
    const size_t e = rp_dtype_size(storage);
    const int64_t bs = c->bs, Hk = c->Hk, D = c->D, block = bs * Hk * D;
    if (c->latent) { /* [nb, bs, Hk, Dv + D]: v its first Dv dims, k the last D */
        const int64_t W = c->Dv + D;
        for (int i = 0; i < 2; i++) {
            rp_tensor t = {0};
            t.dtype = storage;
            t.data = i ? base : (char *)base + (size_t)c->Dv * e;
            const int64_t dims = i ? c->Dv : D;
            if (c->layout == RP_KV_FLAT) {
                t.ndim = 3;
                t.shape[0] = nb * bs, t.shape[1] = Hk, t.shape[2] = dims;
                t.strides[0] = Hk * W, t.strides[1] = W, t.strides[2] = 1;
            } else {
                t.ndim = 4;
                t.shape[0] = nb, t.shape[1] = bs, t.shape[2] = Hk, t.shape[3] = dims;
                t.strides[0] = bs * Hk * W, t.strides[1] = Hk * W, t.strides[2] = W, t.strides[3] = 1;
            }
            *(i ? v : k) = t;
        }
        return;
    }
    if (c->layout == RP_KV_FLAT) {
        *k = rp_tensor_3d(base, storage, nb * bs, Hk, D);
        *v = rp_tensor_3d((char *)base + (size_t)(nb * block) * e, storage, nb * bs, Hk, c->Dv);
        return;
    }
    rp_tensor t = {0};
    t.ndim = 4;
    t.dtype = storage;
    t.shape[0] = nb;
    t.shape[1] = c->layout == RP_KV_NHD ? bs : Hk;
    t.shape[2] = c->layout == RP_KV_NHD ? Hk : bs;
    t.shape[3] = D;
    int64_t v_offset;
    if (c->layout == RP_KV_NHD) { /* [nb, 2, bs, Hk, D].unbind(1) */
        t.strides[0] = 2 * block;
        t.strides[1] = Hk * D;
        t.strides[2] = D;
        v_offset = block;
    } else { /* (nb, Hk, bs, 2D).split(D, -1) */
        t.strides[0] = 2 * block;
        t.strides[1] = bs * 2 * D;
        t.strides[2] = 2 * D;
        v_offset = D;
    }
    t.strides[3] = 1;
    t.data = base;
    *k = t;
    t.data = (char *)base + v_offset * (int64_t)e;
    *v = t;
}

/* Runs one case on the device: verified against float64, and no byte of the pool allocation
 * outside the written rows changed. */
static void run_pool_case(const pool_case *c)
{
    const int fp8 = c->fmt != c->dt;
    const rp_dtype storage = fp8 ? RP_U8 : c->dt;
    const size_t e = rp_dtype_size(c->dt), pe = rp_dtype_size(storage);
    const int64_t nb = (c->T + c->bs - 1) / c->bs + 2, P = nb * c->bs;
    fixture f;
    fixture_init(&f, &rng, c->T, c->Hq, c->Hk, c->D, P, c->dt, c->T % 2 ? RP_I64 : RP_I32, 1 << 17, 1);
    if (c->variant)
        fixture_set_variant(&f, &rng, c->variant);
    rp_rope_pool_args *a = &f.args;
    void *v = NULL;
    if (c->Dv != c->D) {
        v = test_alloc((size_t)(c->T * c->Hk * c->Dv) * e);
        fill_random(&rng, v, c->dt, c->T * c->Hk * c->Dv, -2, 2);
        a->v = rp_tensor_3d(v, c->dt, c->T, c->Hk, c->Dv);
        a->v_head_dim = c->Dv;
    }
    const size_t bytes = (size_t)(nb * c->bs * c->Hk * (c->D + c->Dv)) * pe;
    unsigned char *alloc = test_alloc(bytes), *before = test_alloc(bytes);
    for (size_t i = 0; i < bytes; i++)
        alloc[i] = (unsigned char)rng_next(&rng);
    memcpy(before, alloc, bytes);
    a->kv_layout = c->layout;
    pool_views(alloc, storage, c, nb, &a->k_pool, &a->v_pool);
    const float k_scale = fp8 ? 0.375f : 1.0f, v_scale = fp8 ? 1.75f : 1.0f;
    a->pool_dtype = fp8 ? c->fmt : 0;

    mirror m = {0};
    mirror_add(&m, f.q, (size_t)(c->T * c->Hq * c->D) * e);
    mirror_add(&m, f.k, (size_t)(c->T * c->Hk * c->D) * e);
    mirror_add(&m, v ? v : f.v, (size_t)(c->T * c->Hk * c->Dv) * e);
    mirror_add(&m, f.q_rot, (size_t)(c->T * c->Hq * c->D) * e);
    mirror_add(&m, f.k_rot, (size_t)(c->T * c->Hk * c->D) * e);
    mirror_add(&m, f.positions, (size_t)c->T * rp_dtype_size(f.index_dtype));
    mirror_add(&m, f.slots, (size_t)c->T * rp_dtype_size(f.index_dtype));
    mirror_add(&m, alloc, bytes);
    rp_rope_pool_args d = mirror_args(&m, a, 0);
    float *scales = NULL;
    if (fp8 && c->device_scales) {
        const float host[2] = {k_scale, v_scale};
        CUDA_OK(cudaMalloc((void **)&scales, sizeof host));
        CUDA_OK(cudaMemcpy(scales, host, sizeof host, cudaMemcpyHostToDevice));
        d.k_scale_ptr = scales;
        d.v_scale_ptr = scales + 1;
    } else if (fp8) {
        d.k_scale = k_scale;
        d.v_scale = v_scale;
    }
    char what[200], name[64];
    snprintf(what, sizeof what, "%s pools %s layout %d bs %lld %lld/%lld/%lld Dv %lld T=%lld%s %s",
             rp_dtype_name(c->dt), rp_dtype_name(c->fmt), (int)c->layout, (long long)c->bs, (long long)c->Hq,
             (long long)c->Hk, (long long)c->D, (long long)c->Dv, (long long)c->T,
             c->device_scales ? " device scales" : "",
             c->variant ? variant_name(c->variant, c->D, name, sizeof name) : "");
    run_on_device(ctx, &m, &d, what);
    /* the host's view of the call: scales by value */
    a->k_scale = fp8 ? k_scale : 0.0;
    a->v_scale = fp8 ? v_scale : 0.0;
    verify_outputs(a, a, what);
    for (int64_t t = 0; t < c->T; t++) { /* the written rows, as found: the rest must be as before */
        const int64_t slot = (int64_t)test_load(f.slots, f.index_dtype, t);
        if (slot < 0)
            continue;
        for (int64_t h = 0; h < c->Hk; h++) {
            const char *kr = test_pool_element(&a->k_pool, c->layout, slot, h, 0);
            const char *vr = test_pool_element(&a->v_pool, c->layout, slot, h, 0);
            memcpy(before + (kr - (char *)alloc), kr, (size_t)c->D * pe);
            memcpy(before + (vr - (char *)alloc), vr, (size_t)c->Dv * pe);
        }
    }
    CHECK(memcmp(before, alloc, bytes) == 0, "%s: a byte outside the written rows changed", what);
    if (scales)
        CUDA_OK(cudaFree(scales));
    mirror_free(&m);
    free(alloc);
    free(before);
    free(v);
    fixture_free(&f);
}

/* NHD and HND at block sizes 1, 13, 16 and 32, every dtype, on the vectorized kernels (D = 128)
 * and the strided one (D = 6), decode, small and prefill sizes; some with RoPE variants. */
static void test_paged_pools_within_bound_and_nothing_else_written(void)
{
    static const int64_t block_sizes[] = {1, 13, 16, 32};
    const int64_t big_T = test_quick() ? 40 : 700;
    for (int b = 0; b < 4; b++)
        for (int d = 0; d < 3; d++)
            for (int layout = RP_KV_NHD; layout <= RP_KV_HND; layout++)
                for (int s = 0; s < 4; s++) {
                    const int64_t T = s == 0 ? 1 : s == 1 ? 37 : s == 2 ? big_T : 9, D = s == 3 ? 6 : 128;
                    const pool_case c = {dtypes[d], dtypes[d], layout, block_sizes[b], T, s == 2 ? 32 : 4,
                                         s == 2 ? 8 : 2, D, D, 0,
                                         s == 1 ? &test_variants[(b + d) % NUM_TEST_VARIANTS] : NULL, 0};
                    run_pool_case(&c);
                }
}

/* fp8 pools: both formats, flat and paged, scales by value and from device memory, every dtype,
 * both styles and partial rotary, decode and prefill sizes, vectorized and strided kernels. */
static void test_fp8_pools_within_bound(void)
{
    static const int64_t dims[][3] = {{8, 2, 128}, {4, 2, 64}, {3, 1, 80}, {2, 2, 6}, {32, 8, 128}};
    const int64_t big_T = test_quick() ? 40 : 700;
    for (int d = 0; d < 3; d++)
        for (int e5m2 = 0; e5m2 < 2; e5m2++)
            for (size_t s = 0; s < sizeof dims / sizeof dims[0]; s++)
                for (int v = 0; v < 4; v++) {
                    const int64_t T = s == 4 ? big_T : v == 0 ? 1 : 29;
                    const int32_t layout = v == 2 ? RP_KV_NHD : v == 3 ? RP_KV_HND : RP_KV_FLAT;
                    const pool_case c = {dtypes[d], e5m2 ? RP_F8_E5M2 : RP_F8_E4M3, layout, v == 3 ? 13 : 16, T,
                                         dims[s][0], dims[s][1], dims[s][2], dims[s][2], v % 2,
                                         v ? &test_variants[(size_t)v * 3 % NUM_TEST_VARIANTS] : NULL, 0};
                    run_pool_case(&c);
                }
}

/* v_head_dim: MLA's latent row (Hk = 1, D = 64, Dv = 512) and narrower and wider v heads, bf16 and
 * fp8, GPT-J pairs as DeepSeek uses them; then MLA's cache as engines hold it, one row
 * [c_kv | k_pe] a slot (flat, and paged NHD in blocks of 64), at decode and prefill sizes: v in
 * pieces of D (the vectorized kernels) where Dv is a multiple of D, the strided kernel elsewhere. */
static void test_v_head_dim(void)
{
    static const rope_variant gptj = {RP_ROPE_GPTJ, 0, TABLE_F64, 1.2};
    static const int64_t shapes[][4] = {{16, 1, 64, 512}, {4, 2, 128, 64}, {4, 2, 64, 200}, {2, 1, 6, 9},
                                        {4, 2, 64, 128}};
    for (int d = 0; d < 3; d++)
        for (int s = 0; s < 5; s++)
            for (int fp8 = 0; fp8 < 2; fp8++) {
                const pool_case c = {dtypes[d], fp8 ? RP_F8_E4M3 : dtypes[d], RP_KV_FLAT, 1, s == 0 ? 33 : 5,
                                     shapes[s][0], shapes[s][1], shapes[s][2], shapes[s][3], fp8, &gptj, 0};
                run_pool_case(&c);
            }
    const int64_t Ts[] = {1, 16, test_quick() ? 40 : 700};
    for (int d = 0; d < 3; d++)
        for (int i = 0; i < 3; i++)
            for (int v = 0; v < 4; v++) {
                const int paged = v % 2, fp8 = v / 2, hk = i == 1 && d == 1 ? 2 : 1;
                const pool_case c = {dtypes[d], fp8 ? (d ? RP_F8_E4M3 : RP_F8_E5M2) : dtypes[d],
                                     paged ? RP_KV_NHD : RP_KV_FLAT, paged ? 64 : 1, Ts[i], 16 * hk, hk, 64, 512,
                                     fp8 && i == 0, &gptj, 1};
                run_pool_case(&c);
            }
}

/* Calls deep enough (T = 8192: 40 tokens or more per multiprocessor on GPUs of up to 204) for
 * plan.cu's deep-call geometry, on the shapes it changes (few heads a token: several tokens a
 * block, 8-32 threads a token, 3-6 heads a thread, heads of 6 lanes): Llama-style heads, MLA's
 * latent row flat and paged, fp8 pools. */
static void test_deep_calls_with_few_heads(void)
{
    static const rope_variant gptj = {RP_ROPE_GPTJ, 0, TABLE_F64, 1.2};
    static const int64_t dims[][4] = {{8, 1, 128, 128}, {32, 4, 64, 64}, {24, 1, 64, 64}, {16, 1, 64, 512},
                                      {16, 2, 96, 96}};
    const int64_t T = test_quick() ? 40 : 8192;
    for (int d = 0; d < 3; d++)
        for (int s = 0; s < 5; s++) {
            const int latent = s == 3, fp8 = (d + s) % 2;
            const pool_case c = {dtypes[d], fp8 ? RP_F8_E4M3 : dtypes[d], latent && d == 2 ? RP_KV_NHD : RP_KV_FLAT,
                                 latent && d == 2 ? 64 : 1, T, dims[s][0], dims[s][1], dims[s][2], dims[s][3], 0,
                                 latent ? &gptj : NULL, latent};
            run_pool_case(&c);
        }
}

/* A call on fp8 pools with device scales, captured in a graph and replayed after new scales were
 * written to device memory: each replay quantises with the scales of its time. */
static void test_graph_replay_reads_changed_device_scales(void)
{
    const int64_t T = 64, Hq = 8, Hk = 2, D = 128, P = 256;
    fixture f;
    fixture_init(&f, &rng, T, Hq, Hk, D, P, RP_BF16, RP_I32, 131072, 1);
    rp_rope_pool_args *a = &f.args;
    a->k_pool.dtype = a->v_pool.dtype = RP_U8;
    a->pool_dtype = RP_F8_E4M3;
    mirror m = {0};
    mirror_fixture(&m, &f);
    float *scales;
    CUDA_OK(cudaMalloc((void **)&scales, 2 * sizeof(float)));
    rp_rope_pool_args d = mirror_args(&m, a, 0);
    d.k_scale_ptr = scales;
    d.v_scale_ptr = scales + 1;
    captured_call call = capture_call(ctx, &d);
    static const float k_scales[3] = {1.0f, 0.0625f, 3.5f}, v_scales[3] = {0.5f, 1.0f, 0.01f};
    for (int replay = 0; replay < 3; replay++) {
        const float host[2] = {k_scales[replay], v_scales[replay]};
        CUDA_OK(cudaMemcpy(scales, host, sizeof host, cudaMemcpyHostToDevice));
        fill_random(&rng, f.k, RP_BF16, T * Hk * D, -2, 2);
        fill_random(&rng, f.v, RP_BF16, T * Hk * D, -2, 2);
        mirror_upload(&m);
        captured_call_replay(&call);
        mirror_download(&m);
        a->k_scale = k_scales[replay];
        a->v_scale = v_scales[replay];
        char what[64];
        snprintf(what, sizeof what, "graph replay %d, scales %g / %g", replay, (double)host[0], (double)host[1]);
        verify_outputs(a, a, what);
    }
    captured_call_free(&call);
    CUDA_OK(cudaFree(scales));
    mirror_free(&m);
    fixture_free(&f);
}

int main(void)
{
    if (cuda_test_no_gpu())
        return CUDA_TEST_SKIP;
    ctx = cuda_test_context(0);
    RUN(test_paged_pools_within_bound_and_nothing_else_written);
    RUN(test_fp8_pools_within_bound);
    RUN(test_v_head_dim);
    RUN(test_deep_calls_with_few_heads);
    RUN(test_graph_replay_reads_changed_device_scales);
    rp_context_destroy(ctx);
    return test_summary("test_cuda_pools");
}
