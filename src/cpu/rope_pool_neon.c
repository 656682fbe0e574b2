/*
 * rope_pool_neon.c — the aarch64 kernel: Advanced SIMD (baseline on every aarch64 CPU), 2 float64
 * lanes for the angles, 8 pairs (two float32x4 per half) per rotation step; a head_dim/2 that is
 * not a multiple of 8 ends with one step on a zero-padded copy. The token/head walk is the x86
 * kernels' (rope_pool_simd.h); this file holds the instructions, in the same order as the AVX2 and
 * AVX-512 files (same constants, same FMAs, same float64 -> float32 rounding), so the three give
 * the same bits for angles below 2^31 (the libm fallback above that is the platform's), QK-norm
 * and mRoPE included (test_numerics.c records them), except for the sign and payload of a NaN
 * result: Arm and x86 pick among NaN operands differently, and x86's default NaN is negative.
 *
 * Only src/CMakeLists.txt's aarch64 branch compiles this file; it needs no extra flags.
 *
 * Conversions: f16 through fcvtl / fcvtn (vcvt_f32_f16, vcvt_f16_f32: round to nearest-even,
 * subnormals and NaN kept: every slice runs with FPCR 0, fp_mode.h, whatever the caller set).
 * bf16 widens by a 16-bit shift and narrows with integer round-to-nearest-even:
 * rp_float_to_bf16_bits (dtype.h) lane for lane, exact on subnormals, NaN kept quiet. fp8 pools
 * (e4m3fn, e5m2; Advanced SIMD has no conversion) take the x86 kernels' integer rounding on 4
 * lanes, so their codes are the same too. The BF16 extension's BFCVTN is not used: it is optional,
 * and what it does with subnormals depends on FPCR and FEAT_EBF16; the integer rounding costs a
 * few instructions per 4 lanes against the loads and stores of a memory-bound kernel.
 *
 * Streaming stores: none (SIMD_STREAMING_STORES 0). AArch64's STNP is only a hint, and the Arm
 * cores ropepool targets (Neoverse, Apple) switch to write-streaming on their own when whole lines
 * are written in sequence, so the driver runs every call in one pass with ordinary stores.
 */
#define SIMD_STREAMING_STORES 0
#include "rope_pool_simd.h"

#include <arm_neon.h>
#include <string.h>

/* ---- angles -------------------------------------------------------------------------------------- */

/* The drivers' FMA(a, b, c) = a * b + c, and SET. */
#define NEON_FMA(a, b, c) vfmaq_f64((c), (a), (b))
#define NEON_SET(x) vdupq_n_f64(x)

/* sincos.h's rp_sincos on 2 lanes with |a| < 2^31; the same steps as sincos4 in the AVX2 file. */
static RP_ALWAYS_INLINE void sincos2(float64x2_t a, float64x2_t *sin_out, float64x2_t *cos_out)
{
    const float64x2_t k = vrndnq_f64(vmulq_f64(a, NEON_SET(RP_TWO_OVER_PI))); /* nearest-even */
    float64x2_t r = vfmsq_f64(a, k, NEON_SET(RP_PIO2_HI));                    /* a - k * HI, fused */
    r = vfmsq_f64(r, k, NEON_SET(RP_PIO2_LO));
    const float64x2_t z = vmulq_f64(r, r);

    const float64x2_t sin_poly = SIMD_SIN_POLY(NEON_FMA, NEON_SET, z);
    const float64x2_t cos_poly = SIMD_COS_POLY(NEON_FMA, NEON_SET, z);
    const float64x2_t sr = vfmaq_f64(r, vmulq_f64(r, z), sin_poly);
    const float64x2_t cr = vfmaq_f64(vfmsq_f64(NEON_SET(1.0), z, NEON_SET(0.5)), vmulq_f64(z, z), cos_poly);

    /* Quadrant k & 3: odd swaps sin and cos; bit 1 of k (sin) and of k + 1 (cos) is the sign,
     * shifted straight into bit 63. k is integral, so the conversion is exact. */
    const int64x2_t quadrant = vcvtq_s64_f64(k);
    const uint64x2_t swap = vtstq_s64(quadrant, vdupq_n_s64(1));
    const int64x2_t two = vdupq_n_s64(2);
    const uint64x2_t sin_sign = vreinterpretq_u64_s64(vshlq_n_s64(vandq_s64(quadrant, two), 62));
    const uint64x2_t cos_sign =
        vreinterpretq_u64_s64(vshlq_n_s64(vandq_s64(vaddq_s64(quadrant, vdupq_n_s64(1)), two), 62));
    *sin_out = vreinterpretq_f64_u64(veorq_u64(vreinterpretq_u64_f64(vbslq_f64(swap, cr, sr)), sin_sign));
    *cos_out = vreinterpretq_f64_u64(veorq_u64(vreinterpretq_u64_f64(vbslq_f64(swap, sr, cr)), cos_sign));
}

/* 4 frequencies per step (two vectors, so that each step stores 4 float32 to cs and sn); a short
 * last step reads zeros past n, whose angles are 0 and whose outputs land in SIMD_PAD. */
static int simd_sincos(const double *inv_freq, int64_t n, double pos, double scale, float *cs, float *sn)
{
    const float64x2_t position = vdupq_n_f64(pos), limit = vdupq_n_f64(RP_SINCOS_FAST_LIMIT);
    const float64x2_t s_scale = vdupq_n_f64(scale);
    uint64x2_t fast = vdupq_n_u64(~0ull);
    for (int64_t i = 0; i < n; i += 4) {
        double tail[4] = {0, 0, 0, 0};
        const double *f = inv_freq + i;
        if (n - i < 4) {
            memcpy(tail, f, (size_t)(n - i) * sizeof *tail);
            f = tail;
        }
        const float64x2_t a0 = vmulq_f64(position, vld1q_f64(f));
        const float64x2_t a1 = vmulq_f64(position, vld1q_f64(f + 2));
        /* |angle| < 2^31 is false for NaN too, which must take the libm path as well. */
        fast = vandq_u64(fast, vandq_u64(vcaltq_f64(a0, limit), vcaltq_f64(a1, limit)));
        float64x2_t s0, c0, s1, c1;
        sincos2(a0, &s0, &c0);
        sincos2(a1, &s1, &c1);
        vst1q_f32(cs + i, vcvt_high_f32_f64(vcvt_f32_f64(vmulq_f64(s_scale, c0)), vmulq_f64(s_scale, c1)));
        vst1q_f32(sn + i, vcvt_high_f32_f64(vcvt_f32_f64(vmulq_f64(s_scale, s0)), vmulq_f64(s_scale, s1)));
    }
    return vminvq_u32(vreinterpretq_u32_u64(fast)) == 0;
}

/* ---- rotation ------------------------------------------------------------------------------------ */

/* 8 elements of one half-row, widened to float32. */
typedef struct half8 {
    float32x4_t lo, hi;
} half8;

static RP_ALWAYS_INLINE half8 load8(rp_dtype dt, const char *p)
{
    half8 v;
    if (dt == RP_F32) {
        v.lo = vld1q_f32((const float *)p);
        v.hi = vld1q_f32((const float *)p + 4);
        return v;
    }
    const uint16x8_t w = vld1q_u16((const uint16_t *)p);
    if (dt == RP_F16) {
        const float16x8_t h = vreinterpretq_f16_u16(w);
        v.lo = vcvt_f32_f16(vget_low_f16(h));
        v.hi = vcvt_high_f32_f16(h);
    } else {
        v.lo = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(w), 16));
        v.hi = vreinterpretq_f32_u32(vshll_high_n_u16(w, 16));
    }
    return v;
}

/* rp_float_to_bf16_bits (dtype.h) on 4 lanes: (u + 0x7fff + lsb) >> 16, or u >> 16 | 0x40 for NaN. */
static RP_ALWAYS_INLINE uint16x4_t float_to_bf16(float32x4_t v)
{
    const uint32x4_t u = vreinterpretq_u32_f32(v);
    const uint32x4_t lsb = vandq_u32(vshrq_n_u32(u, 16), vdupq_n_u32(1));
    const uint16x4_t rounded = vaddhn_u32(u, vaddq_u32(lsb, vdupq_n_u32(0x7fff))); /* high halves */
    const uint16x4_t quiet = vorr_u16(vshrn_n_u32(u, 16), vdup_n_u16(0x40));
    const uint32x4_t nan = vcgtq_u32(vandq_u32(u, vdupq_n_u32(0x7fffffff)), vdupq_n_u32(0x7f800000));
    return vbsl_u16(vmovn_u32(nan), quiet, rounded);
}

/* No streaming stores on this ISA (SIMD_STREAMING_STORES 0): `stream` is always 0. */
static RP_ALWAYS_INLINE void store8(rp_dtype dt, int stream, char *p, half8 v)
{
    (void)stream;
    if (dt == RP_F32) {
        vst1q_f32((float *)p, v.lo);
        vst1q_f32((float *)p + 4, v.hi);
    } else if (dt == RP_F16) {
        vst1q_u16((uint16_t *)p, vreinterpretq_u16_f16(vcvt_high_f16_f32(vcvt_f16_f32(v.lo), v.hi)));
    } else {
        vst1q_u16((uint16_t *)p, vcombine_u16(float_to_bf16(v.lo), float_to_bf16(v.hi)));
    }
}

/* dtype.h's rp_double_to_fp8_bits on 4 float32 lanes, as fp8_convert16 in the AVX-512 file:
 * saturation first; normal results round to nearest-even in integer arithmetic on the float32
 * bits, the exponent rebiased by the same add; results below the smallest normal come from adding
 * a magic number whose ulp is the fp8 subnormal quantum (the FPU rounds to nearest-even); then NaN
 * and the sign. Codes in the low byte of a lane. */
static RP_ALWAYS_INLINE uint32x4_t fp8_convert4(rp_dtype fmt, float32x4_t v)
{
    const int e5m2 = fmt == RP_F8_E5M2, mant = e5m2 ? 2 : 3, shift = 23 - mant, bias = e5m2 ? 15 : 7;
    const uint32_t min_normal = (uint32_t)(127 + 1 - bias) << 23, max_bits = e5m2 ? 0x47600000 : 0x43e00000;
    const uint32x4_t u = vreinterpretq_u32_f32(v), a = vandq_u32(u, vdupq_n_u32(0x7fffffff));
    const uint32x4_t c = vminq_u32(a, vdupq_n_u32(max_bits));
    const int32x4_t down = vdupq_n_s32(-shift); /* vshlq by a negative count shifts right */
    const uint32x4_t lsb = vandq_u32(vshlq_u32(c, down), vdupq_n_u32(1));
    const uint32x4_t round_rebias = vdupq_n_u32((1u << (shift - 1)) - 1 - ((uint32_t)(127 - bias) << 23));
    uint32x4_t code = vshlq_u32(vaddq_u32(vaddq_u32(c, round_rebias), lsb), down);
    const float32x4_t magic = vdupq_n_f32(e5m2 ? 0x1p7f : 0x1p14f); /* 2^23 * the subnormal quantum */
    const uint32x4_t sub = vsubq_u32(vreinterpretq_u32_f32(vaddq_f32(vreinterpretq_f32_u32(c), magic)),
                                     vreinterpretq_u32_f32(magic));
    code = vbslq_u32(vcltq_u32(c, vdupq_n_u32(min_normal)), sub, code);
    code = vbslq_u32(vcgtq_u32(a, vdupq_n_u32(0x7f800000)), vdupq_n_u32(e5m2 ? 0x7e : 0x7f), code);
    return vorrq_u32(code, vshrq_n_u32(vbicq_u32(u, a), 24)); /* sign to bit 7 */
}

/* 8 values times inv_scale as fp8 codes at p (8 bytes). */
static RP_ALWAYS_INLINE void store8_fp8(rp_dtype fmt, int stream, char *p, half8 v, float32x4_t inv_scale)
{
    (void)stream;
    const uint16x4_t lo = vmovn_u32(fp8_convert4(fmt, vmulq_f32(v.lo, inv_scale)));
    const uint16x4_t hi = vmovn_u32(fp8_convert4(fmt, vmulq_f32(v.hi, inv_scale)));
    vst1_u8((uint8_t *)p, vmovn_u16(vcombine_u16(lo, hi)));
}

/* 16 values (v, then w) rounded to dtype dt at p. */
static RP_ALWAYS_INLINE void store16(rp_dtype dt, int stream, char *p, half8 v, half8 w)
{
    store8(dt, stream, p, v);
    store8(dt, stream, p + (dt == RP_F32 ? 32 : 16), w);
}

/* 16 values (v, then w) times inv_scale as fp8 codes at p (16 bytes). */
static RP_ALWAYS_INLINE void store16_fp8(rp_dtype fmt, int stream, char *p, half8 v, half8 w,
                                         float32x4_t inv_scale)
{
    (void)stream;
    const uint16x8_t lo = vcombine_u16(vmovn_u32(fp8_convert4(fmt, vmulq_f32(v.lo, inv_scale))),
                                       vmovn_u32(fp8_convert4(fmt, vmulq_f32(v.hi, inv_scale))));
    const uint16x8_t hi = vcombine_u16(vmovn_u32(fp8_convert4(fmt, vmulq_f32(w.lo, inv_scale))),
                                       vmovn_u32(fp8_convert4(fmt, vmulq_f32(w.hi, inv_scale))));
    vst1q_u8((uint8_t *)p, vcombine_u8(vmovn_u16(lo), vmovn_u16(hi)));
}

/* x' = fma(x, c, -(y * s)) and y' = fma(y, c, x * s), as the x86 kernels round them (negation is
 * exact, so x * c - y * s with one rounding of the fma is the same value). */
static RP_ALWAYS_INLINE void rotate4(float32x4_t x, float32x4_t y, const float *cs, const float *sn,
                                     float32x4_t *out_x, float32x4_t *out_y)
{
    const float32x4_t c = vld1q_f32(cs), s = vld1q_f32(sn);
    *out_x = vfmaq_f32(vnegq_f32(vmulq_f32(y, s)), x, c);
    *out_y = vfmaq_f32(vmulq_f32(x, s), y, c);
}

/* rope_pool_simd8.h's two rotations of 8 float32 values. */
static RP_ALWAYS_INLINE void rotate8_values(half8 x, half8 y, const float *cs, const float *sn, half8 *out_x,
                                            half8 *out_y)
{
    rotate4(x.lo, y.lo, cs, sn, &out_x->lo, &out_y->lo);
    rotate4(x.hi, y.hi, cs + 4, sn + 4, &out_x->hi, &out_y->hi);
}

/* out = fma(x, cd, swap_pairs(x) * sd) as in the x86 kernels; rev64 swaps the two floats of each
 * pair. */
static RP_ALWAYS_INLINE half8 rotate_pairs8_values(half8 x, const float *cd, const float *sd)
{
    half8 out;
    out.lo = vfmaq_f32(vmulq_f32(vrev64q_f32(x.lo), vld1q_f32(sd)), x.lo, vld1q_f32(cd));
    out.hi = vfmaq_f32(vmulq_f32(vrev64q_f32(x.hi), vld1q_f32(sd + 4)), x.hi, vld1q_f32(cd + 4));
    return out;
}

typedef half8 simd8;
typedef float32x4_t simd8_scale;
#define SIMD8_SCALE(x) vdupq_n_f32(x)

static RP_ALWAYS_INLINE half8 normalise8(half8 x, float rstd, const float *w)
{
    half8 v;
    v.lo = vmulq_f32(vmulq_n_f32(x.lo, rstd), vld1q_f32(w));
    v.hi = vmulq_f32(vmulq_n_f32(x.hi, rstd), vld1q_f32(w + 4));
    return v;
}
#include "rope_pool_simd8.h"

/* ---- copies --------------------------------------------------------------------------------------- */

/* With no streaming stores there is nothing to do better than the C library's memcpy, which on
 * aarch64 is tuned per core (ldp/stp of q registers, DC ZVA for large spans). */
static RP_ALWAYS_INLINE void simd_copy(int stream, char *dst, const char *src, int64_t bytes)
{
    memcpy(dst, src, (size_t)bytes);
}

static inline void simd_stream_fence(void)
{
}

void rp_cpu_fill_neon(rp_cpu_kernels *table)
{
    simd_fill_table(table, "neon");
}
