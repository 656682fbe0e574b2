/*
 * kernels.cuh — the CUDA kernels of rope_pool_fused and the variants compiled of each. Each kernel
 * lives in its own file (decode.cu, prefill.cu, strided.cu), which instantiates the variants listed
 * here; the dispatch (rope_pool.cu) launches them. A variant the dispatch names that is not listed
 * here fails to link.
 *
 * Vectorized kernels (the fast path): decode and prefill. An item is one frequency group of one
 * head: ELEMS = 16 / sizeof(element) consecutive pairs (x[i], x[i + D/2]), i.e. two 16-byte vectors.
 * (items.cuh says how a head row is cut into groups for each style and rotary_dim.) A block is (groups, heads, tokens): consecutive threads take consecutive groups of a head row, so
 * a warp reads and writes whole runs of 16-byte vectors. Each thread first issues the loads of the
 * token's position (if it helps build the table), of its first items and of the token's slot;
 * then the block computes its (token, frequency) cos/sin table once, in float64, into shared
 * memory while those loads are in flight; after one barrier every item is rotated in float32 and
 * stored with 16-byte stores. On sm_90 the launch overlaps the previous kernel on the stream
 * (programmatic dependent launch); a kernel waits for it before touching memory.
 *   - Decode (one item per thread) is bound by that chain of latencies: its blocks take a few
 *     groups of one token, so that a token spreads over several multiprocessors, and every thread
 *     turns the parameters into addresses before the wait, overlapping the previous kernel.
 *   - Prefill (RP_PREFILL_PREFETCH items per thread) is bound by bytes in flight: a block takes whole tokens,
 *     each thread prefetches RP_PREFILL_PREFETCH heads, serves the rest of its heads after the barrier
 *     (about three warps a token: plan.cu) and computes addresses where it uses them.
 * The plan (plan.cu) picks by items per thread.
 *
 * Strided kernel (every other layout: head_dim not contiguous, rows not 16-byte aligned, D/2 or
 * R/2 not a multiple of ELEMS). One thread per (token, frequency): it computes that angle once and walks
 * all heads. Plain element loads; the same numerics.
 *
 * All of them never write a pool row whose slot is negative or >= P; the latter is recorded in the
 * context's status word (device.cuh) for rp_context_check().
 */
#ifndef RP_CUDA_KERNELS_CUH
#define RP_CUDA_KERNELS_CUH

#include "kernel_args.cuh"

/* A kernel of the backend, as cudaLaunchKernelEx takes it. */
template <int FREQ_CAP> using rp_kernel_fn = void (*)(rp_kernel_args<FREQ_CAP>);

/* Each kernel file returns its compiled variants through these host functions: a __global__
 * template's launch stub is local to its file (nvcc's -static-global-template-stub, the default in
 * whole-program mode), a plain host function is not.
 * STYLE: rp_rope_style. HALF: head_dim / 2 when compiled for the whole head rotating at one
 * head_dim, 0 for any head_dim and rotary_dim (frequencies up to FREQ_CAP). */
template <rp_dtype DT, int STYLE, int HALF, int FREQ_CAP, bool FP8, int NORM>
rp_kernel_fn<FREQ_CAP> rp_decode_kernel(void); /* NORM: 0 or a build (cuda_backend.h) */
template <rp_dtype DT, int STYLE, int HALF, int FREQ_CAP, bool FP8, bool NORM>
rp_kernel_fn<FREQ_CAP> rp_prefill_kernel(void);
template <rp_dtype DT, int FREQ_CAP> rp_kernel_fn<FREQ_CAP> rp_strided_kernel(void);

/* The compiled variants, X(DT, STYLE, HALF, FREQ_CAP, FP8) per vectorized one and S(DT, FREQ_CAP)
 * per strided one. Either style over the whole head gets head_dim as a compile-time constant for
 * the common sizes (64, 128, 256); partial rotary and other sizes run the same code with runtime
 * sizes. The style is a compile-time constant: it decides the shape of the rotation's inner loop.
 * fp8 pools (FP8) are compiled apart: their conversions would cost the other pools registers
 * (measured: the decode kernel spilled); they take head_dim 128 and 256 NeoX with constant sizes
 * (256 with runtime sizes spilled 12 bytes and ran 4-20% slower on an H100:
 * bench/results/cuda-h100-stop37.md) and any rotary_dim up to 512 in both styles vectorized, the
 * rest on the strided kernel. */
#define RP_VECTOR_VARIANTS_OF(X, DT)                                                                           \
    X(DT, RP_ROPE_NEOX, 32, 32, false) X(DT, RP_ROPE_NEOX, 64, 64, false) X(DT, RP_ROPE_NEOX, 128, 128, false)   \
    X(DT, RP_ROPE_NEOX, 0, 256, false) X(DT, RP_ROPE_NEOX, 0, RP_CUDA_MAX_HEAD_DIM / 2, false)                   \
    X(DT, RP_ROPE_GPTJ, 32, 32, false) X(DT, RP_ROPE_GPTJ, 64, 64, false) X(DT, RP_ROPE_GPTJ, 128, 128, false)   \
    X(DT, RP_ROPE_GPTJ, 0, 256, false) X(DT, RP_ROPE_GPTJ, 0, RP_CUDA_MAX_HEAD_DIM / 2, false)                   \
    X(DT, RP_ROPE_NEOX, 64, 64, true) X(DT, RP_ROPE_NEOX, 128, 128, true) X(DT, RP_ROPE_NEOX, 0, 256, true)     \
    X(DT, RP_ROPE_GPTJ, 0, 256, true)
#define RP_VECTOR_VARIANTS(X)                                                                                  \
    RP_VECTOR_VARIANTS_OF(X, RP_F32) RP_VECTOR_VARIANTS_OF(X, RP_F16) RP_VECTOR_VARIANTS_OF(X, RP_BF16)
#define RP_VECTOR_FP8_MAX_PAIRS 256 /* rotary_dim / 2 of the fp8 variants above */
/* QK-norm (NORM): compiled apart too, for the same reason (its float64 reduction and weight loads
 * made the 16-bit decode kernels spill 80-130 bytes when it was a runtime branch of every variant).
 * Its heads have at most 32 groups (plan.cu), so 256 frequencies cover every rotary_dim; head_dim
 * 128 and 256 NeoX (Qwen3; Gemma 3) get their constant sizes, with fp8 pools too (with runtime
 * sizes the bf16 prefill kernel spills 100-136 bytes there, with constant ones 20, and Qwen3-8B's
 * fp8 call is 17-22% faster on an H100: bench/results/qwen3-8b-qk-norm.md), the rest runs with
 * runtime sizes. */
#define RP_NORM_VARIANTS_OF(X, DT)                                                                             \
    X(DT, RP_ROPE_NEOX, 64, 64, false) X(DT, RP_ROPE_NEOX, 128, 128, false) X(DT, RP_ROPE_NEOX, 0, 256, false)  \
    X(DT, RP_ROPE_GPTJ, 0, 256, false) X(DT, RP_ROPE_NEOX, 64, 64, true) X(DT, RP_ROPE_NEOX, 128, 128, true)       \
    X(DT, RP_ROPE_NEOX, 0, 256, true) X(DT, RP_ROPE_GPTJ, 0, 256, true)
#define RP_NORM_VARIANTS(X) RP_NORM_VARIANTS_OF(X, RP_F32) RP_NORM_VARIANTS_OF(X, RP_F16) RP_NORM_VARIANTS_OF(X, RP_BF16)
#define RP_STRIDED_VARIANTS_OF(S, DT) S(DT, 256) S(DT, RP_CUDA_MAX_HEAD_DIM / 2)
#define RP_STRIDED_VARIANTS(S)                                                                                 \
    RP_STRIDED_VARIANTS_OF(S, RP_F32) RP_STRIDED_VARIANTS_OF(S, RP_F16) RP_STRIDED_VARIANTS_OF(S, RP_BF16)

#endif /* RP_CUDA_KERNELS_CUH */
