/*
 * rope_pool_avx512.c — the AVX-512 kernel: 8 float64 lanes for the angles, 16 float32 lanes for
 * the rotation, masks for the tails of any even head_dim. The token/head walk is shared with the
 * AVX2 kernel (rope_pool_simd.h); this file holds the instructions.
 *
 * Only this file is compiled for AVX-512 F/BW/VL/DQ + FMA (src/CMakeLists.txt), and dispatch.c
 * calls rp_cpu_fill_avx512 only on a CPU that has them, so nothing here runs anywhere else.
 *
 * Conversions: f16 through vcvtph2ps / vcvtps2ph (round to nearest-even, subnormals and NaN kept).
 * bf16 loads by a 16-bit shift; stores round to nearest-even in integer arithmetic, which is exact
 * on subnormals and keeps NaN quiet: vcvtneps2bf16 would flush subnormals to zero.
 */
#include "rope_pool_simd.h"

#include <immintrin.h>

/* ---- angles -------------------------------------------------------------------------------------- */

/* sincos.h's rp_sincos on 8 lanes with |a| < 2^31. */
static RP_ALWAYS_INLINE void sincos8(__m512d a, __m512d *sin_out, __m512d *cos_out)
{
    const __m512d k = _mm512_roundscale_pd(_mm512_mul_pd(a, _mm512_set1_pd(RP_TWO_OVER_PI)),
                                           _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512d r = _mm512_fnmadd_pd(k, _mm512_set1_pd(RP_PIO2_HI), a);
    r = _mm512_fnmadd_pd(k, _mm512_set1_pd(RP_PIO2_LO), r);
    const __m512d z = _mm512_mul_pd(r, r);

    const __m512d sin_poly = SIMD_SIN_POLY(_mm512_fmadd_pd, _mm512_set1_pd, z);
    const __m512d cos_poly = SIMD_COS_POLY(_mm512_fmadd_pd, _mm512_set1_pd, z);
    const __m512d sr = _mm512_fmadd_pd(_mm512_mul_pd(r, z), sin_poly, r);
    const __m512d cr = _mm512_fmadd_pd(_mm512_mul_pd(z, z), cos_poly,
                                       _mm512_fnmadd_pd(z, _mm512_set1_pd(0.5), _mm512_set1_pd(1.0)));

    /* Quadrant k & 3: odd swaps sin and cos; sin is negative in quadrants 2, 3 (bit 1 of k),
     * cos in quadrants 1, 2 (bit 1 of k + 1). The sign goes straight into bit 63. */
    const __m512i quadrant = _mm512_cvtpd_epi64(k);
    const __mmask8 swap = _mm512_test_epi64_mask(quadrant, _mm512_set1_epi64(1));
    const __m512i two = _mm512_set1_epi64(2);
    const __m512i sin_sign = _mm512_slli_epi64(_mm512_and_si512(quadrant, two), 62);
    const __m512i cos_sign =
        _mm512_slli_epi64(_mm512_and_si512(_mm512_add_epi64(quadrant, _mm512_set1_epi64(1)), two), 62);
    *sin_out = _mm512_castsi512_pd(
        _mm512_xor_si512(_mm512_castpd_si512(_mm512_mask_blend_pd(swap, sr, cr)), sin_sign));
    *cos_out = _mm512_castsi512_pd(
        _mm512_xor_si512(_mm512_castpd_si512(_mm512_mask_blend_pd(swap, cr, sr)), cos_sign));
}

static int simd_sincos(const double *inv_freq, int64_t n, double pos, double scale, float *cs, float *sn)
{
    const __m512d position = _mm512_set1_pd(pos), limit = _mm512_set1_pd(RP_SINCOS_FAST_LIMIT);
    const __m512d s_scale = _mm512_set1_pd(scale);
    __mmask8 slow = 0;
    for (int64_t i = 0; i < n; i += 8) {
        const __mmask8 m = n - i >= 8 ? (__mmask8)0xff : (__mmask8)((1u << (n - i)) - 1);
        const __m512d angle = _mm512_mul_pd(position, _mm512_maskz_loadu_pd(m, inv_freq + i));
        slow |= _mm512_mask_cmp_pd_mask(m, _mm512_abs_pd(angle), limit, _CMP_NLT_UQ);
        __m512d s, c;
        sincos8(angle, &s, &c);
        _mm256_store_ps(cs + i, _mm512_cvtpd_ps(_mm512_mul_pd(s_scale, c)));
        _mm256_store_ps(sn + i, _mm512_cvtpd_ps(_mm512_mul_pd(s_scale, s)));
    }
    return slow != 0;
}

/* ---- rotation ------------------------------------------------------------------------------------ */

/* The rotation steps over one cache line of each half of a head row at a time: 16 float32, or 32
 * float16/bfloat16 widened into two float32 vectors, so that every full step loads and stores
 * whole 64-byte lines. */
typedef struct line {
    __m512 lo, hi; /* elements [0, 16) and (16-bit dtypes) [16, 32) of the line */
} line;

#define LINE_LANES(dt) ((dt) == RP_F32 ? 16 : 32)
#define RP_NEAREST (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC) /* round to nearest-even */
#define ALL32 ((__mmask32)0xffffffffu)

/* bfloat16 words i (lo) or 16 + i (hi) into the high half of float32 lane i; low halves zero. */
static RP_ALWAYS_INLINE __m512 bf16_widen(__m512i words, int upper)
{
    const __m512i index = _mm512_set_epi16(
        15, 0, 14, 0, 13, 0, 12, 0, 11, 0, 10, 0, 9, 0, 8, 0, 7, 0, 6, 0, 5, 0, 4, 0, 3, 0, 2, 0, 1, 0, 0, 0);
    const __m512i shifted = upper ? _mm512_add_epi16(index, _mm512_set1_epi16(16)) : index;
    return _mm512_castsi512_ps(_mm512_maskz_permutexvar_epi16((__mmask32)0xaaaaaaaau, shifted, words));
}

/* rp_float_to_bf16_bits (dtype.h) on 16 lanes, left in the high half of each 32-bit lane. */
static RP_ALWAYS_INLINE __m512i bf16_round(__m512 v)
{
    const __m512i u = _mm512_castps_si512(v);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    const __m512i rounded = _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                                  _mm512_set1_epi32(0x7f800000));
    return _mm512_mask_or_epi32(rounded, nan, u, _mm512_set1_epi32(0x00400000)); /* NaN stays quiet */
}

/* The line of dtype dt at p, widened; elements outside m read as 0. */
static RP_ALWAYS_INLINE line load_line(rp_dtype dt, const char *p, __mmask32 m)
{
    line v;
    if (dt == RP_F32) {
        v.lo = m == ALL32 ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps((__mmask16)m, p);
        v.hi = v.lo;
        return v;
    }
    const __m512i w = m == ALL32 ? _mm512_loadu_si512(p) : _mm512_maskz_loadu_epi16(m, p);
    if (dt == RP_F16) {
        v.lo = _mm512_cvtph_ps(_mm512_castsi512_si256(w));
        v.hi = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(w, 1));
    } else {
        v.lo = bf16_widen(w, 0);
        v.hi = bf16_widen(w, 1);
    }
    return v;
}

/* Stores the elements m of v at p as dtype dt (round to nearest-even). A streaming store is a
 * whole, aligned line (the caller checked), so only full lines stream. */
static RP_ALWAYS_INLINE void store_line(rp_dtype dt, int stream, char *p, line v, __mmask32 m)
{
    __m512i w;
    if (dt == RP_F32) {
        w = _mm512_castps_si512(v.lo);
    } else if (dt == RP_F16) {
        w = _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtps_ph(v.lo, RP_NEAREST)),
                               _mm512_cvtps_ph(v.hi, RP_NEAREST), 1);
    } else { /* the high words of the rounded lanes, lo's then hi's */
        const __m512i odd_words = _mm512_set_epi16(
            63, 61, 59, 57, 55, 53, 51, 49, 47, 45, 43, 41, 39, 37, 35, 33,
            31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
        w = _mm512_permutex2var_epi16(bf16_round(v.lo), odd_words, bf16_round(v.hi));
    }
    if (m != ALL32) {
        if (dt == RP_F32)
            _mm512_mask_storeu_epi32(p, (__mmask16)m, w);
        else
            _mm512_mask_storeu_epi16(p, m, w);
    } else if (stream) {
        _mm512_stream_si512((__m512i *)p, w);
    } else {
        _mm512_storeu_si512(p, w);
    }
}

/* ---- fp8 ------------------------------------------------------------------------------------------ */

/* dtype.h's rp_double_to_fp8_bits on 16 float32 lanes (AVX-512 has no e4m3/e5m2 conversion), as
 * half-float converters do it in software: saturation first (every magnitude from the largest
 * finite value up, infinity included, becomes that value); normal results then round to
 * nearest-even in integer arithmetic on the float32 bits, the exponent rebiased by the same add;
 * results below the smallest normal come from adding a magic number whose ulp is the fp8
 * subnormal quantum (the FPU rounds to nearest-even); last NaN and the sign. */
static RP_ALWAYS_INLINE __m128i fp8_convert16(rp_dtype fmt, __m512 v)
{
    const int e5m2 = fmt == RP_F8_E5M2, mant = e5m2 ? 2 : 3, shift = 23 - mant, bias = e5m2 ? 15 : 7;
    const int min_normal = (127 + 1 - bias) << 23, max_bits = e5m2 ? 0x47600000 : 0x43e00000;
    const __m512i u = _mm512_castps_si512(v), a = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
    const __m512i c = _mm512_min_epu32(a, _mm512_set1_epi32(max_bits));
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(c, shift), _mm512_set1_epi32(1));
    const __m512i round_rebias = _mm512_set1_epi32((1 << (shift - 1)) - 1 - ((127 - bias) << 23));
    __m512i code = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(c, round_rebias), lsb), shift);
    const __m512 magic = _mm512_set1_ps(e5m2 ? 0x1p7f : 0x1p14f); /* 2^23 * the subnormal quantum */
    const __m512i sub = _mm512_sub_epi32(_mm512_castps_si512(_mm512_add_ps(_mm512_castsi512_ps(c), magic)),
                                         _mm512_castps_si512(magic));
    code = _mm512_mask_mov_epi32(code, _mm512_cmplt_epu32_mask(c, _mm512_set1_epi32(min_normal)), sub);
    code = _mm512_mask_mov_epi32(code, _mm512_cmpgt_epu32_mask(a, _mm512_set1_epi32(0x7f800000)),
                                 _mm512_set1_epi32(e5m2 ? 0x7e : 0x7f));
    /* code | (the sign bit, moved to bit 7): 0xf8 is A | (B & C) */
    code = _mm512_ternarylogic_epi32(code, _mm512_srli_epi32(u, 24), _mm512_set1_epi32(0x80), 0xf8);
    return _mm512_cvtepi32_epi8(code);
}

/* bf16 values at scale 1 as fp8 codes, 32 a step on 16-bit lanes, with no widening to float32:
 * rope_pool_avx2.c's fp8_codes16_bf16 (which says why it equals fp8_convert16 on them,
 * exhaustively tested over all 65,536 bf16 values: tests/test_pools.c) on twice the lanes, the
 * blends taken by masks. About 20 instructions for 32 values, against 40 through float32 lanes. */
static RP_ALWAYS_INLINE __m256i fp8_codes32_bf16(rp_dtype fmt, __m512i h)
{
    const int e5m2 = fmt == RP_F8_E5M2, mant = e5m2 ? 2 : 3, shift = 7 - mant, bias = e5m2 ? 15 : 7;
    const int max_bits = e5m2 ? 0x4760 : 0x43e0;    /* 57344, 448 */
    const int min_normal = (127 + 1 - bias) << 7;    /* 2^-14, 2^-6 */
    const int least_half = (127 - bias - mant) << 7; /* half the smallest subnormal: 2^-17, 2^-10 */
    const __m512i a = _mm512_and_si512(h, _mm512_set1_epi16(0x7fff));
    const __m512i c = _mm512_min_epu16(a, _mm512_set1_epi16((short)max_bits)); /* saturation */
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi16(c, shift), _mm512_set1_epi16(1));
    __m512i code = _mm512_add_epi16(_mm512_add_epi16(c, _mm512_set1_epi16((short)((1 << (shift - 1)) - 1))), lsb);
    code = _mm512_sub_epi16(_mm512_srli_epi16(code, shift), _mm512_set1_epi16((short)((127 - bias) << mant)));
    /* (128 + m) << (E - E_least), E_least the binade of least_half; codes = that / 2^8, rounded */
    const __m512i cs = _mm512_max_epu16(c, _mm512_set1_epi16((short)least_half));
    const __m512i binade = _mm512_sub_epi16(_mm512_srli_epi16(cs, 7), _mm512_set1_epi16((short)((least_half >> 7) - 1)));
    const __m512i powers = _mm512_broadcast_i32x4(_mm_setr_epi8(0, 1, 2, 4, 8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0));
    const __m512i significand = _mm512_and_si512(_mm512_or_si512(cs, _mm512_set1_epi16(0x80)), _mm512_set1_epi16(0xff));
    const __m512i y = _mm512_mullo_epi16(significand, _mm512_shuffle_epi8(powers, binade));
    const __m512i y_lsb = _mm512_and_si512(_mm512_srli_epi16(y, 8), _mm512_set1_epi16(1));
    const __m512i sub = _mm512_srli_epi16(_mm512_add_epi16(_mm512_add_epi16(y, _mm512_set1_epi16(0x7f)), y_lsb), 8);
    code = _mm512_mask_mov_epi16(code, _mm512_cmplt_epu16_mask(c, _mm512_set1_epi16((short)min_normal)), sub);
    code = _mm512_mask_mov_epi16(code, _mm512_cmpgt_epu16_mask(a, _mm512_set1_epi16(0x7f80)),
                                 _mm512_set1_epi16(e5m2 ? 0x7e : 0x7f));
    /* code | (the sign bit, moved to bit 7): 0xf8 is A | (B & C) */
    code = _mm512_ternarylogic_epi32(code, _mm512_srli_epi16(h, 8), _mm512_set1_epi16(0x80), 0xf8);
    return _mm512_cvtepi16_epi8(code);
}

/* The lanes m of a line (16 or 32 values) times inv_scale, as fp8 codes at p; a whole line's 16
 * or 32 codes stream when asked (the caller checked their alignment). */
static RP_ALWAYS_INLINE void store_fp8_line(rp_dtype dt, rp_dtype fmt, int stream, char *p, line v,
                                            __mmask32 m, __m512 inv_scale)
{
    const __m128i lo = fp8_convert16(fmt, _mm512_mul_ps(v.lo, inv_scale));
    if (m == ALL32 && dt != RP_F32) {
        const __m128i hi = fp8_convert16(fmt, _mm512_mul_ps(v.hi, inv_scale));
        const __m256i codes = _mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1);
        if (stream)
            _mm256_stream_si256((__m256i *)p, codes);
        else
            _mm256_storeu_si256((__m256i *)p, codes);
        return;
    }
    if (m == ALL32 && stream) {
        _mm_stream_si128((__m128i *)p, lo);
        return;
    }
    _mm_mask_storeu_epi8(p, (__mmask16)m, lo);
    if (dt != RP_F32 && (m >> 16))
        _mm_mask_storeu_epi8(p + 16, (__mmask16)(m >> 16),
                             fp8_convert16(fmt, _mm512_mul_ps(v.hi, inv_scale)));
}

static RP_ALWAYS_INLINE __m512 cs_load(const float *p, __mmask16 m)
{
    return m == (__mmask16)0xffff ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(m, p);
}

/* load_line, and with QK-norm's gains (g not NULL) normalised by those of head dims [gi, gi +
 * LINE_LANES) (simd_gain: (x * rstd) * w). */
static RP_ALWAYS_INLINE line load_line_normed(rp_dtype dt, const char *p, __mmask32 m, const simd_gain *g,
                                              int64_t gi)
{
    line v = load_line(dt, p, m);
    if (!g)
        return v;
    const __m512 rstd = _mm512_set1_ps(g->rstd);
    v.lo = _mm512_mul_ps(_mm512_mul_ps(v.lo, rstd), cs_load(g->w + gi, (__mmask16)m));
    if (dt != RP_F32)
        v.hi = _mm512_mul_ps(_mm512_mul_ps(v.hi, rstd), cs_load(g->w + gi + 16, (__mmask16)(m >> 16)));
    else
        v.hi = v.lo;
    return v;
}

/* Pairs [j, j + LINE_LANES) masked by m; at = j * element size, half_bytes = half * element size;
 * the pool row (format pool_dt) takes them at its own element size. g: QK-norm's gains, or NULL. */
static RP_ALWAYS_INLINE void rotate_line(rp_dtype dt, rp_dtype pool_dt, int stream_dst, int stream_pool,
                                         const char *src, char *dst, char *pool, int64_t at,
                                         int64_t half_bytes, const float *cs, const float *sn, __mmask32 m,
                                         __m512 inv_scale, const simd_gain *g)
{
    const int64_t elem = dt == RP_F32 ? 4 : 2;
    const line x = load_line_normed(dt, src + at, m, g, at / elem);
    const line y = load_line_normed(dt, src + at + half_bytes, m, g, (at + half_bytes) / elem);
    line out_x, out_y;
    const __mmask16 m_lo = (__mmask16)m, m_hi = (__mmask16)(m >> 16);
    const __m512 c_lo = cs_load(cs, m_lo), s_lo = cs_load(sn, m_lo);
    out_x.lo = _mm512_fmsub_ps(x.lo, c_lo, _mm512_mul_ps(y.lo, s_lo));
    out_y.lo = _mm512_fmadd_ps(y.lo, c_lo, _mm512_mul_ps(x.lo, s_lo));
    out_x.hi = out_x.lo;
    out_y.hi = out_y.lo;
    if (dt != RP_F32) {
        const __m512 c_hi = cs_load(cs + 16, m_hi), s_hi = cs_load(sn + 16, m_hi);
        out_x.hi = _mm512_fmsub_ps(x.hi, c_hi, _mm512_mul_ps(y.hi, s_hi));
        out_y.hi = _mm512_fmadd_ps(y.hi, c_hi, _mm512_mul_ps(x.hi, s_hi));
    }
    store_line(dt, stream_dst, dst + at, out_x, m);
    store_line(dt, stream_dst, dst + at + half_bytes, out_y, m);
    if (pool && pool_dt == dt) {
        store_line(dt, stream_pool, pool + at, out_x, m);
        store_line(dt, stream_pool, pool + at + half_bytes, out_y, m);
    } else if (pool) {
        store_fp8_line(dt, pool_dt, stream_pool, pool + at / elem, out_x, m, inv_scale);
        store_fp8_line(dt, pool_dt, stream_pool, pool + (at + half_bytes) / elem, out_y, m, inv_scale);
    }
}

static RP_ALWAYS_INLINE void simd_rotate(rp_dtype dt, rp_dtype pool_dt, int stream_dst, int stream_pool,
                                         const char *src, char *dst, char *pool, int64_t half,
                                         int64_t n, const float *cs, const float *sn, float inv_scale,
                                         const simd_gain *g)
{
    const int64_t elem = dt == RP_F32 ? 4 : 2, lanes = LINE_LANES(dt), half_bytes = half * elem;
    const __m512 scale = _mm512_set1_ps(inv_scale);
    int64_t j = 0;
    for (; j + lanes <= n; j += lanes)
        rotate_line(dt, pool_dt, stream_dst, stream_pool, src, dst, pool, j * elem, half_bytes, cs + j, sn + j,
                    ALL32, scale, g);
    if (j < n)
        rotate_line(dt, pool_dt, 0, 0, src, dst, pool, j * elem, half_bytes, cs + j, sn + j,
                    (__mmask32)((1u << (n - j)) - 1), scale, g);
}

/* GPT-J: elements [at, at + LINE_LANES) masked by m, as neighbouring pairs. vpermilps swaps the
 * two floats of each pair within its 128-bit lane. */
static RP_ALWAYS_INLINE void rotate_pairs_line(rp_dtype dt, rp_dtype pool_dt, int stream_dst, int stream_pool,
                                               const char *src, char *dst, char *pool, int64_t at,
                                               const float *cd, const float *sd, __mmask32 m, __m512 inv_scale,
                                               const simd_gain *g)
{
    const line x = load_line_normed(dt, src + at, m, g, at / (dt == RP_F32 ? 4 : 2));
    line out;
    const __mmask16 m_lo = (__mmask16)m, m_hi = (__mmask16)(m >> 16);
    out.lo = _mm512_fmadd_ps(x.lo, cs_load(cd, m_lo), _mm512_mul_ps(_mm512_permute_ps(x.lo, 0xb1), cs_load(sd, m_lo)));
    out.hi = out.lo;
    if (dt != RP_F32)
        out.hi = _mm512_fmadd_ps(x.hi, cs_load(cd + 16, m_hi),
                                 _mm512_mul_ps(_mm512_permute_ps(x.hi, 0xb1), cs_load(sd + 16, m_hi)));
    store_line(dt, stream_dst, dst + at, out, m);
    if (pool && pool_dt == dt)
        store_line(dt, stream_pool, pool + at, out, m);
    else if (pool)
        store_fp8_line(dt, pool_dt, stream_pool, pool + at / (dt == RP_F32 ? 4 : 2), out, m, inv_scale);
}

static RP_ALWAYS_INLINE void simd_rotate_interleaved(rp_dtype dt, rp_dtype pool_dt, int stream_dst,
                                                     int stream_pool, const char *src, char *dst, char *pool,
                                                     int64_t n, const float *cd, const float *sd,
                                                     float inv_scale, const simd_gain *g)
{
    const int64_t elem = dt == RP_F32 ? 4 : 2, lanes = LINE_LANES(dt);
    const __m512 scale = _mm512_set1_ps(inv_scale);
    int64_t i = 0;
    for (; i + lanes <= n; i += lanes)
        rotate_pairs_line(dt, pool_dt, stream_dst, stream_pool, src, dst, pool, i * elem, cd + i, sd + i, ALL32,
                          scale, g);
    if (i < n)
        rotate_pairs_line(dt, pool_dt, 0, 0, src, dst, pool, i * elem, cd + i, sd + i,
                          (__mmask32)((1u << (n - i)) - 1), scale, g);
}

/* ---- copies --------------------------------------------------------------------------------------- */

static RP_ALWAYS_INLINE void simd_copy(int stream, char *dst, const char *src, int64_t bytes)
{
    int64_t i = 0;
    for (; i + 64 <= bytes; i += 64) {
        const __m512i v = _mm512_loadu_si512(src + i);
        if (stream)
            _mm512_stream_si512((__m512i *)(dst + i), v);
        else
            _mm512_storeu_si512(dst + i, v);
    }
    if (i < bytes) {
        const __mmask64 m = ~0ull >> (64 - (bytes - i));
        _mm512_mask_storeu_epi8(dst + i, m, _mm512_maskz_loadu_epi8(m, src + i));
    }
}

static RP_ALWAYS_INLINE void simd_narrow(rp_dtype dt, int stream, char *dst, const float *src, int64_t n)
{
    const int64_t elem = dt == RP_F32 ? 4 : 2, lanes = LINE_LANES(dt);
    for (int64_t j = 0; j < n; j += lanes) {
        const __mmask32 m = n - j >= lanes ? ALL32 : (__mmask32)((1u << (n - j)) - 1);
        line v;
        v.lo = _mm512_maskz_loadu_ps((__mmask16)m, src + j);
        v.hi = dt == RP_F32 ? v.lo : _mm512_maskz_loadu_ps((__mmask16)(m >> 16), src + j + 16);
        store_line(dt, stream, dst + j * elem, v, m);
    }
}

static RP_ALWAYS_INLINE void simd_to_fp8(rp_dtype dt, rp_dtype pool_dt, int stream, uint8_t *dst,
                                         const char *src, int64_t n, float inv_scale)
{
    const int64_t elem = dt == RP_F32 ? 4 : 2, lanes = LINE_LANES(dt);
    const __m512 scale = _mm512_set1_ps(inv_scale);
    int64_t j = 0;
    if (dt == RP_BF16 && inv_scale == 1.0f) /* on 16-bit lanes: the values are their own products */
        for (; j + 32 <= n; j += 32) {
            const __m256i codes = fp8_codes32_bf16(pool_dt, _mm512_loadu_si512(src + j * elem));
            if (stream) /* a streamed row is whole lines: each 32-byte store is aligned */
                _mm256_stream_si256((__m256i *)(dst + j), codes);
            else
                _mm256_storeu_si256((__m256i *)(dst + j), codes);
        }
    for (; j < n; j += lanes) {
        const __mmask32 m = n - j >= lanes ? ALL32 : (__mmask32)((1u << (n - j)) - 1);
        store_fp8_line(dt, pool_dt, stream, (char *)dst + j, load_line(dt, src + j * elem, m), m, scale);
    }
}

static inline void simd_stream_fence(void)
{
    _mm_sfence();
}

void rp_cpu_fill_avx512(rp_cpu_kernels *table)
{
    simd_fill_table(table, "avx512");
}
