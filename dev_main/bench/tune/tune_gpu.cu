/*
 * tune_gpu.cu — the device side of ropepool-tune-cuda: filling buffers, the floor kernels that
 * bound what any kernel can reach (an empty launch, a one-load chain, a plain copy), and timing
 * a sequence of launches inside one CUDA graph.
 */
#include "tune.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

namespace {

__device__ __forceinline__ unsigned mix(unsigned long long i)
{
    i ^= i >> 33;
    i *= 0xff51afd7ed558ccdull;
    i ^= i >> 33;
    i *= 0xc4ceb9fe1a85ec53ull;
    return (unsigned)(i ^ (i >> 33));
}

/* x[i] = uniform [-2, 2) of the element type (0: f32, 1: f16, 2: bf16). */
__global__ void fill_values(void *x, size_t n, int type, unsigned long long seed)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const float v = (float)(mix(i * 0x9e3779b97f4a7c15ull + seed) >> 8) * (4.0f / 16777216.0f) - 2.0f;
        if (type == 0)
            ((float *)x)[i] = v;
        else if (type == 1)
            ((__half *)x)[i] = __float2half_rn(v);
        else
            ((__nv_bfloat16 *)x)[i] = __float2bfloat16_rn(v);
    }
}

/* positions[t] = hash(t) % max_position; slots[t] = a bijection of [0, pool) (pool a power of two)
 * or t when contiguous. int64. */
__global__ void fill_indices(long long *positions, long long *slots, long long n, long long max_position,
                             long long pool, int contiguous)
{
    for (long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x; t < n; t += (long long)gridDim.x * blockDim.x) {
        positions[t] = (long long)(mix((unsigned long long)t + 12345) % (unsigned long long)max_position);
        slots[t] = contiguous ? t : (long long)(((unsigned long long)t * 0x9e3779b1ull) & (unsigned long long)(pool - 1));
    }
}

__device__ __forceinline__ void wait_prior(void) { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void launch_next(void) { asm volatile("griddepcontrol.launch_dependents;" :::); }

__global__ void floor_empty(void) {}

__global__ void floor_empty_pdl(void)
{
    launch_next();
    wait_prior();
}

/* One dependent load and one store: the shortest chain a kernel with inputs can have. */
__global__ void floor_chain_pdl(const int *src, int *dst)
{
    launch_next();
    wait_prior();
    if (threadIdx.x == 0)
        dst[blockIdx.x] = src[blockIdx.x] + 1;
}

/* dst[i] = src[i], 16 bytes a thread, n vectors. */
__global__ void floor_copy_pdl(const uint4 *src, uint4 *dst, size_t n)
{
    launch_next();
    wait_prior();
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = src[i];
}

template <typename... Params, typename... Args>
cudaError_t launch_pdl(void (*kernel)(Params...), dim3 grid, dim3 block, cudaStream_t s, int pdl, Args... args)
{
    cudaLaunchConfig_t config = {};
    config.gridDim = grid;
    config.blockDim = block;
    config.stream = s;
    cudaLaunchAttribute attribute = {};
    attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute.val.programmaticStreamSerializationAllowed = 1;
    config.attrs = &attribute;
    config.numAttrs = pdl ? 1 : 0;
    return cudaLaunchKernelEx(&config, kernel, args...);
}

} // namespace

extern "C" int tune_fill(void *values, size_t n, rp_dtype dtype, void *positions, void *slots, int64_t tokens,
                         int64_t max_position, int64_t pool, int contiguous_slots, unsigned long long seed)
{
    if (values)
        fill_values<<<1024, 256>>>(values, n, dtype == RP_F32 ? 0 : dtype == RP_F16 ? 1 : 2, seed);
    if (positions)
        fill_indices<<<256, 256>>>((long long *)positions, (long long *)slots, tokens, max_position, pool,
                                   contiguous_slots);
    return cudaDeviceSynchronize() == cudaSuccess ? 0 : -1;
}

extern "C" int tune_launch_floor(int which, void *stream, const void *src, void *dst, size_t vectors)
{
    const cudaStream_t s = (cudaStream_t)stream;
    cudaError_t e = cudaSuccess;
    switch (which) {
    case TUNE_FLOOR_EMPTY: e = launch_pdl(floor_empty, dim3(1), dim3(32), s, 0); break;
    case TUNE_FLOOR_EMPTY_PDL: e = launch_pdl(floor_empty_pdl, dim3(1), dim3(32), s, 1); break;
    case TUNE_FLOOR_CHAIN_PDL:
        e = launch_pdl(floor_chain_pdl, dim3(2), dim3(32), s, 1, (const int *)src, (int *)dst);
        break;
    default: { /* the copy: enough 256-thread blocks for the vectors, at most 16 per SM of an H200 */
        const size_t blocks = std::min<size_t>(std::max<size_t>((vectors + 255) / 256, 1), 132 * 16);
        e = launch_pdl(floor_copy_pdl, dim3((unsigned)blocks), dim3(256), s, 1, (const uint4 *)src, (uint4 *)dst,
                       vectors);
    }
    }
    return e == cudaSuccess ? 0 : -1;
}

extern "C" int tune_make_graph(void *stream, tune_enqueue_fn enqueue, void *arg, int64_t calls, void **exec_out)
{
    const cudaStream_t s = (cudaStream_t)stream;
    cudaGraph_t graph = nullptr;
    if (cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) != cudaSuccess)
        return -1;
    int failed = 0;
    for (int64_t i = 0; i < calls && !failed; i++)
        failed = enqueue(arg, i, stream);
    const cudaError_t ended = cudaStreamEndCapture(s, &graph);
    if (failed || ended != cudaSuccess)
        return -1;
    cudaGraphExec_t exec = nullptr;
    const cudaError_t made = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    *exec_out = exec;
    return made == cudaSuccess ? 0 : -1;
}

extern "C" int tune_replay(void *stream, void *exec, double *seconds)
{
    const cudaStream_t s = (cudaStream_t)stream;
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    cudaEventRecord(a, s);
    cudaError_t e = cudaGraphLaunch((cudaGraphExec_t)exec, s);
    cudaEventRecord(b, s);
    if (e == cudaSuccess)
        e = cudaEventSynchronize(b);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    *seconds = 1e-3 * ms;
    return e == cudaSuccess && cudaGetLastError() == cudaSuccess ? 0 : -1;
}

extern "C" void tune_destroy_graph(void *exec)
{
    cudaGraphExecDestroy((cudaGraphExec_t)exec);
}
