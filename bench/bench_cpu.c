/*
 * bench_cpu.c — the CPU side: the memcpy roofline, and timing calls on host buffers.
 *
 * Timing: calls run back to back in batches of about 2 ms (so a 3 us call is not lost in the
 * clock's resolution), and the per-call time of a batch is one sample; the median over samples is
 * reported. Fused and unfused batches alternate, so a slow spell of this shared machine hits both.
 * A pass over every input set warms up first. Buffers are touched before timing, so no call pays
 * for page faults. All memory comes from the same allocator as the roofline's, without huge-page
 * hints.
 */
#include "bench.h"

#include "internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { ROOFLINE_REPS = 11 };

static const double batch_seconds = 0.002;

/* ---- roofline ---------------------------------------------------------------------------------- */

typedef struct copy_job {
    char *dst;
    const char *src;
    size_t bytes;
} copy_job;

static void copy_part(void *arg, int part, int parts)
{
    const copy_job *job = arg;
    const size_t lines = job->bytes / 64;
    const size_t begin = lines * (size_t)part / (size_t)parts * 64;
    const size_t end = part + 1 == parts ? job->bytes : lines * (size_t)(part + 1) / (size_t)parts * 64;
    memcpy(job->dst + begin, job->src + begin, end - begin);
}

/* The median memcpy bandwidth of `threads` threads over job's buffers. */
static double copy_bandwidth(const copy_job *job, int threads, char *msg, size_t msg_size)
{
    rp_context *ctx;
    rp_context_options opts = {0};
    opts.num_threads = threads;
    char why[256];
    if (rp_context_create(&opts, &ctx, why, sizeof why) != RP_OK) {
        snprintf(msg, msg_size, "roofline: %s", why);
        return -1;
    }
    double secs[ROOFLINE_REPS];
    rp_context_parallel(ctx, copy_part, (void *)job, threads); /* warm-up */
    for (int r = 0; r < ROOFLINE_REPS; r++) {
        const double t0 = bench_now();
        rp_context_parallel(ctx, copy_part, (void *)job, threads);
        secs[r] = bench_now() - t0;
    }
    rp_context_destroy(ctx);
    bench_timing t;
    bench_summarize(secs, ROOFLINE_REPS, 1, &t);
    return 2.0 * (double)job->bytes / t.median_s;
}

int bench_cpu_roofline(const bench_options *o, double *bytes_per_s, char *what, size_t what_size,
                       char *msg, size_t msg_size)
{
    /* Eight times the last-level cache, and never less than 256 MiB: the copy streams from DRAM. */
    const double llc = bench_machine_info()->llc_bytes;
    const size_t bytes = (size_t)fmax(256.0 * (1 << 20), 8.0 * llc);
    copy_job job = {bench_alloc(bytes), bench_alloc(bytes), bytes};
    int rc = -1;
    if (!job.dst || !job.src) {
        snprintf(msg, msg_size, "roofline: out of memory for 2 x %zu MiB", bytes >> 20);
        goto done;
    }
    memset(job.dst, 0, bytes);
    memset((char *)job.src, 1, bytes);
    /* One thread can copy faster than two on some machines; the roofline is the best figure. */
    int counts[BENCH_MAX_LIST + 1] = {1}, num_counts = 1;
    for (int i = 0; i < o->num_threads; i++) {
        int seen = 0;
        for (int k = 0; k < num_counts; k++)
            seen |= counts[k] == o->threads[i];
        if (!seen)
            counts[num_counts++] = o->threads[i];
    }
    size_t used = (size_t)snprintf(what, what_size, "best memcpy bandwidth (");
    *bytes_per_s = 0;
    for (int k = 0; k < num_counts; k++) {
        const double bw = copy_bandwidth(&job, counts[k], msg, msg_size);
        if (bw < 0)
            goto done;
        *bytes_per_s = fmax(*bytes_per_s, bw);
        if (used < what_size)
            used += (size_t)snprintf(what + used, what_size - used, "%s%d thread%s %.1f", k ? ", " : "",
                                     counts[k], counts[k] == 1 ? "" : "s", bw / 1e9);
    }
    if (used < what_size)
        snprintf(what + used, what_size - used, " GB/s), 2 x %zu MiB buffers, read + write bytes", bytes >> 20);
    rc = 0;
done:
    free(job.dst);
    free((void *)job.src);
    return rc;
}

/* ---- calls ------------------------------------------------------------------------------------- */

typedef struct cpu_bench {
    bench_layout L, seed_L; /* seed_L: L with the seed's variant (--baseline seed) */
    int baseline_seed;
    int verify_seed;         /* the last run_once ran the seed baseline: verify against seed_L */
    bench_buffers buf; /* inputs from a bench_inputs, outputs and pools owned here */
    rp_context *ctx;
    rp_rope_pool_args *args, *seed_args; /* one per input set of the current T */
} cpu_bench;

/* Call arguments for each input set of calls of T tokens. */
static int prepare_sets(cpu_bench *c, int64_t T, int64_t sets, char *msg, size_t msg_size)
{
    const rp_device host = {RP_DEVICE_CPU, 0};
    free(c->args);
    free(c->seed_args);
    c->seed_args = NULL;
    if (!(c->args = bench_set_args(&c->L, &c->buf, T, sets, host, NULL)) ||
        (c->baseline_seed && !(c->seed_args = bench_set_args(&c->seed_L, &c->buf, T, sets, host, NULL)))) {
        snprintf(msg, msg_size, "out of memory for %lld call arguments", (long long)sets);
        return -1;
    }
    return 0;
}

/* Series v: 0 the call under test (fused), 1 the baseline (unfused, or the seed's fused call). */
static int cpu_series(cpu_bench *c, int v, int64_t sets, int64_t n, int64_t *next, char *msg, size_t msg_size)
{
    if (v == 1 && c->baseline_seed)
        return bench_calls(c->ctx, 1, c->seed_args, sets, n, next, msg, msg_size);
    return bench_calls(c->ctx, v == 0, c->args, sets, n, next, msg, msg_size);
}

static int cpu_run_once(void *self, int64_t T, int64_t sets, int fused, char *msg, size_t msg_size)
{
    cpu_bench *c = self;
    int64_t next = 0;
    if (prepare_sets(c, T, sets, msg, msg_size))
        return -1;
    c->verify_seed = !fused && c->baseline_seed;
    return cpu_series(c, !fused, sets, sets, &next, msg, msg_size);
}

static int cpu_time(void *self, int64_t T, int64_t sets, int variants, double seconds,
                    bench_timing out[2], char *msg, size_t msg_size)
{
    cpu_bench *c = self;
    if (prepare_sets(c, T, sets, msg, msg_size))
        return -1;

    /* Per variant: warm up on every set, estimate one call's time from 20 ms of calls, and size
     * the batches; then take the samples of both variants in turn. */
    int64_t next[2] = {0, 0}, batch[2] = {1, 1};
    double samples = 1000;
    for (int v = 0; v < variants; v++) {
        int64_t calls = 0;
        if (cpu_series(c, v, sets, sets, &next[v], msg, msg_size))
            return -1;
        const double t0 = bench_now();
        double elapsed;
        do {
            if (cpu_series(c, v, sets, 1, &next[v], msg, msg_size))
                return -1;
            calls++;
        } while ((elapsed = bench_now() - t0) < 0.02);
        const double estimate = elapsed / (double)calls;
        batch[v] = (int64_t)fmax(1.0, ceil(batch_seconds / estimate));
        samples = fmin(samples, seconds / (estimate * (double)batch[v]));
    }
    const int n = (int)fmax(5.0, samples);
    double *per_call = malloc(2 * (size_t)n * sizeof *per_call);
    if (!per_call) {
        snprintf(msg, msg_size, "out of memory for %d samples", n);
        return -1;
    }
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++)
        for (int v = 0; v < variants && rc == 0; v++) {
            const double start = bench_now();
            rc = cpu_series(c, v, sets, batch[v], &next[v], msg, msg_size);
            per_call[v * n + i] = (bench_now() - start) / (double)batch[v];
        }
    for (int v = 0; v < variants && rc == 0; v++)
        bench_summarize(per_call + v * n, n, batch[v], &out[v]);
    free(per_call);
    return rc;
}

static int cpu_poison(void *self, int64_t tokens, char *msg, size_t msg_size)
{
    cpu_bench *c = self;
    const rp_tensor pools[2] = {bench_pool_tensor(&c->L, &c->buf, 0), bench_pool_tensor(&c->L, &c->buf, 1)};
    const size_t elem = rp_dtype_size((rp_dtype)pools[0].dtype);
    const size_t head[2] = {(size_t)c->L.d * elem, (size_t)bench_dv(&c->L) * elem};
    memset(c->buf.q_rot, 0xff, bench_rows_bytes(&c->L, tokens, c->L.hq));
    memset(c->buf.k_rot, 0xff, bench_rows_bytes(&c->L, tokens, c->L.hk));
    for (int64_t t = 0; t < tokens; t++) {
        const int64_t slot = rp_load_index(c->buf.slots, c->L.index_dtype, 1, t);
        for (int64_t h = 0; h < c->L.hk; h++)
            for (int which = 0; which < 2; which++)
                memset(bench_pool_row(&c->L, &pools[which], slot, h), 0xff, head[which]);
    }
    (void)msg;
    (void)msg_size;
    return 0;
}

static int cpu_verify(void *self, int64_t tokens, int fused, bench_check *chk, char *msg, size_t msg_size)
{
    cpu_bench *c = self;
    /* The seed baseline is a fused call too: its fp8 k_pool holds the fp8 of the float64 rotation,
     * not of the rounded k_rot that the unfused scatter reads (the two differ at fp8 midpoints). */
    return bench_verify(c->verify_seed ? &c->seed_L : &c->L, &c->buf, tokens, fused || c->verify_seed, chk, msg,
                        msg_size);
}

int bench_cpu_runs(const bench_options *o, rp_dtype dtype, double roofline, const char *roofline_what,
                   bench_report *rep, char *msg, size_t msg_size)
{
    const bench_machine *m = bench_machine_info();
    cpu_bench c;
    memset(&c, 0, sizeof c);
    c.L = (bench_layout){o->shape.hq, o->shape.hk, o->shape.d, o->pool_size, o->shape.rope_base,
                         dtype, o->index_dtype, 0, 0, NULL, 0.0, o->kv_layout, o->block_size, o->kv_dtype,
                         {0, 0, 0}, 0, 1, NULL, NULL, 0, 0, 0};
    c.seed_L = c.L;
    bench_layout_set_variant(&c.L, o);
    c.seed_L.positions_per_token = c.L.positions_per_token; /* the seed's call reads row t */
    c.baseline_seed = o->baseline_seed;
    const int64_t arena = bench_arena_tokens(o, &c.L, m->llc_bytes);
    bench_inputs in;
    bench_progress("cpu %s: drawing inputs for %lld tokens", rp_dtype_name(dtype), (long long)arena);
    if (bench_inputs_create(&in, &c.L, arena, o->max_position, o->seed, msg, msg_size))
        return -1;
    /* Flat: two pools; paged or latent: one allocation holding both (bench_pool_tensor), v_pool
     * unused. */
    const size_t k_alloc = bench_pool_alloc_bytes(&c.L, 0), v_alloc = bench_pool_alloc_bytes(&c.L, 1);
    c.buf = (bench_buffers){in.q, in.k, in.v, in.positions, in.slots,
                            bench_alloc(bench_rows_bytes(&c.L, arena, c.L.hq)),
                            bench_alloc(bench_rows_bytes(&c.L, arena, c.L.hk)),
                            bench_alloc(k_alloc), v_alloc ? bench_alloc(v_alloc) : NULL};
    int rc = -1;
    if (!c.buf.q_rot || !c.buf.k_rot || !c.buf.k_pool || (v_alloc && !c.buf.v_pool)) {
        snprintf(msg, msg_size, "out of memory for the outputs and two pools of %lld slots (%.2f GiB)",
                 (long long)c.L.pool_size, (double)(k_alloc + v_alloc) / (1 << 30));
        goto done;
    }
    bench_progress("cpu %s: touching the pools", rp_dtype_name(dtype));
    memset(c.buf.q_rot, 0, bench_rows_bytes(&c.L, arena, c.L.hq));
    memset(c.buf.k_rot, 0, bench_rows_bytes(&c.L, arena, c.L.hk));
    memset(c.buf.k_pool, 0, k_alloc);
    if (c.buf.v_pool)
        memset(c.buf.v_pool, 0, v_alloc);
    bench_progress(NULL);

    const bench_backend_ops ops = {&c, cpu_poison, cpu_run_once, cpu_verify, cpu_time};
    for (int i = 0; i < o->num_threads; i++) {
        if (rep->num_runs == BENCH_MAX_RUNS) {
            snprintf(msg, msg_size, "more than %d runs in one invocation", BENCH_MAX_RUNS);
            goto done;
        }
        bench_run *run = &rep->runs[rep->num_runs];
        memset(run, 0, sizeof *run);
        run->backend = BENCH_CPU;
        snprintf(run->device, sizeof run->device, "%s", m->cpu);
        snprintf(run->kernel, sizeof run->kernel, "%s", rp_cpu_kernel_name());
        run->layout = c.L;
        run->threads = o->threads[i];
        run->max_position = o->max_position;
        run->sets_option = o->sets;
        run->roofline_bytes_per_s = roofline;
        snprintf(run->roofline_what, sizeof run->roofline_what, "%s", roofline_what);
        run->unfused = o->unfused;
        run->baseline_seed = o->baseline_seed && o->unfused;

        rp_context_options opts = {0};
        opts.num_threads = o->threads[i];
        char why[256];
        if (rp_context_create(&opts, &c.ctx, why, sizeof why) != RP_OK) {
            snprintf(msg, msg_size, "cannot create a context of %d threads: %s", o->threads[i], why);
            goto done;
        }
        const int failed = bench_sweep(o, &ops, m->llc_bytes, run, msg, msg_size);
        rp_context_destroy(c.ctx);
        c.ctx = NULL;
        rep->num_runs++;
        if (failed)
            goto done;
    }
    rc = 0;
done:
    free(c.args);
    free(c.seed_args);
    free(c.buf.q_rot);
    free(c.buf.k_rot);
    free(c.buf.k_pool);
    free(c.buf.v_pool);
    bench_inputs_free(&in);
    return rc;
}
