/*
 * sweep.c — the loop every backend shares. For each T: choose the input sets; for the fused call
 * and the unfused baseline, poison the outputs, run once over every set and verify against the
 * reference; then time both, interleaved; print the row.
 */
#include "bench.h"

#include "internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

double bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void bench_summarize(double *per_call, int n, int64_t calls_per_sample, bench_timing *t)
{
    qsort(per_call, (size_t)n, sizeof *per_call, cmp_double);
    t->median_s = n % 2 ? per_call[n / 2] : 0.5 * (per_call[n / 2 - 1] + per_call[n / 2]);
    t->min_s = per_call[0];
    t->max_s = per_call[n - 1];
    t->samples = n;
    t->calls_per_sample = calls_per_sample;
}

int bench_calls(rp_context *ctx, int fused, const rp_rope_pool_args *args, int64_t sets, int64_t n,
                int64_t *next, char *msg, size_t msg_size)
{
    char why[256];
    for (int64_t i = 0; i < n; i++) {
        const rp_rope_pool_args *a = &args[*next];
        rp_status st;
        if (fused) {
            st = rp_rope_pool_fused(ctx, a, why, sizeof why);
        } else {
            st = rp_rope_pool_run(ctx, a, RP_PARTS_ROTATE, why, sizeof why);
            if (st == RP_OK)
                st = rp_rope_pool_run(ctx, a, RP_PARTS_SCATTER, why, sizeof why);
        }
        if (st != RP_OK) {
            snprintf(msg, msg_size, "the %s call failed: %s: %s", fused ? "fused" : "unfused",
                     rp_status_name(st), why);
            return -1;
        }
        *next = *next + 1 == sets ? 0 : *next + 1;
    }
    return 0;
}

int64_t bench_sets_for(const bench_options *o, const bench_layout *L, int64_t T, double cache_bytes)
{
    if (o->sets > 0)
        return o->sets;
    double sets = ceil(2.0 * cache_bytes / bench_op_bytes(L, T));
    const double most = fmin(BENCH_MAX_SETS, floor((double)L->pool_size / (double)T));
    return (int64_t)fmax(1.0, fmin(sets, most));
}

int64_t bench_arena_tokens(const bench_options *o, const bench_layout *L, double cache_bytes)
{
    int64_t most = 0;
    for (int i = 0; i < o->num_tokens; i++) {
        const int64_t need = bench_sets_for(o, L, o->tokens[i], cache_bytes) * o->tokens[i];
        most = need > most ? need : most;
    }
    return most;
}

int bench_sweep(const bench_options *o, const bench_backend_ops *ops, double cache_bytes,
                bench_run *run, char *msg, size_t msg_size)
{
    const char *backend = run->backend == BENCH_CPU ? "cpu" : "cuda";
    const char *dtype = rp_dtype_name(run->layout.dtype);
    bench_print_run_header(run);
    for (int i = 0; i < o->num_tokens; i++) {
        bench_point *pt = &run->points[run->num_points];
        pt->tokens = o->tokens[i];
        pt->sets = bench_sets_for(o, &run->layout, pt->tokens, cache_bytes);
        pt->op_bytes = bench_op_bytes(&run->layout, pt->tokens);
        const long long T = (long long)pt->tokens, tokens = (long long)(pt->sets * pt->tokens);
        for (int fused = 1; o->verify && fused >= !o->unfused; fused--) {
            const char *variant = fused ? "fused" : "unfused";
            bench_progress("%s %s T=%lld: verifying the %s call on %lld tokens", backend, dtype, T,
                           variant, tokens);
            if (ops->poison(ops->self, pt->sets * pt->tokens, msg, msg_size) ||
                ops->run_once(ops->self, pt->tokens, pt->sets, fused, msg, msg_size) ||
                ops->verify(ops->self, pt->sets * pt->tokens, fused,
                            fused ? &pt->fused.check : &pt->unfused.check, msg, msg_size))
                return -1;
        }
        bench_progress("%s %s T=%lld: timing", backend, dtype, T);
        bench_timing t[2];
        if (ops->time(ops->self, pt->tokens, pt->sets, o->unfused ? 2 : 1, o->seconds, t, msg, msg_size))
            return -1;
        pt->fused.time = t[0];
        if (o->unfused)
            pt->unfused.time = t[1];
        bench_progress(NULL);
        bench_print_point(run, pt);
        run->num_points++;
    }
    return 0;
}
