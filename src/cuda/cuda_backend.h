/*
 * cuda_backend.h — what the CUDA backend's files share: the per-context state, the device word
 * where kernels record a bad slot, and the launch plan with the launcher behind the public call
 * (also used by bench/tune/, which times plans side by side).
 */
#ifndef RP_CUDA_BACKEND_H
#define RP_CUDA_BACKEND_H

#include "../internal.h"

#include <cuda_runtime.h>

/* The first out-of-range slot that a kernel met since the last rp_context_check(): the LOWEST
 * token index among all launches, so that racing threads and blocks always leave the same record.
 * `lock` serialises writers (rare: only bad slots take it). */
#define RP_NO_BAD_TOKEN (~0ull)

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
    int compute_capability; /* major * 10 + minor */
    /* Device memory: [0] is what kernels update, [1] receives [0] when a check takes it. */
    rp_cuda_slot_status *status;
    /* Pinned host memory mapped into the device: kernels copy each new lowest record there too,
     * so that the next call reads it without synchronising. host_status_dev is its device
     * address. */
    rp_cuda_slot_status *host_status, *host_status_dev;
} rp_cuda_state;

/* The QK-norm decode kernel is compiled twice (decode.cu's NORM parameter: the threads a block it
 * is compiled for; 0: no QK-norm). SHORT takes up to 128 registers a thread: its one chain of
 * latencies is shortest so (at 80 registers Qwen3-8B ran 2.65 us at T = 1 against 2.23, 3.33
 * against 2.29 at T = 64). RESIDENT takes 80, like the plain kernels: a multiprocessor holds 1.5
 * times its blocks, and calls whose blocks all fit at once only so ran 11-27% faster than on the
 * prefill kernel (Qwen3-8B at T = 200-264, 16/8/256 at T = 133-198; both on an H100,
 * bench/results/qwen3-8b-qk-norm.md, stop 40). The plan picks one (plan.cu, norm_decode_heads);
 * every other kernel's bound is kernel_args.cuh's rp_block_threads. */
enum { RP_NORM_DECODE_SHORT = 512, RP_NORM_DECODE_RESIDENT = 768 };

/* How a call is launched. Made by rp_cuda_make_plan, the one place where geometry is chosen. */
typedef struct rp_cuda_plan {
    int vectorized;          /* 1: 16-byte kernel; 0: the plain strided kernel                   */
    /* vectorized kernel: block (groups_per_block, heads_per_pass, tokens_per_block), grid (grid,
     * chunks, head_chunks). A frequency group is the 16 bytes of pairs one thread rotates in one
     * head.                                                                                       */
    int groups_per_block;    /* a token's groups one block serves; the token spans `chunks` blocks */
    int chunks;
    int heads;               /* heads the call touches: Hq + Hk + Hk v_pieces (all), Hq + Hk
                                (rotate), Hk + Hk v_pieces (scatter)                             */
    int v_pieces;            /* vectorized: v and v_pool read as Hk v_pieces heads of D dims (Dv /
                                D: MLA's latent row; 1 when Dv = D)                              */
    int heads_per_pass;      /* blockDim.y; a thread serves heads y, y + heads_per_pass, ...     */
    int head_chunks;         /* gridDim.z: QK-norm decode splits a token's heads over this many
                                blocks (block z: heads z heads_per_pass ..), else 1              */
    int items_per_thread;    /* heads per thread whose loads are issued before the barrier: 1 runs
                                the decode kernel, 2 or 4 the prefill kernel                     */
    int tokens_per_block;    /* blockDim.z: tokens sharing one block                              */
    int norm_decode_threads; /* QK-norm decode: the build launched, RP_NORM_DECODE_SHORT or
                                RP_NORM_DECODE_RESIDENT (its threads a block, above); 0
                                for other kernels                                                */
    int threads_x;           /* strided kernel: threads per block                                 */
    int overlap_launch;      /* launch with programmatic stream serialization (sm_90+): the launch
                                and index setup overlap the kernel before it on the stream; the
                                kernel waits for that kernel's completion before touching memory */
    unsigned int grid;       /* blocks (gridDim.x)                                                */
    int wave_sms;            /* decode kernel without QK-norm: the multiprocessors whose one wave
                                of resident blocks caps grid (each block then loops over tokens);
                                0: a block for every token tile (rp_cuda_plan_complete)          */
    size_t shared_bytes;     /* vectorized: the (token, frequency) cos/sin table                  */
} rp_cuda_plan;

#ifdef __cplusplus
extern "C" {
#endif

/* Largest head_dim the CUDA backend takes: its frequencies travel in the kernel parameters. */
#define RP_CUDA_MAX_HEAD_DIM 4096

rp_cuda_plan rp_cuda_make_plan(const rp_cuda_state *st, const rp_problem *p, rp_parts parts);

/* The rest of a vectorized plan from its block (groups_per_block, heads_per_pass,
 * tokens_per_block), items_per_thread and wave_sms: chunks, grid and shared memory. 0, or -1
 * when that block cannot launch. rp_cuda_make_plan ends here, and ropepool-tune-cuda's overrides go
 * through it, so both size a launch the same way. */
int rp_cuda_plan_complete(const rp_problem *p, rp_parts parts, rp_cuda_plan *plan);

/* Launches a validated problem with the given plan on `stream` (the caller has made st->device
 * current). No allocation, no synchronisation. */
rp_status rp_cuda_launch(const rp_cuda_state *st, const rp_problem *p, rp_parts parts,
                         const rp_cuda_plan *plan, cudaStream_t stream, rp_err *err);

/* RP_CHECK_SLOTS: copies the slots to the host (one synchronisation of `stream`) and validates
 * range and duplicates with the CPU's rp_validate_slots. */
rp_status rp_cuda_check_slots(const rp_problem *p, cudaStream_t stream, rp_err *err);

/* The host-mapped copy of the bad-slot record: RP_ERR_SLOT_OUT_OF_RANGE naming the slot an earlier
 * call's kernel recorded (and clears the copy), or RP_OK. Reads pinned host memory only. */
rp_status rp_cuda_take_earlier_bad_slot(const rp_cuda_state *st, rp_err *err);

/* Makes `device` current, saving the caller's in *previous; leave gives it back. */
rp_status rp_cuda_enter_device(int device, int *previous, rp_err *err);
void rp_cuda_leave_device(int device, int previous);

/* RP_ERR_CUDA with the runtime's text, naming what failed. */
rp_status rp_cuda_fail(rp_err *err, cudaError_t e, const char *what);

#ifdef __cplusplus
}
#endif

#endif /* RP_CUDA_BACKEND_H */
