/*
 * kernel_args.cuh — the one parameter block every CUDA kernel of rope_pool_fused takes, and the
 * block sizes the vectorized kernels are compiled for (the plan reads the same function).
 */
#ifndef RP_CUDA_KERNEL_ARGS_CUH
#define RP_CUDA_KERNEL_ARGS_CUH

#include "cuda_backend.h"
#include "device.cuh"

/* Tensors of the [token|slot, head, dim] family, indexing rp_kernel_args.stride. */
enum { T_Q, T_K, T_V, T_Q_ROT, T_K_ROT, T_K_POOL, T_V_POOL, T_COUNT };

/* Pool storage (rp_kernel_args.pool_fp8): the inputs' dtype, or fp8 codes of x / scale. */
enum { RP_POOL_SAME = 0, RP_POOL_E4M3 = 1, RP_POOL_E5M2 = 2 };

/* The kernels' only parameter, passed by value so that nothing is allocated and a graph captures
 * it whole. FREQ_CAP bounds rotary_dim / 2 (parameter size was measured not to cost launch time). */
template <int FREQ_CAP> struct rp_kernel_args {
    const void *q;                /* [T, Hq, D]                                        */
    const void *k;                /* [T, Hk, D]                                        */
    const void *v;                /* [T, Hk, Dv]; vectorized: [T, Hk Dv / D, D]        */
    const void *positions;        /* [T] int32 | int64; mRoPE: [3, T] (rows t, h, w)   */
    const void *slots;            /* [T] int32 | int64                                 */
    void *q_rot;                  /* [T, Hq, D]; may be q                              */
    void *k_rot;                  /* [T, Hk, D]; may be k                              */
    void *k_pool;                 /* [blocks, block_size, Hk, D] in any axis order     */
    void *v_pool;                 /* [blocks, block_size, Hk, Dv] likewise; vectorized:
                                     [.., Hk Dv / D, D] (plan.cu's v_pieces)           */
    rp_cuda_slot_status *status;  /* [1] the context's bad-slot record                 */
    rp_cuda_slot_status *host_status; /* [1] its host-mapped copy                      */
    long long stride[T_COUNT][3]; /* in elements, indexed by T_*; pools: [block, head,
                                     dim] (flat pools: blocks of one row)              */
    long long pool_row_stride[2]; /* k_pool, v_pool: row in block (0 for flat pools)   */
    long long block_size;         /* rows per pool block (1 for flat pools)            */
    double inv_block_size;        /* 1 / block_size                                    */
    int block_shift;              /* log2(block_size), or -1 when not a power of two   */
    int pool_fp8;                 /* RP_POOL_SAME, RP_POOL_E4M3 or RP_POOL_E5M2        */
    float k_inv_scale;            /* fp8 pools: 1 / k_scale (when k_scale_ptr is NULL) */
    float v_inv_scale;            /* likewise for v                                    */
    const float *k_scale_ptr;     /* [1] device float or NULL: read by the kernel      */
    const float *v_scale_ptr;     /* [1] likewise                                      */
    int v_head_dim;               /* Dv                                                */
    long long pos_stride, slot_stride;
    long long num_tokens, pool_size;
    int num_qo_heads, num_kv_heads;
    int half_dim;                 /* D / 2                                             */
    int style;                    /* rp_rope_style (the strided kernel's; the vectorized
                                     ones are compiled for one)                        */
    int rotary_dim;               /* R: dims [0, R) rotate, [R, D) pass through        */
    int rot_half;                 /* R / 2: the rotated pairs                          */
    int rot_groups;               /* vectorized: groups (see items.cuh) that rotate    */
    double scale;                 /* attention_scaling                                 */
    int mrope_section[3];         /* mRoPE's [t, h, w]; without mRoPE {R/2, 0, 0}, so
                                     that every frequency takes row 0 (rp_mrope_row)   */
    int mrope_interleaved;        /* mRoPE's section rule: 0 chunked, 1 interleaved    */
    long long pos_row_bytes;      /* mRoPE: bytes from one position row to the next;
                                     0 without mRoPE                                   */
    int pos64, slot64;            /* index dtypes: 1 = int64                           */
    int parts;                    /* rp_parts                                          */
    int heads;                    /* vectorized: heads touched (see place_head)        */
    long long num_tiles;          /* vectorized: ceil(T / tokens per block)            */
    /* QK-norm (vectorized kernels only; qk_norm.cuh): a head's groups are the block's x lanes. */
    const void *q_norm, *k_norm;  /* [D] weights of q / k heads, or NULL                */
    int q_norm_f32, k_norm_f32;   /* weight dtype: 1 = float32, 0 = the inputs' dtype   */
    int norm_float32;             /* 16-bit inputs and a float32-exact offset: y may be
                                     formed in float32 (qk_norm.cuh, rp_norm_rstd)         */
    double norm_eps, norm_offset;
    double norm_inv_dim;          /* 1 / D (a power of two on these kernels: exact)     */
    double inv_freq[FREQ_CAP];    /* [rot_half] the pairs' frequencies, float64        */
};


/* The positions row that frequency (pair) j reads: positions itself without mRoPE. A table
 * builder computes it once, for its own frequency, before the token loop: a few integer
 * instructions per thread, and the position load then stays the first load of the chain. */
template <typename Args>
__device__ __forceinline__ const void *rp_position_row(const Args &a, long long j)
{
    return (const char *)a.positions + rp_mrope_row(a.mrope_section, a.mrope_interleaved, j) * a.pos_row_bytes;
}

/* The kernels compiled for one head size (HALF > 0) serve calls without mRoPE only (rope_pool.cu
 * sends mRoPE calls to the HALF = 0 ones), so their position load, which heads the longest chain,
 * has no row to select first: selecting it after the wait cost a decode call 0.12-0.37 us on the
 * H200 (bench/results/plan-h200.md, section 6), and before the wait, spills. */
template <int HALF, typename Args>
__device__ __forceinline__ const void *rp_position_row_of(const Args &a, long long j)
{
    return HALF > 0 ? a.positions : rp_position_row(a, j);
}

/* Whether pairs of one group may read different position rows (mRoPE on a HALF = 0 kernel). */
template <int HALF, typename Args>
__device__ __forceinline__ bool rp_rows_differ(const Args &a)
{
    return HALF == 0 && a.pos_row_bytes != 0;
}

/* Block and row in block of pool slot `slot` (>= 0): rp_pool_offset's split, on the device. A
 * power of two (flat pools: 2^0) takes a shift and a mask. */
template <typename Args>
__device__ __forceinline__ long long rp_slot_block(const Args &a, long long slot, long long *row)
{
    if (a.block_shift >= 0) {
        *row = slot & ((1LL << a.block_shift) - 1);
        return slot >> a.block_shift;
    }
    /* Other block sizes: a quotient from the float64 reciprocal, off by at most one for any slot
     * below 2^52 (a pool of more slots would not fit in memory), then corrected exactly. A 64-bit
     * integer division is a called routine whose frame costs the kernels registers. */
    long long block = (long long)((double)slot * a.inv_block_size);
    long long r = slot - block * a.block_size;
    if (r < 0) {
        block--;
        r += a.block_size;
    } else if (r >= a.block_size) {
        block++;
        r -= a.block_size;
    }
    *row = r;
    return block;
}

/* 1 / scale in float32, formed in float64 as the CPU kernels form it: from the pointer when there
 * is one (read when the kernel runs, so a captured graph sees the value of the replay), else the
 * host's value. */
__device__ __forceinline__ float rp_inv_scale(const float *ptr, float host_inv_scale)
{
    return ptr ? (float)(1.0 / (double)*ptr) : host_inv_scale;
}

/* Which tensors an item (a frequency group of one head) reads and writes (items.cuh). */
enum rp_item_kind { RP_ITEM_Q, RP_ITEM_K, RP_ITEM_V };

/* Items per thread of the prefill kernel, the one value compiled: 4 measured no better than 2 on
 * the H200 once the prefill kernel computed its addresses at use (bench/results/cuda-h200-tuning.md). */
#define RP_PREFILL_PREFETCH 2

/* Threads per block the vectorized kernels are compiled for, by items per thread (1: the decode
 * kernel; 2: the prefill kernel; 4: at most 128 registers a thread): at most 80 registers a thread
 * below 4. The QK-norm prefill kernel too: it ran a prefill call 1.3-1.4 times faster so than at
 * 128 registers (4 blocks of 192 threads a multiprocessor for Qwen3-8B, against 2:
 * bench/results/qwen3-8b-qk-norm.md). The plan reads the same function. */
__host__ __device__ constexpr int rp_block_threads(int prefetch)
{
    return prefetch >= 4 ? 512 : 768;
}

#endif /* RP_CUDA_KERNEL_ARGS_CUH */
