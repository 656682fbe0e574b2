/*
 * device.cuh — device helpers of the CUDA kernels: the float64 sin/cos of one RoPE angle, the
 * storage types' conversions to and from float32, and the bad-slot record.
 */
#ifndef RP_CUDA_DEVICE_CUH
#define RP_CUDA_DEVICE_CUH

#include "../cpu/sincos.h" /* the range-reduction and polynomial constants every backend shares */
#include "cuda_backend.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

/* scale * sin and scale * cos of angle = position * inv_freq (scale = attention_scaling), with
 * src/cpu/sincos.h's algorithm: k = rint(angle * 2/pi), a two-step Cody-Waite reduction that is
 * exact for |k| < 2^31, fdlibm's polynomials; larger angles (int64 positions only) use CUDA's
 * sin/cos, which reduce exactly at any size. The products with scale are float64 too, and each
 * result is rounded once to float32, as the contract says (scale = 1 multiplies exactly). */
__device__ __forceinline__ void rp_angle_sincos(double angle, double scale, float *s_out, float *c_out)
{
    if (!(fabs(angle) < RP_SINCOS_FAST_LIMIT)) {
        double s, c;
        sincos(angle, &s, &c);
        *s_out = (float)(scale * s);
        *c_out = (float)(scale * c);
        return;
    }
    const double k = rint(angle * RP_TWO_OVER_PI);
    const double r = fma(-k, RP_PIO2_LO, fma(-k, RP_PIO2_HI, angle));
    const double z = r * r;
    const double sin_poly =
        RP_SIN_C1 + z * (RP_SIN_C2 + z * (RP_SIN_C3 + z * (RP_SIN_C4 + z * (RP_SIN_C5 + z * RP_SIN_C6))));
    const double cos_poly =
        RP_COS_C1 + z * (RP_COS_C2 + z * (RP_COS_C3 + z * (RP_COS_C4 + z * (RP_COS_C5 + z * RP_COS_C6))));
    const double sr = r + r * z * sin_poly;
    const double cr = 1.0 - 0.5 * z + z * z * cos_poly;
    /* negation commutes with the scaling and the rounding: scale first, then pick the quadrant */
    const float fs = (float)(scale * sr), fc = (float)(scale * cr);
    switch ((int)((long long)k & 3)) {
    case 0: *s_out = fs; *c_out = fc; break;
    case 1: *s_out = fc; *c_out = -fs; break;
    case 2: *s_out = -fs; *c_out = -fc; break;
    default: *s_out = -fc; *c_out = fs; break;
    }
}

/* One rotated pair in float32: (x, y) -> (x c - y s, y c + x s), one rounding per product. */
__device__ __forceinline__ void rp_rotate(float x, float y, float c, float s, float *ox, float *oy)
{
    *ox = fmaf(x, c, -(y * s));
    *oy = fmaf(y, c, x * s);
}

/* ---- storage types ---------------------------------------------------------------------------
 * Each has: the storage type, ELEMS elements per 16-byte vector, scalar and vector conversions to
 * float32 (exact) and back (round to nearest-even, subnormals kept, NaN stays NaN). */

template <rp_dtype DT> struct rp_elem;

template <> struct rp_elem<RP_F32> {
    typedef float storage;
    static constexpr int ELEMS = 4;
    static __device__ __forceinline__ float to_float(float x) { return x; }
    static __device__ __forceinline__ float from_float(float x) { return x; }
    static __device__ __forceinline__ void unpack(uint4 u, float *f)
    {
        f[0] = __uint_as_float(u.x); f[1] = __uint_as_float(u.y);
        f[2] = __uint_as_float(u.z); f[3] = __uint_as_float(u.w);
    }
    static __device__ __forceinline__ uint4 pack(const float *f)
    {
        return make_uint4(__float_as_uint(f[0]), __float_as_uint(f[1]), __float_as_uint(f[2]),
                          __float_as_uint(f[3]));
    }
};

/* Pairs of 16-bit values, chosen by overload: the two conversions that differ per type. */
__device__ __forceinline__ __half2 rp_pair_from_floats(float a, float b, __half2 *) { return __floats2half2_rn(a, b); }
__device__ __forceinline__ __nv_bfloat162 rp_pair_from_floats(float a, float b, __nv_bfloat162 *)
{
    return __floats2bfloat162_rn(a, b);
}
__device__ __forceinline__ float2 rp_pair_to_floats(__half2 h) { return __half22float2(h); }
__device__ __forceinline__ float2 rp_pair_to_floats(__nv_bfloat162 h) { return __bfloat1622float2(h); }

/* Two 16-bit elements per 32-bit word, the lower address in the low half. */
template <typename Half2> struct rp_elem16 {
    static constexpr int ELEMS = 8;
    static __device__ __forceinline__ unsigned pack2(float lo, float hi)
    {
        const Half2 h = rp_pair_from_floats(lo, hi, (Half2 *)0);
        unsigned u;
        memcpy(&u, &h, sizeof u);
        return u;
    }
    static __device__ __forceinline__ float2 unpack2(unsigned u)
    {
        Half2 h;
        memcpy(&h, &u, sizeof u);
        return rp_pair_to_floats(h);
    }
    static __device__ __forceinline__ void unpack(uint4 u, float *f)
    {
        const unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const float2 v = unpack2(w[i]);
            f[2 * i] = v.x;
            f[2 * i + 1] = v.y;
        }
    }
    static __device__ __forceinline__ uint4 pack(const float *f)
    {
        return make_uint4(pack2(f[0], f[1]), pack2(f[2], f[3]), pack2(f[4], f[5]), pack2(f[6], f[7]));
    }
};

template <> struct rp_elem<RP_F16> : rp_elem16<__half2> {
    typedef __half storage;
    static __device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
    static __device__ __forceinline__ __half from_float(float x) { return __float2half_rn(x); }
};

template <> struct rp_elem<RP_BF16> : rp_elem16<__nv_bfloat162> {
    typedef __nv_bfloat16 storage;
    static __device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
    static __device__ __forceinline__ __nv_bfloat16 from_float(float x) { return __float2bfloat16_rn(x); }
};

/* ---- fp8 pool codes -------------------------------------------------------------------------
 * x rounded once to OCP e4m3fn (e5m2 when e5m2 != 0): round to nearest-even, saturating to the
 * finite range (infinities too), NaN stays NaN. sm_89+ use the hardware's cvt.rn.satfinite; the
 * header's fallback on older GPUs rounds the same way. */
__device__ __forceinline__ unsigned rp_fp8x2(float lo, float hi, int e5m2)
{
    return (unsigned)__nv_cvt_float2_to_fp8x2(make_float2(lo, hi), __NV_SATFINITE, e5m2 ? __NV_E5M2 : __NV_E4M3);
}

__device__ __forceinline__ unsigned char rp_fp8(float x, int e5m2)
{
    return (unsigned char)__nv_cvt_float_to_fp8(x, __NV_SATFINITE, e5m2 ? __NV_E5M2 : __NV_E4M3);
}

/* Four values as four fp8 codes in one word, the first in the low byte. */
__device__ __forceinline__ unsigned rp_fp8x4(const float *x, float inv_scale, int e5m2)
{
    return rp_fp8x2(x[0] * inv_scale, x[1] * inv_scale, e5m2) |
           (rp_fp8x2(x[2] * inv_scale, x[3] * inv_scale, e5m2) << 16);
}

/* ---- programmatic dependent launch (sm_90+; no-ops before) ---------------------------------------
 * A kernel launched with programmatic stream serialization may start while the kernel before it on
 * the stream is still running; it must wait for that kernel (completion and memory) before it
 * reads or writes global memory. Letting dependents launch early is always safe: they wait too. */

__device__ __forceinline__ void rp_wait_for_prior_kernel(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

/* Makes the computation of x happen before this point. The compiler sinks parameter reads and
 * address arithmetic to their first use, past the wait; an asm statement that reads x cannot move
 * (volatile asms keep their order) nor be dropped, so x, and every parameter line its computation
 * read, is ready before the wait. It sleeps 1 ns for one impossible value of x. */
__device__ __forceinline__ void rp_compute_before_here(unsigned long long x)
{
    asm volatile("{\n\t.reg .pred p;\n\tsetp.eq.u64 p, %0, 0x5555555555555555;\n\t@p nanosleep.u32 1;\n\t}" ::"l"(x));
}

__device__ __forceinline__ void rp_let_next_kernel_launch(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

/* ---- indices ---------------------------------------------------------------------------------- */

/* Entry t of a positions or slots array of int32 (is64 = 0) or int64, in two steps: issue() reads
 * the raw 32-bit words with unconditional loads from a selected address, value() assembles them.
 * A plain `is64 ? load64 : load32` merges both loads into one register, and the instruction that
 * sign-extends the int32 result then waits for the load at once (a write-after-write on that
 * register), stalling everything after it for a memory latency; here nothing waits until the value
 * is used. */
struct rp_index_words {
    int lo, hi; /* hi is meaningful for int64 only */
};

__device__ __forceinline__ rp_index_words rp_index_issue(const void *base, int is64, long long stride, long long t)
{
    const int *p = (const int *)base + (is64 ? 2 : 1) * t * stride;
    rp_index_words w;
    w.lo = p[0];
    w.hi = p[is64]; /* int32: the same word again, ignored */
    return w;
}

__device__ __forceinline__ long long rp_index_value(rp_index_words w, int is64)
{
    return is64 ? (long long)(((unsigned long long)(unsigned)w.hi << 32) | (unsigned)w.lo) : (long long)w.lo;
}

__device__ __forceinline__ long long rp_load_index_dev(const void *base, int is64, long long stride, long long t)
{
    return rp_index_value(rp_index_issue(base, is64, stride, t), is64);
}

/* ---- the bad-slot record ---------------------------------------------------------------------- */

/* Records (token, slot) if token is lower than what the status holds, and likewise in the host's
 * mapped copy. The quick unlocked read
 * keeps the common case (a lower token already recorded) off the lock; under the lock the
 * comparison is repeated, so the lowest token always wins whatever the order of arrival. */
__device__ __forceinline__ void rp_record_bad_slot(rp_cuda_slot_status *st, rp_cuda_slot_status *host,
                                                   long long token, long long slot, long long pool_size)
{
    volatile rp_cuda_slot_status *vs = st;
    if ((unsigned long long)token >= vs->token)
        return;
    while (atomicCAS(&st->lock, 0u, 1u) != 0u)
        __nanosleep(64);
    __threadfence();
    if ((unsigned long long)token < vs->token) {
        vs->slot = slot;
        vs->pool_size = pool_size;
        vs->token = (unsigned long long)token;
    }
    volatile rp_cuda_slot_status *vh = host; /* the host clears its copy when it reports it */
    if ((unsigned long long)token < vh->token) {
        vh->slot = slot;
        vh->pool_size = pool_size;
        __threadfence_system(); /* the host reads token last: slot and pool_size are there */
        vh->token = (unsigned long long)token;
    }
    __threadfence();
    atomicExch(&st->lock, 0u);
}

#endif /* RP_CUDA_DEVICE_CUH */
