/*
 * ropepool_bench.c — `make run`: is it right, and how fast is it on my shapes?
 *
 * For each backend (CPU; CUDA when built with it and a GPU is present), dtype and thread count:
 * measure the roofline in this process, then for each T time the fused call and the unfused
 * baseline, verify both against the float64 reference, and print a row. Then write the JSON and
 * the SVG. Exit status: 0 all verified, 1 a run failed, 2 bad arguments or a backend asked for by
 * name is not available, 3 some result failed verification.
 */
#include "bench.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h> /* access */

static int failed_checks(const bench_report *rep)
{
    int failed = 0;
    for (int r = 0; r < rep->num_runs; r++)
        for (int i = 0; i < rep->runs[r].num_points; i++)
            failed += rep->runs[r].points[i].fused.check.failures > 0 ||
                      rep->runs[r].points[i].unfused.check.failures > 0;
    return failed;
}

static int run_cpu(const bench_options *o, bench_report *rep, char *msg, size_t msg_size)
{
    double roofline;
    char what[160];
    bench_progress("cpu: measuring the roofline (memcpy)");
    if (bench_cpu_roofline(o, &roofline, what, sizeof what, msg, msg_size))
        return -1;
    bench_progress(NULL);
    for (int d = 0; d < o->num_dtypes; d++)
        if (bench_cpu_runs(o, o->dtypes[d], roofline, what, rep, msg, msg_size))
            return -1;
    return 0;
}

/* A path the report cannot be written to should fail now, not after the whole benchmark. A file
 * the probe creates is removed again: a run refused later leaves nothing behind. */
static int writable(const char *option, const char *path)
{
    const int existed = path && access(path, F_OK) == 0;
    FILE *f = path ? fopen(path, "a") : NULL;
    if (f) {
        fclose(f);
        if (!existed)
            remove(path);
    }
    if (path && !f)
        fprintf(stderr, "ropepool-bench: %s: cannot write '%s'\n", option, path);
    return !path || f;
}

/* --json and --svg naming one file (the same path, or two names of it): the SVG would replace the
 * JSON. Files not there yet are compared by path. */
static int same_file(const char *a, const char *b)
{
    struct stat sa, sb;
    if (!a || !b)
        return 0;
    if (stat(a, &sa) == 0 && stat(b, &sb) == 0)
        return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
    return strcmp(a, b) == 0;
}

static int write_outputs(const bench_report *rep, char *msg, size_t msg_size)
{
    const bench_options *o = rep->options;
    if (o->json_path) {
        if (bench_write_json(o->json_path, rep, msg, msg_size))
            return -1;
        printf("\nwrote %s\n", o->json_path);
    }
    if (o->svg_path) {
        if (bench_write_svg(o->svg_path, rep, msg, msg_size))
            return -1;
        printf("%swrote %s\n", o->json_path ? "" : "\n", o->svg_path);
    }
    return 0;
}

int main(int argc, char **argv)
{
    static bench_report rep;
    bench_options o, cpu, cuda;
    char msg[512];
    const int parsed = bench_parse_args(argc, argv, &o);
    if (parsed)
        return parsed > 0 ? 0 : 2;

    /* Every argument error comes out before anything runs. */
    if (same_file(o.json_path, o.svg_path)) {
        fprintf(stderr, "ropepool-bench: --json and --svg name one file, '%s': give each its own\n", o.json_path);
        return 2;
    }
    if (!writable("--json", o.json_path) || !writable("--svg", o.svg_path))
        return 2;
    if ((o.backends & BENCH_CPU) && bench_options_for(&o, BENCH_CPU, &cpu))
        return 2;
    int use_cuda = 0;
    char no_cuda[256] = "";
    if (o.backends & BENCH_CUDA) {
        use_cuda = bench_cuda_available(no_cuda, sizeof no_cuda);
        if (!use_cuda && o.cuda_required) {
            fprintf(stderr, "ropepool-bench: --backend cuda: %s\n", no_cuda);
            return 2;
        }
        if (use_cuda && bench_options_for(&o, BENCH_CUDA, &cuda))
            return 2;
    }

    bench_alloc_use_hugepages(o.hugepages);
    rep.options = &o;
    bench_print_banner(&o);
    int rc = 0;
    if (o.backends & BENCH_CPU)
        rc = run_cpu(&cpu, &rep, msg, sizeof msg);
    if (!use_cuda && (o.backends & BENCH_CUDA))
        printf("\ncuda: skipped: %s\n", no_cuda);
    for (int d = 0; rc == 0 && use_cuda && d < cuda.num_dtypes; d++)
        rc = bench_cuda_runs(&cuda, cuda.dtypes[d], &rep, msg, sizeof msg);
    bench_progress(NULL);
    if (rc == 0)
        rc = write_outputs(&rep, msg, sizeof msg);
    if (rc) {
        fprintf(stderr, "ropepool-bench: %s\n", msg);
        return 1;
    }
    const int failed = failed_checks(&rep);
    if (failed) {
        fprintf(stderr, "ropepool-bench: %d result(s) FAILED verification against the float64 reference\n", failed);
        return 3;
    }
    return 0;
}
