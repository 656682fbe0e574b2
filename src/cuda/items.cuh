/*
 * items.cuh — device code the two vectorized kernels (decode.cu, prefill.cu) share. A head row of
 * D elements is cut into D / (2 ELEMS) groups of two 16-byte vectors (ELEMS = 16 / sizeof(element));
 * an item is one group of one head. Groups g < rot_groups rotate: lo = x[g ELEMS ..] and
 * hi = lo + R/2, as in NeoX, for both styles, so that a warp's lo and hi loads are each one run of
 * whole lines. NeoX: the group's ELEMS pairs are (lo[c], hi[c]), frequencies g ELEMS + c. GPT-J:
 * lo holds pairs (x[2j], x[2j + 1]) j = g ELEMS/2 .., hi the pairs from R/4 + g ELEMS/2. The other
 * groups are the pass-through dims [R, D), two consecutive vectors each, bit copies. Here: the
 * groups' geometry, rotating an item with the block's cos/sin table, where its rows are (built
 * before the wait: rp_item; or at use: head_place), and storing it where it goes.
 */
#ifndef RP_CUDA_ITEMS_CUH
#define RP_CUDA_ITEMS_CUH

#include "kernel_args.cuh"

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

/* Which tensors an item (a frequency group of one head) reads and writes. */
enum rp_item_kind { RP_ITEM_Q, RP_ITEM_K, RP_ITEM_V };

/* ---- QK-norm ------------------------------------------------------------------------------------
 * The plan gives a normalised call whole head rows per block row: the head's groups are blockDim.x
 * = a power of two <= 32 consecutive lanes, so a head's sum of squares is a shuffle reduction over
 * an aligned segment of a warp, and every head is served in one pass (no loop over further heads).
 *
 * Float32 inputs (and the extremes below): the squares are exact in float64 and summed there;
 * rstd = 1 / sqrt(sum / D + eps) and (w + offset) * rstd are float64, and y = float32(x * that):
 * one rounding, as on the CPU. Those float64 conversions and products cost as much issue time as
 * the whole plain call (a conversion to or from float64 issues at 1/8 of float32's rate), so
 * 16-bit inputs form y in float32 instead, with a relative error below 6 * 2^-24 (u):
 *  - the square of a 16-bit value is exact in float32 (in its normal range), a pair of squares is
 *    summed with one rounding (fmaf: u, no cancellation in a sum of squares), a lane's pairs in
 *    float32 as a tree of depth 3 (3u), the lanes in float64, and v = sum / D + eps is kept when it
 *    lies in [2^-100, 2^64): no square overflowed and the subnormal squares' absolute errors are
 *    negligible (<= 2^-141 against v);
 *  - rstd = 1 / sqrt(v) (2u from v's error, 2^-41 from its computation), rounded to float32 (u);
 *  - y = (x * rstd 2^39) * ((w + offset) 2^-39): the offset is used only when float32 holds it
 *    exactly, w + offset rounds once (u), each product once (2u). 2^39 keeps x * rstd in float32's
 *    normal range: a nonzero 16-bit x is at least 2^-133 and rstd above 2^-32, while |x| rstd is
 *    at most sqrt(D) <= 2^4.5. The prefill kernel stages the second factor once per block in
 *    shared memory, where the 2^-39 is exact and the product finite: when every |w + offset| is 0
 *    or in [2^-87, 2^123) (rp_stage_norm_weights). Otherwise, and in the decode kernel, y =
 *    ((x * rstd 2^39) * (w + offset)) * 2^-39, exact scaling but below 2^-126, and a 16-byte
 *    vector whose second product overflowed (|w + offset| > 2^84) is formed in float64.
 * With the rotation's own error (< 3u s (|y[a]| + |y[b]|): cos, sin and one product rounded, then
 * the fmaf), every output stays within the header's bounds, which the rounding to the 16-bit dtype
 * dominates. A warp with a v outside that range (a square overflowed, a head's root mean square
 * reaches 2^32, or every square is tiny and eps below 2^-100) sums again in float64 and takes the
 * float64 path. */
#define RP_NORM_SCALE 0x1p39f
#define RP_NORM_UNSCALE 0x1p-39f
struct rp_norm_item {
    const void *w;   /* the head's [D] weight; NULL: not normalised */
    int w_f32;       /* weight dtype float32 (else the inputs')     */
    int lo, hi;      /* head dims of lo's and hi's first element    */
    bool fast;       /* y in float32 (above), else in float64       */
    float scaled_rstd, offset_f32; /* fast: float32(rstd) 2^39, the offset */
    const float *sw;               /* fast: the block's staged weights, or
                                      NULL: w from memory                  */
    double rstd, offset;           /* else                                 */
};

/* A head's reciprocal root mean square, and whether its y may be formed in float32. */
struct rp_norm_factor {
    double rstd;
    bool fast;
};

/* This lane's sums over the blockDim.x lanes of its heads (one per item), interleaved: the N
 * reductions' shuffles overlap instead of forming N chains. Blocks of QK-norm calls are whole warps
 * (the plan), so the mask is the full warp's and the compiler emits bare shuffles. */
template <int N>
__device__ __forceinline__ void rp_head_sums(double *sum)
{
#pragma unroll
    for (int o = 1; o < 32; o <<= 1)
        if (o < (int)blockDim.x)
#pragma unroll
            for (int i = 0; i < N; i++)
                sum[i] += __shfl_xor_sync(0xffffffffu, sum[i], o);
}

/* The sum of a 16-bit item's squares: pairs of exact squares rounded once (fmaf), summed in
 * float32 as a tree of depth log2(ELEMS) (relative error below (1 + 3) u for ELEMS = 8). */
template <rp_dtype DT>
__device__ __forceinline__ float rp_square_sum16(uint4 lo, uint4 hi)
{
    constexpr int V = rp_elem<DT>::ELEMS;
    float x[V], y[V];
    rp_elem<DT>::unpack(lo, x);
    rp_elem<DT>::unpack(hi, y);
#pragma unroll
    for (int c = 0; c < V; c++)
        x[c] = fmaf(y[c], y[c], x[c] * x[c]);
#pragma unroll
    for (int w = 1; w < V; w <<= 1)
#pragma unroll
        for (int c = 0; c < V; c += 2 * w)
            x[c] += x[c + w];
    return x[0];
}

/* rstd of the N heads whose lanes hold (lo[i], hi[i]) (valid[i]: this lane holds item i), each
 * reduced over the blockDim.x lanes of its head. Every lane of the block must call it (uniformly). */
template <rp_dtype DT, int N, typename Args>
__device__ __forceinline__ void rp_norm_rstd(const Args &a, const bool *valid, const uint4 *lo, const uint4 *hi,
                                             rp_norm_factor *f)
{
    constexpr int V = rp_elem<DT>::ELEMS;
    double sum[N];
    if (DT != RP_F32 && a.norm_float32) {
        bool slow = false;
#pragma unroll
        for (int i = 0; i < N; i++)
            sum[i] = valid[i] ? (double)rp_square_sum16<DT>(lo[i], hi[i]) : 0.0;
        rp_head_sums<N>(sum);
#pragma unroll
        for (int i = 0; i < N; i++) {
            const double v = sum[i] * a.norm_inv_dim + a.norm_eps;
            f[i].fast = v >= 0x1p-100 && v < 0x1p64; /* false for NaN */
            /* rsqrtf (2 ulp) and one Newton step in float64: relative error ~2^-41, against the
             * 17 instructions of a float64 rsqrt (used where v is not fast: recomputed below) */
            const double r0 = (double)rsqrtf((float)v);
            f[i].rstd = r0 * fma(-0.5 * v, r0 * r0, 1.5);
            slow |= valid[i] && !f[i].fast;
        }
        if (!__any_sync(0xffffffffu, slow))
            return;
    }
#pragma unroll
    for (int i = 0; i < N; i++) {
        float x[V], y[V];
        rp_elem<DT>::unpack(lo[i], x);
        rp_elem<DT>::unpack(hi[i], y);
        sum[i] = 0.0;
#pragma unroll
        for (int c = 0; c < V; c++)
            sum[i] += valid[i] ? (double)x[c] * (double)x[c] + (double)y[c] * (double)y[c] : 0.0;
    }
    rp_head_sums<N>(sum);
#pragma unroll
    for (int i = 0; i < N; i++) {
        f[i].rstd = 1.0 / sqrt(sum[i] * a.norm_inv_dim + a.norm_eps);
        f[i].fast = false;
    }
}

/* The normalisation of an item of `kind` (rp_item_kind) whose vectors start at head dims lo, hi;
 * sw: the block's staged weights (rp_stage_norm_weights), or NULL: from memory. */
template <typename Args>
__device__ __forceinline__ rp_norm_item rp_norm_of(const Args &a, int kind, int lo, int hi, rp_norm_factor f,
                                                   const float *sw)
{
    rp_norm_item n;
    const bool q = kind == RP_ITEM_Q, k = kind == RP_ITEM_K;
    n.w = a.parts == RP_PARTS_SCATTER ? NULL : q ? a.q_norm : k ? a.k_norm : NULL;
    n.w_f32 = q ? a.q_norm_f32 : a.k_norm_f32;
    n.lo = lo;
    n.hi = hi;
    n.fast = f.fast;
    n.scaled_rstd = (float)f.rstd * RP_NORM_SCALE;
    n.offset_f32 = (float)a.norm_offset;
    n.sw = sw ? sw + (k ? 2 * a.half_dim : 0) : NULL;
    n.rstd = f.rstd;
    n.offset = a.norm_offset;
    return n;
}

/* 16 bytes from an address aligned to 2 only (a weight given as a view at an odd element). A call,
 * so that the aligned path's one vector load does not issue these eight loads predicated off. */
static __device__ __noinline__ uint4 rp_load16_unaligned(const unsigned short *p)
{
    return make_uint4(p[0] | (unsigned)p[1] << 16, p[2] | (unsigned)p[3] << 16, p[4] | (unsigned)p[5] << 16,
                      p[6] | (unsigned)p[7] << 16);
}

__device__ __forceinline__ uint4 rp_load16(const void *p)
{
    return ((uintptr_t)p & 15) == 0 ? __ldg((const uint4 *)p) : rp_load16_unaligned((const unsigned short *)p);
}

/* Dynamic shared memory the QK-norm kernels reserve before their cos/sin table, in float4s: the
 * staged weights of q and k, [2][D] floats. */
template <typename Args>
__device__ __forceinline__ int rp_norm_staged_float4s(const Args &a)
{
    return a.half_dim; /* 2 D floats */
}

/* Stages the weights of the float32 path into the block's shared memory sw [2][D] (q's, then k's):
 * (w + offset) 2^-39, rounded once, the scaling exact where |w + offset| is 0 or in [2^-87, 2^123).
 * There the second product of y (items.cuh, above) cannot overflow and no staged value is
 * subnormal; returns whether one of this thread's values lies outside (the block ORs them at its
 * barrier, and a block with one forms y in float64 from the weights in memory). Each thread
 * takes 16-byte pieces; called on the block's first tile, before its barrier. */
template <rp_dtype DT, typename Args>
__device__ __forceinline__ bool rp_stage_norm_weights(const Args &a, float *sw)
{
    typedef typename rp_elem<DT>::storage S;
    const int D = 2 * a.half_dim;
    const int thread = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    const int threads = blockDim.x * blockDim.y * blockDim.z;
    const float offset = (float)a.norm_offset; /* exact: a.norm_float32 */
    bool outside = false;
    for (int which = 0; which < 2; which++) {
        const void *w = which ? a.k_norm : a.q_norm;
        const int f32 = which ? a.k_norm_f32 : a.q_norm_f32, per = f32 ? 4 : 8; /* elements a piece */
        for (int i = thread * per; w && i < D; i += threads * per) {
            float v[8];
            if (f32) {
                const uint4 u = rp_load16((const float *)w + i);
                v[0] = __uint_as_float(u.x), v[1] = __uint_as_float(u.y);
                v[2] = __uint_as_float(u.z), v[3] = __uint_as_float(u.w);
            } else {
                rp_elem<DT>::unpack(rp_load16((const S *)w + i), v);
            }
#pragma unroll
            for (int c = 0; c < 8; c++)
                if (c < per) {
                    const float wo = v[c] + offset, m = fabsf(wo);
                    outside |= wo != 0.0f && !(m >= 0x1p-87f && m < 0x1p123f); /* NaN: outside */
                    sw[which * D + i + c] = wo * RP_NORM_UNSCALE;
                }
        }
    }
    return outside;
}

/* The QK-norm kernels' barrier after the table: on the block's first tile (stage), whether every
 * staged weight is usable (no thread found one outside); else a plain barrier and `staged` kept. */
__device__ __forceinline__ bool rp_norm_barrier(bool stage, bool outside, bool staged)
{
    if (stage)
        return !__syncthreads_or(outside);
    __syncthreads();
    return staged;
}

/* w[first .. first + ELEMS) as float32: 16-byte loads (of the weight's dtype, float32 or the inputs'). */
template <rp_dtype DT>
__device__ __forceinline__ void rp_norm_weights(const rp_norm_item &n, int first, float *w)
{
    typedef rp_elem<DT> E;
    if (n.w_f32) {
#pragma unroll
        for (int c = 0; c < E::ELEMS; c += 4) {
            const uint4 f = rp_load16((const float *)n.w + first + c);
            w[c] = __uint_as_float(f.x); w[c + 1] = __uint_as_float(f.y);
            w[c + 2] = __uint_as_float(f.z); w[c + 3] = __uint_as_float(f.w);
        }
        return;
    }
    E::unpack(rp_load16((const typename E::storage *)n.w + first), w);
}

/* x[c] (head dim first + c) normalised in place (see above for the two paths). */
template <rp_dtype DT>
__device__ __forceinline__ void rp_normalise(const rp_norm_item &n, float *x, int first)
{
    constexpr int V = rp_elem<DT>::ELEMS;
    if (DT != RP_F32 && n.fast && n.sw) {
        const float4 *sw = (const float4 *)(n.sw + first);
#pragma unroll
        for (int c = 0; c < V; c += 4) {
            const float4 w = sw[c / 4];
            x[c] = (x[c] * n.scaled_rstd) * w.x;
            x[c + 1] = (x[c + 1] * n.scaled_rstd) * w.y;
            x[c + 2] = (x[c + 2] * n.scaled_rstd) * w.z;
            x[c + 3] = (x[c + 3] * n.scaled_rstd) * w.w;
        }
        return;
    }
    float w[V];
    rp_norm_weights<DT>(n, first, w);
    if (DT != RP_F32 && n.fast) { /* the same products, w + offset unstaged, scaled last */
        float y[V], largest = 0.0f;
#pragma unroll
        for (int c = 0; c < V; c++) {
            const float q = (x[c] * n.scaled_rstd) * (w[c] + n.offset_f32);
            largest = fmaxf(largest, fabsf(q));
            y[c] = q * RP_NORM_UNSCALE;
        }
        if (largest <= 0x1.fffffep127f) { /* else |w + offset| > 2^84 overflowed one: float64 below */
#pragma unroll
            for (int c = 0; c < V; c++)
                x[c] = y[c];
            return;
        }
    }
#pragma unroll
    for (int c = 0; c < V; c++)
        x[c] = (float)((double)x[c] * (((double)w[c] + n.offset) * n.rstd));
}

/* A pass-through item with QK-norm: its vectors become the normalised values (x, y receive them). */
template <rp_dtype DT>
__device__ __forceinline__ void normalise_vectors(uint4 *lo, uint4 *hi, const rp_norm_item &n, float *x, float *y)
{
    rp_elem<DT>::unpack(*lo, x);
    rp_elem<DT>::unpack(*hi, y);
    rp_normalise<DT>(n, x, n.lo);
    rp_normalise<DT>(n, y, n.hi);
    *lo = rp_elem<DT>::pack(x);
    *hi = rp_elem<DT>::pack(y);
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
        rp_normalise<DT>(norm, x, norm.lo);
        rp_normalise<DT>(norm, y, norm.hi);
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
