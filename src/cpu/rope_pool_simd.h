/*
 * rope_pool_simd.h — the part of the AVX2, AVX-512 and NEON kernels that does not depend on the
 * ISA: the walk over tokens, frequency chunks and heads, the libm fallback for huge angles, the
 * pool copies, and the choice of streaming stores. An ISA file includes this header, defines the
 * four primitives declared below (the only code that differs between ISAs), and fills its table
 * with simd_fill_table(). An ISA without streaming stores worth using defines
 * SIMD_STREAMING_STORES to 0 first: every call then takes one pass with ordinary stores.
 *
 * Numerics, per token: the angles pos * inv_freq[i] are reduced and evaluated in float64 exactly
 * as sincos.h does (same constants; the Horner steps are FMAs), rounded to float32 once into
 * cs/sn, and reused by all Hq + Hk heads. Each pair then rotates in float32:
 *     x' = fma(x, c, -(y * s)),   y' = fma(y, c, x * s).
 * Every ISA does the same operations in the same order, so their outputs agree bit for bit, and the
 * partition of tokens between threads cannot change a result.
 */
#ifndef RP_CPU_ROPE_POOL_SIMD_H
#define RP_CPU_ROPE_POOL_SIMD_H

#include "kernels.h"
#include "sincos.h"

#include <stdint.h>

#define RP_ALWAYS_INLINE inline __attribute__((always_inline))

#ifndef SIMD_STREAMING_STORES
#  define SIMD_STREAMING_STORES 1
#endif

enum {
    SIMD_CHUNK = 256, /* frequencies per pass: bounds the cs/sn buffers for any head_dim */
    SIMD_PAD = 16,    /* room past a chunk in cs/sn: a vector step may write up to a whole vector */
    SIMD_LINE = 64,   /* streaming stores need every output row on a cache-line boundary */
    SIMD_STREAM_BLOCK = 64 /* tokens per block of a streaming call (see simd_rope_pool_slice) */
};

/* rp_sincos's polynomials in z = r * r, as Horner steps of an ISA's fused multiply-add FMA(a, b, c)
 * = a * b + c and broadcast SET, so that both vector kernels evaluate them identically:
 *     sin r = fma(r * z, SIMD_SIN_POLY, r),   cos r = fma(z * z, SIMD_COS_POLY, 1 - 0.5 * z). */
#define SIMD_SIN_POLY(FMA, SET, z)                                                                 \
    FMA(z, FMA(z, FMA(z, FMA(z, FMA(z, SET(RP_SIN_C6), SET(RP_SIN_C5)), SET(RP_SIN_C4)),           \
                      SET(RP_SIN_C3)), SET(RP_SIN_C2)), SET(RP_SIN_C1))
#define SIMD_COS_POLY(FMA, SET, z)                                                                 \
    FMA(z, FMA(z, FMA(z, FMA(z, FMA(z, SET(RP_COS_C6), SET(RP_COS_C5)), SET(RP_COS_C4)),           \
                      SET(RP_COS_C3)), SET(RP_COS_C2)), SET(RP_COS_C1))

/* ---- the primitives each ISA file defines --------------------------------------------------- */

/* cos and sin of pos * inv_freq[i] for i < n, rounded to float32 into cs[i] and sn[i]; entries up
 * to SIMD_PAD past n may be written too. Returns nonzero when some angle is NaN or >= 2^31 in
 * magnitude: those entries are not valid and the caller recomputes them with libm. */
static int simd_sincos(const double *inv_freq, int64_t n, double pos, float *cs, float *sn);

/* Rotates the pairs (x[j], x[j + half]) for j < n of one head row x = src (dtype dt), writing
 * dst (which may be src: every pair is read before it is written) and, unless pool is NULL, pool.
 * cs/sn hold n entries. stream_dst / stream_pool select streaming stores for dst / pool; dt and
 * both flags are constants once inlined. */
static RP_ALWAYS_INLINE void simd_rotate(rp_dtype dt, int stream_dst, int stream_pool,
                                         const char *src, char *dst, char *pool, int64_t half,
                                         int64_t n, const float *cs, const float *sn);

/* Copies `bytes` bytes (a multiple of 2) from src to dst, with streaming stores if `stream`. */
static RP_ALWAYS_INLINE void simd_copy(int stream, char *dst, const char *src, int64_t bytes);

/* Makes the streaming stores issued so far globally visible before the slice returns. */
static inline void simd_stream_fence(void);

/* ---- the driver -------------------------------------------------------------------------------- */

static inline char *simd_row(const void *base, const int64_t stride[3], int64_t outer, int64_t head,
                             int64_t elem)
{
    return (char *)base + (outer * stride[0] + head * stride[1]) * elem;
}

/* The angles the vector sincos cannot reduce (NaN, or |angle| >= 2^31: int64 positions, or rope
 * bases below 1), recomputed one by one through sincos.h's libm path. */
static void simd_fix_slow_angles(const double *inv_freq, int64_t n, double pos, float *cs, float *sn)
{
    for (int64_t i = 0; i < n; i++) {
        const double angle = pos * inv_freq[i];
        if (!(fabs(angle) < RP_SINCOS_FAST_LIMIT)) {
            double s, c;
            rp_sincos(angle, &s, &c);
            cs[i] = (float)c;
            sn[i] = (float)s;
        }
    }
}

static int simd_rows_on_lines(const void *base, const int64_t stride[3], int64_t elem)
{
    return (uintptr_t)base % SIMD_LINE == 0 && (stride[0] * elem) % SIMD_LINE == 0 &&
           (stride[1] * elem) % SIMD_LINE == 0;
}

enum { SIMD_STREAM_ROWS = 1, SIMD_STREAM_POOL = 2 };

/* Which outputs take streaming stores in this call (SIMD_STREAM_* bits). Pool rows always do:
 * they are scattered over a pool far larger than the cache and rarely in it, so a store that
 * skips their read-for-ownership saves the read and its latency at every size (on Zen 4, up to
 * 2x on calls of 1 to 256 tokens with fresh slots, and no loss when the rows happen to be cached).
 * q_rot and k_rot stream only in calls beyond RP_STREAM_MIN_BYTES. Either needs every vector
 * store of its rows to cover whole, aligned cache lines, so the stream path never stores part. */
static int simd_streaming(const rp_problem *p)
{
    const int64_t elem = (int64_t)rp_dtype_size(p->dtype);
    if (!SIMD_STREAMING_STORES || (p->head_dim / 2 * elem) % SIMD_LINE != 0)
        return 0;
    int mode = 0;
    if (simd_rows_on_lines(p->k_pool, p->k_pool_stride, elem) &&
        simd_rows_on_lines(p->v_pool, p->v_pool_stride, elem))
        mode |= SIMD_STREAM_POOL;
    if (rp_cpu_bytes_moved(p) >= RP_STREAM_MIN_BYTES &&
        simd_rows_on_lines(p->q_rot, p->q_rot_stride, elem) &&
        simd_rows_on_lines(p->k_rot, p->k_rot_stride, elem))
        mode |= SIMD_STREAM_ROWS;
    return mode;
}

/* Copies the Hk head rows of token t in src to pool row `slot` of dst: one span when both hold
 * their heads back to back, else head by head. */
static RP_ALWAYS_INLINE void simd_copy_heads(int stream, const rp_problem *p, const void *src,
                                             const int64_t src_stride[3], void *dst,
                                             const int64_t dst_stride[3], int64_t t, int64_t slot,
                                             int64_t elem)
{
    const int64_t row_bytes = p->head_dim * elem;
    if (src_stride[1] == p->head_dim && dst_stride[1] == p->head_dim) {
        simd_copy(stream, simd_row(dst, dst_stride, slot, 0, elem), simd_row(src, src_stride, t, 0, elem),
                  row_bytes * p->num_kv_heads);
        return;
    }
    for (int64_t h = 0; h < p->num_kv_heads; h++)
        simd_copy(stream, simd_row(dst, dst_stride, slot, h, elem), simd_row(src, src_stride, t, h, elem),
                  row_bytes);
}

/* Touches token t's pool rows (their first and last line in each pool) ahead of the stores. The
 * rows sit on random pages of a pool far larger than the TLB covers; starting the address
 * translations early, and all at once, keeps the page walks off the store path (on Zen 4 with
 * fresh slots: 1.25x at 1 token, 1.4x to 1.5x at 16 to 256 tokens). */
static inline void simd_touch_pool_rows(const rp_problem *p, int64_t t, int64_t elem)
{
    const int64_t slot = rp_load_index(p->slots, p->slot_dtype, p->slot_stride, t);
    if (slot < 0)
        return;
    const int64_t last = p->num_kv_heads - 1, end = (p->head_dim - 1) * elem;
    __builtin_prefetch(simd_row(p->k_pool, p->k_pool_stride, slot, 0, elem), 1, 0);
    __builtin_prefetch(simd_row(p->v_pool, p->v_pool_stride, slot, 0, elem), 1, 0);
    __builtin_prefetch(simd_row(p->k_pool, p->k_pool_stride, slot, last, elem) + end, 1, 0);
    __builtin_prefetch(simd_row(p->v_pool, p->v_pool_stride, slot, last, elem) + end, 1, 0);
}

enum { SIMD_PASS_KV = 1, SIMD_PASS_Q = 2 }; /* which heads a pass over tokens handles */

/* One pass over tokens [t_begin, t_end). Per token: v to its pool row, then the frequencies'
 * cos/sin, then (SIMD_PASS_KV) the k heads, to k_rot and the pool row, and (SIMD_PASS_Q) the q
 * heads. mode holds SIMD_STREAM_* bits; dt, mode and pass are constants once inlined. */
static RP_ALWAYS_INLINE void simd_rope_pool_pass(const rp_problem *p, rp_parts parts, int64_t t_begin,
                                                 int64_t t_end, rp_dtype dt, int mode, int pass)
{
    const int stream_rows = mode & SIMD_STREAM_ROWS, stream_pool = mode & SIMD_STREAM_POOL;
    const int kv = pass & SIMD_PASS_KV, q = pass & SIMD_PASS_Q, pools = kv && parts != RP_PARTS_ROTATE;
    const int64_t elem = dt == RP_F32 ? 4 : 2, half = p->head_dim / 2;
    float cs[SIMD_CHUNK + SIMD_PAD] __attribute__((aligned(64)));
    float sn[SIMD_CHUNK + SIMD_PAD] __attribute__((aligned(64)));
    if (pools)
        simd_touch_pool_rows(p, t_begin, elem);
    for (int64_t t = t_begin; t < t_end; t++) {
        if (pools && t + 1 < t_end)
            simd_touch_pool_rows(p, t + 1, elem);
        const double pos = (double)rp_load_index(p->positions, p->pos_dtype, p->pos_stride, t);
        const int64_t slot = rp_load_index(p->slots, p->slot_dtype, p->slot_stride, t);
        const int write_pool = pools && slot >= 0;
        if (write_pool)
            simd_copy_heads(stream_pool, p, p->v, p->v_stride, p->v_pool, p->v_pool_stride, t, slot, elem);
        if (write_pool && parts == RP_PARTS_SCATTER)
            simd_copy_heads(stream_pool, p, p->k_rot, p->k_rot_stride, p->k_pool, p->k_pool_stride, t,
                            slot, elem);
        for (int64_t i0 = 0; parts != RP_PARTS_SCATTER && i0 < half; i0 += SIMD_CHUNK) {
            const int64_t n = half - i0 < SIMD_CHUNK ? half - i0 : SIMD_CHUNK, offset = i0 * elem;
            if (simd_sincos(p->inv_freq + i0, n, pos, cs, sn))
                simd_fix_slow_angles(p->inv_freq + i0, n, pos, cs, sn);
            for (int64_t h = 0; kv && h < p->num_kv_heads; h++)
                simd_rotate(dt, stream_rows, stream_pool, simd_row(p->k, p->k_stride, t, h, elem) + offset,
                            simd_row(p->k_rot, p->k_rot_stride, t, h, elem) + offset,
                            write_pool ? simd_row(p->k_pool, p->k_pool_stride, slot, h, elem) + offset : NULL,
                            half, n, cs, sn);
            for (int64_t h = 0; q && h < p->num_qo_heads; h++)
                simd_rotate(dt, stream_rows, 0, simd_row(p->q, p->q_stride, t, h, elem) + offset,
                            simd_row(p->q_rot, p->q_rot_stride, t, h, elem) + offset, NULL, half, n,
                            cs, sn);
        }
    }
}

/* Tokens [t_begin, t_end) with the SIMD_STREAM_* bits in mode. A call large enough to stream its
 * rows goes through blocks of SIMD_STREAM_BLOCK tokens in two passes, k and v (five streams)
 * then q (two): DRAM serves fewer concurrent streams better (Zen 4, Llama-3-8B shapes: 1.25x at
 * 4096 and 16384 tokens). The second pass computes each token's cos/sin again, ~50 ns against
 * the ~2 us its q heads take to stream. Smaller calls, cache-resident, take one pass. */
static RP_ALWAYS_INLINE void simd_rope_pool_slice(const rp_problem *p, rp_parts parts, int64_t t_begin,
                                                  int64_t t_end, rp_dtype dt, int mode)
{
    if (!(mode & SIMD_STREAM_ROWS)) {
        simd_rope_pool_pass(p, parts, t_begin, t_end, dt, mode, SIMD_PASS_KV | SIMD_PASS_Q);
    } else {
        for (int64_t b = t_begin; b < t_end; b += SIMD_STREAM_BLOCK) {
            const int64_t e = t_end - b < SIMD_STREAM_BLOCK ? t_end : b + SIMD_STREAM_BLOCK;
            simd_rope_pool_pass(p, parts, b, e, dt, mode, SIMD_PASS_KV);
            simd_rope_pool_pass(p, parts, b, e, dt, mode, SIMD_PASS_Q);
        }
    }
    if (mode)
        simd_stream_fence();
}

static RP_ALWAYS_INLINE void simd_rope_pool(const rp_problem *p, rp_parts parts, int64_t t_begin,
                                            int64_t t_end, rp_dtype dt)
{
    switch (simd_streaming(p)) {
    case 0: simd_rope_pool_slice(p, parts, t_begin, t_end, dt, 0); break;
    case SIMD_STREAM_POOL: simd_rope_pool_slice(p, parts, t_begin, t_end, dt, SIMD_STREAM_POOL); break;
    case SIMD_STREAM_ROWS: simd_rope_pool_slice(p, parts, t_begin, t_end, dt, SIMD_STREAM_ROWS); break;
    default: simd_rope_pool_slice(p, parts, t_begin, t_end, dt, SIMD_STREAM_ROWS | SIMD_STREAM_POOL); break;
    }
}

static void simd_rope_pool_f32(const rp_problem *p, rp_parts parts, int64_t t_begin, int64_t t_end)
{
    simd_rope_pool(p, parts, t_begin, t_end, RP_F32);
}

static void simd_rope_pool_f16(const rp_problem *p, rp_parts parts, int64_t t_begin, int64_t t_end)
{
    simd_rope_pool(p, parts, t_begin, t_end, RP_F16);
}

static void simd_rope_pool_bf16(const rp_problem *p, rp_parts parts, int64_t t_begin, int64_t t_end)
{
    simd_rope_pool(p, parts, t_begin, t_end, RP_BF16);
}

static void simd_fill_table(rp_cpu_kernels *table, const char *name)
{
    table->name = name;
    table->rope_pool[RP_F32] = simd_rope_pool_f32;
    table->rope_pool[RP_F16] = simd_rope_pool_f16;
    table->rope_pool[RP_BF16] = simd_rope_pool_bf16;
}

#endif /* RP_CPU_ROPE_POOL_SIMD_H */
