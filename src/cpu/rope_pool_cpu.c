/*
 * rope_pool_cpu.c — the CPU backend: splits tokens across the context's threads and runs the
 * chosen kernel on each slice.
 *
 * Slices are contiguous and fixed by (T, threads) alone, and every output element depends only on
 * its own token, so results are bit-identical for any thread count. Calls too small to repay
 * waking the workers (decode: a few tokens) stay on the caller's thread.
 */
#include "kernels.h"

#include "../fp_mode.h"

/* Calls that move fewer bytes (rp_cpu_bytes_moved) run on the caller's thread alone: decode-size
 * calls, up to 4 tokens of Llama-3-8B in float32 (53 KB each), 9 in 16-bit types. Spinning workers
 * would save little there (Zen 4: 1.7 -> 1.55 us at 2 tokens, 2.6 -> 2.2 us at 4), and a worker
 * that has gone to sleep costs far more to wake (300-700 us measured on this 2-vCPU VM). */
enum { RP_PARALLEL_MIN_BYTES = 256 * 1024 };

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
    if (begin >= end)
        return;
    const rp_fp_mode mode = rp_fp_mode_enter(); /* workers: the mode they were made with */
    job->kernel(job->p, job->parts, begin, end);
    rp_fp_mode_leave(mode);
}

rp_status rp_cpu_rope_pool(rp_context *ctx, const rp_problem *p, rp_parts parts,
                           int32_t num_threads, rp_err *err)
{
    (void)err;
    const rp_cpu_kernels *table = rp_cpu_kernel_table();
    /* The fast levels need unit-stride head rows and, with QK-norm, heads of one row buffer. */
    const int fast = p->inner_contiguous && rp_cpu_norm_fits(p);
    cpu_job job = {p, parts, fast ? table->rope_pool[p->dtype] : rp_ref_rope_pool};

    int64_t threads = rp_context_num_threads(ctx);
    if (num_threads > 0 && num_threads < threads)
        threads = num_threads;
    if (rp_cpu_bytes_moved(p) < RP_PARALLEL_MIN_BYTES)
        threads = 1;
    if (threads > p->num_tokens)
        threads = p->num_tokens;
    rp_context_parallel(ctx, run_slice, &job, (int)threads);
    return RP_OK;
}
