/*
 * rope_pool.cu — the CUDA kernels of rope_pool_fused, the one function that chooses their launch
 * geometry, and the dispatch from runtime sizes to compiled variants.
 *
 * Vectorized kernel (the fast path). A block serves tokens_per_block tokens (blockDim.y); the
 * threads_x threads of a token share its items. An item is one frequency group of one head:
 * ELEMS = 16 / sizeof(element) consecutive pairs (x[i], x[i + D/2]), i.e. two 16-byte vectors.
 * Items run over the q heads, then the k heads, then the v heads, so that a warp reads and writes
 * whole 128-byte lines. Each thread first issues the loads of its first items_per_thread items and
 * of the token's slot; then the block computes the (token, frequency) cos/sin table once, in
 * float64, into shared memory — while those loads are in flight — and after one barrier every item
 * is rotated in float32 and stored with 16-byte stores. Decode (a few tokens) is bound by that
 * chain of latencies, prefill by bytes in flight: the plan gives small calls one token per block
 * and large ones several.
 *
 * Strided kernel (every other layout: head_dim not contiguous, rows not 16-byte aligned, D/2 not
 * a multiple of ELEMS). One thread per (token, frequency): it computes that angle once and walks
 * all heads. Plain element loads; the same numerics.
 *
 * Both never write a pool row whose slot is negative or >= P; the latter is recorded in the
 * context's status word (device.cuh) for rp_context_check().
 */
#include "cuda_backend.h"
#include "device.cuh"

#include <limits.h>
#include <string.h>

/* Tensors of the [token|slot, head, dim] family, indexing rp_kernel_args.stride. */
enum { T_Q, T_K, T_V, T_Q_ROT, T_K_ROT, T_K_POOL, T_V_POOL, T_COUNT };

/* The kernels' only parameter, passed by value so that nothing is allocated and a graph captures
 * it whole. FREQ_CAP bounds head_dim / 2; small caps keep the launch cheap. */
template <int FREQ_CAP> struct rp_kernel_args {
    const void *q;                /* [T, Hq, D]                                       */
    const void *k;                /* [T, Hk, D]                                       */
    const void *v;                /* [T, Hk, D]                                       */
    const void *positions;        /* [T] int32 | int64                                */
    const void *slots;            /* [T] int32 | int64                                */
    void *q_rot;                  /* [T, Hq, D]; may be q                             */
    void *k_rot;                  /* [T, Hk, D]; may be k                             */
    void *k_pool;                 /* [P, Hk, D]                                       */
    void *v_pool;                 /* [P, Hk, D]                                       */
    rp_cuda_slot_status *status;  /* [1] the context's bad-slot record                */
    long long stride[T_COUNT][3]; /* in elements, indexed by T_*                      */
    long long pos_stride, slot_stride;
    long long num_tokens, pool_size;
    int num_qo_heads, num_kv_heads, half_dim; /* half_dim = D / 2                              */
    int pos64, slot64;                    /* index dtypes: 1 = int64                  */
    int parts;                            /* rp_parts                                 */
    int items_per_token;                  /* vectorized kernel                        */
    long long num_tiles;                  /* vectorized: ceil(T / tokens per block)   */
    double inv_freq[FREQ_CAP];            /* [half_dim] rope_base^(-2i/D), float64        */
};

/* Which tensor an item reads, rotates and writes. */
enum item_kind { ITEM_Q, ITEM_K, ITEM_V };

/* Address of row (token or slot, head) of a tensor, in bytes. Strides are picked by the callers
 * with constant indices or selects, never a runtime index, so the parameters stay in the constant
 * bank instead of being copied to local memory. */
__device__ __forceinline__ char *row_address(const void *base, const long long *stride, long long row,
                                             int head, size_t elem)
{
    return (char *)base + (row * stride[0] + head * stride[1]) * (long long)elem;
}

/* ---- the vectorized kernel -------------------------------------------------------------------- */

/* One item's place: kind, head within its tensor, frequency group. */
struct item_place {
    int kind, head, group;
};

template <int GROUPS_CT, typename Args>
__device__ __forceinline__ item_place place_item(const Args &a, int item, int groups)
{
    const int g = GROUPS_CT ? GROUPS_CT : groups;
    item_place pl;
    int h = item / g + (a.parts == RP_PARTS_SCATTER ? a.num_qo_heads : 0);
    pl.group = item % g;
    if (h < a.num_qo_heads) {
        pl.kind = ITEM_Q;
    } else if ((h -= a.num_qo_heads) < a.num_kv_heads) {
        pl.kind = ITEM_K;
    } else {
        pl.kind = ITEM_V;
        h -= a.num_kv_heads;
    }
    pl.head = h;
    return pl;
}

/* The row an item reads: k_rot instead of k when only scattering. */
template <typename Args>
__device__ __forceinline__ const char *source_row(const Args &a, const item_place &pl, long long t, size_t elem)
{
    const bool scatter = a.parts == RP_PARTS_SCATTER;
    const void *base = pl.kind == ITEM_Q ? a.q : pl.kind == ITEM_V ? a.v : scatter ? a.k_rot : a.k;
    const long long *stride = pl.kind == ITEM_Q   ? a.stride[T_Q]
                              : pl.kind == ITEM_V ? a.stride[T_V]
                              : scatter           ? a.stride[T_K_ROT]
                                                  : a.stride[T_K];
    return row_address(base, stride, t, pl.head, elem);
}

/* Rotates one item (lo = pairs' first halves, hi = second halves) and stores it where it goes. */
template <rp_dtype DT, typename Args>
__device__ __forceinline__ void finish_item(const Args &a, const item_place &pl, uint4 lo, uint4 hi,
                                            long long t, long long slot, int half_dim,
                                            const float4 *table_row, int groups)
{
    typedef rp_elem<DT> E;
    constexpr int V = E::ELEMS;
    const size_t elem = sizeof(typename E::storage);
    const long long offset = (long long)pl.group * V * (long long)elem;
    const long long half_bytes = (long long)half_dim * (long long)elem;
    const bool to_pool = a.parts != RP_PARTS_ROTATE && slot >= 0 && slot < a.pool_size;
    if (pl.kind == ITEM_V || a.parts == RP_PARTS_SCATTER) { /* bit copy into the pool */
        if (to_pool) {
            const bool v = pl.kind == ITEM_V;
            char *dst = row_address(v ? a.v_pool : a.k_pool, v ? a.stride[T_V_POOL] : a.stride[T_K_POOL],
                                    slot, pl.head, elem) + offset;
            *(uint4 *)dst = lo;
            *(uint4 *)(dst + half_bytes) = hi;
        }
        return;
    }
    float x[V], y[V], ox[V], oy[V];
    E::unpack(lo, x);
    E::unpack(hi, y);
#pragma unroll
    for (int c = 0; c < V / 2; c++) {
        /* table_row[c * groups + group] = (cos, sin) of pairs 2c and 2c + 1 of this group */
        const float4 cs = table_row[c * groups + pl.group];
        rp_rotate(x[2 * c], y[2 * c], cs.x, cs.y, &ox[2 * c], &oy[2 * c]);
        rp_rotate(x[2 * c + 1], y[2 * c + 1], cs.z, cs.w, &ox[2 * c + 1], &oy[2 * c + 1]);
    }
    const uint4 out_lo = E::pack(ox), out_hi = E::pack(oy);
    const bool is_q = pl.kind == ITEM_Q;
    char *dst = row_address(is_q ? a.q_rot : a.k_rot, is_q ? a.stride[T_Q_ROT] : a.stride[T_K_ROT], t,
                            pl.head, elem) + offset;
    *(uint4 *)dst = out_lo;
    *(uint4 *)(dst + half_bytes) = out_hi;
    if (!is_q && to_pool) {
        char *pool = row_address(a.k_pool, a.stride[T_K_POOL], slot, pl.head, elem) + offset;
        *(uint4 *)pool = out_lo;
        *(uint4 *)(pool + half_bytes) = out_hi;
    }
}

/* Threads per block the vectorized kernel is compiled for, by prefetch depth: deeper prefetch
 * holds more registers per thread (64, 80 and 128 at most). */
template <int PREFETCH> struct rp_block_limit {
    static constexpr int THREADS = PREFETCH >= 4 ? 512 : PREFETCH >= 2 ? 768 : 1024;
};

/* HALF: head_dim / 2 when compiled for one head_dim, 0 for any (up to FREQ_CAP). PREFETCH: items
 * per thread whose loads are issued before the table is built. */
template <rp_dtype DT, int HALF, int FREQ_CAP, int PREFETCH>
__global__ void __launch_bounds__(rp_block_limit<PREFETCH>::THREADS)
rope_pool_vectorized(const __grid_constant__ rp_kernel_args<FREQ_CAP> a)
{
    typedef rp_elem<DT> E;
    constexpr int V = E::ELEMS;
    constexpr int GROUPS_CT = HALF / V; /* 0 when HALF is 0 */
    const int half_dim = HALF ? HALF : a.half_dim;
    const int groups = half_dim / V;
    const size_t elem = sizeof(typename E::storage);
    /* [tokens_per_block][V/2][groups] float4: (cos, sin) of two consecutive pairs, laid out so
     * that the lanes of a quarter-warp (consecutive groups) read consecutive 16 bytes. */
    extern __shared__ float4 table[];

    const int Y = blockDim.y, X = blockDim.x;
    const int lane_in_block = threadIdx.y * X + threadIdx.x;
    const long long T = a.num_tokens, num_tiles = a.num_tiles;
    const bool rotates = a.parts != RP_PARTS_SCATTER;

    for (long long tile = blockIdx.x; tile < num_tiles; tile += gridDim.x) {
        const long long t = tile * Y + threadIdx.y;
        const bool token_ok = t < T;

        /* 1. Loads first: this thread's items and the token's slot. */
        item_place pl[PREFETCH];
        uint4 lo[PREFETCH], hi[PREFETCH];
#pragma unroll
        for (int j = 0; j < PREFETCH; j++) {
            const int item = threadIdx.x + j * X;
            pl[j].kind = -1;
            if (token_ok && item < a.items_per_token) {
                pl[j] = place_item<GROUPS_CT>(a, item, groups);
                const char *p = source_row(a, pl[j], t, elem) + (long long)pl[j].group * V * (long long)elem;
                lo[j] = *(const uint4 *)p;
                hi[j] = *(const uint4 *)(p + (long long)half_dim * (long long)elem);
            }
        }
        long long slot = -1;
        if (token_ok && a.parts != RP_PARTS_ROTATE)
            slot = rp_load_index_dev(a.slots, a.slot64, a.slot_stride, t);

        /* 2. The (token, frequency) table, once per block, while the loads are in flight. */
        if (rotates) {
            for (int e = lane_in_block; e < Y * half_dim; e += X * Y) {
                const int ty = e / half_dim, i = e % half_dim;
                const long long tt = tile * Y + ty;
                if (tt >= T)
                    continue;
                const long long pos = rp_load_index_dev(a.positions, a.pos64, a.pos_stride, tt);
                float s, c;
                rp_angle_sincos((double)pos * a.inv_freq[i], &s, &c);
                const int g = i / V, j = i % V;
                float *entry = (float *)&table[ty * (half_dim / 2) + (j / 2) * groups + g] + (j % 2) * 2;
                entry[0] = c;
                entry[1] = s;
            }
            __syncthreads();
        }

        /* 3. Rotate and store. */
        const float4 *table_row = table + threadIdx.y * (half_dim / 2);
#pragma unroll
        for (int j = 0; j < PREFETCH; j++)
            if (pl[j].kind >= 0)
                finish_item<DT>(a, pl[j], lo[j], hi[j], t, slot, half_dim, table_row, groups);
        for (int item = threadIdx.x + PREFETCH * X; token_ok && item < a.items_per_token; item += X) {
            const item_place p1 = place_item<GROUPS_CT>(a, item, groups);
            const char *p = source_row(a, p1, t, elem) + (long long)p1.group * V * (long long)elem;
            finish_item<DT>(a, p1, *(const uint4 *)p, *(const uint4 *)(p + (long long)half_dim * (long long)elem),
                            t, slot, half_dim, table_row, groups);
        }
        if (threadIdx.x == 0 && slot >= a.pool_size)
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
    MAX_BLOCK_THREADS = 1024,
    /* Tuned on an H200 (bench/results/cuda-*.md): a call is "large" from this many tokens per
     * multiprocessor; its threads then prefetch this many items, in blocks of about this many
     * threads. */
    LARGE_CALL_BLOCKS_PER_SM = 4,
    LARGE_CALL_PREFETCH = 4,
    LARGE_CALL_BLOCK_THREADS = 384,
    MAX_TABLE_BYTES = 48 * 1024,
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
    const long long items = heads * (half_dim / per_vector);

    plan.vectorized = p->inner_contiguous && half_dim % per_vector == 0 && items <= INT_MAX / 2 &&
                      rows_aligned(p->q, p->q_stride, T, Hq, elem) &&
                      rows_aligned(p->k, p->k_stride, T, Hk, elem) &&
                      rows_aligned(p->v, p->v_stride, T, Hk, elem) &&
                      rows_aligned(p->q_rot, p->q_rot_stride, T, Hq, elem) &&
                      rows_aligned(p->k_rot, p->k_rot_stride, T, Hk, elem) &&
                      rows_aligned(p->k_pool, p->k_pool_stride, P, Hk, elem) &&
                      rows_aligned(p->v_pool, p->v_pool_stride, P, Hk, elem);
    if (!plan.vectorized) {
        plan.threads_x = STRIDED_THREADS;
        const long long blocks = div_up(T * half_dim, STRIDED_THREADS);
        const long long cap = (long long)st->num_sms * 64;
        plan.grid = (unsigned)(blocks < cap ? blocks : cap);
        return plan;
    }
    plan.items_per_token = (int)items;
    /* Small calls (decode) are bound by a chain of latencies: one token per block and one item
     * per thread give the most blocks and the shortest chain. Large calls (prefill) are bound by
     * the bytes each multiprocessor keeps in flight: each thread prefetches several items. */
    const long long sms = st->num_sms > 0 ? st->num_sms : 1;
    const int large = T >= LARGE_CALL_BLOCKS_PER_SM * sms;
    int prefetch = large ? LARGE_CALL_PREFETCH : 1;
    while (prefetch > 1 && items < (long long)prefetch * 32)
        prefetch /= 2; /* keep at least a warp of threads per token */
    const long long limit = prefetch >= 4 ? 512 : prefetch >= 2 ? 768 : MAX_BLOCK_THREADS;
    long long x = div_up(items, prefetch);
    if (x > limit)
        x = limit;
    long long y = large ? LARGE_CALL_BLOCK_THREADS / x : 1;
    if (y * x > limit)
        y = limit / x;
    if (y * half_dim * 2 * (long long)sizeof(float) > MAX_TABLE_BYTES)
        y = MAX_TABLE_BYTES / (half_dim * 2 * (long long)sizeof(float));
    if (y < 1)
        y = 1;
    plan.items_per_thread = prefetch;
    plan.threads_x = (int)x;
    plan.tokens_per_block = (int)y;
    const long long tiles = div_up(T, y);
    plan.grid = (unsigned)(tiles < MAX_GRID ? tiles : MAX_GRID);
    plan.shared_bytes = parts == RP_PARTS_SCATTER ? 0 : (size_t)(y * half_dim * 2) * sizeof(float);
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
    a->items_per_token = plan->items_per_token;
    a->num_tiles = plan->tokens_per_block > 0 ? (p->num_tokens + plan->tokens_per_block - 1) / plan->tokens_per_block : 0;
    memcpy(a->inv_freq, p->inv_freq, (size_t)a->half_dim * sizeof(double));
}

template <rp_dtype DT, int HALF, int FREQ_CAP>
static void launch_vectorized(const rp_cuda_state *st, const rp_problem *p, rp_parts parts,
                              const rp_cuda_plan *plan, cudaStream_t stream)
{
    rp_kernel_args<FREQ_CAP> a;
    fill_args(&a, st, p, parts, plan);
    const dim3 block((unsigned)plan->threads_x, (unsigned)plan->tokens_per_block);
    if (plan->items_per_thread >= 4)
        rope_pool_vectorized<DT, HALF, FREQ_CAP, 4><<<plan->grid, block, plan->shared_bytes, stream>>>(a);
    else if (plan->items_per_thread >= 2)
        rope_pool_vectorized<DT, HALF, FREQ_CAP, 2><<<plan->grid, block, plan->shared_bytes, stream>>>(a);
    else
        rope_pool_vectorized<DT, HALF, FREQ_CAP, 1><<<plan->grid, block, plan->shared_bytes, stream>>>(a);
}

template <rp_dtype DT, int FREQ_CAP>
static void launch_strided(const rp_cuda_state *st, const rp_problem *p, rp_parts parts,
                           const rp_cuda_plan *plan, cudaStream_t stream)
{
    rp_kernel_args<FREQ_CAP> a;
    fill_args(&a, st, p, parts, plan);
    rope_pool_strided<DT, FREQ_CAP><<<plan->grid, plan->threads_x, 0, stream>>>(a);
}

/* head_dim becomes a compile-time constant for the common sizes (64, 128, 256); the others run
 * the same code with a runtime head_dim. Frequencies up to RP_CUDA_MAX_HEAD_DIM / 2. */
template <rp_dtype DT>
static void launch_dtype(const rp_cuda_state *st, const rp_problem *p, rp_parts parts,
                         const rp_cuda_plan *plan, cudaStream_t stream)
{
    const int64_t half_dim = p->head_dim / 2;
    if (!plan->vectorized) {
        if (half_dim <= 256)
            launch_strided<DT, 256>(st, p, parts, plan, stream);
        else
            launch_strided<DT, RP_CUDA_MAX_HEAD_DIM / 2>(st, p, parts, plan, stream);
        return;
    }
    switch (half_dim) {
    case 32: launch_vectorized<DT, 32, 32>(st, p, parts, plan, stream); break;
    case 64: launch_vectorized<DT, 64, 64>(st, p, parts, plan, stream); break;
    case 128: launch_vectorized<DT, 128, 128>(st, p, parts, plan, stream); break;
    default:
        if (half_dim <= 256)
            launch_vectorized<DT, 0, 256>(st, p, parts, plan, stream);
        else
            launch_vectorized<DT, 0, RP_CUDA_MAX_HEAD_DIM / 2>(st, p, parts, plan, stream);
        break;
    }
}

extern "C" rp_status rp_cuda_launch(const rp_cuda_state *st, const rp_problem *p, rp_parts parts,
                                    const rp_cuda_plan *plan, cudaStream_t stream, rp_err *err)
{
    switch (p->dtype) {
    case RP_F32: launch_dtype<RP_F32>(st, p, parts, plan, stream); break;
    case RP_F16: launch_dtype<RP_F16>(st, p, parts, plan, stream); break;
    case RP_BF16: launch_dtype<RP_BF16>(st, p, parts, plan, stream); break;
    default:
        return rp_fail(err, RP_ERR_UNSUPPORTED, "the CUDA backend has no kernel for dtype %s",
                       rp_dtype_name(p->dtype));
    }
    const cudaError_t e = cudaGetLastError();
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
