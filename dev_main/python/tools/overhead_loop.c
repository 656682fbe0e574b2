/*
 * overhead_loop.c — the C side of measure_overhead.py: times rp_rope_pool_fused on the caller's
 * (contiguous) buffers, so that the Python call can be compared with the C call on the same
 * memory. Built by measure_overhead.py as a small shared library and called through ctypes once
 * per batch of calls, so ctypes' own cost is not in the figures.
 */
#include "ropepool.h"

#include <time.h>

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* After `calls` untimed warm-up calls, runs `calls` back-to-back calls `batches` times;
 * ns_per_call[b] is batch b's mean. Returns the first failing status, or RP_OK. The context is
 * created on the first call and kept, as the Python module keeps its own: a new context's workers
 * would spin through the timed calls. */
int rp_overhead_time_c(void *q, void *k, void *v, void *positions, void *slots, void *k_pool,
                       void *v_pool, void *q_rot, void *k_rot, int64_t T, int64_t Hq, int64_t Hk,
                       int64_t D, int64_t P, int dtype, int index_dtype, double rope_base,
                       int num_threads, int batches, int calls, double *ns_per_call)
{
    rp_rope_pool_args a = {0};
    a.q = rp_tensor_3d(q, (rp_dtype)dtype, T, Hq, D);
    a.k = rp_tensor_3d(k, (rp_dtype)dtype, T, Hk, D);
    a.v = rp_tensor_3d(v, (rp_dtype)dtype, T, Hk, D);
    a.positions = rp_tensor_1d(positions, (rp_dtype)index_dtype, T);
    a.slots = rp_tensor_1d(slots, (rp_dtype)index_dtype, T);
    a.k_pool = rp_tensor_3d(k_pool, (rp_dtype)dtype, P, Hk, D);
    a.v_pool = rp_tensor_3d(v_pool, (rp_dtype)dtype, P, Hk, D);
    a.q_rot = rp_tensor_3d(q_rot, (rp_dtype)dtype, T, Hq, D);
    a.k_rot = rp_tensor_3d(k_rot, (rp_dtype)dtype, T, Hk, D);
    a.head_dim = D;
    a.num_qo_heads = Hq;
    a.num_kv_heads = Hk;
    a.rope_base = rope_base;

    static rp_context *ctx;
    rp_status st = RP_OK;
    if (ctx == NULL) {
        rp_context_options opts = {0};
        opts.num_threads = num_threads;
        st = rp_context_create(&opts, &ctx, NULL, 0);
    }
    for (int i = 0; st == RP_OK && i < calls; i++)
        st = rp_rope_pool_fused(ctx, &a, NULL, 0);
    for (int b = 0; st == RP_OK && b < batches; b++) {
        const double start = now_ns();
        for (int i = 0; st == RP_OK && i < calls; i++)
            st = rp_rope_pool_fused(ctx, &a, NULL, 0);
        ns_per_call[b] = (now_ns() - start) / calls;
    }
    return (int)st;
}
