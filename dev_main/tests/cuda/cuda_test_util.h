/*
 * cuda_test_util.h — what the CUDA tests share: a skip when there is no GPU, and a "mirror" that
 * copies any call built on the host (the CPU tests' fixtures and layouts) to the device, runs it
 * there, and brings every buffer back, so the host-side checks (rp_ref_verify, byte comparisons)
 * apply to the GPU's results unchanged.
 */
#ifndef RP_CUDA_TEST_UTIL_H
#define RP_CUDA_TEST_UTIL_H

#include "../test_verify.h"

#include <cuda_runtime_api.h>

/* ctest's SKIP_RETURN_CODE for these tests. */
#define CUDA_TEST_SKIP 77

#define CUDA_OK(call)                                                                             \
    do {                                                                                          \
        cudaError_t e_ = (call);                                                                  \
        if (e_ != cudaSuccess) {                                                                  \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            exit(1);                                                                              \
        }                                                                                         \
    } while (0)

/* Returns 1 (after printing why) when this machine has no usable CUDA device. */
static inline int cuda_test_no_gpu(void)
{
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        printf("skip: no CUDA device (%s)\n", e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        return 1;
    }
    return 0;
}

static inline rp_context *cuda_test_context(int device)
{
    rp_context_options o = {0};
    o.flags = RP_CONTEXT_CUDA;
    o.cuda_device = device;
    o.num_threads = 1;
    rp_context *ctx = NULL;
    char msg[256];
    if (rp_context_create(&o, &ctx, msg, sizeof msg) != RP_OK) {
        fprintf(stderr, "CUDA context: %s\n", msg);
        exit(1);
    }
    return ctx;
}

static inline int starts_with(const char *text, const char *prefix)
{
    return strncmp(text, prefix, strlen(prefix)) == 0;
}

/* ---- mirror: host regions and their device copies ---------------------------------------------- */

enum { MIRROR_MAX = 24 };

typedef struct mirror {
    int n;
    void *host[MIRROR_MAX];
    void *dev[MIRROR_MAX];
    size_t bytes[MIRROR_MAX];
} mirror;

/* Allocates a device copy of [host, host + bytes) and uploads it. */
static inline void mirror_add(mirror *m, void *host, size_t bytes)
{
    if (m->n == MIRROR_MAX) {
        fprintf(stderr, "mirror: too many regions\n");
        exit(1);
    }
    void *d = NULL;
    CUDA_OK(cudaMalloc(&d, bytes ? bytes : 16));
    if (bytes)
        CUDA_OK(cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice));
    m->host[m->n] = host;
    m->dev[m->n] = d;
    m->bytes[m->n] = bytes;
    m->n++;
}

/* Points t at the device copy of its memory (same offset) and tags it cuda:device. A pointer
 * outside every region is kept (it makes a test of a bad pointer). */
static inline void mirror_tensor(const mirror *m, rp_tensor *t, int device)
{
    t->device.type = RP_DEVICE_CUDA;
    t->device.index = device;
    for (int i = 0; i < m->n; i++) {
        const char *h = (const char *)m->host[i];
        if (t->data && (const char *)t->data >= h && (const char *)t->data < h + m->bytes[i]) {
            t->data = (char *)m->dev[i] + ((const char *)t->data - h);
            return;
        }
    }
}

/* args with every tensor moved to the device. */
static inline rp_rope_pool_args mirror_args(const mirror *m, const rp_rope_pool_args *host_args, int device)
{
    rp_rope_pool_args a = *host_args;
    rp_tensor *ts[] = {&a.q, &a.k, &a.v, &a.positions, &a.slots, &a.k_pool, &a.v_pool, &a.q_rot, &a.k_rot};
    for (int i = 0; i < 9; i++)
        mirror_tensor(m, ts[i], device);
    return a;
}

static inline void mirror_upload(const mirror *m)
{
    for (int i = 0; i < m->n; i++)
        if (m->bytes[i])
            CUDA_OK(cudaMemcpy(m->dev[i], m->host[i], m->bytes[i], cudaMemcpyHostToDevice));
}

/* Waits for the device and copies every region back over its host original. */
static inline void mirror_download(const mirror *m)
{
    CUDA_OK(cudaDeviceSynchronize());
    for (int i = 0; i < m->n; i++)
        if (m->bytes[i])
            CUDA_OK(cudaMemcpy(m->host[i], m->dev[i], m->bytes[i], cudaMemcpyDeviceToHost));
}

static inline void mirror_free(mirror *m)
{
    for (int i = 0; i < m->n; i++)
        cudaFree(m->dev[i]);
    m->n = 0;
}

/* Mirrors the nine buffers of a fixture. */
static inline void mirror_fixture(mirror *m, fixture *f)
{
    const size_t e = rp_dtype_size(f->dtype), ie = rp_dtype_size(f->index_dtype);
    const int64_t nq = f->T * f->Hq * f->D, nk = f->T * f->Hk * f->D, np = f->P * f->Hk * f->D;
    mirror_add(m, f->q, (size_t)nq * e);
    mirror_add(m, f->k, (size_t)nk * e);
    mirror_add(m, f->v, (size_t)nk * e);
    mirror_add(m, f->q_rot, (size_t)nq * e);
    mirror_add(m, f->k_rot, (size_t)nk * e);
    mirror_add(m, f->k_pool, (size_t)np * e);
    mirror_add(m, f->v_pool, (size_t)np * e);
    /* [T], or mRoPE's [3, T] rows (fixture_use_mrope_rows) */
    mirror_add(m, f->positions, (size_t)(f->args.positions.ndim == 2 ? 3 * f->T : f->T) * ie);
    mirror_add(m, f->slots, (size_t)f->T * ie);
}


/* Runs host-built args on the device through a mirror of its regions, downloads, and expects RP_OK
 * and no recorded bad slot. */
static inline void run_on_device(rp_context *ctx, const mirror *m, const rp_rope_pool_args *host_args,
                                 const char *what)
{
    rp_rope_pool_args d = mirror_args(m, host_args, 0);
    char msg[512];
    rp_status st = rp_rope_pool_fused(ctx, &d, msg, sizeof msg);
    CHECK(st == RP_OK, "%s: %s: %s", what, rp_status_name(st), msg);
    st = rp_context_check(ctx, NULL, msg, sizeof msg);
    CHECK(st == RP_OK, "%s: context check: %s: %s", what, rp_status_name(st), msg);
    mirror_download(m);
}

/* Runs a fixture's call on the device and verifies the downloaded outputs. */
static inline void run_and_verify_fixture(rp_context *ctx, fixture *f, const char *what)
{
    mirror m = {0};
    mirror_fixture(&m, f);
    run_on_device(ctx, &m, &f->args, what);
    verify_outputs(&f->args, &f->args, what);
    mirror_free(&m);
}

/* One call captured in a CUDA graph on a stream of its own, for tests that replay it after
 * changing what it reads in device memory. */
typedef struct captured_call {
    cudaStream_t stream;
    cudaGraph_t graph;
    cudaGraphExec_t exec;
} captured_call;

/* Captures rp_rope_pool_fused(ctx, d) (device arguments; d->stream is set to the new stream). */
static inline captured_call capture_call(rp_context *ctx, rp_rope_pool_args *d)
{
    captured_call c;
    CUDA_OK(cudaStreamCreateWithFlags(&c.stream, cudaStreamNonBlocking));
    d->stream = c.stream;
    char msg[512];
    CUDA_OK(cudaStreamBeginCapture(c.stream, cudaStreamCaptureModeGlobal));
    CHECK(rp_rope_pool_fused(ctx, d, msg, sizeof msg) == RP_OK, "captured call: %s", msg);
    CUDA_OK(cudaStreamEndCapture(c.stream, &c.graph));
    CUDA_OK(cudaGraphInstantiate(&c.exec, c.graph, 0));
    return c;
}

/* Replays the graph and waits for it. */
static inline void captured_call_replay(const captured_call *c)
{
    CUDA_OK(cudaGraphLaunch(c->exec, c->stream));
    CUDA_OK(cudaStreamSynchronize(c->stream));
}

static inline void captured_call_free(captured_call *c)
{
    CUDA_OK(cudaGraphExecDestroy(c->exec));
    CUDA_OK(cudaGraphDestroy(c->graph));
    CUDA_OK(cudaStreamDestroy(c->stream));
}

#endif /* RP_CUDA_TEST_UTIL_H */
