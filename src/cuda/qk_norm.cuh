/*
 * qk_norm.cuh — QK-norm in the vectorized kernels (items.cuh): every q and k head RMS-normalised
 * before its rotation (ropepool.h). The per-head reduction, rstd, the two ways y is formed, and the
 * prefill kernel's weights staged in shared memory.
 *
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
#ifndef RP_CUDA_QK_NORM_CUH
#define RP_CUDA_QK_NORM_CUH

#include "kernel_args.cuh"

/* ELEMS weights as loaded, not yet widened: 16 bytes of the inputs' dtype, or 32 of float32 (16-bit
 * inputs). The decode kernel issues their loads early and holds the bits: widening them at once
 * made the table's sin/cos and the slot's load wait for them (bench/results/qwen3-8b-qk-norm.md).
 * Its 80-register build holds only 16 bytes (rp_weights_are_16_bytes). */
struct rp_weight_bits {
    uint4 v[2];
};

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
    const rp_weight_bits *w_lo, *w_hi; /* w of lo's and hi's elements, loaded
                                          ahead (the decode kernel), or NULL */
    double rstd, offset;           /* else                                 */
};

/* A head's reciprocal root mean square, and whether its y may be formed in float32. */
struct rp_norm_factor {
    double rstd;
    bool fast;
};

/* This lane's sums over the blockDim.x lanes of its heads (one per item), interleaved: the N
 * reductions' shuffles overlap instead of forming N chains. Blocks of QK-norm calls are whole warps
 * (the plan), so the mask is the full warp's and the compiler emits bare shuffles. LANES:
 * blockDim.x when the kernel knows it (compiled for one head_dim: HALF / ELEMS groups a head, see
 * rp_head_lanes), else 0 and tested at run time. */
template <int N, int LANES>
__device__ __forceinline__ void rp_head_sums(double *sum)
{
#pragma unroll
    for (int o = 1; o < 32; o <<= 1)
        if (o < (LANES ? LANES : (int)blockDim.x))
#pragma unroll
            for (int i = 0; i < N; i++)
                sum[i] += __shfl_xor_sync(0xffffffffu, sum[i], o);
}

/* The lanes of a head's reduction at compile time: a kernel compiled for one head_dim (HALF) serves
 * whole head rows of HALF / ELEMS groups, the plan's blockDim.x for QK-norm calls; 0: unknown. */
template <int HALF, int ELEMS> __host__ __device__ constexpr int rp_head_lanes(void)
{
    return HALF / ELEMS;
}

/* 16-bit values as float32 for the sum of squares: bfloat16 is the high half of a float32, so the
 * pair in a word is (w << 16, w & 0xffff0000), one instruction a pair fewer than the conversion.
 * Only here: the same unpack in the rotation moved the decode kernels' register allocation and
 * slowed them (bench/results/qwen3-8b-qk-norm.md, stop 35). */
template <rp_dtype DT> __device__ __forceinline__ void rp_unpack_for_sum(uint4 u, float *f)
{
    if (DT != RP_BF16) {
        rp_elem<DT>::unpack(u, f);
        return;
    }
    const unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        f[2 * i] = __uint_as_float(w[i] << 16);
        f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
}

/* The sum of a 16-bit item's squares: pairs of exact squares rounded once (fmaf), summed in
 * float32 as a tree of depth log2(ELEMS) (relative error below (1 + 3) u for ELEMS = 8). */
template <rp_dtype DT>
__device__ __forceinline__ float rp_square_sum16(uint4 lo, uint4 hi)
{
    constexpr int V = rp_elem<DT>::ELEMS;
    float x[V], y[V];
    rp_unpack_for_sum<DT>(lo, x);
    rp_unpack_for_sum<DT>(hi, y);
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
 * reduced over the blockDim.x lanes of its head (LANES: as rp_head_sums). Every lane of the block
 * must call it (uniformly). */
template <rp_dtype DT, int N, int LANES, typename Args>
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
        rp_head_sums<N, LANES>(sum);
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
    rp_head_sums<N, LANES>(sum);
#pragma unroll
    for (int i = 0; i < N; i++) {
        f[i].rstd = 1.0 / sqrt(sum[i] * a.norm_inv_dim + a.norm_eps);
        f[i].fast = false;
    }
}

/* The weights a normalised item of `kind` multiplies by: q's, k's, or NULL (v, or not normalised). */
template <typename Args> __device__ __forceinline__ const void *rp_norm_weights_of(const Args &a, int kind, int *f32)
{
    *f32 = kind == RP_ITEM_Q ? a.q_norm_f32 : a.k_norm_f32;
    return a.parts == RP_PARTS_SCATTER ? NULL : kind == RP_ITEM_Q ? a.q_norm : kind == RP_ITEM_K ? a.k_norm : NULL;
}

/* The normalisation of an item of `kind` (rp_item_kind) whose vectors start at head dims lo, hi;
 * sw: the block's staged weights (rp_stage_norm_weights), or NULL: from memory. */
template <typename Args>
__device__ __forceinline__ rp_norm_item rp_norm_of(const Args &a, int kind, int lo, int hi, rp_norm_factor f,
                                                   const float *sw)
{
    rp_norm_item n;
    const bool k = kind == RP_ITEM_K;
    n.w = rp_norm_weights_of(a, kind, &n.w_f32);
    n.lo = lo;
    n.hi = hi;
    n.fast = f.fast;
    n.scaled_rstd = (float)f.rstd * RP_NORM_SCALE;
    n.offset_f32 = (float)a.norm_offset;
    n.sw = sw ? sw + (k ? 2 * a.half_dim : 0) : NULL;
    n.w_lo = n.w_hi = NULL;
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

/* Four float32s from their bits. */
__device__ __forceinline__ void rp_floats_of(uint4 f, float *v)
{
    v[0] = __uint_as_float(f.x); v[1] = __uint_as_float(f.y);
    v[2] = __uint_as_float(f.z); v[3] = __uint_as_float(f.w);
}

/* w[first .. first + ELEMS) as float32 (f32: the weight's dtype is float32, else the inputs'),
 * in 16-byte loads. */
template <rp_dtype DT>
__device__ __forceinline__ void rp_load_weights(const void *w, int f32, int first, float *v)
{
    typedef rp_elem<DT> E;
    if (f32) {
#pragma unroll
        for (int c = 0; c < E::ELEMS; c += 4)
            rp_floats_of(rp_load16((const float *)w + first + c), v + c);
        return;
    }
    E::unpack(rp_load16((const typename E::storage *)w + first), v);
}

/* Whether 16 bytes hold an item's ELEMS weights (f32: the weight's dtype is float32, else the
 * inputs'). */
template <rp_dtype DT> __device__ __forceinline__ bool rp_weights_are_16_bytes(int f32)
{
    return DT == RP_F32 || !f32;
}

/* The same weights as bits, widened by rp_widen_weights where they are used (the decode kernel:
 * see rp_weight_bits). The prefill kernel keeps rp_load_weights: the same loads written this way
 * ran it 13% slower (Qwen3-8B, T = 256 and 1024; cuda-h200-stop31-qknorm-ab.log). */
template <rp_dtype DT>
__device__ __forceinline__ rp_weight_bits rp_load_weight_bits(const void *w, int f32, int first)
{
    typedef rp_elem<DT> E;
    rp_weight_bits b;
    if (f32) {
#pragma unroll
        for (int c = 0; c < E::ELEMS; c += 4)
            b.v[c / 4] = rp_load16((const float *)w + first + c);
    } else {
        b.v[0] = rp_load16((const typename E::storage *)w + first);
    }
    return b;
}

template <rp_dtype DT>
__device__ __forceinline__ void rp_widen_weights(const rp_weight_bits &b, int f32, float *v)
{
    typedef rp_elem<DT> E;
    if (f32) {
#pragma unroll
        for (int c = 0; c < E::ELEMS; c += 4)
            rp_floats_of(b.v[c / 4], v + c);
        return;
    }
    E::unpack(b.v[0], v);
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
 * There the second product of y (above) cannot overflow and no staged value is
 * subnormal; returns whether one of this thread's values lies outside (the block ORs them at its
 * barrier, and a block with one forms y from the weights in memory). Each thread takes pieces of
 * ELEMS weights; called on the block's first tile, before its barrier. */
template <rp_dtype DT, typename Args>
__device__ __forceinline__ bool rp_stage_norm_weights(const Args &a, float *sw)
{
    constexpr int V = rp_elem<DT>::ELEMS; /* a piece: 16 bytes of the inputs' dtype */
    const int D = 2 * a.half_dim;
    const int thread = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    const int threads = blockDim.x * blockDim.y * blockDim.z;
    const float offset = (float)a.norm_offset; /* exact: a.norm_float32 */
    bool outside = false;
    for (int which = 0; which < 2; which++) {
        const void *w = which ? a.k_norm : a.q_norm;
        const int f32 = which ? a.k_norm_f32 : a.q_norm_f32;
        for (int i = thread * V; w && i < D; i += threads * V) {
            float v[V];
            rp_load_weights<DT>(w, f32, i, v);
#pragma unroll
            for (int c = 0; c < V; c++) {
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

/* x[c] (head dim first + c) normalised in place (see above for the two paths); pre: its weights
 * loaded ahead, or NULL: from the block's staged copy or from memory. */
template <rp_dtype DT>
__device__ __forceinline__ void rp_normalise(const rp_norm_item &n, float *x, int first, const rp_weight_bits *pre)
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
    if (pre)
        rp_widen_weights<DT>(*pre, n.w_f32, w);
    else
        rp_load_weights<DT>(n.w, n.w_f32, first, w);
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
    rp_normalise<DT>(n, x, n.lo, n.w_lo);
    rp_normalise<DT>(n, y, n.hi, n.w_hi);
    *lo = rp_elem<DT>::pack(x);
    *hi = rp_elem<DT>::pack(y);
}

#endif /* RP_CUDA_QK_NORM_CUH */
