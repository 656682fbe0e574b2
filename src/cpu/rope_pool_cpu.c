/*
 * rope_pool_cpu.c — the CPU backend: splits tokens across the context's threads and runs the
 * chosen kernel on each slice.
 *
 * Slices are contiguous and fixed by (T, threads) alone, and every output element depends only on
 * its own token, so results are bit-identical for any thread count. Calls too small to repay
 * waking the workers (decode: a few tokens) stay on the caller's thread.
 */
#include "../internal.h"

enum { RP_PARALLEL_MIN_BYTES = 96 * 1024 }; /* below this, one thread finishes before two start */

typedef struct cpu_job {
    const rp_problem *p;
    rp_parts parts;
    rp_cpu_kernel_fn kernel;
} cpu_job;

static void run_slice(void *arg, int part, int num_parts)
{
    const cpu_job *job = arg;
    const int64_t T = job->p->num_tokens;
    const int64_t begin = (int64_t)((__int128)T * part / num_parts);
    const int64_t end = (int64_t)((__int128)T * (part + 1) / num_parts);
    if (begin < end)
        job->kernel(job->p, job->parts, begin, end);
}

rp_status rp_cpu_rope_pool(rp_context *ctx, const rp_problem *p, rp_parts parts,
                           int32_t num_threads, rp_err *err)
{
    (void)err;
    const rp_cpu_kernels *table = rp_cpu_kernel_table();
    cpu_job job = {p, parts, p->inner_contiguous ? table->rope_pool[p->dtype] : rp_ref_rope_pool};

    /* Bytes the call moves: q, q_rot; k, k_rot, k_pool; v, v_pool. */
    const int64_t row_bytes = p->head_dim * (int64_t)rp_dtype_size(p->dtype);
    const int64_t bytes = p->num_tokens * row_bytes * (2 * p->num_qo_heads + 5 * p->num_kv_heads);
    int64_t threads = rp_context_num_threads(ctx);
    if (num_threads > 0 && num_threads < threads)
        threads = num_threads;
    if (bytes < RP_PARALLEL_MIN_BYTES)
        threads = 1;
    if (threads > p->num_tokens)
        threads = p->num_tokens;
    rp_context_parallel(ctx, run_slice, &job, (int)threads);
    return RP_OK;
}
