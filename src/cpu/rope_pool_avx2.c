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

/* rp_float_to_bf16_bits (dtype.h) on 8 lanes. */
static RP_ALWAYS_INLINE __m128i float_to_bf16(__m256 v)
{
    const __m256i u = _mm256_castps_si256(v), high = _mm256_srli_epi32(u, 16);
    const __m256i lsb = _mm256_and_si256(high, _mm256_set1_epi32(1));
    const __m256i bias = _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb);
    const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(u, bias), 16);
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                           _mm256_set1_epi32(0x7f800000));
    const __m256i quiet = _mm256_or_si256(high, _mm256_set1_epi32(0x40));
    const __m256i bits = _mm256_blendv_epi8(rounded, quiet, nan);
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

/* The fp8 conversion of the AVX-512 kernel (fp8_convert16 there) on 8 lanes, returned in the low
 * 8 bytes. */
static RP_ALWAYS_INLINE __m128i fp8_convert8(rp_dtype fmt, __m256 v)
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
    code = _mm256_or_si256(code, _mm256_srli_epi32(_mm256_andnot_si256(a, u), 24));
    const __m256i bytes = _mm256_packus_epi16(_mm256_packus_epi32(code, code), _mm256_setzero_si256());
    return _mm_unpacklo_epi32(_mm256_castsi256_si128(bytes), _mm256_extracti128_si256(bytes, 1));
}

/* 8 values times inv_scale as fp8 codes at p (8 bytes; streaming: movnti, p 8-byte aligned). */
static RP_ALWAYS_INLINE void store8_fp8(rp_dtype fmt, int stream, char *p, __m256 v, __m256 inv_scale)
{
    const __m128i codes = fp8_convert8(fmt, _mm256_mul_ps(v, inv_scale));
    if (stream)
        _mm_stream_si64((long long *)p, _mm_cvtsi128_si64(codes));
    else
        _mm_storel_epi64((__m128i *)p, codes);
}

/* 8 pairs: x from xs, y from ys; results to xd/yd and, unless xp is NULL, xp/yp (format pool_dt). */
static RP_ALWAYS_INLINE void rotate8(rp_dtype dt, rp_dtype pool_dt, int stream_dst, int stream_pool,
                                     const char *xs, const char *ys, char *xd, char *yd, char *xp, char *yp,
                                     const float *cs, const float *sn, __m256 inv_scale)
{
    const __m256 x = load8(dt, xs), y = load8(dt, ys);
    const __m256 c = _mm256_loadu_ps(cs), s = _mm256_loadu_ps(sn);
    const __m256 out_x = _mm256_fmsub_ps(x, c, _mm256_mul_ps(y, s));
    const __m256 out_y = _mm256_fmadd_ps(y, c, _mm256_mul_ps(x, s));
    store8(dt, stream_dst, xd, out_x);
    store8(dt, stream_dst, yd, out_y);
    if (xp && pool_dt == dt) {
        store8(dt, stream_pool, xp, out_x);
        store8(dt, stream_pool, yp, out_y);
    } else if (xp) {
        store8_fp8(pool_dt, stream_pool, xp, out_x, inv_scale);
        store8_fp8(pool_dt, stream_pool, yp, out_y, inv_scale);
    }
}

static RP_ALWAYS_INLINE void simd_rotate(rp_dtype dt, rp_dtype pool_dt, int stream_dst, int stream_pool,
                                         const char *src, char *dst, char *pool, int64_t half,
                                         int64_t n, const float *cs, const float *sn, float inv_scale)
{
    const int64_t elem = dt == RP_F32 ? 4 : 2, hb = half * elem, pool_elem = pool_dt == dt ? elem : 1;
    const __m256 scale = _mm256_set1_ps(inv_scale);
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        const int64_t at = j * elem, pool_at = j * pool_elem;
        rotate8(dt, pool_dt, stream_dst, stream_pool, src + at, src + at + hb, dst + at, dst + at + hb,
                pool ? pool + pool_at : NULL, pool ? pool + pool_at + half * pool_elem : NULL, cs + j, sn + j,
                scale);
    }
    if (j == n)
        return;
    /* The last n - j < 8 pairs: one vector step on zero-padded copies (streaming needs whole
     * lines, so it never reaches here). */
    const size_t at = (size_t)(j * elem), bytes = (size_t)((n - j) * elem);
    char in[2][32] = {{0}}, out[2][32], codes[2][8];
    float c[8] = {0}, s[8] = {0};
    memcpy(in[0], src + at, bytes);
    memcpy(in[1], src + at + hb, bytes);
    memcpy(c, cs + j, (size_t)(n - j) * sizeof(float));
    memcpy(s, sn + j, (size_t)(n - j) * sizeof(float));
    const int fp8 = pool && pool_dt != dt;
    rotate8(dt, pool_dt, 0, 0, in[0], in[1], out[0], out[1], fp8 ? codes[0] : NULL, codes[1], c, s, scale);
    memcpy(dst + at, out[0], bytes);
    memcpy(dst + at + hb, out[1], bytes);
    if (pool && pool_dt == dt) {
        memcpy(pool + at, out[0], bytes);
        memcpy(pool + at + hb, out[1], bytes);
    } else if (fp8) {
        memcpy(pool + j, codes[0], (size_t)(n - j));
        memcpy(pool + j + half, codes[1], (size_t)(n - j));
    }
}

/* GPT-J: 8 elements (4 neighbouring pairs) from xs to xd and, unless xp is NULL, xp. vpermilps
 * swaps the two floats of each pair within its 128-bit lane. */
static RP_ALWAYS_INLINE void rotate_pairs8(rp_dtype dt, rp_dtype pool_dt, int stream_dst, int stream_pool,
                                           const char *xs, char *xd, char *xp, const float *cd, const float *sd,
                                           __m256 inv_scale)
{
    const __m256 x = load8(dt, xs);
    const __m256 out = _mm256_fmadd_ps(x, _mm256_loadu_ps(cd),
                                       _mm256_mul_ps(_mm256_permute_ps(x, 0xb1), _mm256_loadu_ps(sd)));
    store8(dt, stream_dst, xd, out);
    if (xp && pool_dt == dt)
        store8(dt, stream_pool, xp, out);
    else if (xp)
        store8_fp8(pool_dt, stream_pool, xp, out, inv_scale);
}

static RP_ALWAYS_INLINE void simd_rotate_interleaved(rp_dtype dt, rp_dtype pool_dt, int stream_dst,
                                                     int stream_pool, const char *src, char *dst, char *pool,
                                                     int64_t n, const float *cd, const float *sd,
                                                     float inv_scale)
{
    const int64_t elem = dt == RP_F32 ? 4 : 2, pool_elem = pool_dt == dt ? elem : 1;
    const __m256 scale = _mm256_set1_ps(inv_scale);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        rotate_pairs8(dt, pool_dt, stream_dst, stream_pool, src + i * elem, dst + i * elem,
                      pool ? pool + i * pool_elem : NULL, cd + i, sd + i, scale);
    if (i == n)
        return;
    /* The last n - i < 8 elements (whole pairs): one vector step on zero-padded copies. */
    const size_t at = (size_t)(i * elem), bytes = (size_t)((n - i) * elem);
    char in[32] = {0}, out[32], codes[8];
    float c[8] = {0}, s[8] = {0};
    memcpy(in, src + at, bytes);
    memcpy(c, cd + i, (size_t)(n - i) * sizeof(float));
    memcpy(s, sd + i, (size_t)(n - i) * sizeof(float));
    const int fp8 = pool && pool_dt != dt;
    rotate_pairs8(dt, pool_dt, 0, 0, in, out, fp8 ? codes : NULL, c, s, scale);
    memcpy(dst + at, out, bytes);
    if (fp8)
        memcpy(pool + i, codes, (size_t)(n - i));
    else if (pool)
        memcpy(pool + at, out, bytes);
}

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

static RP_ALWAYS_INLINE void simd_narrow(rp_dtype dt, int stream, char *dst, const float *src, int64_t n)
{
    const int64_t elem = dt == RP_F32 ? 4 : 2;
    int64_t j = 0;
    for (; j + 8 <= n; j += 8)
        store8(dt, stream, dst + j * elem, _mm256_loadu_ps(src + j));
    if (j < n) { /* the last n - j < 8 values through a zero-padded copy */
        float in[8] = {0};
        char out[32];
        memcpy(in, src + j, (size_t)(n - j) * sizeof(float));
        store8(dt, 0, out, _mm256_loadu_ps(in));
        memcpy(dst + j * elem, out, (size_t)((n - j) * elem));
    }
}

static RP_ALWAYS_INLINE void simd_to_fp8(rp_dtype dt, rp_dtype pool_dt, int stream, uint8_t *dst,
                                         const char *src, int64_t n, float inv_scale)
{
    const int64_t elem = dt == RP_F32 ? 4 : 2;
    const __m256 scale = _mm256_set1_ps(inv_scale);
    int64_t j = 0;
    for (; j + 8 <= n; j += 8)
        store8_fp8(pool_dt, stream, (char *)dst + j, load8(dt, src + j * elem), scale);
    if (j < n) { /* the last n - j < 8 elements through a zero-padded copy */
        char in[32] = {0}, codes[8];
        memcpy(in, src + j * elem, (size_t)((n - j) * elem));
        store8_fp8(pool_dt, 0, codes, load8(dt, in), scale);
        memcpy(dst + j, codes, (size_t)(n - j));
    }
}

static inline void simd_stream_fence(void)
{
    _mm_sfence();
}

void rp_cpu_fill_avx2(rp_cpu_kernels *table)
{
    simd_fill_table(table, "avx2");
}
