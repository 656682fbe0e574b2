/*
 * tune_cuda.c — ropepool-tune-cuda: for each T, the library's plan and variants of it (and the
 * floor kernels) are each captured as a CUDA graph of many calls; the graphs are replayed in
 * interleaved rounds and the median time per call is printed, with the ratio to the plan.
 *
 *   ropepool-tune-cuda [--dtype bf16] [--shape 32/8/128 | --preset NAME] [--style neox|gptj] [--rotary-dim R]
 *                      [--pool 1048576] [--max-pos 131072] [--sets N] [--contiguous-slots] [--qk-norm]
 *                      [--kv-dtype fp8_e4m3|fp8_e5m2]
 *                      [--rounds 25] [--host] -T 1,64
 *                      --variants 'plan;api;floor-empty-pdl;gb=2;gb=8,pf=2'
 *
 * A variant is a name (plan, api, floor-empty, floor-empty-pdl, floor-chain, floor-copy) or
 * overrides of the plan: gb (groups per block), hy (heads per pass), pf (items per thread: 1, 2,
 * 4), y (tokens per block), grid (most blocks), pdl (0/1), nt (QK-norm decode's build: 512 or
 * 768 threads, cuda_backend.h). --qk-norm gives --shape q and k weights
 * (QK-norm's kernels); its variants must keep a head's lanes in whole warps. --preset lays the
 * call out as ropepool-bench does for that preset (its RoPE variant, mRoPE positions, QK-norm,
 * MLA's q and latent cache row); --style and --rotary-dim override its (or --shape's NeoX over the
 * whole head) pair style and rotated dims, as ropepool-bench's do. Results are not
 * verified here: what wins is made the plan and verified by the tests and ropepool-bench.
 *
 * --host instead times the host side of an eager call (no graph), stage by stage: the public
 * call, then validation, the plan, the launch of the planned kernel, an empty launch with and
 * without programmatic dependent launch, and cudaGetDevice, each in chunks of 200 calls timed
 * over their calls alone (the stream synchronised between chunks, outside the timing); then the
 * public call back to back, synchronised once (an eager loop's pace); ns per call, the median of
 * --rounds samples.
 */
#include "tune.h"

#include "../bench.h"
#include "context.h"
#include "cuda/cuda_backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { MAX_VARIANTS = 24, MAX_T = 16 };

typedef struct variant {
    char spec[64];
    int floor;          /* -1: a plan; else TUNE_FLOOR_* */
    int api;            /* the public call */
    rp_cuda_plan plan;
    void *exec;
    int64_t calls;
    double samples[256];
} variant;

typedef struct sequence {
    const rp_cuda_state *st;
    rp_context *ctx;
    rp_problem *probs;
    rp_rope_pool_args *args;
    int64_t sets;
    const variant *v;
    void *copy_src, *copy_dst;
    size_t copy_vectors;
} sequence;

static int enqueue(void *arg, int64_t i, void *stream)
{
    const sequence *s = arg;
    const int64_t set = i % s->sets;
    if (s->v->floor >= 0)
        return tune_launch_floor(s->v->floor, stream, s->copy_src, s->copy_dst, s->copy_vectors);
    char msg[256];
    if (s->v->api)
        return rp_rope_pool_fused(s->ctx, &s->args[set], msg, sizeof msg) == RP_OK ? 0 : -1;
    rp_err err = {msg, sizeof msg};
    if (rp_cuda_launch(s->st, &s->probs[set], RP_PARTS_ALL, &s->v->plan, (cudaStream_t)stream, &err) != RP_OK) {
        fprintf(stderr, "launch: %s\n", msg);
        return -1;
    }
    return 0;
}

/* Applies "k=v,k=v" to the plan of problem p; 0, or -1 when the result cannot launch. */
static int apply(variant *v, const rp_problem *p, const rp_cuda_plan *base)
{
    v->plan = *base;
    rp_cuda_plan *pl = &v->plan;
    long long grid_cap = 0;
    char buf[64];
    snprintf(buf, sizeof buf, "%s", v->spec);
    for (char *kv = strtok(buf, ","); kv; kv = strtok(NULL, ",")) {
        char key[16];
        long long val;
        if (sscanf(kv, "%15[a-z]=%lld", key, &val) != 2)
            return -1;
        if (!strcmp(key, "gb")) pl->groups_per_block = (int)val;
        else if (!strcmp(key, "hy")) pl->heads_per_pass = (int)val;
        else if (!strcmp(key, "pf")) pl->items_per_thread = (int)val;
        else if (!strcmp(key, "y")) pl->tokens_per_block = (int)val;
        else if (!strcmp(key, "grid")) grid_cap = val;
        else if (!strcmp(key, "pdl")) pl->overlap_launch = (int)val;
        else if (!strcmp(key, "nt")) pl->norm_decode_threads = (int)val;
        else return -1;
    }
    if (!pl->vectorized)
        return 0;
    if (rp_cuda_plan_complete(p, RP_PARTS_ALL, pl))
        return -1;
    if (grid_cap > 0 && grid_cap < pl->grid)
        pl->grid = (unsigned)grid_cap;
    return 0;
}

/* --host: the host side of an eager call at T, stage by stage (ns per call). Each sample is chunks
 * of HOST_CHUNK calls, fewer than the launch queue holds, each timed over its calls and then
 * synchronised outside the timing: the host's own cost, not the GPU's pace. The last stage is the
 * public call back to back, synchronised once at the end: the pace of an eager loop. */
enum { HOST_API, HOST_VALIDATE, HOST_PLAN, HOST_LAUNCH, HOST_EMPTY, HOST_EMPTY_PDL, HOST_GET_DEVICE, HOST_BACK_TO_BACK,
       HOST_STAGES, HOST_CHUNK = 200, HOST_CHUNKS = 10 };
static const char *const host_stage_names[HOST_STAGES] = {
    "public call", "rp_validate", "rp_cuda_make_plan", "launch (planned kernel)", "empty launch",
    "empty launch, pdl", "cudaGetDevice", "public call, back to back"};

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return 1e9 * (double)ts.tv_sec + (double)ts.tv_nsec;
}

static int host_stage(int stage, const sequence *s, cudaStream_t stream, rp_cuda_plan *plan)
{
    char msg[256];
    rp_err err = {msg, sizeof msg};
    rp_problem p;
    int device;
    switch (stage) {
    case HOST_API:
    case HOST_BACK_TO_BACK: return rp_rope_pool_fused(s->ctx, &s->args[0], msg, sizeof msg) == RP_OK ? 0 : -1;
    case HOST_VALIDATE: return rp_validate(&s->args[0], &p, &err) == RP_OK ? 0 : -1;
    case HOST_PLAN: *plan = rp_cuda_make_plan(s->st, &s->probs[0], RP_PARTS_ALL); return 0;
    case HOST_LAUNCH: return rp_cuda_launch(s->st, &s->probs[0], RP_PARTS_ALL, plan, stream, &err) == RP_OK ? 0 : -1;
    case HOST_EMPTY: return tune_launch_floor(TUNE_FLOOR_EMPTY, stream, NULL, NULL, 0);
    case HOST_EMPTY_PDL: return tune_launch_floor(TUNE_FLOOR_EMPTY_PDL, stream, NULL, NULL, 0);
    default: return cudaGetDevice(&device) == cudaSuccess ? 0 : -1;
    }
}

static int host_breakdown(const sequence *s, cudaStream_t stream, int64_t T, int rounds)
{
    rp_cuda_plan plan = rp_cuda_make_plan(s->st, &s->probs[0], RP_PARTS_ALL);
    double samples[HOST_STAGES][256];
    for (int r = -1; r < rounds; r++) /* round -1 warms up */
        for (int stage = 0; stage < HOST_STAGES; stage++) {
            const int chunk = stage == HOST_BACK_TO_BACK ? HOST_CHUNK * HOST_CHUNKS : HOST_CHUNK;
            double ns = 0;
            for (int c = 0; c < HOST_CHUNK * HOST_CHUNKS / chunk; c++) {
                const double start = now_ns();
                for (int i = 0; i < chunk; i++)
                    if (host_stage(stage, s, stream, &plan)) {
                        fprintf(stderr, "--host: %s failed\n", host_stage_names[stage]);
                        return -1;
                    }
                if (stage == HOST_BACK_TO_BACK && cudaStreamSynchronize(stream) != cudaSuccess)
                    return -1;
                ns += now_ns() - start;
                if (cudaStreamSynchronize(stream) != cudaSuccess)
                    return -1;
            }
            if (r >= 0)
                samples[stage][r] = ns / (HOST_CHUNK * HOST_CHUNKS);
        }
    for (int stage = 0; stage < HOST_STAGES; stage++) {
        bench_timing timing;
        bench_summarize(samples[stage], rounds, HOST_CHUNK * HOST_CHUNKS, &timing);
        printf("%7lld  host  %-26s %9.0f ns/call\n", (long long)T, host_stage_names[stage], timing.median_s); /* samples in ns */
    }
    return 0;
}

static int parse_list(const char *s, int64_t *out, int most)
{
    int n = 0;
    for (const char *c = s; *c && n < most;) {
        out[n++] = strtoll(c, (char **)&c, 10);
        if (*c == ',')
            c++;
    }
    return n;
}

int main(int argc, char **argv)
{
    rp_dtype dtype = RP_BF16;
    long long hq = 32, hk = 8, d = 128, pool = 1 << 20, max_pos = 131072, sets_opt = 1;
    int rounds = 25, contiguous = 0, qk_norm = 0, nT = 0, host = 0, style = -1;
    rp_dtype kv_dtype = RP_DTYPE_UNSET; /* fp8 pools: uint8, unit scales */
    long long rotary_dim = -1;
    int64_t Ts[MAX_T];
    const bench_shape *preset = NULL;
    const char *variants = "plan;api;floor-empty;floor-empty-pdl;floor-chain;floor-copy";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *next = i + 1 < argc ? argv[i + 1] : "";
        if (!strcmp(a, "--dtype")) { dtype = !strcmp(next, "f32") ? RP_F32 : !strcmp(next, "f16") ? RP_F16 : RP_BF16; i++; }
        else if (!strcmp(a, "--shape")) { sscanf(next, "%lld/%lld/%lld", &hq, &hk, &d); i++; }
        else if (!strcmp(a, "--preset")) {
            if ((preset = bench_find_preset(next)) == NULL) { fprintf(stderr, "ropepool-tune-cuda: unknown preset %s\n", next); return 2; }
            i++;
        }
        else if (!strcmp(a, "--style") && (!strcmp(next, "neox") || !strcmp(next, "gptj"))) {
            style = !strcmp(next, "gptj") ? RP_ROPE_GPTJ : RP_ROPE_NEOX;
            i++;
        }
        else if (!strcmp(a, "--rotary-dim")) { rotary_dim = atoll(next); i++; }
        else if (!strcmp(a, "--pool")) { pool = atoll(next); i++; }
        else if (!strcmp(a, "--max-pos")) { max_pos = atoll(next); i++; }
        else if (!strcmp(a, "--sets")) { sets_opt = atoll(next); i++; }
        else if (!strcmp(a, "--rounds")) { rounds = atoi(next); i++; }
        else if (!strcmp(a, "--contiguous-slots")) contiguous = 1;
        else if (!strcmp(a, "--qk-norm")) qk_norm = 1;
        else if (!strcmp(a, "--kv-dtype") && (!strcmp(next, "fp8_e4m3") || !strcmp(next, "fp8_e5m2"))) {
            kv_dtype = !strcmp(next, "fp8_e4m3") ? RP_F8_E4M3 : RP_F8_E5M2;
            i++;
        }
        else if (!strcmp(a, "--host")) host = 1;
        else if (!strcmp(a, "-T")) { nT = parse_list(next, Ts, MAX_T); i++; }
        else if (!strcmp(a, "--variants")) { variants = next; i++; }
        else { fprintf(stderr, "ropepool-tune-cuda: unknown argument %s\n", a); return 2; }
    }
    if (nT == 0) { Ts[0] = 1; nT = 1; }
    if (rounds > 256) rounds = 256;
    int64_t arena = 0;
    for (int t = 0; t < nT; t++)
        arena = Ts[t] * sets_opt > arena ? Ts[t] * sets_opt : arena;
    if (arena > pool) { fprintf(stderr, "T x sets exceeds the pool\n"); return 2; }

    bench_layout L = {hq, hk, d, pool, 500000.0, dtype, RP_I64, 0, 0, NULL, 0.0, RP_KV_FLAT, 1, kv_dtype, {0, 0, 0}, 0, 1,
                      NULL, NULL, 0, 0, 0};
    /* The call's variant as ropepool-bench gives it: the preset's, or --shape's (NeoX over the
     * whole head, rope_base's table, QK-norm weights with --qk-norm) */
    static bench_options po;
    if (preset) {
        po.shape = *preset;
    } else {
        po.shape.hq = hq, po.shape.hk = hk, po.shape.d = d, po.shape.rope_base = L.rope_base;
        po.shape.qk_norm = qk_norm;
    }
    if (style >= 0)
        po.shape.style = style;
    if (rotary_dim >= 0)
        po.shape.rotary_dim = rotary_dim;
    const int table = bench_rope_table(&po.shape, po.inv_freq, &po.attention_scaling);
    if (table < 0)
        return 1;
    po.has_table = table;
    L.hq = hq = po.shape.hq;
    L.hk = hk = po.shape.hk;
    L.d = d = po.shape.d;
    L.rope_base = po.shape.rope_base;
    bench_layout_set_variant(&L, &po); /* QK-norm weights on the host: copied below */
    qk_norm = L.norm_weights != NULL;
    bench_buffers b;
    memset(&b, 0, sizeof b);
    const size_t es = rp_dtype_size(dtype);
    /* ropepool-bench's sizes (bench_cuda.cu); positions hold every row of mRoPE's [T, 3], slots
     * as many entries (only the first arena are used) */
    const int64_t per_token = L.positions_per_token > 1 ? L.positions_per_token : 1;
    void **bufs[] = {&b.q, &b.k, &b.v, &b.q_rot, &b.k_rot, &b.k_pool, &b.v_pool, &b.positions, &b.slots};
    const size_t sizes[] = {bench_q_bytes(&L, arena), bench_rows_bytes(&L, arena, hk), bench_v_bytes(&L, arena),
                            bench_rows_bytes(&L, arena, hq), bench_rows_bytes(&L, arena, hk),
                            bench_pool_alloc_bytes(&L, 0), bench_pool_alloc_bytes(&L, 1),
                            (size_t)(arena * per_token) * 8, (size_t)(arena * per_token) * 8};
    for (int i = 0; i < 9; i++)
        if (sizes[i] && cudaMalloc(bufs[i], sizes[i]) != cudaSuccess) { fprintf(stderr, "cudaMalloc %zu\n", sizes[i]); return 1; }
    for (int i = 0; i < 3; i++) /* q, k, v; the outputs and pools are written by the calls */
        if (tune_fill(*bufs[i], sizes[i] / es, dtype, NULL, NULL, 0, 0, 0, 0, 77 + i)) { fprintf(stderr, "fill\n"); return 1; }
    if (tune_fill(NULL, 0, dtype, b.positions, b.slots, arena * per_token, max_pos, pool, contiguous, 0)) return 1;
    if (qk_norm) { /* the calls read q's and k's weights in device memory, as ropepool-bench's */
        void *w;
        if (cudaMalloc(&w, 2 * (size_t)d * es) != cudaSuccess ||
            cudaMemcpy(w, L.norm_weights, 2 * (size_t)d * es, cudaMemcpyHostToDevice) != cudaSuccess)
            return 1;
        L.norm_weights_dev = w;
    }
    void *copy_src, *copy_dst;
    if (cudaMalloc(&copy_src, 256u << 20) != cudaSuccess || cudaMalloc(&copy_dst, 256u << 20) != cudaSuccess) return 1;

    rp_context_options o = {0};
    o.flags = RP_CONTEXT_CUDA;
    rp_context *ctx;
    char msg[256];
    if (rp_context_create(&o, &ctx, msg, sizeof msg) != RP_OK) { fprintf(stderr, "%s\n", msg); return 1; }
    cudaStream_t stream;
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    double freq[2048]; /* rope_base's table for calls without their own (the public call's cache) */

    printf("dtype %s shape %lld/%lld/%lld %s R=%lld%s%s%s%s pool %lld sets %lld slots %s, median of %d rounds\n",
           rp_dtype_name(dtype), hq, hk, d, po.shape.style == RP_ROPE_GPTJ ? "gptj" : "neox",
           (long long)(po.shape.rotary_dim ? po.shape.rotary_dim : d), qk_norm ? " qk-norm" : "",
           kv_dtype ? (kv_dtype == RP_F8_E4M3 ? " pools fp8_e4m3" : " pools fp8_e5m2") : "",
           preset ? " preset " : "", preset ? preset->name : "", pool, sets_opt, contiguous ? "contiguous" : "random",
           rounds);
    printf("%7s  %-28s %9s %7s  %s\n", "T", "variant", "us/call", "vs plan", "plan (gb x hy x y, chunks x head chunks, grid, pf, pdl, nt)");
    for (int t = 0; t < nT; t++) {
        const int64_t T = Ts[t];
        rp_device dev = {RP_DEVICE_CUDA, 0};
        rp_rope_pool_args *args = bench_set_args(&L, &b, T, sets_opt, dev, stream);
        rp_problem *probs = calloc((size_t)sets_opt, sizeof *probs);
        for (int64_t s = 0; s < sets_opt; s++) {
            rp_err err = {msg, sizeof msg};
            if (rp_validate(&args[s], &probs[s], &err) != RP_OK) { fprintf(stderr, "%s\n", msg); return 1; }
            if (probs[s].inv_freq == NULL) {
                rp_compute_inv_freq(probs[s].rope_base, probs[s].rotary_dim, freq);
                probs[s].inv_freq = freq;
            }
        }
        if (host) {
            sequence hs = {ctx->cuda_state, ctx, probs, args, sets_opt, NULL, NULL, NULL, 0};
            if (host_breakdown(&hs, stream, T, rounds))
                return 1;
            free(probs);
            free(args);
            continue;
        }
        const rp_cuda_plan base = rp_cuda_make_plan(ctx->cuda_state, &probs[0], RP_PARTS_ALL);
        variant *vs = calloc(MAX_VARIANTS, sizeof *vs);
        int nv = 0;
        char list[1024];
        snprintf(list, sizeof list, "%s", variants);
        for (char *save = NULL, *spec = strtok_r(list, ";", &save); spec && nv < MAX_VARIANTS; spec = strtok_r(NULL, ";", &save)) {
            variant *v = &vs[nv];
            snprintf(v->spec, sizeof v->spec, "%s", spec);
            v->floor = !strcmp(spec, "floor-empty") ? TUNE_FLOOR_EMPTY : !strcmp(spec, "floor-empty-pdl") ? TUNE_FLOOR_EMPTY_PDL
                     : !strcmp(spec, "floor-chain") ? TUNE_FLOOR_CHAIN_PDL : !strcmp(spec, "floor-copy") ? TUNE_FLOOR_COPY_PDL : -1;
            v->api = !strcmp(spec, "api");
            if (v->floor < 0 && !v->api && strcmp(spec, "plan") && apply(v, &probs[0], &base)) {
                printf("%7lld  %-28s  (cannot launch)\n", (long long)T, spec);
                continue;
            }
            if (!strcmp(spec, "plan") || v->api)
                v->plan = base;
            nv++;
        }
        /* Graph sizes: about 2 ms a replay, measured on the plan's own time. */
        sequence seq = {ctx->cuda_state, ctx, probs, args, sets_opt, NULL, copy_src, copy_dst,
                        (size_t)(bench_op_bytes(&L, T) / 2 / 16)};
        for (int i = 0; i < nv; i++) {
            seq.v = &vs[i];
            int64_t calls = 50 * sets_opt;
            double sec = 0;
            for (int attempt = 0; attempt < 2; attempt++) {
                if (tune_make_graph(stream, enqueue, &seq, calls, &vs[i].exec) ||
                    tune_replay(stream, vs[i].exec, &sec) || tune_replay(stream, vs[i].exec, &sec)) {
                    fprintf(stderr, "T %lld variant %s: capture or replay failed: %s\n", (long long)T, vs[i].spec,
                            cudaGetErrorString(cudaGetLastError()));
                    return 1;
                }
                vs[i].calls = calls;
                if (attempt == 0) {
                    int64_t want = (int64_t)(2e-3 / (sec / (double)calls));
                    want = want < 20 ? 20 : want > 4000 ? 4000 : want;
                    want = (want + sets_opt - 1) / sets_opt * sets_opt;
                    tune_destroy_graph(vs[i].exec);
                    calls = want;
                }
            }
        }
        for (int r = 0; r < rounds; r++)
            for (int i = 0; i < nv; i++) {
                double sec;
                if (tune_replay(stream, vs[i].exec, &sec)) { fprintf(stderr, "replay failed\n"); return 1; }
                vs[i].samples[r] = sec / (double)vs[i].calls;
            }
        double plan_us = 0;
        for (int i = 0; i < nv; i++) {
            bench_timing timing;
            bench_summarize(vs[i].samples, rounds, vs[i].calls, &timing);
            const double us = 1e6 * timing.median_s;
            if (!strcmp(vs[i].spec, "plan"))
                plan_us = us;
            const rp_cuda_plan *pl = &vs[i].plan;
            char desc[128] = "";
            if (vs[i].floor < 0)
                snprintf(desc, sizeof desc, "%s %d x %d x %d, %d x %d, %u, %d, %d, %d",
                         pl->vectorized ? "vec" : "strided", pl->groups_per_block, pl->heads_per_pass,
                         pl->tokens_per_block, pl->chunks, pl->head_chunks, pl->grid,
                         pl->items_per_thread, pl->overlap_launch, pl->norm_decode_threads);
            printf("%7lld  %-28s %9.3f %7.3f  %s\n", (long long)T, vs[i].spec, us, plan_us > 0 ? us / plan_us : 0.0, desc);
            tune_destroy_graph(vs[i].exec);
        }
        char why[256];
        if (rp_context_check(ctx, stream, why, sizeof why) != RP_OK) { fprintf(stderr, "check: %s\n", why); return 1; }
        fflush(stdout);
        free(vs);
        free(probs);
        free(args);
    }
    rp_context_destroy(ctx);
    return 0;
}
