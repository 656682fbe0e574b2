/*
 * svg.c — one picture of a report, hand-written SVG: time per call against T (log-log) on the
 * left, % of roofline against T on the right. Each run (backend, dtype, threads) has a colour;
 * the fused call is a solid line, the unfused baseline the same colour dashed.
 */
#include "bench.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

enum { WIDTH = 1000, PANEL_W = 390, PANEL_H = 300, TOP = 100, LEFT_X = 80, RIGHT_X = 575 };

static const char *const colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd",
                                     "#ff7f0e", "#8c564b", "#e377c2", "#17becf"};

typedef struct axis {
    double lo, hi; /* data range (log10 for log axes) */
    int log;
    double px0, px1; /* pixel positions of lo and hi */
} axis;

static double place(const axis *a, double v)
{
    const double x = a->log ? log10(v) : v;
    return a->px0 + (x - a->lo) / (a->hi - a->lo) * (a->px1 - a->px0);
}

static void escape(FILE *f, const char *s)
{
    for (; *s; s++) {
        if (*s == '<')
            fputs("&lt;", f);
        else if (*s == '>')
            fputs("&gt;", f);
        else if (*s == '&')
            fputs("&amp;", f);
        else
            fputc(*s, f);
    }
}

static const char *tokens_label(int64_t t, char *buf, size_t size)
{
    if (t >= 1024 && t % 1024 == 0)
        snprintf(buf, size, "%lldk", (long long)(t / 1024));
    else
        snprintf(buf, size, "%lld", (long long)t);
    return buf;
}

static const char *decade_label(int e, char *buf, size_t size)
{
    static const char *const units[] = {"ns", "\xc2\xb5s" /* µs in UTF-8 */, "ms", "s"};
    const int u = e < -6 ? 0 : e < -3 ? 1 : e < 0 ? 2 : 3;
    snprintf(buf, size, "%.0f %s", pow(10.0, e - 3 * (u - 3)), units[u]);
    return buf;
}

static void run_label(const bench_run *r, char *buf, size_t size)
{
    const int n = snprintf(buf, size, "%s %s", r->backend == BENCH_CPU ? "cpu" : "cuda",
                           rp_dtype_name(r->layout.dtype));
    if (r->backend == BENCH_CPU && n > 0 && (size_t)n < size)
        snprintf(buf + n, size - (size_t)n, ", %d thread%s", r->threads, r->threads == 1 ? "" : "s");
}

/* The frame, grid and labels of one panel; x ticks at every T measured. */
static void draw_frame(FILE *f, const axis *x, const axis *y, const char *title, const bench_report *rep)
{
    const double top = y->px1, bottom = y->px0;
    fprintf(f, "<rect x='%.1f' y='%.1f' width='%.1f' height='%.1f' fill='none' stroke='#444'/>\n",
            x->px0, top, x->px1 - x->px0, bottom - top);
    fprintf(f, "<text x='%.1f' y='%.1f' text-anchor='middle' font-size='14' font-weight='bold'>%s</text>\n",
            (x->px0 + x->px1) / 2, top - 10, title);
    int64_t drawn[BENCH_MAX_LIST * 4];
    int num_drawn = 0;
    for (int r = 0; r < rep->num_runs; r++)
        for (int i = 0; i < rep->runs[r].num_points; i++) {
            const int64_t t = rep->runs[r].points[i].tokens;
            int seen = 0;
            for (int k = 0; k < num_drawn; k++)
                seen |= drawn[k] == t;
            if (seen || num_drawn == (int)(sizeof drawn / sizeof drawn[0]))
                continue;
            drawn[num_drawn++] = t;
            char label[32];
            const double px = place(x, (double)t);
            fprintf(f, "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' stroke='#e4e4e4'/>\n", px, top, px, bottom);
            fprintf(f, "<text x='%.1f' y='%.1f' text-anchor='middle' font-size='12'>%s</text>\n", px,
                    bottom + 16, tokens_label(t, label, sizeof label));
        }
    fprintf(f, "<text x='%.1f' y='%.1f' text-anchor='middle' font-size='13'>tokens per call T (log scale)</text>\n",
            (x->px0 + x->px1) / 2, bottom + 36);
}

static void draw_series(FILE *f, const bench_run *r, const axis *x, const axis *y, int pct, int fused,
                        const char *color)
{
    char label[96];
    run_label(r, label, sizeof label);
    fprintf(f, "<polyline fill='none' stroke='%s' stroke-width='%s'%s points='", color,
            fused ? "2.2" : "1.6", fused ? "" : " stroke-dasharray='6 4'");
    for (int i = 0; i < r->num_points; i++) {
        const bench_point *pt = &r->points[i];
        const double s = (fused ? pt->fused : pt->unfused).time.median_s;
        const double v = pct ? 100.0 * pt->op_bytes / s / r->roofline_bytes_per_s : s;
        fprintf(f, "%.1f,%.1f ", place(x, (double)pt->tokens), place(y, v));
    }
    fputs("'/>\n", f);
    for (int i = 0; i < r->num_points; i++) {
        const bench_point *pt = &r->points[i];
        const bench_measure *m = fused ? &pt->fused : &pt->unfused;
        const double s = m->time.median_s;
        const double share = 100.0 * pt->op_bytes / s / r->roofline_bytes_per_s;
        const double px = place(x, (double)pt->tokens), py = place(y, pct ? share : s);
        char t[32];
        if (fused)
            fprintf(f, "<circle cx='%.1f' cy='%.1f' r='3.5' fill='%s'>", px, py, color);
        else
            fprintf(f, "<rect x='%.1f' y='%.1f' width='6' height='6' fill='white' stroke='%s'>", px - 3,
                    py - 3, color);
        fprintf(f, "<title>");
        escape(f, label);
        fprintf(f, ", %s, T = %lld: %s per call, %.1f%% of roofline%s</title>%s\n",
                fused ? "fused" : r->baseline_seed ? "seed call" : "unfused", (long long)pt->tokens, bench_format_time(s, t, sizeof t),
                share, m->check.failures ? ", verification FAILED" : "", fused ? "</circle>" : "</rect>");
    }
}

int bench_write_svg(const char *path, const bench_report *rep, char *msg, size_t msg_size)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        snprintf(msg, msg_size, "--svg: cannot write '%s'", path);
        return -1;
    }
    const bench_options *o = rep->options;
    double t_lo = INFINITY, t_hi = 0, s_lo = INFINITY, s_hi = 0, pct_hi = 100;
    for (int r = 0; r < rep->num_runs; r++) {
        const bench_run *run = &rep->runs[r];
        for (int i = 0; i < run->num_points; i++) {
            const bench_point *pt = &run->points[i];
            for (int v = 0; v <= run->unfused; v++) {
                const double s = (v ? pt->unfused : pt->fused).time.median_s;
                s_lo = fmin(s_lo, s);
                s_hi = fmax(s_hi, s);
                pct_hi = fmax(pct_hi, 100.0 * pt->op_bytes / s / run->roofline_bytes_per_s);
            }
            t_lo = fmin(t_lo, (double)pt->tokens);
            t_hi = fmax(t_hi, (double)pt->tokens);
        }
    }
    if (!(t_hi > 0)) { /* nothing measured: an empty frame still says so */
        t_lo = 1, t_hi = 2, s_lo = 1e-6, s_hi = 1e-3;
    }
    const int legend_rows = (rep->num_runs + 2) / 3;
    const int height = TOP + PANEL_H + 80 + 22 * legend_rows;
    const double bottom = TOP + PANEL_H;
    const double x_lo = log10(t_lo) - 0.15, x_hi = log10(t_hi) + 0.15;
    axis xl = {x_lo, x_hi, 1, LEFT_X, LEFT_X + PANEL_W}, xr = {x_lo, x_hi, 1, RIGHT_X, RIGHT_X + PANEL_W};
    const int e_lo = (int)floor(log10(s_lo)), e_hi = (int)ceil(log10(s_hi) + 1e-9);
    axis time_axis = {e_lo, e_hi > e_lo ? e_hi : e_lo + 1, 1, bottom, TOP};
    axis pct_axis = {0, ceil(pct_hi / 20.0) * 20.0, 0, bottom, TOP};

    fprintf(f, "<svg xmlns='http://www.w3.org/2000/svg' width='%d' height='%d' viewBox='0 0 %d %d' "
               "font-family='DejaVu Sans, Helvetica, Arial, sans-serif'>\n", WIDTH, height, WIDTH, height);
    fprintf(f, "<rect width='100%%' height='100%%' fill='white'/>\n");
    fprintf(f, "<text x='%d' y='26' text-anchor='middle' font-size='17' font-weight='bold'>ropepool: "
               "RoPE + KV-pool write, %s (Hq %lld, Hk %lld, D %lld)</text>\n",
            WIDTH / 2, o->shape.name, (long long)o->shape.hq, (long long)o->shape.hk, (long long)o->shape.d);
    fprintf(f, "<text x='%d' y='46' text-anchor='middle' font-size='12' fill='#555'>", WIDTH / 2);
    for (int r = 0; r < rep->num_runs; r++) {
        const bench_run *run = &rep->runs[r];
        int repeated = 0;
        for (int k = 0; k < r; k++)
            repeated |= rep->runs[k].backend == run->backend && rep->runs[k].roofline_bytes_per_s == run->roofline_bytes_per_s;
        if (repeated)
            continue;
        fprintf(f, "%s", r ? " | " : "");
        escape(f, run->device);
        fprintf(f, " (%s kernel %s): roofline %.1f GB/s", run->backend == BENCH_CPU ? "cpu" : "cuda",
                run->kernel, run->roofline_bytes_per_s / 1e9);
    }
    fprintf(f, "</text>\n<text x='%d' y='62' text-anchor='middle' font-size='12' fill='#555'>median time "
               "per call; %% of roofline = op bytes / time / roofline (copy bandwidth measured in the "
               "same run)</text>\n", WIDTH / 2);

    /* Left: time per call, decade grid. */
    draw_frame(f, &xl, &time_axis, "time per call (log scale)", rep);
    for (int e = (int)time_axis.lo; e <= (int)time_axis.hi; e++) {
        char label[32];
        const double py = place(&time_axis, pow(10.0, e));
        fprintf(f, "<line x1='%d' y1='%.1f' x2='%d' y2='%.1f' stroke='#e4e4e4'/>\n", LEFT_X, py,
                LEFT_X + PANEL_W, py);
        fprintf(f, "<text x='%d' y='%.1f' text-anchor='end' font-size='12'>%s</text>\n", LEFT_X - 6,
                py + 4, decade_label(e, label, sizeof label));
    }
    /* Right: % of roofline, every 20%, the roofline itself dashed. */
    draw_frame(f, &xr, &pct_axis, "% of roofline (copy bandwidth)", rep);
    for (double p = 0; p <= pct_axis.hi + 1e-9; p += 20) {
        const double py = place(&pct_axis, p);
        fprintf(f, "<line x1='%d' y1='%.1f' x2='%d' y2='%.1f' stroke='%s'%s/>\n", RIGHT_X, py,
                RIGHT_X + PANEL_W, py, p == 100 ? "#888" : "#e4e4e4",
                p == 100 ? " stroke-dasharray='3 3'" : "");
        fprintf(f, "<text x='%d' y='%.1f' text-anchor='end' font-size='12'>%.0f%%</text>\n", RIGHT_X - 6,
                py + 4, p);
        if (p == 100)
            fprintf(f, "<text x='%d' y='%.1f' text-anchor='end' font-size='11' fill='#666'>roofline</text>\n",
                    RIGHT_X + PANEL_W - 4, p == pct_axis.hi ? py + 13 : py - 4);
    }
    for (int r = 0; r < rep->num_runs; r++) {
        const char *color = colors[r % (int)(sizeof colors / sizeof colors[0])];
        for (int fused = 1; fused >= !rep->runs[r].unfused; fused--) {
            draw_series(f, &rep->runs[r], &xl, &time_axis, 0, fused, color);
            draw_series(f, &rep->runs[r], &xr, &pct_axis, 1, fused, color);
        }
    }

    /* Legend: line styles, then one swatch per run. */
    const double ly = bottom + 62;
    fprintf(f, "<line x1='%d' y1='%.1f' x2='%d' y2='%.1f' stroke='#333' stroke-width='2.2'/>"
               "<text x='%d' y='%.1f' font-size='13'>fused: rp_rope_pool_fused</text>\n",
            LEFT_X, ly, LEFT_X + 30, ly, LEFT_X + 38, ly + 4);
    /* The dashed series is what --baseline chose (--no-unfused: none), as the table's header says. */
    int unfused = 0, seed = 0;
    for (int r = 0; r < rep->num_runs; r++) {
        unfused |= rep->runs[r].unfused && !rep->runs[r].baseline_seed;
        seed |= rep->runs[r].baseline_seed;
    }
    if (unfused || seed)
        fprintf(f, "<line x1='%d' y1='%.1f' x2='%d' y2='%.1f' stroke='#333' stroke-width='1.6' "
                   "stroke-dasharray='6 4'/><text x='%d' y='%.1f' font-size='13'>%s</text>\n",
                LEFT_X + 260, ly, LEFT_X + 290, ly, LEFT_X + 298, ly + 4,
                seed ? "seed call: NeoX, whole head, rope_base's table, s = 1 (same buffers)"
                     : "unfused baseline: rotate, then scatter (same kernels, two passes)");
    for (int r = 0; r < rep->num_runs; r++) {
        char label[96];
        const double x = LEFT_X + 300.0 * (r % 3), y = ly + 22.0 * (1 + r / 3);
        run_label(&rep->runs[r], label, sizeof label);
        fprintf(f, "<rect x='%.1f' y='%.1f' width='24' height='10' fill='%s'/><text x='%.1f' y='%.1f' "
                   "font-size='13'>", x, y - 5, colors[r % (int)(sizeof colors / sizeof colors[0])],
                x + 32, y + 4);
        escape(f, label);
        fputs("</text>\n", f);
    }
    fputs("</svg>\n", f);
    if (fclose(f) != 0) {
        snprintf(msg, msg_size, "--svg: error writing '%s'", path);
        return -1;
    }
    return 0;
}
