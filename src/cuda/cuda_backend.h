/*
 * cuda_backend.h — what the CUDA backend's files share: the per-context state, the device word
 * where kernels record a bad slot, and the launch plan with the launcher behind the public call
 * (also used by a timing harness to compare plans).
 */
#ifndef RP_CUDA_BACKEND_H
#define RP_CUDA_BACKEND_H

#include "../internal.h"

#include <cuda_runtime.h>

/* The first out-of-range slot that a kernel met since the last rp_context_check(): the LOWEST
 * token index among all launches, so that racing threads and blocks always leave the same record.
 * `lock` serialises writers (rare: only bad slots take it). */
typedef struct rp_cuda_slot_status {
    unsigned long long token; /* ~0ull when nothing was recorded */
    long long slot;
    long long pool_size;
    unsigned int lock;
    unsigned int pad;
} rp_cuda_slot_status;

/* Per-context state, made by rp_cuda_context_init. */
typedef struct rp_cuda_state {
    int device;
    int num_sms;
    /* Device memory: [0] is what kernels update, [1] receives [0] when a check takes it. */
    rp_cuda_slot_status *status;
} rp_cuda_state;

/* How a call is launched. Made by rp_cuda_make_plan, the one place where geometry is chosen. */
typedef struct rp_cuda_plan {
    int vectorized;          /* 1: 16-byte kernel; 0: the plain strided kernel                  */
    int items_per_token;     /* vectorized: (heads touched) x (D/2 / elements per 16 bytes)     */
    int items_per_thread;    /* vectorized: items whose loads are issued before the barrier    */
    int threads_x;           /* vectorized: threads per token; strided: threads per block       */
    int tokens_per_block;    /* vectorized: blockDim.y, tokens sharing one block and its table  */
    unsigned int grid;       /* blocks                                                          */
    size_t shared_bytes;     /* vectorized: the (token, frequency) cos/sin table                */
} rp_cuda_plan;

#ifdef __cplusplus
extern "C" {
#endif

/* Largest head_dim the CUDA backend takes: its frequencies travel in the kernel parameters. */
#define RP_CUDA_MAX_HEAD_DIM 4096

rp_cuda_plan rp_cuda_make_plan(const rp_cuda_state *st, const rp_problem *p, rp_parts parts);

/* Launches a validated problem with the given plan on `stream` (the caller has made st->device
 * current). No allocation, no synchronisation. */
rp_status rp_cuda_launch(const rp_cuda_state *st, const rp_problem *p, rp_parts parts,
                         const rp_cuda_plan *plan, cudaStream_t stream, rp_err *err);

/* RP_CHECK_SLOTS: copies the slots to the host (one synchronisation of `stream`) and validates
 * range and duplicates with the CPU's rp_validate_slots. */
rp_status rp_cuda_check_slots(const rp_problem *p, cudaStream_t stream, rp_err *err);

/* Makes `device` current, saving the caller's in *previous; leave gives it back. */
rp_status rp_cuda_enter_device(int device, int *previous, rp_err *err);
void rp_cuda_leave_device(int device, int previous);

/* RP_ERR_CUDA with the runtime's text, naming what failed. */
rp_status rp_cuda_fail(rp_err *err, cudaError_t e, const char *what);

#ifdef __cplusplus
}
#endif

#endif /* RP_CUDA_BACKEND_H */
