/*
 * rope_pool_avx2.c — the AVX2 kernel: 4 float64 lanes for the angles, 8 float32 lanes for the
 * rotation; a head_dim/2 that is not a multiple of 8 ends with one vector step on a zero-padded
 * copy. The token/head walk is shared with the AVX-512 kernel (rope_pool_simd.h); this file holds
 * the instructions, in the same order, so both give the same bits.
 *
 * Only this file is compiled for AVX2 + FMA + F16C (src/CMakeLists.txt), and dispatch.c calls
 * rp_cpu_fill_avx2 only on a CPU that has them.
 *
 * Conversions: f16 through vcvtph2ps / vcvtps2ph (round to nearest-even, subnormals and NaN kept);
 * bf16 loads by a 16-bit shift and stores with integer round-to-nearest-even (exact on
 * subnormals, NaN kept quiet), as in the AVX-512 kernel.
 */
#include "rope_pool_simd.h"

#include <immintrin.h>
#include <string.h>

/* ---- angles -------------------------------------------------------------------------------------- */

/* sincos.h's rp_sincos on 4 lanes with |a| < 2^31; the same steps as sincos8 in the AVX-512 file. */
static RP_ALWAYS_INLINE void sincos4(__m256d a, __m256d *sin_out, __m256d *cos_out)
{
    const __m256d k = _mm256_round_pd(_mm256_mul_pd(a, _mm256_set1_pd(RP_TWO_OVER_PI)),
                                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256d r = _mm256_fnmadd_pd(k, _mm256_set1_pd(RP_PIO2_HI), a);
    r = _mm256_fnmadd_pd(k, _mm256_set1_pd(RP_PIO2_LO), r);
    const __m256d z = _mm256_mul_pd(r, r);

    const __m256d sin_poly = SIMD_SIN_POLY(_mm256_fmadd_pd, _mm256_set1_pd, z);
    const __m256d cos_poly = SIMD_COS_POLY(_mm256_fmadd_pd, _mm256_set1_pd, z);
    const __m256d sr = _mm256_fmadd_pd(_mm256_mul_pd(r, z), sin_poly, r);
    const __m256d cr = _mm256_fmadd_pd(_mm256_mul_pd(z, z), cos_poly,
                                       _mm256_fnmadd_pd(z, _mm256_set1_pd(0.5), _mm256_set1_pd(1.0)));

    /* Quadrant k & 3: odd swaps sin and cos; bit 1 of k (sin) and of k + 1 (cos) is the sign. */
    const __m256i quadrant = _mm256_cvtepi32_epi64(_mm256_cvtpd_epi32(k));
    const __m256i one = _mm256_set1_epi64x(1), two = _mm256_set1_epi64x(2);
    const __m256d swap = _mm256_castsi256_pd(_mm256_cmpeq_epi64(_mm256_and_si256(quadrant, one), one));
    const __m256d sin_sign = _mm256_castsi256_pd(_mm256_slli_epi64(_mm256_and_si256(quadrant, two), 62));
    const __m256d cos_sign = _mm256_castsi256_pd(
        _mm256_slli_epi64(_mm256_and_si256(_mm256_add_epi64(quadrant, one), two), 62));
    *sin_out = _mm256_xor_pd(_mm256_blendv_pd(sr, cr, swap), sin_sign);
    *cos_out = _mm256_xor_pd(_mm256_blendv_pd(cr, sr, swap), cos_sign);
}

static int simd_sincos(const double *inv_freq, int64_t n, double pos, double scale, float *cs, float *sn)
{
    const __m256d position = _mm256_set1_pd(pos), limit = _mm256_set1_pd(RP_SINCOS_FAST_LIMIT);
    const __m256d s_scale = _mm256_set1_pd(scale);
    const __m256d magnitude = _mm256_castsi256_pd(_mm256_set1_epi64x(0x7fffffffffffffffll));
    const __m256i lane = _mm256_setr_epi64x(0, 1, 2, 3);
    int slow = 0;
    for (int64_t i = 0; i < n; i += 4) {
        const __m256i m = _mm256_cmpgt_epi64(_mm256_set1_epi64x(n - i), lane);
        const __m256d angle = _mm256_mul_pd(position, _mm256_maskload_pd(inv_freq + i, m));
        const __m256d bad = _mm256_cmp_pd(_mm256_and_pd(angle, magnitude), limit, _CMP_NLT_UQ);
        slow |= _mm256_movemask_pd(_mm256_and_pd(bad, _mm256_castsi256_pd(m)));
        __m256d s, c;
        sincos4(angle, &s, &c);
        _mm_store_ps(cs + i, _mm256_cvtpd_ps(_mm256_mul_pd(s_scale, c)));
        _mm_store_ps(sn + i, _mm256_cvtpd_ps(_mm256_mul_pd(s_scale, s)));
    }
    return slow;
}

/* ---- rotation ------------------------------------------------------------------------------------ */

static RP_ALWAYS_INLINE __m256 load8(rp_dtype dt, const char *p)
{
    if (dt == RP_F32)
        return _mm256_loadu_ps((const float *)p);
    const __m128i h = _mm_loadu_si128((const __m128i *)p);
    if (dt == RP_F16)
        return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* rp_float_to_bf16_bits (dtype.h) on 8 lanes, each in the low 16 bits of its 32-bit lane. */
static RP_ALWAYS_INLINE __m256i bf16_lanes(__m256 v)
{
    const __m256i u = _mm256_castps_si256(v), high = _mm256_srli_epi32(u, 16);
    const __m256i lsb = _mm256_and_si256(high, _mm256_set1_epi32(1));
    const __m256i bias = _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb);
    const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(u, bias), 16);
    const __m256i quiet = _mm256_or_si256(high, _mm256_set1_epi32(0x40));
    const __m256 nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q); /* one compare, no |u| */
    return _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(rounded), _mm256_castsi256_ps(quiet), nan));
}

static RP_ALWAYS_INLINE __m128i float_to_bf16(__m256 v)
{
    const __m256i bits = bf16_lanes(v);
    return _mm_packus_epi32(_mm256_castsi256_si128(bits), _mm256_extracti128_si256(bits, 1));
}

static RP_ALWAYS_INLINE void store8(rp_dtype dt, int stream, char *p, __m256 v)
{
    if (dt == RP_F32) {
        if (stream)
            _mm256_stream_ps((float *)p, v);
        else
            _mm256_storeu_ps((float *)p, v);
        return;
    }
    const __m128i h = dt == RP_F16 ? _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
                                   : float_to_bf16(v);
    if (stream)
        _mm_stream_si128((__m128i *)p, h);
    else
        _mm_storeu_si128((__m128i *)p, h);
}

/* 16 values (v, then w) rounded to dtype dt at p: 16-bit types packed together into one 32-byte
 * store (streaming: p 32-byte aligned), half the packing and stores of two store8. */
static RP_ALWAYS_INLINE void store16(rp_dtype dt, int stream, char *p, __m256 v, __m256 w)
{
    if (dt == RP_F32) {
        store8(dt, stream, p, v);
        store8(dt, stream, p + 32, w);
        return;
    }
    __m256i h;
    if (dt == RP_F16) {
        /* the rounding mode spelled out: an immediate even where nothing is optimised (make asan) */
        h = _mm256_inserti128_si256(
            _mm256_castsi128_si256(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)),
            _mm256_cvtps_ph(w, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), 1);
    } else { /* the pack interleaves v and w by 4 per 128-bit lane; the permutation restores order */
        h = _mm256_permute4x64_epi64(_mm256_packus_epi32(bf16_lanes(v), bf16_lanes(w)), 0xd8);
    }
    if (stream)
        _mm256_stream_si256((__m256i *)p, h);
    else
        _mm256_storeu_si256((__m256i *)p, h);
}

/* The fp8 conversion of the AVX-512 kernel (fp8_convert16 there) on 8 lanes: each lane's code
 * (sign in bit 7) in its low byte. */
static RP_ALWAYS_INLINE __m256i fp8_codes8(rp_dtype fmt, __m256 v)
{
    const int e5m2 = fmt == RP_F8_E5M2, mant = e5m2 ? 2 : 3, shift = 23 - mant, bias = e5m2 ? 15 : 7;
    const int min_normal = (127 + 1 - bias) << 23, max_bits = e5m2 ? 0x47600000 : 0x43e00000;
    const __m256i u = _mm256_castps_si256(v), a = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
    const __m256i c = _mm256_min_epu32(a, _mm256_set1_epi32(max_bits));
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(c, shift), _mm256_set1_epi32(1));
    const __m256i round_rebias = _mm256_set1_epi32((1 << (shift - 1)) - 1 - ((127 - bias) << 23));
    __m256i code = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(c, round_rebias), lsb), shift);
    const __m256 magic = _mm256_set1_ps(e5m2 ? 0x1p7f : 0x1p14f);
    const __m256i sub = _mm256_sub_epi32(_mm256_castps_si256(_mm256_add_ps(_mm256_castsi256_ps(c), magic)),
                                         _mm256_castps_si256(magic));
    /* c, a <= 0x7fffffff: the signed compares order them as unsigned */
    code = _mm256_blendv_epi8(code, sub, _mm256_cmpgt_epi32(_mm256_set1_epi32(min_normal), c));
    code = _mm256_blendv_epi8(code, _mm256_set1_epi32(e5m2 ? 0x7e : 0x7f),
                              _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x7f800000)));
    return _mm256_or_si256(code, _mm256_srli_epi32(_mm256_andnot_si256(a, u), 24));
}

/* 8 values times inv_scale as fp8 codes at p (8 bytes; streaming: movnti, p 8-byte aligned). */
static RP_ALWAYS_INLINE void store8_fp8(rp_dtype fmt, int stream, char *p, __m256 v, __m256 inv_scale)
{
    const __m256i code = fp8_codes8(fmt, _mm256_mul_ps(v, inv_scale));
    const __m256i bytes = _mm256_packus_epi16(_mm256_packus_epi32(code, code), _mm256_setzero_si256());
    const __m128i codes = _mm_unpacklo_epi32(_mm256_castsi256_si128(bytes), _mm256_extracti128_si256(bytes, 1));
    if (stream)
        _mm_stream_si64((long long *)p, _mm_cvtsi128_si64(codes));
    else
        _mm_storel_epi64((__m128i *)p, codes);
}

/* 16 values (v, then w) times inv_scale as fp8 codes at p: both packed at once and one 16-byte
 * store (streaming: movntdq, p 16-byte aligned), half the packing and stores of two store8_fp8. */
static RP_ALWAYS_INLINE void store16_fp8(rp_dtype fmt, int stream, char *p, __m256 v, __m256 w, __m256 inv_scale)
{
    const __m256i cv = fp8_codes8(fmt, _mm256_mul_ps(v, inv_scale));
    const __m256i cw = fp8_codes8(fmt, _mm256_mul_ps(w, inv_scale));
    /* Per 128-bit lane the packs interleave v and w in groups of 4 codes: dwords v0-3 w0-3 . .
     * | v4-7 w4-7 . .; the permutation puts them in order. */
    const __m256i words = _mm256_packus_epi32(cv, cw);
    const __m256i bytes = _mm256_packus_epi16(words, words);
    const __m128i codes = _mm256_castsi256_si128(
        _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 0, 4, 1, 5)));
    if (stream)
        _mm_stream_si128((__m128i *)p, codes);
    else
        _mm_storeu_si128((__m128i *)p, codes);
}

/* bf16 values at scale 1 as fp8 codes, 16 a step on 16-bit lanes, with no widening to float32:
 * a bf16 value is its own float32 product with 1.0f, so fp8_codes8's result on it is the
 * correctly rounded code, and this computes the same from the bf16 bits (exhaustively equal over
 * all 65,536 of them: tests/test_pools.c). Normal codes: the mantissa rounded to the format's
 * width (nearest-even) and the exponent rebiased. Subnormal codes (below the smallest normal):
 * the significand shifted by the binade (a multiply by 1, 2, 4 or 8 picked by a byte shuffle), then
 * rounded by 2^8; values up to half the smallest subnormal are clamped to it, which rounds to 0.
 * About 27 instructions for 16 values, against 38 through float32 lanes. */
static RP_ALWAYS_INLINE __m256i fp8_codes16_bf16(rp_dtype fmt, __m256i h)
{
    const int e5m2 = fmt == RP_F8_E5M2, mant = e5m2 ? 2 : 3, shift = 7 - mant, bias = e5m2 ? 15 : 7;
    const int max_bits = e5m2 ? 0x4760 : 0x43e0;        /* 57344, 448 */
    const int min_normal = (127 + 1 - bias) << 7;        /* 2^-14, 2^-6 */
    const int least_half = (127 - bias - mant) << 7;     /* half the smallest subnormal: 2^-17, 2^-10 */
    const __m256i a = _mm256_and_si256(h, _mm256_set1_epi16(0x7fff));
    const __m256i c = _mm256_min_epu16(a, _mm256_set1_epi16((short)max_bits)); /* saturation */
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi16(c, shift), _mm256_set1_epi16(1));
    __m256i normal = _mm256_add_epi16(_mm256_add_epi16(c, _mm256_set1_epi16((short)((1 << (shift - 1)) - 1))), lsb);
    normal = _mm256_sub_epi16(_mm256_srli_epi16(normal, shift), _mm256_set1_epi16((short)((127 - bias) << mant)));
    /* (128 + m) << (E - E_least), E_least the binade of least_half; codes = that / 2^8, rounded */
    const __m256i cs = _mm256_max_epu16(c, _mm256_set1_epi16((short)least_half));
    const __m256i binade = _mm256_sub_epi16(_mm256_srli_epi16(cs, 7), _mm256_set1_epi16((short)((least_half >> 7) - 1)));
    const __m256i powers = _mm256_setr_epi8(0, 1, 2, 4, 8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* binade 1..4; high bytes 0 */
                                            0, 1, 2, 4, 8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
    const __m256i significand = _mm256_and_si256(_mm256_or_si256(cs, _mm256_set1_epi16(0x80)), _mm256_set1_epi16(0xff));
    const __m256i y = _mm256_mullo_epi16(significand, _mm256_shuffle_epi8(powers, binade));
    const __m256i y_lsb = _mm256_and_si256(_mm256_srli_epi16(y, 8), _mm256_set1_epi16(1));
    const __m256i sub = _mm256_srli_epi16(_mm256_add_epi16(_mm256_add_epi16(y, _mm256_set1_epi16(0x7f)), y_lsb), 8);
    /* a, c <= 0x7fff: the signed compares order them as unsigned */
    __m256i code = _mm256_blendv_epi8(normal, sub, _mm256_cmpgt_epi16(_mm256_set1_epi16((short)min_normal), c));
    code = _mm256_blendv_epi8(code, _mm256_set1_epi16(e5m2 ? 0x7e : 0x7f),
                              _mm256_cmpgt_epi16(a, _mm256_set1_epi16(0x7f80)));
    return _mm256_or_si256(code, _mm256_srli_epi16(_mm256_andnot_si256(a, h), 8));
}

/* 16 bf16 values at src (scale 1) as fp8 codes at p: one 16-byte store (streaming: movntdq, p
 * 16-byte aligned). */
#define SIMD8_HAS_STORE16_FP8_BF16 1
static RP_ALWAYS_INLINE void store16_fp8_bf16(rp_dtype fmt, int stream, char *p, const char *src)
{
    const __m256i code = fp8_codes16_bf16(fmt, _mm256_loadu_si256((const __m256i *)src));
    const __m128i codes = _mm_packus_epi16(_mm256_castsi256_si128(code), _mm256_extracti128_si256(code, 1));
    if (stream)
        _mm_stream_si128((__m128i *)p, codes);
    else
        _mm_storeu_si128((__m128i *)p, codes);
}

/* rope_pool_simd8.h's two rotations of 8 float32 values. */
static RP_ALWAYS_INLINE void rotate8_values(__m256 x, __m256 y, const float *cs, const float *sn, __m256 *out_x,
                                            __m256 *out_y)
{
    const __m256 c = _mm256_loadu_ps(cs), s = _mm256_loadu_ps(sn);
    *out_x = _mm256_fmsub_ps(x, c, _mm256_mul_ps(y, s));
    *out_y = _mm256_fmadd_ps(y, c, _mm256_mul_ps(x, s));
}

/* vpermilps swaps the two floats of each pair within its 128-bit lane. */
static RP_ALWAYS_INLINE __m256 rotate_pairs8_values(__m256 x, const float *cd, const float *sd)
{
    return _mm256_fmadd_ps(x, _mm256_loadu_ps(cd), _mm256_mul_ps(_mm256_permute_ps(x, 0xb1), _mm256_loadu_ps(sd)));
}

typedef __m256 simd8;
typedef __m256 simd8_scale;
#define SIMD8_SCALE(x) _mm256_set1_ps(x)
#include "rope_pool_simd8.h"

/* ---- copies --------------------------------------------------------------------------------------- */

static RP_ALWAYS_INLINE void simd_copy(int stream, char *dst, const char *src, int64_t bytes)
{
    int64_t i = 0;
    for (; i + 32 <= bytes; i += 32) {
        const __m256i v = _mm256_loadu_si256((const __m256i *)(src + i));
        if (stream)
            _mm256_stream_si256((__m256i *)(dst + i), v);
        else
            _mm256_storeu_si256((__m256i *)(dst + i), v);
    }
    if (i < bytes)
        memcpy(dst + i, src + i, (size_t)(bytes - i));
}

static inline void simd_stream_fence(void)
{
    _mm_sfence();
}

void rp_cpu_fill_avx2(rp_cpu_kernels *table)
{
    simd_fill_table(table, "avx2");
}
