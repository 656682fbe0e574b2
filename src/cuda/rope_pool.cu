/*
 * rope_pool.cu — the CUDA kernels of rope_pool_fused, the one function that chooses their launch
 * geometry (rp_cuda_make_plan), and the dispatch from runtime sizes to compiled variants.
 *
 * Vectorized kernels (the fast path): decode and prefill. An item is one frequency group of one
 * head: ELEMS = 16 / sizeof(element) consecutive pairs (x[i], x[i + D/2]), i.e. two 16-byte vectors. A block is
 * (groups, heads, tokens): consecutive threads take consecutive groups of a head row, so a warp
 * reads and writes whole runs of 16-byte vectors. Each thread first issues the loads of the
 * token's position (if it helps build the table), of its first items and of the token's slot;
 * then the block computes its (token, frequency) cos/sin table once, in float64, into shared
 * memory while those loads are in flight; after one barrier every item is rotated in float32 and
 * stored with 16-byte stores. On sm_90 the launch overlaps the previous kernel on the stream
 * (programmatic dependent launch); a kernel waits for it before touching memory.
 *   - Decode (one item per thread) is bound by that chain of latencies: its blocks take a few
 *     groups of one token, so that a token spreads over several multiprocessors, and every thread
 *     turns the parameters into addresses before the wait, overlapping the previous kernel.
 *   - Prefill (2 or 4 items per thread) is bound by bytes in flight: a block takes a whole token,
 *     each thread prefetches several heads and computes addresses where it uses them.
 * The plan picks by items per thread.
 *
 * Strided kernel (every other layout: head_dim not contiguous, rows not 16-byte aligned, D/2 not
 * a multiple of ELEMS). One thread per (token, frequency): it computes that angle once and walks
 * all heads. Plain element loads; the same numerics.
 *
 * All of them never write a pool row whose slot is negative or >= P; the latter is recorded in the
 * context's status word (device.cuh) for rp_context_check().
 */
#include "cuda_backend.h"
#include "device.cuh"

#include <limits.h>
#include <stddef.h>
#include <string.h>

/* Tensors of the [token|slot, head, dim] family, indexing rp_kernel_args.stride. */
enum { T_Q, T_K, T_V, T_Q_ROT, T_K_ROT, T_K_POOL, T_V_POOL, T_COUNT };

/* The kernels' only parameter, passed by value so that nothing is allocated and a graph captures
 * it whole. FREQ_CAP bounds head_dim / 2 (parameter size was measured not to cost launch time). */
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
    int pos64, slot64;            /* index dtypes: 1 = int64                           */
    int parts;                    /* rp_parts                                          */
    int heads;                    /* vectorized: heads touched (see place_head)        */
    long long num_tiles;          /* vectorized: ceil(T / tokens per block)            */
    double inv_freq[FREQ_CAP];    /* [half_dim] rope_base^(-2i/D), float64             */
};

/* ---- the vectorized kernel -------------------------------------------------------------------- */

/* Rotates one item in place: lo = its pairs' first halves, hi = their second halves; cs[c] =
 * (cos, sin) of pairs 2c and 2c + 1, read from the table at a stride of `cs_stride` float4s. */
template <rp_dtype DT>
__device__ __forceinline__ void rotate_vectors(uint4 *lo, uint4 *hi, const float4 *cs, int cs_stride)
{
    typedef rp_elem<DT> E;
    constexpr int V = E::ELEMS;
    float x[V], y[V], ox[V], oy[V];
    E::unpack(*lo, x);
    E::unpack(*hi, y);
#pragma unroll
    for (int c = 0; c < V / 2; c++) {
        const float4 r = cs[c * cs_stride];
        rp_rotate(x[2 * c], y[2 * c], r.x, r.y, &ox[2 * c], &oy[2 * c]);
        rp_rotate(x[2 * c + 1], y[2 * c + 1], r.z, r.w, &ox[2 * c + 1], &oy[2 * c + 1]);
    }
    *lo = E::pack(ox);
    *hi = E::pack(oy);
}

/* Table entry of pair j of a group: (cos, sin) of angle, float64 in, float32 out. The table of a
 * token is [V/2][groups] float4, each float4 the (cos, sin) of pairs 2c and 2c + 1; cs points at
 * this thread's group, GB groups apart. */
__device__ __forceinline__ void put_cos_sin(float4 *cs, int GB, int j, double angle)
{
    float s, c;
    rp_angle_sincos(angle, &s, &c);
    float *entry = (float *)&cs[(j / 2) * GB] + (j % 2) * 2;
    entry[0] = c;
    entry[1] = s;
}

/* Which tensors an item (a frequency group of one head) reads and writes. */
enum rp_item_kind { RP_ITEM_Q, RP_ITEM_K, RP_ITEM_V };

/* Where one item is read and written: base addresses at row 0 (token 0, slot 0). Built from the
 * parameters alone, before the kernel waits for the one before it: none of it depends on memory
 * that kernel may write. The bytes from one row to the next depend only on the kind (rp_item_rows),
 * so a thread holds 7 registers per item. */
struct rp_item {
    const char *src; /* q, k or v head row of token 0 (k_rot when only scattering)          */
    char *out;       /* q_rot / k_rot head row of token 0; NULL when the item is not rotated */
    char *pool;      /* k_pool / v_pool head row of slot 0; NULL when no pool is written      */
    int kind;        /* rp_item_kind                                                          */
};

/* cond ? x : y for two parameter values. A plain select of two parameters may be compiled into one
 * parameter load from a computed address, which the hardware serialises when the lanes of a warp
 * pick different ones (measured: +7% time per prefill call on an H200); hiding where the values came
 * from keeps two broadcast loads and a register select. */
__device__ __forceinline__ long long rp_pick(bool cond, long long x, long long y)
{
    asm("" : "+l"(x));
    asm("" : "+l"(y));
    return cond ? x : y;
}

__device__ __forceinline__ const char *rp_pick(bool cond, const void *x, const void *y)
{
    return (const char *)rp_pick(cond, (long long)x, (long long)y);
}

/* The item of head h' (counted over the heads a call touches: q, then k, then v; k and v only when
 * scattering) at element `first` of its head. Every stride is read with a constant offset and
 * selected by value: no parameter is indexed at run time, so nothing is copied to local memory and
 * no load waits on an address computation. */
template <size_t ELEM, typename Args>
__device__ __forceinline__ rp_item make_item(const Args &a, int h, long long first)
{
    h += a.parts == RP_PARTS_SCATTER ? a.num_qo_heads : 0;
    const bool q = h < a.num_qo_heads, k = !q && h < a.num_qo_heads + a.num_kv_heads;
    const int head = q ? h : k ? h - a.num_qo_heads : h - a.num_qo_heads - a.num_kv_heads;
    const bool scatter = a.parts == RP_PARTS_SCATTER;
    const char *k_in = rp_pick(scatter, a.k_rot, a.k);
    const long long k_in_s1 = rp_pick(scatter, a.stride[T_K_ROT][1], a.stride[T_K][1]);
    const char *in = rp_pick(q, a.q, rp_pick(k, k_in, a.v));
    const long long in_s1 = rp_pick(q, a.stride[T_Q][1], rp_pick(k, k_in_s1, a.stride[T_V][1]));
    const char *out = rp_pick(q, a.q_rot, a.k_rot);
    const long long out_s1 = rp_pick(q, a.stride[T_Q_ROT][1], a.stride[T_K_ROT][1]);
    const char *pool = rp_pick(k, a.k_pool, a.v_pool);
    const long long pool_s1 = rp_pick(k, a.stride[T_K_POOL][1], a.stride[T_V_POOL][1]);
    const long long e = (long long)ELEM;
    rp_item it;
    it.src = in + (head * in_s1 + first) * e;
    it.out = !scatter && (q || k) ? (char *)out + (head * out_s1 + first) * e : NULL;
    it.pool = a.parts != RP_PARTS_ROTATE && !q ? (char *)pool + (head * pool_s1 + first) * e : NULL;
    it.kind = q ? RP_ITEM_Q : k ? RP_ITEM_K : RP_ITEM_V;
    return it;
}

/* Bytes from one token's (slot's) row of an item's tensors to the next. */
struct rp_item_rows {
    long long src, out, pool;
};

template <size_t ELEM, typename Args>
__device__ __forceinline__ rp_item_rows item_rows(const Args &a, int kind)
{
    const bool q = kind == RP_ITEM_Q, k = kind == RP_ITEM_K, scatter = a.parts == RP_PARTS_SCATTER;
    rp_item_rows r;
    const long long k_in = rp_pick(scatter, a.stride[T_K_ROT][0], a.stride[T_K][0]);
    r.src = rp_pick(q, a.stride[T_Q][0], rp_pick(k, k_in, a.stride[T_V][0])) * (long long)ELEM;
    r.out = rp_pick(q, a.stride[T_Q_ROT][0], a.stride[T_K_ROT][0]) * (long long)ELEM;
    r.pool = rp_pick(k, a.stride[T_K_POOL][0], a.stride[T_V_POOL][0]) * (long long)ELEM;
    return r;
}

/* Rotates one item of token t (lo = its pairs' first halves, hi = their second halves) when it is
 * rotated, and stores it where it goes. cs[c] = (cos, sin) of the item's pairs 2c and 2c + 1,
 * read from the table at a stride of `cs_stride` float4s. */
template <rp_dtype DT>
__device__ __forceinline__ void finish_item(const rp_item &it, const rp_item_rows &rows, uint4 lo, uint4 hi,
                                            long long t, bool to_pool, long long slot, long long half_bytes,
                                            const float4 *cs, int cs_stride)
{
    if (it.out) {
        rotate_vectors<DT>(&lo, &hi, cs, cs_stride);
        char *dst = it.out + t * rows.out;
        *(uint4 *)dst = lo;
        *(uint4 *)(dst + half_bytes) = hi;
    }
    if (it.pool && to_pool) {
        char *dst = it.pool + slot * rows.pool;
        *(uint4 *)dst = lo;
        *(uint4 *)(dst + half_bytes) = hi;
    }
}

/* ---- the prefill kernel's placement of heads (addresses computed where they are used) ----------- */

/* Which tensor head h' (counted over the heads a call touches: q, then k, then v; k and v only
 * when scattering) is, and its index within that tensor. */
struct head_place {
    int kind, head;
};

template <typename Args> __device__ __forceinline__ head_place place_head(const Args &a, int h)
{
    head_place pl;
    h += a.parts == RP_PARTS_SCATTER ? a.num_qo_heads : 0;
    if (h < a.num_qo_heads) {
        pl.kind = RP_ITEM_Q;
    } else if ((h -= a.num_qo_heads) < a.num_kv_heads) {
        pl.kind = RP_ITEM_K;
    } else {
        pl.kind = RP_ITEM_V;
        h -= a.num_kv_heads;
    }
    pl.head = h;
    return pl;
}

/* Byte address of element `first` of (row, head). The candidates' strides are read with constant
 * offsets and selected by value: no parameter is indexed at run time, so nothing waits on an
 * address computation to read a parameter and nothing is copied to local memory. */
template <size_t ELEM>
__device__ __forceinline__ char *item_address(const void *base, long long s0, long long s1, long long row,
                                              int head, long long first)
{
    return (char *)base + (row * s0 + head * s1 + first) * (long long)ELEM;
}

/* The row an item reads: q, k (k_rot when only scattering) or v. */
template <size_t ELEM, typename Args>
__device__ __forceinline__ const char *source_address(const Args &a, const head_place &pl, long long t,
                                                      long long first)
{
    const bool q = pl.kind == RP_ITEM_Q, k = pl.kind == RP_ITEM_K, scatter = a.parts == RP_PARTS_SCATTER;
    const void *base = q ? a.q : k ? (scatter ? a.k_rot : a.k) : a.v;
    const long long s0 = q ? a.stride[T_Q][0] : k ? (scatter ? a.stride[T_K_ROT][0] : a.stride[T_K][0]) : a.stride[T_V][0];
    const long long s1 = q ? a.stride[T_Q][1] : k ? (scatter ? a.stride[T_K_ROT][1] : a.stride[T_K][1]) : a.stride[T_V][1];
    return item_address<ELEM>(base, s0, s1, t, pl.head, first);
}

/* Rotates one item (lo = its pairs' first halves, hi = their second halves; elements `first` ..
 * `first` + ELEMS - 1 of the head) and stores it where it goes. cs[c] = (cos, sin) of the item's
 * pairs 2c and 2c + 1, read from the table at a stride of `cs_stride` float4s. */
template <rp_dtype DT, typename Args>
__device__ __forceinline__ void finish_placed_item(const Args &a, const head_place &pl, uint4 lo, uint4 hi,
                                            long long t, long long slot, long long first,
                                            long long half_bytes, const float4 *cs, int cs_stride)
{
    constexpr size_t ELEM = sizeof(typename rp_elem<DT>::storage);
    const bool to_pool = a.parts != RP_PARTS_ROTATE && slot >= 0 && slot < a.pool_size;
    if (pl.kind == RP_ITEM_V || a.parts == RP_PARTS_SCATTER) { /* bit copy into the pool */
        if (to_pool) {
            const bool v = pl.kind == RP_ITEM_V;
            char *dst = item_address<ELEM>(v ? a.v_pool : a.k_pool, v ? a.stride[T_V_POOL][0] : a.stride[T_K_POOL][0],
                                           v ? a.stride[T_V_POOL][1] : a.stride[T_K_POOL][1], slot, pl.head, first);
            *(uint4 *)dst = lo;
            *(uint4 *)(dst + half_bytes) = hi;
        }
        return;
    }
    uint4 out_lo = lo, out_hi = hi;
    rotate_vectors<DT>(&out_lo, &out_hi, cs, cs_stride);
    const bool is_q = pl.kind == RP_ITEM_Q;
    char *dst = item_address<ELEM>(is_q ? a.q_rot : a.k_rot, is_q ? a.stride[T_Q_ROT][0] : a.stride[T_K_ROT][0],
                                   is_q ? a.stride[T_Q_ROT][1] : a.stride[T_K_ROT][1], t, pl.head, first);
    *(uint4 *)dst = out_lo;
    *(uint4 *)(dst + half_bytes) = out_hi;
    if (!is_q && to_pool) {
        char *pool = item_address<ELEM>(a.k_pool, a.stride[T_K_POOL][0], a.stride[T_K_POOL][1], slot, pl.head, first);
        *(uint4 *)pool = out_lo;
        *(uint4 *)(pool + half_bytes) = out_hi;
    }
}

/* Threads per block the vectorized kernels are compiled for, by items per thread (1: the decode
 * kernel; 2 and 4: the prefill kernel): at most 80 and 128 registers a thread. The plan reads the
 * same function. */
__host__ __device__ constexpr int rp_block_threads(int prefetch)
{
    return prefetch >= 4 ? 512 : 768;
}

/* The decode kernel: one item per thread (heads past blockDim.y are looped over after it). HALF: head_dim
 * / 2 when compiled for one head_dim, 0 for any (up to FREQ_CAP).
 *
 * Block (x, y, z) = (frequency group, head, token): thread (g, h, y) serves group g of heads h,
 * h + blockDim.y, ... of token tile * blockDim.z + y, so no index needs a division. Grid (x, y) =
 * (token tile, chunk of blockDim.x groups): decode splits a token's groups over several blocks,
 * each computing only its own frequencies, so that more multiprocessors share a token.
 *
 * A decode call is a chain of latencies, and most of its time was instructions on parameters
 * (bench/results/cuda-h200-tuning.md: 2.3 us a call at T = 1, against 0.7 us for a plain copy of
 * its bytes). So before waiting for the previous kernel, each thread turns the parameters into
 * its item's addresses and (if it builds the table) its frequency: with programmatic dependent
 * launch that work overlaps the previous kernel, and after the wait a decode call is one chain of loads,
 * float64 sin/cos, one barrier, rotation and stores. */
template <rp_dtype DT, int HALF, int FREQ_CAP>
__global__ void __launch_bounds__(rp_block_threads(1))
rope_pool_decode(const __grid_constant__ rp_kernel_args<FREQ_CAP> a)
{
    typedef rp_elem<DT> E;
    constexpr int V = E::ELEMS;
    constexpr size_t ELEM = sizeof(typename E::storage);
    const long long half_bytes = (long long)(HALF ? HALF : a.half_dim) * (long long)ELEM;
    /* [tokens][V/2][groups of the block] float4: (cos, sin) of pairs 2c and 2c + 1 of a group,
     * laid out so that a warp's consecutive groups read consecutive 16 bytes. */
    extern __shared__ float4 table[];

    rp_let_next_kernel_launch();
    const int GB = blockDim.x, HY = blockDim.y, Y = blockDim.z;
    const long long first = (long long)(blockIdx.y * GB + threadIdx.x) * V; /* in its head */
    const long long T = a.num_tokens, num_tiles = a.num_tiles;
    const bool rotates = a.parts != RP_PARTS_SCATTER, uses_slot = a.parts != RP_PARTS_ROTATE;
    float4 *cs = table + threadIdx.z * (GB * V / 2) + threadIdx.x;
    /* Threads y < V build the table: pair y (y + HY, ...) of their group. */
    const bool builds_table = rotates && (int)threadIdx.y < V;
    const double freq = builds_table ? a.inv_freq[first + threadIdx.y] : 0.0;
    /* This thread's item (head y; junk, and unused, when y >= heads), before the wait. */
    const rp_item item = make_item<ELEM>(a, threadIdx.y, first);
    const rp_item_rows rows = item_rows<ELEM>(a, item.kind);
    unsigned long long ready = (unsigned long long)__double_as_longlong(freq);
    ready ^= (unsigned long long)item.src ^ (unsigned long long)item.out ^ (unsigned long long)item.pool ^
             (unsigned long long)(rows.src ^ rows.out ^ rows.pool);
    /* Every 64-byte line of the scalar parameters, so that the reads after the wait hit. */
    const unsigned *words = (const unsigned *)&a;
#pragma unroll
    for (int i = 0; i < (int)(offsetof(rp_kernel_args<FREQ_CAP>, inv_freq) / 4); i += 16)
        ready ^= words[i];
    rp_compute_before_here(ready);
    rp_wait_for_prior_kernel();

    for (long long tile = blockIdx.x; tile < num_tiles; tile += gridDim.x) {
        const long long t = tile * Y + threadIdx.z;
        const bool token_ok = t < T;

        /* 0. The position, first: it heads the longest chain. */
        rp_index_words pos = {0, 0};
        if (builds_table && token_ok)
            pos = rp_index_issue(a.positions, a.pos64, a.pos_stride, t);

        /* 1. This thread's item and the token's slot. */
        uint4 lo, hi;
        if (token_ok && (int)threadIdx.y < a.heads) {
            const char *p = item.src + t * rows.src;
            lo = *(const uint4 *)p;
            hi = *(const uint4 *)(p + half_bytes);
        }
        rp_index_words slot_words = {-1, -1};
        if (uses_slot && token_ok)
            slot_words = rp_index_issue(a.slots, a.slot64, a.slot_stride, t);

        /* 2. The (token, frequency) table of this block, while the loads are in flight, once for
         * all heads. */
        if (rotates) {
            if (builds_table && token_ok)
                for (int j = threadIdx.y; j < V; j += HY) { /* more than once only when HY < V */
                    float s, c;
                    const double f = j == (int)threadIdx.y ? freq : a.inv_freq[first + j];
                    rp_angle_sincos((double)rp_index_value(pos, a.pos64) * f, &s, &c);
                    float *entry = (float *)&cs[(j / 2) * GB] + (j % 2) * 2;
                    entry[0] = c;
                    entry[1] = s;
                }
            __syncthreads();
        }

        /* 3. Rotate and store: this thread's item, then heads past blockDim.y. */
        const long long slot = uses_slot ? rp_index_value(slot_words, a.slot64) : -1;
        const bool to_pool = slot >= 0 && slot < a.pool_size;
        if (token_ok && (int)threadIdx.y < a.heads)
            finish_item<DT>(item, rows, lo, hi, t, to_pool, slot, half_bytes, cs, GB);
        for (int h = threadIdx.y + HY; token_ok && h < a.heads; h += HY) {
            const rp_item it = make_item<ELEM>(a, h, first);
            const rp_item_rows r = item_rows<ELEM>(a, it.kind);
            const char *p = it.src + t * r.src;
            finish_item<DT>(it, r, *(const uint4 *)p, *(const uint4 *)(p + half_bytes), t, to_pool, slot, half_bytes,
                            cs, GB);
        }
        if (threadIdx.x == 0 && threadIdx.y == 0 && blockIdx.y == 0 && slot >= a.pool_size)
            rp_record_bad_slot(a.status, t, slot, a.pool_size);
        if (rotates && tile + gridDim.x < num_tiles)
            __syncthreads(); /* the next tile rewrites the table */
    }
}

/* The prefill kernel: PREFETCH (2 or 4) heads per thread whose loads are issued before the table
 * is built, so that each multiprocessor keeps enough bytes in flight; the geometry is the decode
 * kernel's, with a block taking whole tokens. Addresses are computed where they are used (after
 * the wait): holding them across the barrier cost registers and 7% of the time of a prefill call
 * (bench/results/cuda-h200-tuning.md). */
template <rp_dtype DT, int HALF, int FREQ_CAP, int PREFETCH>
__global__ void __launch_bounds__(rp_block_threads(PREFETCH))
rope_pool_prefill(const __grid_constant__ rp_kernel_args<FREQ_CAP> a)
{
    typedef rp_elem<DT> E;
    constexpr int V = E::ELEMS;
    constexpr size_t ELEM = sizeof(typename E::storage);
    const long long half_bytes = (long long)(HALF ? HALF : a.half_dim) * (long long)ELEM;
    /* [tokens][V/2][groups of the block] float4: (cos, sin) of pairs 2c and 2c + 1 of a group,
     * laid out so that a warp's consecutive groups read consecutive 16 bytes. */
    extern __shared__ float4 table[];

    const int GB = blockDim.x, HY = blockDim.y, Y = blockDim.z;
    const int group = blockIdx.y * GB + threadIdx.x;
    const long long first = (long long)group * V; /* the item's first element in its head */
    const long long T = a.num_tokens, num_tiles = a.num_tiles;
    const bool rotates = a.parts != RP_PARTS_SCATTER;
    float4 *cs = table + threadIdx.z * (GB * V / 2) + threadIdx.x;

    rp_let_next_kernel_launch();
    rp_wait_for_prior_kernel();
    for (long long tile = blockIdx.x; tile < num_tiles; tile += gridDim.x) {
        const long long t = tile * Y + threadIdx.z;
        const bool token_ok = t < T;

        /* 0. The position, first: it heads the longest chain (threads y < V build the table). */
        const bool builds_table = rotates && token_ok && (int)threadIdx.y < V;
        rp_index_words pos = {0, 0};
        if (builds_table)
            pos = rp_index_issue(a.positions, a.pos64, a.pos_stride, t);

        /* 1. This thread's items and the token's slot. */
        uint4 lo[PREFETCH], hi[PREFETCH];
#pragma unroll
        for (int j = 0; j < PREFETCH; j++) {
            const int h = threadIdx.y + j * HY;
            if (token_ok && h < a.heads) {
                const char *p = source_address<ELEM>(a, place_head(a, h), t, first);
                lo[j] = *(const uint4 *)p;
                hi[j] = *(const uint4 *)(p + half_bytes);
            }
        }
        const bool uses_slot = token_ok && a.parts != RP_PARTS_ROTATE;
        rp_index_words slot_words = {-1, -1};
        if (uses_slot)
            slot_words = rp_index_issue(a.slots, a.slot64, a.slot_stride, t);

        /* 2. The (token, frequency) table of this block, while the loads are in flight: thread
         * (g, y) computes pair y (y + HY, ...) of group g, once for all heads. */
        if (rotates) {
            if (builds_table)
                for (int j = threadIdx.y; j < V; j += HY) {
                    float s, c;
                    rp_angle_sincos((double)rp_index_value(pos, a.pos64) * a.inv_freq[first + j], &s, &c);
                    float *entry = (float *)&cs[(j / 2) * GB] + (j % 2) * 2;
                    entry[0] = c;
                    entry[1] = s;
                }
            __syncthreads();
        }

        /* 3. Rotate and store. */
        const long long slot = uses_slot ? rp_index_value(slot_words, a.slot64) : -1;
#pragma unroll
        for (int j = 0; j < PREFETCH; j++) {
            const int h = threadIdx.y + j * HY;
            if (token_ok && h < a.heads)
                finish_placed_item<DT>(a, place_head(a, h), lo[j], hi[j], t, slot, first, half_bytes, cs, GB);
        }
        for (int h = threadIdx.y + PREFETCH * HY; token_ok && h < a.heads; h += HY) {
            const head_place pl = place_head(a, h);
            const char *p = source_address<ELEM>(a, pl, t, first);
            finish_placed_item<DT>(a, pl, *(const uint4 *)p, *(const uint4 *)(p + half_bytes), t, slot, first,
                            half_bytes, cs, GB);
        }
        if (threadIdx.x == 0 && threadIdx.y == 0 && blockIdx.y == 0 && slot >= a.pool_size)
            rp_record_bad_slot(a.status, t, slot, a.pool_size);
        if (rotates && tile + gridDim.x < num_tiles)
            __syncthreads(); /* the next tile rewrites the table */
    }
}

/* ---- the strided kernel ------------------------------------------------------------------------ */

/* Rotates pair i of every head of one token: in[t] -> out[t] and, when pool is not NULL,
 * pool[slot]. Each pair is read before it is written, so in == out (in place) is safe. */
template <rp_dtype DT>
__device__ __forceinline__ void rotate_heads(const void *in, const long long *is, void *out,
                                             const long long *os, void *pool, const long long *ps,
                                             int heads, int half_dim, long long t, long long slot, int i,
                                             float c, float s)
{
    typedef rp_elem<DT> E;
    typedef typename E::storage S;
    for (int h = 0; h < heads; h++) {
        const long long xi = t * is[0] + h * is[1] + i * is[2];
        const float x = E::to_float(((const S *)in)[xi]), y = E::to_float(((const S *)in)[xi + half_dim * is[2]]);
        float ox, oy;
        rp_rotate(x, y, c, s, &ox, &oy);
        const S sx = E::from_float(ox), sy = E::from_float(oy);
        const long long oi = t * os[0] + h * os[1] + i * os[2];
        ((S *)out)[oi] = sx;
        ((S *)out)[oi + half_dim * os[2]] = sy;
        if (pool) {
            const long long pi = slot * ps[0] + h * ps[1] + i * ps[2];
            ((S *)pool)[pi] = sx;
            ((S *)pool)[pi + half_dim * ps[2]] = sy;
        }
    }
}

/* Copies pair i of every head, bit for bit: in[t] -> out[slot]. */
template <rp_dtype DT>
__device__ __forceinline__ void copy_heads(const void *in, const long long *is, void *out,
                                           const long long *os, int heads, int half_dim, long long t,
                                           long long slot, int i)
{
    typedef typename rp_elem<DT>::storage S;
    for (int h = 0; h < heads; h++) {
        const long long si = t * is[0] + h * is[1] + i * is[2], di = slot * os[0] + h * os[1] + i * os[2];
        ((S *)out)[di] = ((const S *)in)[si];
        ((S *)out)[di + half_dim * os[2]] = ((const S *)in)[si + half_dim * is[2]];
    }
}

template <rp_dtype DT, int FREQ_CAP>
__global__ void __launch_bounds__(256) rope_pool_strided(const __grid_constant__ rp_kernel_args<FREQ_CAP> a)
{
    const long long n = a.num_tokens * a.half_dim;
    rp_let_next_kernel_launch();
    rp_wait_for_prior_kernel();
    for (long long w = blockIdx.x * (long long)blockDim.x + threadIdx.x; w < n;
         w += (long long)gridDim.x * blockDim.x) {
        const long long t = w / a.half_dim;
        const int i = (int)(w % a.half_dim);
        long long slot = -1;
        if (a.parts != RP_PARTS_ROTATE)
            slot = rp_load_index_dev(a.slots, a.slot64, a.slot_stride, t);
        const bool to_pool = slot >= 0 && slot < a.pool_size;
        if (a.parts != RP_PARTS_SCATTER) {
            const long long pos = rp_load_index_dev(a.positions, a.pos64, a.pos_stride, t);
            float s, c;
            rp_angle_sincos((double)pos * a.inv_freq[i], &s, &c);
            rotate_heads<DT>(a.q, a.stride[T_Q], a.q_rot, a.stride[T_Q_ROT], NULL, NULL,
                             a.num_qo_heads, a.half_dim, t, slot, i, c, s);
            rotate_heads<DT>(a.k, a.stride[T_K], a.k_rot, a.stride[T_K_ROT],
                             a.parts == RP_PARTS_ALL && to_pool ? a.k_pool : NULL, a.stride[T_K_POOL],
                             a.num_kv_heads, a.half_dim, t, slot, i, c, s);
        }
        if (to_pool) {
            if (a.parts == RP_PARTS_SCATTER)
                copy_heads<DT>(a.k_rot, a.stride[T_K_ROT], a.k_pool, a.stride[T_K_POOL], a.num_kv_heads,
                               a.half_dim, t, slot, i);
            copy_heads<DT>(a.v, a.stride[T_V], a.v_pool, a.stride[T_V_POOL], a.num_kv_heads, a.half_dim, t,
                           slot, i);
        }
        if (i == 0 && slot >= a.pool_size)
            rp_record_bad_slot(a.status, t, slot, a.pool_size);
    }
}

/* ---- the plan --------------------------------------------------------------------------------- */

enum {
    STRIDED_THREADS = 256,
    MAX_GROUPS = 512,          /* frequency groups of a head row the vectorized kernel takes */
    /* Tuned on an H200 (bench/results/cuda-*.md): a call is "large" from this many tokens per
     * multiprocessor; its threads then prefetch this many heads. Smaller calls give each block
     * this many frequency groups of a token. */
    LARGE_CALL_TOKENS_PER_SM = 4,
    LARGE_CALL_PREFETCH = 2,
    MIN_LARGE_CALL_BLOCK_THREADS = 64, /* below, several tokens share a block; one measured best */
    DECODE_GROUPS_PER_BLOCK = 4,
    MAX_TABLE_BYTES = 48 * 1024,
    MAX_TOKENS_PER_BLOCK = 64, /* blockDim.z */
};
static const long long MAX_GRID = INT_MAX;

/* A [., ., D] tensor takes 16-byte vectors when its rows start on 16 bytes. Strides of a
 * dimension of extent 1 are never used. */
static int rows_aligned(const void *data, const int64_t stride[3], int64_t n0, int64_t n1, size_t elem)
{
    return (uintptr_t)data % 16 == 0 && (n0 <= 1 || (stride[0] * (int64_t)elem) % 16 == 0) &&
           (n1 <= 1 || (stride[1] * (int64_t)elem) % 16 == 0);
}

static long long div_up(long long a, long long b)
{
    return (a + b - 1) / b;
}

rp_cuda_plan rp_cuda_make_plan(const rp_cuda_state *st, const rp_problem *p, rp_parts parts)
{
    rp_cuda_plan plan;
    memset(&plan, 0, sizeof plan);
    const size_t elem = rp_dtype_size(p->dtype);
    const long long T = p->num_tokens, half_dim = p->head_dim / 2, per_vector = 16 / (long long)elem;
    const long long Hq = p->num_qo_heads, Hk = p->num_kv_heads, P = p->pool_size;
    const long long heads = parts == RP_PARTS_ALL ? Hq + 2 * Hk : parts == RP_PARTS_ROTATE ? Hq + Hk : 2 * Hk;
    const long long groups = half_dim / per_vector;

    plan.vectorized = p->inner_contiguous && half_dim % per_vector == 0 && groups <= MAX_GROUPS &&
                      heads <= INT_MAX / 2 &&
                      rows_aligned(p->q, p->q_stride, T, Hq, elem) &&
                      rows_aligned(p->k, p->k_stride, T, Hk, elem) &&
                      rows_aligned(p->v, p->v_stride, T, Hk, elem) &&
                      rows_aligned(p->q_rot, p->q_rot_stride, T, Hq, elem) &&
                      rows_aligned(p->k_rot, p->k_rot_stride, T, Hk, elem) &&
                      rows_aligned(p->k_pool, p->k_pool_stride, P, Hk, elem) &&
                      rows_aligned(p->v_pool, p->v_pool_stride, P, Hk, elem);
    plan.overlap_launch = st->compute_capability >= 90;
    if (!plan.vectorized) {
        plan.threads_x = STRIDED_THREADS;
        const long long blocks = div_up(T * half_dim, STRIDED_THREADS);
        const long long cap = (long long)st->num_sms * 64;
        plan.grid = (unsigned)(blocks < cap ? blocks : cap);
        return plan;
    }
    /* Small calls (decode) are bound by a chain of latencies and by the instructions of the few
     * multiprocessors they occupy: each token's frequency groups are split over several blocks
     * (DECODE_GROUPS_PER_BLOCK, or 2, each: 64 or 32 contiguous bytes per head row), one head per
     * thread: the decode kernel. Large calls (prefill) are bound by the bytes each multiprocessor
     * keeps in flight: a block serves whole tokens and each thread prefetches several heads (the
     * prefill kernel; with few heads a token, prefetch drops to 1 and the decode kernel runs). */
    const long long sms = st->num_sms > 0 ? st->num_sms : 1;
    const int large = T >= LARGE_CALL_TOKENS_PER_SM * sms;
    long long gb = groups;
    for (long long split = DECODE_GROUPS_PER_BLOCK; !large && split >= 2 && gb == groups; split /= 2)
        if (groups % split == 0)
            gb = split;
    int prefetch = large ? LARGE_CALL_PREFETCH : 1;
    while (prefetch > 1 && heads * gb < (long long)prefetch * 32)
        prefetch /= 2; /* keep at least a warp of threads per token */
    const long long limit = rp_block_threads(prefetch);
    long long hy = div_up(heads, prefetch);
    if (hy * gb > limit)
        hy = limit / gb;
    long long y = large ? MIN_LARGE_CALL_BLOCK_THREADS / (hy * gb) : 1;
    if (y * hy * gb > limit)
        y = limit / (hy * gb);
    const long long table_bytes_per_token = gb * per_vector * 2 * (long long)sizeof(float);
    if (y * table_bytes_per_token > MAX_TABLE_BYTES)
        y = MAX_TABLE_BYTES / table_bytes_per_token;
    if (y > MAX_TOKENS_PER_BLOCK)
        y = MAX_TOKENS_PER_BLOCK;
    if (y < 1)
        y = 1;
    plan.groups_per_block = (int)gb;
    plan.chunks = (int)(groups / gb);
    plan.heads = (int)heads;
    plan.heads_per_pass = (int)hy;
    plan.items_per_thread = prefetch;
    plan.tokens_per_block = (int)y;
    const long long tiles = div_up(T, y);
    plan.grid = (unsigned)(tiles < MAX_GRID ? tiles : MAX_GRID);
    plan.shared_bytes = parts == RP_PARTS_SCATTER ? 0 : (size_t)(y * table_bytes_per_token);
    return plan;
}

/* ---- dispatch --------------------------------------------------------------------------------- */

template <int FREQ_CAP>
static void fill_args(rp_kernel_args<FREQ_CAP> *a, const rp_cuda_state *st, const rp_problem *p,
                      rp_parts parts, const rp_cuda_plan *plan)
{
    a->q = p->q;
    a->k = p->k;
    a->v = p->v;
    a->positions = p->positions;
    a->slots = p->slots;
    a->q_rot = p->q_rot;
    a->k_rot = p->k_rot;
    a->k_pool = p->k_pool;
    a->v_pool = p->v_pool;
    a->status = st->status;
    const int64_t *strides[T_COUNT] = {p->q_stride,     p->k_stride,      p->v_stride,     p->q_rot_stride,
                                       p->k_rot_stride, p->k_pool_stride, p->v_pool_stride};
    for (int t = 0; t < T_COUNT; t++)
        for (int d = 0; d < 3; d++)
            a->stride[t][d] = strides[t][d];
    a->pos_stride = p->pos_stride;
    a->slot_stride = p->slot_stride;
    a->num_tokens = p->num_tokens;
    a->pool_size = p->pool_size;
    a->num_qo_heads = (int)p->num_qo_heads;
    a->num_kv_heads = (int)p->num_kv_heads;
    a->half_dim = (int)(p->head_dim / 2);
    a->pos64 = p->pos_dtype == RP_I64;
    a->slot64 = p->slot_dtype == RP_I64;
    a->parts = (int)parts;
    a->heads = plan->heads;
    a->num_tiles = plan->tokens_per_block > 0 ? (p->num_tokens + plan->tokens_per_block - 1) / plan->tokens_per_block : 0;
    memcpy(a->inv_freq, p->inv_freq, (size_t)a->half_dim * sizeof(double));
}

/* Launches kernel<<<grid, block, shared_bytes, stream>>>(args), with programmatic stream
 * serialization when the plan asks for it. */
template <typename Args>
static cudaError_t launch(void (*kernel)(Args), dim3 grid, dim3 block, size_t shared_bytes,
                          cudaStream_t stream, int overlap_launch, const Args &args)
{
    cudaLaunchConfig_t config = {};
    config.gridDim = grid;
    config.blockDim = block;
    config.dynamicSmemBytes = shared_bytes;
    config.stream = stream;
    cudaLaunchAttribute attribute = {};
    attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute.val.programmaticStreamSerializationAllowed = 1;
    config.attrs = &attribute;
    config.numAttrs = overlap_launch ? 1 : 0;
    return cudaLaunchKernelEx(&config, kernel, args);
}

template <rp_dtype DT, int HALF, int FREQ_CAP>
static cudaError_t launch_vectorized(const rp_cuda_state *st, const rp_problem *p, rp_parts parts,
                                     const rp_cuda_plan *plan, cudaStream_t stream)
{
    rp_kernel_args<FREQ_CAP> a;
    fill_args(&a, st, p, parts, plan);
    const dim3 grid(plan->grid, (unsigned)plan->chunks);
    const dim3 block((unsigned)plan->groups_per_block, (unsigned)plan->heads_per_pass,
                     (unsigned)plan->tokens_per_block);
    void (*kernel)(rp_kernel_args<FREQ_CAP>) = plan->items_per_thread >= 4 ? rope_pool_prefill<DT, HALF, FREQ_CAP, 4>
                                               : plan->items_per_thread >= 2 ? rope_pool_prefill<DT, HALF, FREQ_CAP, 2>
                                                                             : rope_pool_decode<DT, HALF, FREQ_CAP>;
    return launch(kernel, grid, block, plan->shared_bytes, stream, plan->overlap_launch, a);
}

template <rp_dtype DT, int FREQ_CAP>
static cudaError_t launch_strided(const rp_cuda_state *st, const rp_problem *p, rp_parts parts,
                                  const rp_cuda_plan *plan, cudaStream_t stream)
{
    rp_kernel_args<FREQ_CAP> a;
    fill_args(&a, st, p, parts, plan);
    return launch(rope_pool_strided<DT, FREQ_CAP>, dim3(plan->grid), dim3((unsigned)plan->threads_x), 0, stream,
                  plan->overlap_launch, a);
}

/* head_dim becomes a compile-time constant for the common sizes (64, 128, 256); the others run
 * the same code with a runtime head_dim. Frequencies up to RP_CUDA_MAX_HEAD_DIM / 2. */
template <rp_dtype DT>
static cudaError_t launch_dtype(const rp_cuda_state *st, const rp_problem *p, rp_parts parts,
                                const rp_cuda_plan *plan, cudaStream_t stream)
{
    const int64_t half_dim = p->head_dim / 2;
    if (!plan->vectorized)
        return half_dim <= 256 ? launch_strided<DT, 256>(st, p, parts, plan, stream)
                           : launch_strided<DT, RP_CUDA_MAX_HEAD_DIM / 2>(st, p, parts, plan, stream);
    switch (half_dim) {
    case 32: return launch_vectorized<DT, 32, 32>(st, p, parts, plan, stream);
    case 64: return launch_vectorized<DT, 64, 64>(st, p, parts, plan, stream);
    case 128: return launch_vectorized<DT, 128, 128>(st, p, parts, plan, stream);
    default:
        return half_dim <= 256 ? launch_vectorized<DT, 0, 256>(st, p, parts, plan, stream)
                           : launch_vectorized<DT, 0, RP_CUDA_MAX_HEAD_DIM / 2>(st, p, parts, plan, stream);
    }
}

extern "C" rp_status rp_cuda_launch(const rp_cuda_state *st, const rp_problem *p, rp_parts parts,
                                    const rp_cuda_plan *plan, cudaStream_t stream, rp_err *err)
{
    cudaError_t e;
    switch (p->dtype) {
    case RP_F32: e = launch_dtype<RP_F32>(st, p, parts, plan, stream); break;
    case RP_F16: e = launch_dtype<RP_F16>(st, p, parts, plan, stream); break;
    case RP_BF16: e = launch_dtype<RP_BF16>(st, p, parts, plan, stream); break;
    default:
        return rp_fail(err, RP_ERR_UNSUPPORTED, "the CUDA backend has no kernel for dtype %s",
                       rp_dtype_name(p->dtype));
    }
    if (e == cudaSuccess)
        e = cudaGetLastError();
    return e == cudaSuccess ? RP_OK : rp_cuda_fail(err, e, "rope_pool_fused kernel launch");
}

/* ---- the backend hook ------------------------------------------------------------------------- */

extern "C" rp_status rp_cuda_rope_pool(void *state, const rp_problem *p, rp_parts parts,
                                       uint32_t flags, void *stream_handle, rp_err *err)
{
    const rp_cuda_state *st = (const rp_cuda_state *)state;
    const cudaStream_t stream = (cudaStream_t)stream_handle;
    if (p->head_dim > RP_CUDA_MAX_HEAD_DIM)
        return rp_fail(err, RP_ERR_UNSUPPORTED,
                       "head_dim %lld is not supported on CUDA: the CUDA backend takes head_dim up to %d",
                       (long long)p->head_dim, RP_CUDA_MAX_HEAD_DIM);
    if (p->style != RP_ROPE_NEOX || p->rotary_dim != p->head_dim || p->caller_freq || p->attention_scaling != 1.0)
        return rp_fail(err, RP_ERR_UNSUPPORTED,
                       "the CUDA backend does not serve GPT-J style, partial rotary_dim, inv_freq or "
                       "attention_scaling yet: only the seed's NeoX full-rotary call");
    /* Run on the context's device; give the caller back its own current device. */
    int previous = -1;
    rp_status status = rp_cuda_enter_device(st->device, &previous, err);
    if (status != RP_OK)
        return status;
    if (flags & RP_CHECK_SLOTS)
        status = rp_cuda_check_slots(p, stream, err);
    if (status == RP_OK) {
        const rp_cuda_plan plan = rp_cuda_make_plan(st, p, parts);
        status = rp_cuda_launch(st, p, parts, &plan, stream, err);
    }
    rp_cuda_leave_device(st->device, previous);
    return status;
}
