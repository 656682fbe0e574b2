/*
 * bench_cuda.cu — the GPU side: device buffers, the roofline copy kernel, timing inside CUDA
 * graphs, and reading results back for verification on the host.
 *
 * - Memory: cudaMalloc only (never managed memory). Inputs are drawn on the host from the seed
 *   (inputs.c, the same values as the CPU run) and copied over once.
 * - Roofline: a plain grid-stride copy kernel with 16-byte loads and stores over two buffers of at
 *   least 8 x L2 (and 512 MiB); bandwidth = read + write bytes over the median time of a copy.
 * - Timing: N calls (fused: one rp_rope_pool_fused each; unfused: rp_rope_pool_run with ROTATE,
 *   then SCATTER) are captured in one CUDA graph; N is a multiple of the input sets and large
 *   enough that a replay lasts >= 2 ms. Each replay is timed with CUDA events; per call = replay
 *   time / N; the median over replays is reported. Fused and unfused replays alternate.
 * - Input sets: by default (--sets cold) the calls rotate among enough input sets, each with its
 *   own q/k/v/outputs and distinct pool slots, that one pass over them moves at least twice the
 *   L2 size, so a call does not find its data in L2 left there by an earlier call. --sets 1
 *   measures the cache-resident case.
 * - Pools: flat, or paged (NHD / HND, one allocation holding K and V), in the inputs' dtype or fp8,
 *   laid out as the CPU bench lays them out (bench_pool_tensor).
 * - Verification: q_rot and k_rot are copied back, the pool head rows the slots name are gathered
 *   on the device (their offsets computed on the host by bench_pool_row, so every layout is
 *   gathered the same way) into a compact flat pool that is copied back, and rp_ref_verify checks
 *   them on the host.
 * Every CUDA error ends the run with a message naming the call; nothing is skipped silently.
 */
#include "bench.h"

#include <cuda_runtime.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CUDA_TRY(call)                                                                            \
    do {                                                                                          \
        const cudaError_t e_ = (call);                                                            \
        if (e_ != cudaSuccess) {                                                                  \
            snprintf(msg, msg_size, "%s failed: %s", #call, cudaGetErrorString(e_));              \
            return -1;                                                                            \
        }                                                                                         \
    } while (0)

namespace {

const double kReplaySeconds = 0.002; /* a timed graph replay lasts at least this long */
const int64_t kMaxCallsPerGraph = 20000;
const int kMaxReplays = 200;
const int kRooflineReps = 21;
const int kCopiesPerRooflineSample = 10;
const int kThreads = 256;

/* dst[i] = src[i] for i < n, 16 bytes at a time. */
__global__ void copy_16_bytes(const uint4 *__restrict__ src, // [n]
                              uint4 *__restrict__ dst,       // [n]
                              size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = src[i];
}

/* rows[r] = the head row at byte offset offsets[r] of pool, for r < n_rows, in 2-byte units (a
 * head row is D elements of >= 1 byte with D even, so a whole number of units). */
__global__ void gather_head_rows(const char *__restrict__ pool,
                                 const int64_t *__restrict__ offsets, // [n_rows] bytes
                                 uint16_t *__restrict__ rows,         // [n_rows, row_units]
                                 int64_t n_rows, int64_t row_units)
{
    const int64_t n = n_rows * row_units;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / row_units, u = i % row_units;
        rows[i] = ((const uint16_t *)(pool + offsets[r]))[u];
    }
}

struct cuda_bench {
    bench_layout L;
    int64_t arena;            /* tokens the buffers hold */
    int blocks;               /* grid size of the helper kernels */
    bench_buffers dev;        /* device: inputs, outputs, pools */
    void *dev_k_rows, *dev_v_rows; /* device [arena, Hk, D] in the pool format: pool rows gathered
                                      for verification */
    int64_t *dev_offsets;          /* device [arena, Hk]: their byte offsets in the allocation */
    int64_t *host_offsets;
    bench_inputs in;          /* host inputs */
    bench_buffers host;       /* host view for verification: inputs, outputs read back, gathered
                                 rows as a compact pool, identity slots */
    rp_context *ctx;
    cudaStream_t stream;
    cudaEvent_t start, stop;
    rp_rope_pool_args *args;  /* one per input set of the current T */
};

/* Elapsed seconds of what `enqueue` puts on the stream, between two events. */
template <typename F>
int time_on_stream(cuda_bench *c, F enqueue, double *seconds, char *msg, size_t msg_size)
{
    CUDA_TRY(cudaEventRecord(c->start, c->stream));
    if (enqueue())
        return -1;
    CUDA_TRY(cudaEventRecord(c->stop, c->stream));
    CUDA_TRY(cudaEventSynchronize(c->stop));
    float ms = 0;
    CUDA_TRY(cudaEventElapsedTime(&ms, c->start, c->stop));
    *seconds = 1e-3 * ms;
    return 0;
}

int roofline(cuda_bench *c, const cudaDeviceProp &prop, double *bytes_per_s, char *what,
             size_t what_size, char *msg, size_t msg_size)
{
    const size_t bytes = (size_t)fmax(512.0 * (1 << 20), 8.0 * prop.l2CacheSize) / 16 * 16;
    void *src = nullptr, *dst = nullptr;
    cudaError_t e = cudaMalloc(&src, bytes);
    if (e == cudaSuccess)
        e = cudaMalloc(&dst, bytes);
    if (e == cudaSuccess)
        e = cudaMemsetAsync(src, 1, bytes, c->stream);
    if (e == cudaSuccess)
        e = cudaMemsetAsync(dst, 0, bytes, c->stream);
    double secs[kRooflineReps];
    int rc = -1;
    auto copies = [&]() -> int {
        for (int i = 0; i < kCopiesPerRooflineSample; i++)
            copy_16_bytes<<<c->blocks, kThreads, 0, c->stream>>>((const uint4 *)src, (uint4 *)dst, bytes / 16);
        const cudaError_t launch = cudaGetLastError();
        if (launch != cudaSuccess)
            snprintf(msg, msg_size, "roofline copy kernel: %s", cudaGetErrorString(launch));
        return launch != cudaSuccess;
    };
    if (e != cudaSuccess) {
        snprintf(msg, msg_size, "roofline buffers (2 x %zu MiB): %s", bytes >> 20, cudaGetErrorString(e));
    } else if (copies() == 0) { /* warm-up */
        int r = 0;
        while (r < kRooflineReps && time_on_stream(c, copies, &secs[r], msg, msg_size) == 0)
            secs[r++] /= kCopiesPerRooflineSample;
        if (r == kRooflineReps) {
            bench_timing t;
            bench_summarize(secs, kRooflineReps, kCopiesPerRooflineSample, &t);
            *bytes_per_s = 2.0 * (double)bytes / t.median_s;
            snprintf(what, what_size, "device-to-device copy kernel, 16-byte loads and stores, "
                     "2 x %zu MiB buffers, read + write bytes", bytes >> 20);
            rc = 0;
        }
    }
    cudaFree(src);
    cudaFree(dst);
    return rc;
}

int launch_calls(cuda_bench *c, int fused, int64_t sets, int64_t n, char *msg, size_t msg_size)
{
    int64_t next = 0;
    return bench_calls(c->ctx, fused, c->args, sets, n, &next, msg, msg_size);
}

/* After calls: the kernels ran without error and reported no bad slot. */
int check_context(cuda_bench *c, char *msg, size_t msg_size)
{
    char why[256];
    CUDA_TRY(cudaStreamSynchronize(c->stream));
    const rp_status st = rp_context_check(c->ctx, c->stream, why, sizeof why);
    if (st != RP_OK) {
        snprintf(msg, msg_size, "rp_context_check after the calls: %s: %s", rp_status_name(st), why);
        return -1;
    }
    return 0;
}

int prepare_sets(cuda_bench *c, int64_t T, int64_t sets, char *msg, size_t msg_size)
{
    const rp_device device = {RP_DEVICE_CUDA, 0};
    free(c->args);
    if (!(c->args = bench_set_args(&c->L, &c->dev, T, sets, device, c->stream))) {
        snprintf(msg, msg_size, "out of memory for %lld call arguments", (long long)sets);
        return -1;
    }
    return 0;
}

int cuda_poison(void *self, int64_t tokens, char *msg, size_t msg_size)
{
    cuda_bench *c = (cuda_bench *)self;
    const bench_layout *L = &c->L;
    CUDA_TRY(cudaMemsetAsync(c->dev.q_rot, 0xff, bench_rows_bytes(L, tokens, L->hq), c->stream));
    CUDA_TRY(cudaMemsetAsync(c->dev.k_rot, 0xff, bench_rows_bytes(L, tokens, L->hk), c->stream));
    CUDA_TRY(cudaMemsetAsync(c->dev.k_pool, 0xff, bench_pool_alloc_bytes(L, 0), c->stream));
    if (c->dev.v_pool)
        CUDA_TRY(cudaMemsetAsync(c->dev.v_pool, 0xff, bench_pool_alloc_bytes(L, 1), c->stream));
    return 0;
}

int cuda_run_once(void *self, int64_t T, int64_t sets, int fused, char *msg, size_t msg_size)
{
    cuda_bench *c = (cuda_bench *)self;
    if (prepare_sets(c, T, sets, msg, msg_size) || launch_calls(c, fused, sets, sets, msg, msg_size))
        return -1;
    return check_context(c, msg, msg_size);
}

int cuda_verify(void *self, int64_t tokens, int fused, bench_check *chk, char *msg, size_t msg_size)
{
    cuda_bench *c = (cuda_bench *)self;
    const bench_layout *L = &c->L;
    const size_t q_bytes = bench_rows_bytes(L, tokens, L->hq), kv_bytes = bench_rows_bytes(L, tokens, L->hk);
    bench_layout compact = *L; /* the gathered rows: a flat pool of `tokens` rows, slot t = t */
    compact.pool_size = tokens;
    compact.kv_layout = RP_KV_FLAT;
    compact.block_size = 1;
    compact.latent = 0;
    void *rows[2] = {c->dev_k_rows, c->dev_v_rows}, *host_rows[2] = {c->host.k_pool, c->host.v_pool};
    for (int which = 0; which < 2; which++) {
        const size_t head_bytes = bench_pool_bytes(&compact, which) / (size_t)(tokens * L->hk);
        const rp_tensor pool = bench_pool_tensor(L, &c->dev, which);
        const char *base = (const char *)c->dev.k_pool; /* paged or latent: V lies in K's allocation */
        if (which && c->dev.v_pool)
            base = (const char *)c->dev.v_pool;
        for (int64_t t = 0; t < tokens; t++) {
            const int64_t slot = L->index_dtype == RP_I64 ? ((const int64_t *)c->in.slots)[t]
                                                           : ((const int32_t *)c->in.slots)[t];
            for (int64_t h = 0; h < L->hk; h++)
                c->host_offsets[t * L->hk + h] = bench_pool_row(L, &pool, slot, h) - base;
        }
        const size_t offsets_bytes = (size_t)(tokens * L->hk) * sizeof(int64_t);
        CUDA_TRY(cudaMemcpyAsync(c->dev_offsets, c->host_offsets, offsets_bytes, cudaMemcpyHostToDevice, c->stream));
        gather_head_rows<<<c->blocks, kThreads, 0, c->stream>>>(base, c->dev_offsets, (uint16_t *)rows[which],
                                                                tokens * L->hk, (int64_t)(head_bytes / 2));
        CUDA_TRY(cudaGetLastError());
        CUDA_TRY(cudaMemcpyAsync(host_rows[which], rows[which], bench_pool_bytes(&compact, which),
                                 cudaMemcpyDeviceToHost, c->stream));
        CUDA_TRY(cudaStreamSynchronize(c->stream)); /* host_offsets is reused for V */
    }
    CUDA_TRY(cudaMemcpyAsync(c->host.q_rot, c->dev.q_rot, q_bytes, cudaMemcpyDeviceToHost, c->stream));
    CUDA_TRY(cudaMemcpyAsync(c->host.k_rot, c->dev.k_rot, kv_bytes, cudaMemcpyDeviceToHost, c->stream));
    CUDA_TRY(cudaStreamSynchronize(c->stream));
    return bench_verify(&compact, &c->host, tokens, fused, chk, msg, msg_size);
}

int capture(cuda_bench *c, int fused, int64_t sets, int64_t calls, cudaGraphExec_t *exec, char *msg,
            size_t msg_size)
{
    cudaGraph_t graph = nullptr;
    CUDA_TRY(cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeGlobal));
    const int failed = launch_calls(c, fused, sets, calls, msg, msg_size);
    const cudaError_t ended = cudaStreamEndCapture(c->stream, &graph);
    if (failed) {
        if (graph)
            cudaGraphDestroy(graph);
        return -1;
    }
    CUDA_TRY(ended);
    const cudaError_t made = cudaGraphInstantiate(exec, graph, 0);
    cudaGraphDestroy(graph);
    CUDA_TRY(made);
    return 0;
}

int replay(cuda_bench *c, cudaGraphExec_t exec, double *seconds, char *msg, size_t msg_size)
{
    auto launch = [&]() -> int {
        const cudaError_t e = cudaGraphLaunch(exec, c->stream);
        if (e != cudaSuccess)
            snprintf(msg, msg_size, "cudaGraphLaunch failed: %s", cudaGetErrorString(e));
        return e != cudaSuccess;
    };
    return time_on_stream(c, launch, seconds, msg, msg_size);
}

/* A graph of calls (a multiple of `sets`) whose replay lasts >= kReplaySeconds; its replay time. */
int make_timed_graph(cuda_bench *c, int fused, int64_t sets, cudaGraphExec_t *exec, int64_t *calls,
                     double *replay_s, char *msg, size_t msg_size)
{
    *calls = sets;
    for (;;) {
        if (capture(c, fused, sets, *calls, exec, msg, msg_size))
            return -1;
        if (replay(c, *exec, replay_s, msg, msg_size) || replay(c, *exec, replay_s, msg, msg_size))
            return -1; /* the first replay warms up */
        const int64_t most = kMaxCallsPerGraph / sets * sets;
        if (*replay_s >= kReplaySeconds || *calls >= most)
            return 0;
        const double grow = ceil(kReplaySeconds / fmax(*replay_s, 1e-7) * 1.2);
        *calls = (int64_t)fmin((double)most, (double)*calls * grow);
        cudaGraphExecDestroy(*exec);
        *exec = nullptr;
    }
}

int cuda_time(void *self, int64_t T, int64_t sets, int variants, double seconds, bench_timing out[2],
              char *msg, size_t msg_size)
{
    cuda_bench *c = (cuda_bench *)self;
    if (prepare_sets(c, T, sets, msg, msg_size))
        return -1;
    cudaGraphExec_t exec[2] = {nullptr, nullptr};
    int64_t calls[2] = {1, 1};
    double replay_s = 0, samples = kMaxReplays;
    double *per_call = nullptr;
    int rc = -1, n = 0;
    for (int v = 0; v < variants; v++) {
        if (make_timed_graph(c, v == 0, sets, &exec[v], &calls[v], &replay_s, msg, msg_size))
            goto done;
        samples = fmin(samples, seconds / replay_s);
    }
    n = (int)fmax(5.0, samples);
    if (!(per_call = (double *)malloc(2 * (size_t)n * sizeof *per_call))) {
        snprintf(msg, msg_size, "out of memory for %d samples", n);
        goto done;
    }
    for (int i = 0; i < n; i++)
        for (int v = 0; v < variants; v++) {
            if (replay(c, exec[v], &replay_s, msg, msg_size))
                goto done;
            per_call[v * n + i] = replay_s / (double)calls[v];
        }
    for (int v = 0; v < variants; v++)
        bench_summarize(per_call + v * n, n, calls[v], &out[v]);
    rc = check_context(c, msg, msg_size);
done:
    for (int v = 0; v < 2; v++)
        if (exec[v])
            cudaGraphExecDestroy(exec[v]);
    free(per_call);
    return rc;
}

void release(cuda_bench *c)
{
    void *dev[] = {c->dev.q, c->dev.k, c->dev.v, c->dev.positions, c->dev.slots, c->dev.q_rot,
                   c->dev.k_rot, c->dev.k_pool, c->dev.v_pool, c->dev_k_rows, c->dev_v_rows, c->dev_offsets};
    for (void *p : dev)
        cudaFree(p);
    void *host[] = {c->host.q_rot, c->host.k_rot, c->host.k_pool, c->host.v_pool, c->host.slots, c->host_offsets};
    for (void *p : host)
        free(p);
    bench_inputs_free(&c->in);
    free(c->args);
    rp_context_destroy(c->ctx);
    if (c->start)
        cudaEventDestroy(c->start);
    if (c->stop)
        cudaEventDestroy(c->stop);
    if (c->stream)
        cudaStreamDestroy(c->stream);
}

/* Device and host buffers for c->arena tokens; the inputs copied over, the rest touched. */
int allocate(cuda_bench *c, char *msg, size_t msg_size)
{
    const bench_layout *L = &c->L;
    const size_t q_bytes = bench_rows_bytes(L, c->arena, L->hq), kv_bytes = bench_rows_bytes(L, c->arena, L->hk);
    const size_t q_in_bytes = bench_q_bytes(L, c->arena), v_in_bytes = bench_v_bytes(L, c->arena);
    bench_layout rows_layout = *L; /* the gathered rows of the arena: a flat pool of its tokens */
    rows_layout.pool_size = c->arena;
    rows_layout.kv_layout = RP_KV_FLAT;
    rows_layout.latent = 0;
    const size_t k_rows_bytes = bench_pool_bytes(&rows_layout, 0), v_rows_bytes = bench_pool_bytes(&rows_layout, 1);
    const size_t index_bytes = bench_index_bytes(L, c->arena);
    const size_t positions_bytes = bench_positions_bytes(L, c->arena);
    const size_t offsets_bytes = (size_t)(c->arena * L->hk) * sizeof(int64_t);
    struct { void **ptr; size_t bytes; const void *from; } dev[] = {
        {&c->dev.q, q_in_bytes, c->in.q},        {&c->dev.k, kv_bytes, c->in.k},
        {&c->dev.v, v_in_bytes, c->in.v},        {&c->dev.positions, positions_bytes, c->in.positions},
        {&c->dev.slots, index_bytes, c->in.slots}, {&c->dev.q_rot, q_bytes, nullptr},
        {&c->dev.k_rot, kv_bytes, nullptr},      {&c->dev.k_pool, bench_pool_alloc_bytes(L, 0), nullptr},
        {&c->dev.v_pool, bench_pool_alloc_bytes(L, 1), nullptr}, {&c->dev_k_rows, k_rows_bytes, nullptr},
        {&c->dev_v_rows, v_rows_bytes, nullptr}, {(void **)&c->dev_offsets, offsets_bytes, nullptr}};
    for (auto &d : dev) {
        if (!d.bytes)
            continue; /* paged: no separate V allocation */
        const cudaError_t e = cudaMalloc(d.ptr, d.bytes);
        if (e != cudaSuccess) {
            snprintf(msg, msg_size, "cudaMalloc of %.2f GiB failed: %s (pool %lld slots, %lld tokens)",
                     (double)d.bytes / (1 << 30), cudaGetErrorString(e), (long long)L->pool_size,
                     (long long)c->arena);
            return -1;
        }
        if (d.from)
            CUDA_TRY(cudaMemcpy(*d.ptr, d.from, d.bytes, cudaMemcpyHostToDevice));
        else
            CUDA_TRY(cudaMemset(*d.ptr, 0, d.bytes));
    }
    c->host = bench_buffers{c->in.q, c->in.k, c->in.v, c->in.positions, malloc(index_bytes),
                              malloc(q_bytes), malloc(kv_bytes), malloc(k_rows_bytes), malloc(v_rows_bytes)};
    c->host_offsets = (int64_t *)malloc(offsets_bytes);
    if (!c->host.slots || !c->host.q_rot || !c->host.k_rot || !c->host.k_pool || !c->host.v_pool ||
        !c->host_offsets) {
        snprintf(msg, msg_size, "out of host memory for reading back %lld tokens", (long long)c->arena);
        return -1;
    }
    for (int64_t t = 0; t < c->arena; t++) {
        if (L->index_dtype == RP_I64)
            ((int64_t *)c->host.slots)[t] = t;
        else
            ((int32_t *)c->host.slots)[t] = (int32_t)t;
    }
    return 0;
}

int run_dtype(cuda_bench *c, const bench_options *o, rp_dtype dtype, bench_report *rep, char *msg,
              size_t msg_size)
{
    CUDA_TRY(cudaSetDevice(0));
    cudaDeviceProp prop;
    CUDA_TRY(cudaGetDeviceProperties(&prop, 0));
    CUDA_TRY(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
    CUDA_TRY(cudaEventCreate(&c->start));
    CUDA_TRY(cudaEventCreate(&c->stop));
    c->blocks = prop.multiProcessorCount * 8;
    c->L = bench_layout{o->shape.hq, o->shape.hk, o->shape.d, o->pool_size, o->shape.rope_base, dtype,
                        o->index_dtype, 0, 0, NULL, 0.0, o->kv_layout, o->block_size, o->kv_dtype, {0, 0, 0}, 0, 1, NULL, NULL, 0, 0, 0};
    bench_layout_set_variant(&c->L, o);
    if (c->L.norm_weights) { /* QK-norm weights: the calls read them in device memory */
        const size_t bytes = 2 * (size_t)c->L.d * rp_dtype_size(dtype);
        void *w = NULL;
        CUDA_TRY(cudaMalloc(&w, bytes));
        CUDA_TRY(cudaMemcpy(w, c->L.norm_weights, bytes, cudaMemcpyHostToDevice));
        c->L.norm_weights_dev = w;
    }
    const double l2 = (double)prop.l2CacheSize;
    c->arena = bench_arena_tokens(o, &c->L, l2);
    if (rep->num_runs == BENCH_MAX_RUNS) {
        snprintf(msg, msg_size, "more than %d runs in one invocation", BENCH_MAX_RUNS);
        return -1;
    }
    bench_run *run = &rep->runs[rep->num_runs];
    memset(run, 0, sizeof *run);
    bench_progress("cuda %s: measuring the roofline (copy kernel)", rp_dtype_name(dtype));
    if (roofline(c, prop, &run->roofline_bytes_per_s, run->roofline_what, sizeof run->roofline_what,
                 msg, msg_size))
        return -1;

    rp_context_options opts = {};
    opts.flags = RP_CONTEXT_CUDA;
    opts.cuda_device = 0;
    char why[256];
    if (rp_context_create(&opts, &c->ctx, why, sizeof why) != RP_OK) {
        snprintf(msg, msg_size, "cannot create a CUDA context: %s", why);
        return -1;
    }
    bench_progress("cuda %s: drawing inputs for %lld tokens", rp_dtype_name(dtype), (long long)c->arena);
    if (bench_inputs_create(&c->in, &c->L, c->arena, o->max_position, o->seed, msg, msg_size) ||
        allocate(c, msg, msg_size))
        return -1;
    bench_progress(NULL);

    run->backend = BENCH_CUDA;
    snprintf(run->device, sizeof run->device, "%s (sm_%d%d, %d SMs, L2 %.0f MiB)", prop.name, prop.major,
             prop.minor, prop.multiProcessorCount, l2 / 1048576.0);
    snprintf(run->kernel, sizeof run->kernel, "cuda");
    run->layout = c->L;
    run->max_position = o->max_position;
    run->sets_option = o->sets;
    run->unfused = o->unfused;
    rep->num_runs++;
    const bench_backend_ops ops = {c, cuda_poison, cuda_run_once, cuda_verify, cuda_time};
    return bench_sweep(o, &ops, l2, run, msg, msg_size);
}

} // namespace

int bench_cuda_available(char *msg, size_t msg_size)
{
    if (!rp_has_cuda()) {
        snprintf(msg, msg_size, "the ropepool library in this build has no CUDA backend");
        return 0;
    }
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        snprintf(msg, msg_size, "no CUDA device is available (%s)",
                 e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        return 0;
    }
    return 1;
}

int bench_cuda_runs(const bench_options *o, rp_dtype dtype, bench_report *rep, char *msg, size_t msg_size)
{
    cuda_bench c;
    memset(&c, 0, sizeof c);
    const int rc = run_dtype(&c, o, dtype, rep, msg, msg_size);
    release(&c);
    return rc;
}
