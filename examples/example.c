/*
 * example.c — a complete version of the README's C example: one call for a 4-token prefill chunk
 * with Llama-3-8B heads, then the error a caller gets for a slot past the end of the pool.
 */
#include <ropepool.h>

#include <stdio.h>
#include <stdlib.h>

int main(void)
{
    enum { T = 4, HQ = 32, HK = 8, D = 128, P = 1024 };
    float *q = calloc(T * HQ * D, sizeof *q), *k = calloc(T * HK * D, sizeof *k);
    float *v = calloc(T * HK * D, sizeof *v);
    float *k_pool = calloc((size_t)P * HK * D, sizeof *k_pool);
    float *v_pool = calloc((size_t)P * HK * D, sizeof *v_pool);
    int32_t positions[T] = {100, 101, 102, 103}, slots[T] = {7, 8, 9, -1}; /* -1: no pool write */
    char err[256];

    rp_context *ctx;
    if (rp_context_create(NULL, &ctx, err, sizeof err) != RP_OK) {
        fprintf(stderr, "ropepool: %s\n", err);
        return 1;
    }
    for (int i = 0; i < T * HQ * D; i++)
        q[i] = (float)(i % 7) - 3.0f;

    rp_rope_pool_args args = {0};
    args.q = rp_tensor_3d(q, RP_F32, T, HQ, D);
    args.k = rp_tensor_3d(k, RP_F32, T, HK, D);
    args.v = rp_tensor_3d(v, RP_F32, T, HK, D);
    args.positions = rp_tensor_1d(positions, RP_I32, T);
    args.slots = rp_tensor_1d(slots, RP_I32, T);
    args.k_pool = rp_tensor_3d(k_pool, RP_F32, P, HK, D);
    args.v_pool = rp_tensor_3d(v_pool, RP_F32, P, HK, D);
    args.q_rot = args.q; /* rotate q and k in place */
    args.k_rot = args.k;
    args.head_dim = D;
    args.num_qo_heads = HQ;
    args.num_kv_heads = HK;
    args.rope_base = 500000.0;

    rp_status st = rp_rope_pool_fused(ctx, &args, err, sizeof err);
    printf("first call: %s, q_rot[0] = %.6f (CPU kernels: %s)\n", rp_status_name(st), q[0],
           rp_cpu_kernel_name());

    slots[3] = P; /* one past the end: refused, and nothing is written */
    st = rp_rope_pool_fused(ctx, &args, err, sizeof err);
    printf("second call: %s: %s\n", rp_status_name(st), err);

    rp_context_destroy(ctx);
    free(q); free(k); free(v); free(k_pool); free(v_pool);
    return st == RP_ERR_SLOT_OUT_OF_RANGE ? 0 : 1;
}
