/*
 * status.cu — the CUDA side of a context: the device it serves, the device word where kernels
 * record the first out-of-range slot (and its host-mapped copy, which the next call reads),
 * rp_context_check() (take that record and clear it), and
 * RP_CHECK_SLOTS (validate slots on the host before launching).
 */
#include "cuda_backend.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

extern "C" int rp_has_cuda(void)
{
    return 1;
}

extern "C" rp_status rp_cuda_fail(rp_err *err, cudaError_t e, const char *what)
{
    return rp_fail(err, RP_ERR_CUDA, "%s failed: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

/* Moves status[0] to status[1] and clears status[0], under the writers' lock, so that a record
 * made by a kernel still running on another stream is either taken now or kept for the next check. */
__global__ void rp_take_status(rp_cuda_slot_status *status)
{
    volatile rp_cuda_slot_status *live = status, *taken = status + 1;
    while (atomicCAS(&status->lock, 0u, 1u) != 0u)
        __nanosleep(64);
    __threadfence();
    taken->token = live->token;
    taken->slot = live->slot;
    taken->pool_size = live->pool_size;
    live->token = RP_NO_BAD_TOKEN;
    __threadfence();
    atomicExch(&status->lock, 0u);
}

extern "C" rp_status rp_cuda_enter_device(int device, int *previous, rp_err *err)
{
    cudaError_t e = cudaGetDevice(previous);
    if (e == cudaSuccess && *previous != device)
        e = cudaSetDevice(device);
    return e == cudaSuccess ? RP_OK : rp_cuda_fail(err, e, "selecting the context's CUDA device");
}

extern "C" void rp_cuda_leave_device(int device, int previous)
{
    if (previous >= 0 && previous != device)
        cudaSetDevice(previous);
}

extern "C" rp_status rp_cuda_context_init(int32_t device, void **state, rp_err *err)
{
    *state = NULL;
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess)
        return rp_cuda_fail(err, e, "cudaGetDeviceCount");
    if (device >= count)
        return rp_fail(err, RP_ERR_INVALID_ARGUMENT,
                       "cuda_device %d does not exist: this machine has %d CUDA device(s)", (int)device, count);
    int previous = -1;
    rp_status status = rp_cuda_enter_device(device, &previous, err);
    if (status != RP_OK)
        return status;
    rp_cuda_state *st = (rp_cuda_state *)calloc(1, sizeof *st);
    if (st == NULL) {
        rp_cuda_leave_device(device, previous);
        return rp_fail(err, RP_ERR_OUT_OF_MEMORY, "out of memory creating the CUDA context state");
    }
    st->device = device;
    rp_cuda_slot_status initial[2];
    memset(initial, 0, sizeof initial);
    initial[0].token = initial[1].token = RP_NO_BAD_TOKEN;
    int major = 0, minor = 0;
    if ((e = cudaDeviceGetAttribute(&st->num_sms, cudaDevAttrMultiProcessorCount, device)) != cudaSuccess ||
        (e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device)) != cudaSuccess ||
        (e = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device)) != cudaSuccess ||
        (e = cudaMalloc((void **)&st->status, sizeof initial)) != cudaSuccess ||
        (e = cudaMemcpy(st->status, initial, sizeof initial, cudaMemcpyHostToDevice)) != cudaSuccess ||
        (e = cudaHostAlloc((void **)&st->host_status, sizeof initial[0], cudaHostAllocMapped | cudaHostAllocPortable)) !=
            cudaSuccess ||
        (e = cudaHostGetDevicePointer((void **)&st->host_status_dev, st->host_status, 0)) != cudaSuccess) {
        if (st->status)
            cudaFree(st->status);
        if (st->host_status)
            cudaFreeHost(st->host_status);
        free(st);
        status = rp_cuda_fail(err, e, "preparing the CUDA context");
    } else {
        *st->host_status = initial[0];
        st->compute_capability = major * 10 + minor;
        *state = st;
    }
    rp_cuda_leave_device(device, previous);
    return status;
}

extern "C" void rp_cuda_context_free(void *state)
{
    rp_cuda_state *st = (rp_cuda_state *)state;
    if (st == NULL)
        return;
    int previous = -1;
    if (rp_cuda_enter_device(st->device, &previous, NULL) == RP_OK) {
        cudaFree(st->status); /* waits for kernels still using it */
        cudaFreeHost(st->host_status);
        rp_cuda_leave_device(st->device, previous);
    }
    free(st);
}

extern "C" rp_status rp_cuda_context_check(void *state, void *stream_handle, rp_err *err)
{
    const rp_cuda_state *st = (const rp_cuda_state *)state;
    const cudaStream_t stream = (cudaStream_t)stream_handle;
    int previous = -1;
    rp_status status = rp_cuda_enter_device(st->device, &previous, err);
    if (status != RP_OK)
        return status;
    rp_cuda_slot_status taken;
    rp_take_status<<<1, 1, 0, stream>>>(st->status);
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(&taken, st->status + 1, sizeof taken, cudaMemcpyDeviceToHost, stream);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(stream);
    rp_cuda_leave_device(st->device, previous);
    if (e != cudaSuccess)
        return rp_cuda_fail(err, e, "rp_context_check");
    ((volatile rp_cuda_slot_status *)st->host_status)->token = RP_NO_BAD_TOKEN; /* reported here */
    if (taken.token == RP_NO_BAD_TOKEN)
        return RP_OK;
    return rp_fail_slot_out_of_range(err, taken.slot, (int64_t)taken.token, taken.pool_size);
}

extern "C" rp_status rp_cuda_take_earlier_bad_slot(const rp_cuda_state *st, rp_err *err)
{
    volatile rp_cuda_slot_status *h = st->host_status;
    const unsigned long long token = h->token;
    if (token == RP_NO_BAD_TOKEN)
        return RP_OK;
    const long long slot = h->slot, pool_size = h->pool_size;
    h->token = RP_NO_BAD_TOKEN;
    return rp_fail(err, RP_ERR_SLOT_OUT_OF_RANGE,
                   "an earlier call on this CUDA context skipped the pool write of its token %llu: slot %lld is "
                   "out of range for a pool of %lld slots (this call wrote nothing; rp_context_check() reports "
                   "such slots at once)",
                   token, slot, pool_size);
}

extern "C" rp_status rp_cuda_check_slots(const rp_problem *p, cudaStream_t stream, rp_err *err)
{
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    cudaError_t e = cudaStreamIsCapturing(stream, &capture);
    if (e != cudaSuccess)
        return rp_cuda_fail(err, e, "cudaStreamIsCapturing");
    if (capture != cudaStreamCaptureStatusNone)
        return rp_fail(err, RP_ERR_INVALID_ARGUMENT,
                       "RP_CHECK_SLOTS waits for the stream, which cannot be done while it is being "
                       "captured into a CUDA graph: leave the flag off there and call "
                       "rp_context_check() after the replay");

    /* Copy the slots into contiguous host memory: one 2-D copy for any stride (rows of one
     * element, `|stride|` elements apart, from the lowest address up). */
    const int64_t T = p->num_tokens, stride = p->slot_stride;
    const size_t elem = rp_dtype_size(p->slot_dtype);
    const int64_t count = stride == 0 ? 1 : T;
    unsigned char stack_buf[4096];
    unsigned char *host = (size_t)count * elem <= sizeof stack_buf ? stack_buf : (unsigned char *)malloc((size_t)count * elem);
    if (host == NULL)
        return rp_fail(err, RP_ERR_OUT_OF_MEMORY, "out of memory copying %lld slots to the host", (long long)T);
    const char *lowest = (const char *)p->slots + (stride < 0 ? (T - 1) * stride * (int64_t)elem : 0);
    const uint64_t pitch = (uint64_t)(stride < 0 ? -stride : stride) * elem;
    if (count == 1)
        e = cudaMemcpyAsync(host, lowest, elem, cudaMemcpyDeviceToHost, stream);
    else if (pitch <= (uint64_t)INT_MAX)
        e = cudaMemcpy2DAsync(host, elem, lowest, (size_t)pitch, elem, (size_t)count, cudaMemcpyDeviceToHost, stream);
    else
        for (int64_t t = 0; t < count && e == cudaSuccess; t++)
            e = cudaMemcpyAsync(host + t * (int64_t)elem, lowest + t * (int64_t)pitch, elem,
                                cudaMemcpyDeviceToHost, stream);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(stream);
    rp_status status;
    if (e != cudaSuccess) {
        status = rp_cuda_fail(err, e, "copying the slots to the host for RP_CHECK_SLOTS");
    } else {
        rp_problem host_problem = *p;
        host_problem.slot_stride = stride > 0 ? 1 : stride < 0 ? -1 : 0;
        status = rp_validate_slots(&host_problem, host + (stride < 0 ? (T - 1) * (int64_t)elem : 0), err);
    }
    if (host != stack_buf)
        free(host);
    return status;
}
