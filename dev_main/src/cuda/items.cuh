/*
 * items.cuh — device code the two vectorized kernels (decode.cu, prefill.cu) share. A head row of
 * D elements is cut into D / (2 ELEMS) groups of two 16-byte vectors (ELEMS = 16 / sizeof(element));
 * an item is one group of one head. Groups g < rot_groups rotate: lo = x[g ELEMS ..] and
 * hi = lo + R/2, as in NeoX, for both styles, so that a warp's lo and hi loads are each one run of
 * whole lines. NeoX: the group's ELEMS pairs are (lo[c], hi[c]), frequencies g ELEMS + c. GPT-J:
 * lo holds pairs (x[2j], x[2j + 1]) j = g ELEMS/2 .., hi the pairs from R/4 + g ELEMS/2. The other
 * groups are the pass-through dims [R, D), two consecutive vectors each, bit copies. Here: the
 * groups' geometry, rotating an item with the block's cos/sin table, where its rows are (built
 * before the wait: rp_item; or at use: head_place), and storing it where it goes. QK-norm, applied
 * before the rotation: qk_norm.cuh.
 */
#ifndef RP_CUDA_ITEMS_CUH
#define RP_CUDA_ITEMS_CUH

#include "kernel_args.cuh"
#include "qk_norm.cuh"

/* One group of a head row: its first element, the bytes from its lo vector to its hi vector, and
 * whether it rotates. HALF > 0 is compiled for the whole head rotating (R = D = 2 HALF): every
 * group rotates and the offset is a constant. */
struct rp_group {
    long long first;
    long long hi_bytes;
    bool rotated;
};

template <int HALF, size_t ELEM, typename Args>
__device__ __forceinline__ rp_group group_of(const Args &a, int g)
{
    constexpr int V = (int)(16 / ELEM);
    rp_group gr;
    if (HALF) {
        gr.first = (long long)g * V;
        gr.hi_bytes = (long long)HALF * (long long)ELEM;
        gr.rotated = true;
        return gr;
    }
    gr.rotated = g < a.rot_groups;
    gr.first = gr.rotated ? (long long)g * V : a.rotary_dim + 2LL * (g - a.rot_groups) * V;
    gr.hi_bytes = gr.rotated ? (long long)a.rot_half * (long long)ELEM : 16;
    return gr;
}

/* The frequency index of pair c (0 .. ELEMS - 1) of rotated group g: its table entry c. */
template <int STYLE, int HALF, int V, typename Args>
__device__ __forceinline__ long long pair_of(const Args &a, int g, int c)
{
    if (STYLE == RP_ROPE_NEOX)
        return (long long)g * V + c;
    const long long quarter = HALF ? HALF / 2 : a.rot_half / 2; /* R/4: hi's first pair */
    return (long long)g * (V / 2) + (c < V / 2 ? c : quarter + c - V / 2);
}

/* Rotates one item in place (lo, hi: its two vectors, see above) with the table's entries of its
 * pairs: cs[c] = (cos, sin) of the group's pairs 2c and 2c + 1, read at a stride of `cs_stride`
 * float4s. ox, oy [ELEMS] receive the float32 results before their rounding to the dtype (what an
 * fp8 pool quantises). */
template <rp_dtype DT, int STYLE>
__device__ __forceinline__ void rotate_vectors(uint4 *lo, uint4 *hi, const float4 *cs, int cs_stride,
                                               float *ox, float *oy, const rp_norm_item &norm)
{
    typedef rp_elem<DT> E;
    constexpr int V = E::ELEMS;
    float x[V], y[V];
    E::unpack(*lo, x);
    E::unpack(*hi, y);
    if (norm.w) { /* QK-norm: the rotation takes the float32 normalised values */
        rp_normalise<DT>(norm, x, norm.lo, norm.w_lo);
        rp_normalise<DT>(norm, y, norm.hi, norm.w_hi);
    }
    if (STYLE == RP_ROPE_NEOX) {
#pragma unroll
        for (int c = 0; c < V / 2; c++) {
            const float4 r = cs[c * cs_stride];
            rp_rotate(x[2 * c], y[2 * c], r.x, r.y, &ox[2 * c], &oy[2 * c]);
            rp_rotate(x[2 * c + 1], y[2 * c + 1], r.z, r.w, &ox[2 * c + 1], &oy[2 * c + 1]);
        }
    } else { /* pairs (x[2c], x[2c + 1]) in lo, then (y[2c], y[2c + 1]) in hi */
#pragma unroll
        for (int c = 0; c < V / 4; c++) {
            const float4 r = cs[c * cs_stride], u = cs[(c + V / 4) * cs_stride];
            rp_rotate(x[4 * c], x[4 * c + 1], r.x, r.y, &ox[4 * c], &ox[4 * c + 1]);
            rp_rotate(x[4 * c + 2], x[4 * c + 3], r.z, r.w, &ox[4 * c + 2], &ox[4 * c + 3]);
            rp_rotate(y[4 * c], y[4 * c + 1], u.x, u.y, &oy[4 * c], &oy[4 * c + 1]);
            rp_rotate(y[4 * c + 2], y[4 * c + 3], u.z, u.w, &oy[4 * c + 2], &oy[4 * c + 3]);
        }
    }
    *lo = E::pack(ox);
    *hi = E::pack(oy);
}

/* Stores an item's two vectors (lo, hi; x, y: their float32 values) into a pool row: the bits, or
 * (fp8 pools) ELEMS codes of x / scale per vector, hi_bytes apart in the pool. */
template <rp_dtype DT, bool FP8>
__device__ __forceinline__ void store_pool_item(char *dst, long long hi_bytes, uint4 lo, uint4 hi, const float *x,
                                                const float *y, int fp8, float inv_scale)
{
    constexpr int V = rp_elem<DT>::ELEMS;
    if (!FP8) {
        *(uint4 *)dst = lo;
        *(uint4 *)(dst + hi_bytes) = hi;
        return;
    }
    const int e5m2 = fp8 == RP_POOL_E5M2;
    if (V == 4) {
        *(unsigned *)dst = rp_fp8x4(x, inv_scale, e5m2);
        *(unsigned *)(dst + hi_bytes) = rp_fp8x4(y, inv_scale, e5m2);
    } else {
        *(uint2 *)dst = make_uint2(rp_fp8x4(x, inv_scale, e5m2), rp_fp8x4(x + 4, inv_scale, e5m2));
        *(uint2 *)(dst + hi_bytes) = make_uint2(rp_fp8x4(y, inv_scale, e5m2), rp_fp8x4(y + 4, inv_scale, e5m2));
    }
}

/* Bytes of one pool element: the dtype's, or 1 for fp8 codes. FP8: compiled for fp8 pools (the
 * format, e4m3 or e5m2, is a.pool_fp8). */
template <size_t ELEM, bool FP8> __device__ __forceinline__ constexpr long long pool_elem(void)
{
    return FP8 ? 1 : (long long)ELEM;
}


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
template <size_t ELEM, bool FP8, typename Args>
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
    it.pool = a.parts != RP_PARTS_ROTATE && !q ? (char *)pool + (head * pool_s1 + first) * pool_elem<ELEM, FP8>() : NULL;
    it.kind = q ? RP_ITEM_Q : k ? RP_ITEM_K : RP_ITEM_V;
    return it;
}

/* Bytes from one token's row of an item's tensors to the next; pools: from one block to the next
 * and from one row of a block to the next. */
struct rp_item_rows {
    long long src, out, pool, pool_row;
};

template <size_t ELEM, bool FP8, typename Args>
__device__ __forceinline__ rp_item_rows item_rows(const Args &a, int kind)
{
    const bool q = kind == RP_ITEM_Q, k = kind == RP_ITEM_K, scatter = a.parts == RP_PARTS_SCATTER;
    rp_item_rows r;
    const long long k_in = rp_pick(scatter, a.stride[T_K_ROT][0], a.stride[T_K][0]);
    r.src = rp_pick(q, a.stride[T_Q][0], rp_pick(k, k_in, a.stride[T_V][0])) * (long long)ELEM;
    r.out = rp_pick(q, a.stride[T_Q_ROT][0], a.stride[T_K_ROT][0]) * (long long)ELEM;
    r.pool = rp_pick(k, a.stride[T_K_POOL][0], a.stride[T_V_POOL][0]) * pool_elem<ELEM, FP8>();
    r.pool_row = rp_pick(k, a.pool_row_stride[0], a.pool_row_stride[1]) * pool_elem<ELEM, FP8>();
    return r;
}

/* Rotates one item of token t (lo, hi: its two vectors, half_bytes apart) when it is a q or k item
 * of a rotated group, and stores it where it goes. cs[c] = (cos, sin) of the item's pairs 2c and 2c + 1,
 * read from the table at a stride of `cs_stride` float4s. norm: its QK-norm (w NULL: none). */
template <rp_dtype DT, int STYLE, bool FP8, typename Args>
__device__ __forceinline__ void finish_item(const Args &a, const rp_item &it, const rp_item_rows &rows, uint4 lo,
                                            uint4 hi, long long t, bool to_pool, long long block, long long row,
                                            long long half_bytes, bool rotated, const float4 *cs, int cs_stride,
                                            float inv_scale, const rp_norm_item &norm)
{
    typedef rp_elem<DT> E;
    constexpr int V = E::ELEMS;
    constexpr size_t ELEM = sizeof(typename E::storage);
    float x[V], y[V];
    if (it.out) {
        if (rotated) {
            rotate_vectors<DT, STYLE>(&lo, &hi, cs, cs_stride, x, y, norm);
        } else if (norm.w) {
            normalise_vectors<DT>(&lo, &hi, norm, x, y);
        } else if (FP8) {
            E::unpack(lo, x);
            E::unpack(hi, y);
        }
        char *dst = it.out + t * rows.out;
        *(uint4 *)dst = lo;
        *(uint4 *)(dst + half_bytes) = hi;
    } else if (FP8) {
        E::unpack(lo, x);
        E::unpack(hi, y);
    }
    if (it.pool && to_pool)
        store_pool_item<DT, FP8>(it.pool + block * rows.pool + row * rows.pool_row,
                            FP8 ? half_bytes / (long long)ELEM : half_bytes, lo, hi, x, y, a.pool_fp8,
                            inv_scale);
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

/* Byte address of element `first` of head `head` in pool row (block, row): k_pool, or v_pool when
 * v. Strides are selected by value, as above. */
template <size_t ELEM, bool FP8, typename Args>
__device__ __forceinline__ char *pool_address(const Args &a, bool v, long long block, long long row, int head,
                                              long long first)
{
    const long long s0 = v ? a.stride[T_V_POOL][0] : a.stride[T_K_POOL][0];
    const long long sr = v ? a.pool_row_stride[1] : a.pool_row_stride[0];
    const long long s1 = v ? a.stride[T_V_POOL][1] : a.stride[T_K_POOL][1];
    return (char *)(v ? a.v_pool : a.k_pool) + (block * s0 + row * sr + head * s1 + first) * pool_elem<ELEM, FP8>();
}

/* Rotates one item (lo, hi: its two vectors, half_bytes apart, from element `first` of the head)
 * when it is a q or k item of a rotated group, and stores it where it goes: pool row (block, row)
 * when to_pool. cs[c] = (cos, sin) of the item's pairs 2c and 2c + 1, read from the table at a
 * stride of `cs_stride` float4s. */
template <rp_dtype DT, int STYLE, bool FP8, typename Args>
__device__ __forceinline__ void finish_placed_item(const Args &a, const head_place &pl, uint4 lo, uint4 hi,
                                                   long long t, bool to_pool, long long block, long long row,
                                                   long long first, long long half_bytes, bool rotated,
                                                   const float4 *cs, int cs_stride, float k_inv, float v_inv,
                                                   const rp_norm_item &norm)
{
    typedef rp_elem<DT> E;
    constexpr int V = E::ELEMS;
    constexpr size_t ELEM = sizeof(typename E::storage);
    const long long pool_hi = FP8 ? half_bytes / (long long)ELEM : half_bytes;
    float x[V], y[V];
    if (pl.kind == RP_ITEM_V || a.parts == RP_PARTS_SCATTER) { /* a copy into the pool */
        if (to_pool) {
            const bool v = pl.kind == RP_ITEM_V;
            if (FP8) {
                E::unpack(lo, x);
                E::unpack(hi, y);
            }
            store_pool_item<DT, FP8>(pool_address<ELEM, FP8>(a, v, block, row, pl.head, first), pool_hi, lo, hi, x, y,
                                a.pool_fp8, v ? v_inv : k_inv);
        }
        return;
    }
    uint4 out_lo = lo, out_hi = hi;
    if (rotated) {
        rotate_vectors<DT, STYLE>(&out_lo, &out_hi, cs, cs_stride, x, y, norm);
    } else if (norm.w) {
        normalise_vectors<DT>(&out_lo, &out_hi, norm, x, y);
    } else if (FP8) {
        E::unpack(lo, x);
        E::unpack(hi, y);
    }
    const bool is_q = pl.kind == RP_ITEM_Q;
    char *dst = item_address<ELEM>(is_q ? a.q_rot : a.k_rot, is_q ? a.stride[T_Q_ROT][0] : a.stride[T_K_ROT][0],
                                   is_q ? a.stride[T_Q_ROT][1] : a.stride[T_K_ROT][1], t, pl.head, first);
    *(uint4 *)dst = out_lo;
    *(uint4 *)(dst + half_bytes) = out_hi;
    if (!is_q && to_pool)
        store_pool_item<DT, FP8>(pool_address<ELEM, FP8>(a, false, block, row, pl.head, first), pool_hi, out_lo, out_hi, x, y,
                            a.pool_fp8, k_inv);
}

#endif /* RP_CUDA_ITEMS_CUH */
