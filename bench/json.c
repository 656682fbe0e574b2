/*
 * json.c — every figure of a report as JSON, with the machine, the build and the kernel level, so
 * that a result can be compared or re-plotted without re-running. The fields are documented in
 * the README ("Benchmark"); bench/tests/check_json.py checks that they are present.
 */
#include "bench.h"

#include <math.h>
#include <stdio.h>
#include <time.h>

typedef struct json {
    FILE *f;
    int depth;
    int need_comma;
} json;

static void separate(json *j)
{
    if (j->need_comma)
        fputc(',', j->f);
    fprintf(j->f, "\n%*s", 2 * j->depth, "");
    j->need_comma = 0;
}

/* Keys are literals of this file: they need no escaping. */
static void key(json *j, const char *k)
{
    separate(j);
    if (k)
        fprintf(j->f, "\"%s\": ", k);
}

static void enter(json *j, const char *k, char bracket)
{
    key(j, k);
    fputc(bracket, j->f);
    j->depth++;
}

static void leave(json *j, char bracket)
{
    j->depth--;
    fprintf(j->f, "\n%*s%c", 2 * j->depth, "", bracket);
    j->need_comma = 1;
}

/* The length of the well-formed UTF-8 sequence at c (1-4), or 0 (RFC 3629: no overlong forms,
 * surrogates or code points past U+10FFFF). */
static int utf8_length(const unsigned char *c)
{
    const unsigned char b = c[0];
    const int n = b < 0x80 ? 1 : b >= 0xc2 && b <= 0xdf ? 2 : b >= 0xe0 && b <= 0xef ? 3 : b >= 0xf0 && b <= 0xf4 ? 4 : 0;
    const unsigned char lo = b == 0xe0 ? 0xa0 : b == 0xf0 ? 0x90 : 0x80, hi = b == 0xed ? 0x9f : b == 0xf4 ? 0x8f : 0xbf;
    for (int i = 1; i < n; i++)
        if (c[i] < (i == 1 ? lo : 0x80) || c[i] > (i == 1 ? hi : 0xbf))
            return 0;
    return n;
}

/* A JSON string: UTF-8 as it is, each byte that is not part of a well-formed sequence (a path
 * in another encoding) as U+FFFD, so that the file stays valid JSON. */
static void str(json *j, const char *k, const char *v)
{
    key(j, k);
    fputc('"', j->f);
    for (const unsigned char *c = (const unsigned char *)v; *c;) {
        const int n = utf8_length(c);
        if (n == 0)
            fputs("\\ufffd", j->f);
        else if (*c == '"' || *c == '\\')
            fprintf(j->f, "\\%c", *c);
        else if (*c < 0x20)
            fprintf(j->f, "\\u%04x", *c);
        else
            fwrite(c, 1, (size_t)n, j->f);
        c += n ? n : 1;
    }
    fputc('"', j->f);
    j->need_comma = 1;
}

static void num(json *j, const char *k, double v)
{
    key(j, k);
    if (isfinite(v))
        fprintf(j->f, "%.9g", v);
    else
        fputs("null", j->f);
    j->need_comma = 1;
}

static void integer(json *j, const char *k, long long v)
{
    key(j, k);
    fprintf(j->f, "%lld", v);
    j->need_comma = 1;
}

static void boolean(json *j, const char *k, int v)
{
    key(j, k);
    fputs(v ? "true" : "false", j->f);
    j->need_comma = 1;
}

static void measure(json *j, const char *k, const bench_measure *m, const bench_point *pt,
                    double roofline)
{
    enter(j, k, '{');
    num(j, "median_s", m->time.median_s);
    num(j, "min_s", m->time.min_s);
    num(j, "max_s", m->time.max_s);
    integer(j, "samples", m->time.samples);
    integer(j, "calls_per_sample", m->time.calls_per_sample);
    num(j, "gb_per_s", pt->op_bytes / m->time.median_s / 1e9);
    num(j, "roofline_fraction", pt->op_bytes / m->time.median_s / roofline);
    enter(j, "verified", '{');
    boolean(j, "done", m->check.done);
    integer(j, "checked", m->check.checked);
    integer(j, "failures", m->check.failures);
    num(j, "worst_error_over_bound", m->check.worst_ratio);
    str(j, "first_failure", m->check.first_failure);
    leave(j, '}');
    leave(j, '}');
}

static void run(json *j, const bench_run *r)
{
    enter(j, NULL, '{');
    str(j, "backend", r->backend == BENCH_CPU ? "cpu" : "cuda");
    str(j, "device", r->device);
    str(j, "kernel", r->kernel);
    str(j, "dtype", rp_dtype_name(r->layout.dtype));
    str(j, "index_dtype", rp_dtype_name(r->layout.index_dtype));
    str(j, "kv_layout", r->layout.kv_layout == RP_KV_NHD ? "NHD" : r->layout.kv_layout == RP_KV_HND ? "HND" : "flat");
    integer(j, "block_size", r->layout.kv_layout ? r->layout.block_size : 1);
    str(j, "kv_dtype", rp_dtype_name(r->layout.kv_dtype ? r->layout.kv_dtype : r->layout.dtype));
    if (r->backend == BENCH_CPU)
        integer(j, "threads", r->threads);
    str(j, "baseline", r->baseline_seed ? "seed_call" : "unfused");
    integer(j, "pool_size", r->layout.pool_size);
    integer(j, "max_position", r->max_position);
    if (r->sets_option == BENCH_SETS_COLD)
        str(j, "input_sets", "cold");
    else
        integer(j, "input_sets", r->sets_option);
    enter(j, "roofline", '{');
    num(j, "bytes_per_s", r->roofline_bytes_per_s);
    str(j, "what", r->roofline_what);
    leave(j, '}');
    enter(j, "points", '[');
    for (int i = 0; i < r->num_points; i++) {
        const bench_point *pt = &r->points[i];
        enter(j, NULL, '{');
        integer(j, "tokens", pt->tokens);
        integer(j, "input_sets", pt->sets);
        num(j, "op_bytes", pt->op_bytes);
        measure(j, "fused", &pt->fused, pt, r->roofline_bytes_per_s);
        if (r->unfused) {
            measure(j, "unfused", &pt->unfused, pt, r->roofline_bytes_per_s);
            /* The table's last column: with --baseline seed it is var/seed, the variant's time over
             * the seed call's, no fusion speed-up (and its inverse would read as one). */
            if (r->baseline_seed)
                num(j, "variant_over_seed", pt->fused.time.median_s / pt->unfused.time.median_s);
            else
                num(j, "fusion_speedup", pt->unfused.time.median_s / pt->fused.time.median_s);
        }
        leave(j, '}');
    }
    leave(j, ']');
    leave(j, '}');
}

int bench_write_json(const char *path, const bench_report *rep, char *msg, size_t msg_size)
{
    json j = {fopen(path, "w"), 0, 0};
    if (!j.f) {
        snprintf(msg, msg_size, "--json: cannot write '%s'", path);
        return -1;
    }
    const bench_options *o = rep->options;
    const bench_machine *m = bench_machine_info();
    char date[32];
    const time_t now = time(NULL);
    struct tm utc;
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&now, &utc));

    enter(&j, NULL, '{');
    str(&j, "tool", "ropepool-bench");
    str(&j, "library_version", rp_version_string());
    str(&j, "command", o->command);
    str(&j, "date_utc", date);
    enter(&j, "machine", '{');
    str(&j, "cpu", m->cpu);
    integer(&j, "online_cpus", m->online_cpus);
    num(&j, "last_level_cache_bytes", m->llc_bytes);
    num(&j, "memory_bytes", m->memory_bytes);
    str(&j, "os", m->os);
    leave(&j, '}');
    enter(&j, "build", '{');
    str(&j, "compiler", m->compiler);
    str(&j, "build_type", m->build_type);
    str(&j, "cpu_kernel", rp_cpu_kernel_name());
    boolean(&j, "library_has_cuda", rp_has_cuda());
    boolean(&j, "cuda_timing_compiled", m->cuda_compiled);
    leave(&j, '}');
    enter(&j, "shape", '{');
    str(&j, "preset", o->shape.name);
    str(&j, "model", o->shape.model);
    integer(&j, "num_qo_heads", o->shape.hq);
    integer(&j, "num_kv_heads", o->shape.hk);
    integer(&j, "head_dim", o->shape.d);
    num(&j, "rope_base", o->shape.rope_base);
    str(&j, "style", o->shape.style == RP_ROPE_GPTJ ? "gptj" : "neox");
    integer(&j, "rotary_dim", o->shape.rotary_dim ? o->shape.rotary_dim : o->shape.d);
    static const char *const scalings[] = {"default", "llama3", "yarn", "longrope"};
    str(&j, "rope_scaling", scalings[o->shape.scaling]);
    num(&j, "attention_scaling", o->attention_scaling);
    /* The preset's model name keeps its "(QK-norm)" under --qk-norm off: these two say what ran. */
    boolean(&j, "qk_norm", o->shape.qk_norm);
    char variant[160];
    str(&j, "variant", bench_variant_text(&o->shape, o->attention_scaling, variant, sizeof variant));
    leave(&j, '}');
    key(&j, "seed");
    fprintf(j.f, "%llu", (unsigned long long)o->seed);
    j.need_comma = 1;
    num(&j, "seconds_per_point", o->seconds);
    key(&j, "hugepages");
    fprintf(j.f, "%s", o->hugepages ? "true" : "false");
    j.need_comma = 1;
    enter(&j, "runs", '[');
    for (int i = 0; i < rep->num_runs; i++)
        run(&j, &rep->runs[i]);
    leave(&j, ']');
    leave(&j, '}');
    fputc('\n', j.f);
    if (fclose(j.f) != 0) {
        snprintf(msg, msg_size, "--json: error writing '%s'", path);
        return -1;
    }
    return 0;
}
