/*
 * kernels.h — the CPU kernel levels. Each fills the entries of the table it can run; dispatch.c
 * fills the reference first, then the best level this CPU supports.
 */
#ifndef RP_CPU_KERNELS_H
#define RP_CPU_KERNELS_H

#include "../dtype.h"
#include "../internal.h"

#include <math.h>

#if defined(__F16C__)
#  include <immintrin.h>
#elif defined(__ARM_NEON) && defined(__aarch64__)
#  include <arm_neon.h>
#endif

void rp_cpu_fill_portable(rp_cpu_kernels *table);

#if defined(__x86_64__) || defined(_M_X64)
#  define RP_HAVE_X86_KERNELS 1
void rp_cpu_fill_avx2(rp_cpu_kernels *table);
void rp_cpu_fill_avx512(rp_cpu_kernels *table);
#endif

#if defined(__aarch64__) || defined(_M_ARM64)
#  define RP_HAVE_NEON_KERNELS 1
void rp_cpu_fill_neon(rp_cpu_kernels *table);
#endif

/* 1 if this CPU can run the kernel level named "avx512", "avx2", "neon", "portable" or "reference"
 * (what dispatch.c checks before it fills the table; the tests use it to pick the levels to run). */
int rp_cpu_level_supported(const char *level);

/* Bytes a whole call moves through memory: q and q_rot; k, k_rot and k_pool; v and v_pool, with
 * the pools' element size (fp8: 1) and v's head width. The threading and streaming-store
 * thresholds are stated in these bytes. */
static inline int64_t rp_cpu_bytes_moved(const rp_problem *p)
{
    /* in 128 bits, saturated: each tensor's bytes fit in int64 (rp_validate), their sum need not
     * (a broadcast v of 2^61 elements beside an empty pool) */
    const __int128 elem = (__int128)rp_dtype_size(p->dtype), pool_elem = (__int128)rp_dtype_size(p->pool_dtype);
    const __int128 per_token = (__int128)p->head_dim * (elem * (2 * (__int128)p->num_qo_heads +
                                                                2 * (__int128)p->num_kv_heads) +
                                                        pool_elem * p->num_kv_heads) +
                               (__int128)p->v_head_dim * p->num_kv_heads * (elem + pool_elem);
    const __int128 bytes = (__int128)p->num_tokens * per_token;
    return bytes > INT64_MAX ? INT64_MAX : (int64_t)bytes;
}

/* Calls that move at least this many bytes (rp_cpu_bytes_moved) write q_rot and k_rot with
 * streaming stores, which skip each output line's read-for-ownership: a third less traffic once
 * the outputs cannot stay in the cache anyway. Smaller calls keep them in the cache, where the
 * attention that follows reads them. Measured on Zen 4 (32 MiB L3, Llama-3-8B shapes, 2 threads):
 * ordinary stores win 1.8x at 13.6 MB, streaming wins 1.8x at 27 MB. */
#define RP_STREAM_MIN_BYTES ((int64_t)16 << 20)

/* QK-norm on the fast CPU levels: each head row is normalised once into a float32 row of at most
 * this many dims, which the rotation then reads (a head of one frequency chunk: 2 * 256 dims).
 * Wider normalised heads take the reference kernel (rope_pool_cpu.c). */
enum { RP_CPU_NORM_MAX_DIM = 512 };

static inline int rp_cpu_norm_fits(const rp_problem *p)
{
    return !rp_has_qk_norm(p) || p->head_dim <= RP_CPU_NORM_MAX_DIM;
}

/* Element i of src (dtype dt: f32, f16 or bf16) as a float32, exactly. */
static inline float rp_cpu_load(rp_dtype dt, const void *src, int64_t i)
{
    return dt == RP_F32 ? ((const float *)src)[i]
         : dt == RP_F16 ? rp_f16_bits_to_float(((const uint16_t *)src)[i])
                        : rp_bf16_bits_to_float(((const uint16_t *)src)[i]);
}

/* The n elements of src (dtype dt) as float32 into y, exactly. f16 takes the ISA's converter where
 * the translation unit is built with one (the AVX2 and AVX-512 levels have F16C, aarch64 NEON):
 * the portable conversion branches on every element and does not vectorise, which made f16
 * QK-norm calls 2.3x as slow as bf16 ones on AVX2 (bf16's shift vectorises as it is). */
static inline void rp_cpu_widen_row(rp_dtype dt, const char *src, int64_t n, float *y)
{
    int64_t i = 0;
#if defined(__F16C__)
    if (dt == RP_F16)
        for (; i + 8 <= n; i += 8)
            _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + 2 * i))));
#elif defined(__ARM_NEON) && defined(__aarch64__)
    if (dt == RP_F16)
        for (; i + 4 <= n; i += 4)
            vst1q_f32(y + i, vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16((const uint16_t *)src + i))));
#endif
    for (; i < n; i++)
        y[i] = rp_cpu_load(dt, src, i);
}

/* One weight's factors for rp_cpu_norm_row, made once per slice (inline: at one token a slice is
 * a call's whole work). gain[i] = w[i] + offset in float64 (rp_norm_gain's value): the float64
 * path. With 16-bit inputs and a float32 offset, also staged[i] = float32(w[i] + offset) 2^-39
 * (one rounding; the scaling exact), kept when every |w[i] + offset| is 0 or in [2^-87, 2^123):
 * the float32 path, which the CUDA kernels take too (qk_norm.cuh). */
typedef struct rp_cpu_norm {
    double gain[RP_CPU_NORM_MAX_DIM];
    float staged[RP_CPU_NORM_MAX_DIM];
    int float32; /* staged holds the float32 path's factors */
} rp_cpu_norm;

/* n's factors for weight w, or NULL when w is not given. */
static inline const rp_cpu_norm *rp_cpu_norm_prepare(const rp_problem *p, const rp_norm_weight *w, rp_cpu_norm *n)
{
    if (w->data == NULL)
        return NULL;
    const float offset = (float)p->norm_offset;
    n->float32 = p->dtype != RP_F32 && (double)offset == p->norm_offset;
    for (int64_t i = 0; i < p->head_dim; i++) {
        const float x = rp_cpu_load(w->dtype, w->data, i), wo = x + offset, m = fabsf(wo);
        n->gain[i] = (double)x + p->norm_offset;
        n->float32 &= wo == 0.0f || (m >= 0x1p-87f && m < 0x1p123f); /* NaN: not */
        n->staged[i] = wo * 0x1p-39f;
    }
    return n;
}

/* The mean of the squares of y[0 .. D), their sum in float64: sixteen partial sums in a fixed order, which compilers
 * vectorise, so every level gets the same bits (a float32's square is exact in float64, so FMA
 * contraction cannot change it; sixteen rather than eight give AVX2 four independent chains of
 * FMAs, 7% off a Qwen3-8B bf16 call, bench/results/qwen3-8b-qk-norm.md). pairs: the float32
 * path's sum instead, of 16-bit values: the squares of elements i and i + 8 of each sixteen, both
 * exact in float32 (8 or 11 significant bits each, doubled), added with one rounding (fmaf), and
 * those eight sums a sixteen accumulated in float64: relative error below 2^-24 (u) where no
 * square leaves float32's normal range (v in [2^-100, 2^64) below: a subnormal square's error,
 * 2^-150 at most, is then negligible against v), half the float64 conversions and additions. */
static inline double rp_cpu_mean_square(const float *y, int64_t D, int pairs)
{
    double acc[16] = {0};
    int64_t i = 0;
    if (pairs)
        for (; i + 16 <= D; i += 16)
            for (int l = 0; l < 8; l++)
                acc[l] += (double)fmaf(y[i + 8 + l], y[i + 8 + l], y[i + l] * y[i + l]);
    else
        for (; i + 16 <= D; i += 16)
            for (int l = 0; l < 16; l++)
                acc[l] += (double)y[i + l] * (double)y[i + l];
    for (; i < D; i++)
        acc[0] += (double)y[i] * (double)y[i];
    const double low = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    const double sum =
        pairs ? low : low + (((acc[8] + acc[9]) + (acc[10] + acc[11])) + ((acc[12] + acc[13]) + (acc[14] + acc[15])));
    /* sum / D, by the exact reciprocal where D is a power of two (the same value, no division) */
    return (D & (D - 1)) == 0 ? sum * (1.0 / (double)D) : sum / (double)D;
}

/* Whether a head whose sum / D + eps is v takes the float32 path (n->float32: 16-bit inputs and
 * weights it can take; false for a NaN v). */
static inline int rp_cpu_norm_float32(const rp_cpu_norm *n, double v)
{
    return n->float32 && v >= 0x1p-100 && v < 0x1p64;
}

/* v = sum / D + eps of one head row src (dtype dt), which is left in y widened to float32. The
 * sum by pairs (rp_cpu_mean_square) where the float32 path may take the head (n->float32), and
 * again exactly where that v falls outside the path's range: a head that takes the float64 path
 * has the exact float64 sum of its squares. */
static inline double rp_cpu_norm_v(const rp_problem *p, const rp_cpu_norm *n, rp_dtype dt, const char *src,
                                   float *y)
{
    const int64_t D = p->head_dim;
    rp_cpu_widen_row(dt, src, D, y);
    const double v = rp_cpu_mean_square(y, D, n->float32) + p->norm_eps;
    if (n->float32 && !rp_cpu_norm_float32(n, v))
        return rp_cpu_mean_square(y, D, 0) + p->norm_eps;
    return v;
}

/* The float32 path's first factor, float32(rstd) 2^39, of rstd = 1 / sqrt(v). */
static inline float rp_cpu_norm_scaled_rstd(double rstd)
{
    return (float)rstd * 0x1p39f;
}

/* The D widened elements of a head row in y normalised in place, given v = rp_cpu_norm_v and
 * rstd = 1 / sqrt(v) (rp_cpu_norm_row does it all for the row src). The float64 path: y[i] =
 * float32(x[i] * (gain[i] * rstd)), one rounding, the header's "no intermediate rounding". The
 * float32 path (rp_cpu_norm_float32: 16-bit inputs, n->float32, and v in [2^-100, 2^64)): y[i] =
 * (x[i] * float32(rstd) 2^39) * staged[i], relative error below 4 * 2^-24 (rstd and w + offset
 * rounded once each, two products): a nonzero 16-bit x is at least 2^-133 and 2^7 < float32(rstd)
 * 2^39 <= 2^89, so the first product is normal, and |x| rstd <= sqrt(D) <= 2^4.5, so the second
 * stays below 2^127.5 (a subnormal y's absolute error, below 2^-150, is the header's last term).
 * Qwen3-8B bf16 calls ran 17% faster on AVX2 than with the float64 scaling (qwen3-8b-qk-norm.md).
 * The vector levels apply the float32 path's two products inside their rotation instead
 * (rope_pool_simd.h, simd_norm_head): the same values. */
static inline void rp_cpu_norm_apply(const rp_problem *p, const rp_cpu_norm *n, double v, double rstd, float *y)
{
    const int64_t D = p->head_dim;
    if (rp_cpu_norm_float32(n, v)) {
        const float scaled = rp_cpu_norm_scaled_rstd(rstd);
        for (int64_t i = 0; i < D; i++)
            y[i] = (y[i] * scaled) * n->staged[i];
        return;
    }
    for (int64_t i = 0; i < D; i++)
        y[i] = (float)((double)y[i] * (n->gain[i] * rstd));
}

static inline void rp_cpu_norm_row(const rp_problem *p, rp_dtype dt, const char *src, const rp_cpu_norm *n,
                                   float *y)
{
    const double v = rp_cpu_norm_v(p, n, dt, src, y);
    rp_cpu_norm_apply(p, n, v, 1.0 / sqrt(v), y);
}

#endif /* RP_CPU_KERNELS_H */
