/*
 * report.c — what a person reads: the banner, one header per run, one row per T as soon as it is
 * measured, and a transient progress line on stderr when stderr is a terminal.
 */
#include "bench.h"

#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

const char *bench_format_time(double s, char *buf, size_t size)
{
    if (s < 1e-3)
        snprintf(buf, size, s < 1e-5 ? "%.2f us" : s < 1e-4 ? "%.1f us" : "%.0f us", s * 1e6);
    else if (s < 1.0)
        snprintf(buf, size, s < 1e-2 ? "%.2f ms" : s < 1e-1 ? "%.1f ms" : "%.0f ms", s * 1e3);
    else
        snprintf(buf, size, "%.2f s", s);
    return buf;
}

void bench_progress(const char *fmt, ...)
{
    static int tty = -1;
    if (tty < 0)
        tty = isatty(STDERR_FILENO);
    if (!tty)
        return;
    fputs("\r\033[K", stderr);
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
    }
    fflush(stderr);
}

void bench_print_banner(const bench_options *o)
{
    const bench_machine *m = bench_machine_info();
    printf("ropepool-bench %s: %s (%s), Hq %lld, Hk %lld, D %lld, rope_base %g\n", rp_version_string(),
           o->shape.name, o->shape.model, (long long)o->shape.hq, (long long)o->shape.hk,
           (long long)o->shape.d, o->shape.rope_base);
    printf("machine: %s, %d CPUs, last-level cache %.0f MiB, memory %.1f GiB, %s\n", m->cpu,
           m->online_cpus, m->llc_bytes / 1048576.0, m->memory_bytes / 1073741824.0, m->os);
    printf("build: %s, %s%s\n", m->compiler, m->build_type, m->cuda_compiled ? ", CUDA timing compiled" : "");
    char variant[160];
    printf("rope: %s\n", bench_variant_text(&o->shape, o->attention_scaling, variant, sizeof variant));
    if (o->hugepages)
        printf("host buffers: transparent huge pages requested (madvise)\n");
    fflush(stdout);
}

void bench_print_run_header(const bench_run *run)
{
    const bench_layout *L = &run->layout;
    char sets[112];
    if (run->sets_option == BENCH_SETS_COLD)
        snprintf(sets, sizeof sets, "input sets: cold (overflow the cache twice, or as many as the pool holds: "
                                    "the sets column)");
    else
        snprintf(sets, sizeof sets, "input sets: %lld", (long long)run->sets_option);
    printf("\n%s: %s, kernel %s, %s", run->backend == BENCH_CPU ? "cpu" : "cuda", run->device,
           run->kernel, rp_dtype_name(L->dtype));
    if (run->backend == BENCH_CPU)
        printf(", up to %d thread%s", run->threads, run->threads == 1 ? "" : "s");
    static const char *const layouts[] = {"flat", "NHD (vLLM [blocks, 2, block, Hk, D])",
                                          "HND (packed (blocks, Hk, block, 2D))"};
    printf("\n  pool %lld slots, positions < %lld, %s indices, %s\n", (long long)L->pool_size,
           (long long)run->max_position, rp_dtype_name(L->index_dtype), sets);
    if (L->latent)  /* MLA: one [c_kv | k_pe] row per token, no separate K and V planes */
        printf("  kv layout %s", L->kv_layout == RP_KV_FLAT ? "flat latent rows [pool, dv + D]"
                                                            : "NHD latent rows [blocks, block, dv + D]");
    else
        printf("  kv layout %s", layouts[L->kv_layout]);
    if (L->kv_layout != RP_KV_FLAT)
        printf(", block size %lld", (long long)L->block_size);
    printf(", pools %s\n", L->kv_dtype ? rp_dtype_name(L->kv_dtype) : rp_dtype_name(L->dtype));
    printf("  roofline %.1f GB/s: %s\n", run->roofline_bytes_per_s / 1e9, run->roofline_what);
    printf("  (%%roof: the call's bytes per second over that memory roofline; above 100%% the call's\n"
           "  data sat in the cache, as at small T with one input set: see --sets cold)\n");
    printf("  %7s %5s %10s %7s %6s", "T", "sets", "fused", "GB/s", "%roof");
    if (run->unfused)
        printf(" %10s %6s %7s", run->baseline_seed ? "seed call" : "unfused", "%roof",
               run->baseline_seed ? "var/seed" : "fusion");
    printf(!run->unfused ? "  verified (max error / bound)\n"
           : run->baseline_seed ? "  verified fused / seed call (max error / bound)\n"
                                : "  verified fused / unfused (max error / bound)\n");
    fflush(stdout);
}

static const char *verdict(const bench_check *c, char *buf, size_t size)
{
    if (!c->done)
        snprintf(buf, size, "not verified");
    else if (c->failures)
        snprintf(buf, size, "FAILED %lld of %lld", (long long)c->failures, (long long)c->checked);
    else
        snprintf(buf, size, "ok %.2f", c->worst_ratio);
    return buf;
}

void bench_print_point(const bench_run *run, const bench_point *pt)
{
    char t1[32], t2[32], v1[64], v2[64];
    const double roof = run->roofline_bytes_per_s;
    const bench_timing *f = &pt->fused.time, *u = &pt->unfused.time;
    printf("  %7lld %5lld %10s %7.1f %5.1f%%", (long long)pt->tokens, (long long)pt->sets,
           bench_format_time(f->median_s, t1, sizeof t1), pt->op_bytes / f->median_s / 1e9,
           100.0 * pt->op_bytes / f->median_s / roof);
    if (run->unfused)
        printf(" %10s %5.1f%% %6.2fx", bench_format_time(u->median_s, t2, sizeof t2),
               100.0 * pt->op_bytes / u->median_s / roof,
               run->baseline_seed ? f->median_s / u->median_s : u->median_s / f->median_s);
    printf("  %s", verdict(&pt->fused.check, v1, sizeof v1));
    if (run->unfused)
        printf(" / %s", verdict(&pt->unfused.check, v2, sizeof v2));
    printf("\n");
    if (pt->fused.check.failures)
        printf("    first fused failure: %s\n", pt->fused.check.first_failure);
    if (run->unfused && pt->unfused.check.failures)
        printf("    first unfused failure: %s\n", pt->unfused.check.first_failure);
    fflush(stdout);
}
