/*
 * rope_pool_simd.h — the part of the AVX2 and AVX-512 kernels that does not depend on the vector
 * width: the walk over tokens, frequency chunks and heads, the libm fallback for huge angles, the
 * pool copies, and the choice of streaming stores. An ISA file includes this header, defines the
 * four primitives declared below (the only code that differs between ISAs), and fills its table
 * with simd_fill_table().
 *
 * Numerics, per token: the angles pos * inv_freq[i] are reduced and evaluated in float64 exactly
 * as sincos.h does (same constants; the Horner steps are FMAs), rounded to float32 once into
 * cs/sn, and reused by all Hq + Hk heads. Each pair then rotates in float32:
 *     x' = fma(x, c, -(y * s)),   y' = fma(y, c, x * s).
 * Both ISAs do the same operations in the same order, so their outputs agree bit for bit, and the
 * partition of tokens between threads cannot change a result.
 */
#ifndef RP_CPU_ROPE_POOL_SIMD_H
#define RP_CPU_ROPE_POOL_SIMD_H

#include "kernels.h"
#include "sincos.h"

#include <stdint.h>

#define RP_ALWAYS_INLINE inline __attribute__((always_inline))

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
 * dst (which may be src: every pair is read before it is written) and, unless pool is NULL, the
 * pool head row `pool` in format pool_dt: dt, or an fp8 format, which stores fp8(x' * inv_scale)
 * from the float32 x' (one rounding to fp8 of that product). cs/sn hold n entries. stream_dst /
 * stream_pool select streaming stores for dst / pool (never for fp8 pools); dt, pool_dt and both
 * flags are constants once inlined. */
static RP_ALWAYS_INLINE void simd_rotate(rp_dtype dt, rp_dtype pool_dt, int stream_dst, int stream_pool,
                                         const char *src, char *dst, char *pool, int64_t half,
                                         int64_t n, const float *cs, const float *sn, float inv_scale);

/* Copies `bytes` bytes (a multiple of 2) from src to dst, with streaming stores if `stream`. */
static RP_ALWAYS_INLINE void simd_copy(int stream, char *dst, const char *src, int64_t bytes);

/* n elements of dtype dt at src to fp8 codes fp8(x * inv_scale) (pool_dt) at dst: the fp8 pool
 * copy of v, and of k_rot in the unfused scatter. */
static RP_ALWAYS_INLINE void simd_to_fp8(rp_dtype dt, rp_dtype pool_dt, uint8_t *dst, const char *src,
                                         int64_t n, float inv_scale);

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

/* The same for pool rows, which rp_pool_offset places by block, row and head strides. */
static int simd_pool_rows_on_lines(const void *base, const int64_t stride[4], int64_t elem)
{
    return (uintptr_t)base % SIMD_LINE == 0 && (stride[0] * elem) % SIMD_LINE == 0 &&
           (stride[1] * elem) % SIMD_LINE == 0 && (stride[2] * elem) % SIMD_LINE == 0;
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
    if ((p->head_dim / 2 * elem) % SIMD_LINE != 0)
        return 0;
    int mode = 0;
    /* fp8 rows are converted, not copied, in part-line steps: they take ordinary stores. */
    if (!rp_pool_is_fp8(p) && (p->v_head_dim * elem) % SIMD_LINE == 0 &&
        simd_pool_rows_on_lines(p->k_pool, p->k_pool_stride, elem) &&
        simd_pool_rows_on_lines(p->v_pool, p->v_pool_stride, elem))
        mode |= SIMD_STREAM_POOL;
    if (rp_cpu_bytes_moved(p) >= RP_STREAM_MIN_BYTES &&
        simd_rows_on_lines(p->q_rot, p->q_rot_stride, elem) &&
        simd_rows_on_lines(p->k_rot, p->k_rot_stride, elem))
        mode |= SIMD_STREAM_ROWS;
    return mode;
}

static inline char *simd_pool_row(const rp_problem *p, void *pool, const int64_t stride[4], int64_t slot,
                                   int64_t head, int64_t pool_elem)
{
    return (char *)pool + rp_pool_offset(p, stride, slot, head) * pool_elem;
}

/* Writes the Hk head rows (n elements each) of token t in src to pool row `slot`: copies, or fp8
 * codes when pool_dt is an fp8 format; one span when both hold their heads back to back. */
static RP_ALWAYS_INLINE void simd_copy_heads(rp_dtype dt, rp_dtype pool_dt, int stream, const rp_problem *p,
                                             const void *src, const int64_t src_stride[3], void *pool,
                                             const int64_t pool_stride[4], int64_t t, int64_t slot,
                                             int64_t n, float inv_scale)
{
    const int64_t elem = dt == RP_F32 ? 4 : 2, pool_elem = pool_dt == dt ? elem : 1;
    const int spans = src_stride[1] == n && pool_stride[2] == n;
    const int64_t heads = spans ? 1 : p->num_kv_heads, count = spans ? n * p->num_kv_heads : n;
    for (int64_t h = 0; h < heads; h++) {
        char *to = simd_pool_row(p, pool, pool_stride, slot, h, pool_elem);
        const char *from = simd_row(src, src_stride, t, h, elem);
        if (pool_dt == dt)
            simd_copy(stream, to, from, count * elem);
        else
            simd_to_fp8(dt, pool_dt, (uint8_t *)to, from, count, inv_scale);
    }
}

/* Touches token t's pool rows (their first and last line in each pool) ahead of the stores. The
 * rows sit on random pages of a pool far larger than the TLB covers; starting the address
 * translations early, and all at once, keeps the page walks off the store path (on Zen 4 with
 * fresh slots: 1.25x at 1 token, 1.4x to 1.5x at 16 to 256 tokens). */
static inline void simd_touch_pool_rows(const rp_problem *p, int64_t t, int64_t pool_elem)
{
    const int64_t slot = rp_load_index(p->slots, p->slot_dtype, p->slot_stride, t);
    if (slot < 0)
        return;
    const int64_t last = p->num_kv_heads - 1;
    __builtin_prefetch(simd_pool_row(p, p->k_pool, p->k_pool_stride, slot, 0, pool_elem), 1, 0);
    __builtin_prefetch(simd_pool_row(p, p->v_pool, p->v_pool_stride, slot, 0, pool_elem), 1, 0);
    __builtin_prefetch(simd_pool_row(p, p->k_pool, p->k_pool_stride, slot, last, pool_elem) +
                       (p->head_dim - 1) * pool_elem, 1, 0);
    __builtin_prefetch(simd_pool_row(p, p->v_pool, p->v_pool_stride, slot, last, pool_elem) +
                       (p->v_head_dim - 1) * pool_elem, 1, 0);
}

enum { SIMD_PASS_KV = 1, SIMD_PASS_Q = 2 }; /* which heads a pass over tokens handles */

/* One pass over tokens [t_begin, t_end). Per token: v to its pool row, then the frequencies'
 * cos/sin, then (SIMD_PASS_KV) the k heads, to k_rot and the pool row, and (SIMD_PASS_Q) the q
 * heads. mode holds SIMD_STREAM_* bits; dt, mode and pass are constants once inlined. */
static RP_ALWAYS_INLINE void simd_rope_pool_pass(const rp_problem *p, rp_parts parts, int64_t t_begin,
                                                 int64_t t_end, rp_dtype dt, rp_dtype pool_dt, int mode,
                                                 int pass)
{
    const int stream_rows = mode & SIMD_STREAM_ROWS, stream_pool = mode & SIMD_STREAM_POOL;
    const int kv = pass & SIMD_PASS_KV, q = pass & SIMD_PASS_Q, pools = kv && parts != RP_PARTS_ROTATE;
    const int64_t elem = dt == RP_F32 ? 4 : 2, half = p->head_dim / 2, pool_elem = pool_dt == dt ? elem : 1;
    const float k_inv_scale = (float)(1.0 / p->k_scale), v_inv_scale = (float)(1.0 / p->v_scale);
    float cs[SIMD_CHUNK + SIMD_PAD] __attribute__((aligned(64)));
    float sn[SIMD_CHUNK + SIMD_PAD] __attribute__((aligned(64)));
    if (pools)
        simd_touch_pool_rows(p, t_begin, pool_elem);
    for (int64_t t = t_begin; t < t_end; t++) {
        if (pools && t + 1 < t_end)
            simd_touch_pool_rows(p, t + 1, pool_elem);
        const double pos = (double)rp_load_index(p->positions, p->pos_dtype, p->pos_stride, t);
        const int64_t slot = rp_load_index(p->slots, p->slot_dtype, p->slot_stride, t);
        const int write_pool = pools && slot >= 0;
        if (write_pool)
            simd_copy_heads(dt, pool_dt, stream_pool, p, p->v, p->v_stride, p->v_pool, p->v_pool_stride, t,
                            slot, p->v_head_dim, v_inv_scale);
        if (write_pool && parts == RP_PARTS_SCATTER)
            simd_copy_heads(dt, pool_dt, stream_pool, p, p->k_rot, p->k_rot_stride, p->k_pool,
                            p->k_pool_stride, t, slot, p->head_dim, k_inv_scale);
        for (int64_t i0 = 0; parts != RP_PARTS_SCATTER && i0 < half; i0 += SIMD_CHUNK) {
            const int64_t n = half - i0 < SIMD_CHUNK ? half - i0 : SIMD_CHUNK, offset = i0 * elem;
            if (simd_sincos(p->inv_freq + i0, n, pos, cs, sn))
                simd_fix_slow_angles(p->inv_freq + i0, n, pos, cs, sn);
            for (int64_t h = 0; kv && h < p->num_kv_heads; h++)
                simd_rotate(dt, pool_dt, stream_rows, stream_pool,
                            simd_row(p->k, p->k_stride, t, h, elem) + offset,
                            simd_row(p->k_rot, p->k_rot_stride, t, h, elem) + offset,
                            write_pool ? simd_pool_row(p, p->k_pool, p->k_pool_stride, slot, h, pool_elem) +
                                             i0 * pool_elem
                                       : NULL,
                            half, n, cs, sn, k_inv_scale);
            for (int64_t h = 0; q && h < p->num_qo_heads; h++)
                simd_rotate(dt, dt, stream_rows, 0, simd_row(p->q, p->q_stride, t, h, elem) + offset,
                            simd_row(p->q_rot, p->q_rot_stride, t, h, elem) + offset, NULL, half, n,
                            cs, sn, 1.0f);
        }
    }
}

/* Tokens [t_begin, t_end) with the SIMD_STREAM_* bits in mode. A call large enough to stream its
 * rows goes through blocks of SIMD_STREAM_BLOCK tokens in two passes, k and v (five streams)
 * then q (two): DRAM serves fewer concurrent streams better (Zen 4, Llama-3-8B shapes: 1.25x at
 * 4096 and 16384 tokens). The second pass computes each token's cos/sin again, ~50 ns against
 * the ~2 us its q heads take to stream. Smaller calls, cache-resident, take one pass. */
static RP_ALWAYS_INLINE void simd_rope_pool_slice(const rp_problem *p, rp_parts parts, int64_t t_begin,
                                                  int64_t t_end, rp_dtype dt, rp_dtype pool_dt, int mode)
{
    if (!(mode & SIMD_STREAM_ROWS)) {
        simd_rope_pool_pass(p, parts, t_begin, t_end, dt, pool_dt, mode, SIMD_PASS_KV | SIMD_PASS_Q);
    } else {
        for (int64_t b = t_begin; b < t_end; b += SIMD_STREAM_BLOCK) {
            const int64_t e = t_end - b < SIMD_STREAM_BLOCK ? t_end : b + SIMD_STREAM_BLOCK;
            simd_rope_pool_pass(p, parts, b, e, dt, pool_dt, mode, SIMD_PASS_KV);
            simd_rope_pool_pass(p, parts, b, e, dt, pool_dt, mode, SIMD_PASS_Q);
        }
    }
    if (mode)
        simd_stream_fence();
}

/* The pool format as a constant: the inputs' dtype (every streaming mode), or fp8 (rows only). */
static RP_ALWAYS_INLINE void simd_rope_pool(const rp_problem *p, rp_parts parts, int64_t t_begin,
                                            int64_t t_end, rp_dtype dt)
{
    const int mode = simd_streaming(p);
    if (rp_pool_is_fp8(p)) {
        const int e5m2 = p->pool_dtype == RP_F8_E5M2;
        if (mode & SIMD_STREAM_ROWS)
            simd_rope_pool_slice(p, parts, t_begin, t_end, dt, e5m2 ? RP_F8_E5M2 : RP_F8_E4M3, SIMD_STREAM_ROWS);
        else if (e5m2)
            simd_rope_pool_slice(p, parts, t_begin, t_end, dt, RP_F8_E5M2, 0);
        else
            simd_rope_pool_slice(p, parts, t_begin, t_end, dt, RP_F8_E4M3, 0);
        return;
    }
    switch (mode) {
    case 0: simd_rope_pool_slice(p, parts, t_begin, t_end, dt, dt, 0); break;
    case SIMD_STREAM_POOL: simd_rope_pool_slice(p, parts, t_begin, t_end, dt, dt, SIMD_STREAM_POOL); break;
    case SIMD_STREAM_ROWS: simd_rope_pool_slice(p, parts, t_begin, t_end, dt, dt, SIMD_STREAM_ROWS); break;
    default: simd_rope_pool_slice(p, parts, t_begin, t_end, dt, dt, SIMD_STREAM_ROWS | SIMD_STREAM_POOL); break;
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
