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

/* The kernels' only parameter, passed by value so that nothing is allocated and a graph captures
 * it whole. FREQ_CAP bounds rotary_dim / 2 (parameter size was measured not to cost launch time). */
template <int FREQ_CAP> struct rp_kernel_args {
    const void *q;                /* [T, Hq, D]                                        */
    const void *k;                /* [T, Hk, D]                                        */
    const void *v;                /* [T, Hk, D]                                        */
    const void *positions;        /* [T] int32 | int64                                 */
    const void *slots;            /* [T] int32 | int64                                 */
    void *q_rot;                  /* [T, Hq, D]; may be q                              */
    void *k_rot;                  /* [T, Hk, D]; may be k                              */
    void *k_pool;                 /* [P, Hk, D]                                        */
    void *v_pool;                 /* [P, Hk, D]                                        */
    rp_cuda_slot_status *status;  /* [1] the context's bad-slot record                 */
    long long stride[T_COUNT][3]; /* in elements, indexed by T_*                       */
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
    int pos64, slot64;            /* index dtypes: 1 = int64                           */
    int parts;                    /* rp_parts                                          */
    int heads;                    /* vectorized: heads touched (see place_head)        */
    long long num_tiles;          /* vectorized: ceil(T / tokens per block)            */
    double inv_freq[FREQ_CAP];    /* [rot_half] the pairs' frequencies, float64        */
};


/* Items per thread of the prefill kernel, the one value compiled: 4 measured no better than 2 on
 * the H200 once the prefill kernel computed its addresses at use (bench/results/cuda-h200-tuning.md). */
#define RP_PREFILL_PREFETCH 2

/* Threads per block the vectorized kernels are compiled for, by items per thread (1: the decode
 * kernel; 2: the prefill kernel; 4: at most 128 registers a thread): at most 80 registers a thread
 * below 4. The plan reads the same function. */
__host__ __device__ constexpr int rp_block_threads(int prefetch)
{
    return prefetch >= 4 ? 512 : 768;
}

#endif /* RP_CUDA_KERNEL_ARGS_CUH */
