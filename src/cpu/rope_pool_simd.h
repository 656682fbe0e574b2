/*
 * rope_pool_simd.h — the part of the AVX2, AVX-512 and NEON kernels that does not depend on the
 * ISA: the walk over tokens, frequency chunks and heads, the libm fallback for huge angles, the
 * RoPE variant (pair style, rotary_dim and its pass-through dims), the pool copies, and the choice
 * of streaming stores. An ISA file includes this header, defines the primitives declared below
 * (the only code that differs between ISAs; AVX2 and NEON share their 8-lane loops through
 * rope_pool_simd8.h), and fills its table with simd_fill_table(). An ISA
 * without streaming stores worth using defines SIMD_STREAMING_STORES to 0 first: every call then
 * takes one pass with ordinary stores.
 *
 * Numerics, per token: the angles pos * inv_freq[j] are reduced and evaluated in float64 exactly
 * as sincos.h does (same constants; the Horner steps are FMAs), scaled by the attention scaling s
 * in float64, rounded to float32 once into cs/sn (c, n), and reused by all Hq + Hk heads. Each
 * pair (x, y) = (x[a], x[b]) then rotates in float32:
 *     x' = fma(x, c, -(y * n)),   y' = fma(y, c, x * n).
 * NeoX pairs (j, j + R/2) take two vectors of x and y. GPT-J pairs (2j, 2j + 1) are neighbours in
 * one vector v: with the tables duplicated per pair, cd = [c0, c0, c1, c1, ...] and
 * sd = [-n0, n0, -n1, n1, ...], v' = fma(v, cd, swap_pairs(v) * sd) gives the same two roundings
 * per element: x' = fma(x, c, round(y * -n)) = fma(x, c, -round(y * n)) (rounding to nearest is
 * symmetric), y' = fma(y, c, round(x * n)). So the styles agree bit for bit on the same pair, every
 * ISA does the same operations in the same order, and the partition of tokens between threads
 * cannot change a result. Dims R..D-1 are copied. QK-norm heads are normalised as the rotation
 * loads them (16-bit inputs) or first into a float32 row (simd_norm_head).
 *
 * Pools: every row address comes from rp_pool_offset (flat, NHD, HND, any block size and
 * strides). fp8 pools (pool_dt an fp8 format) take fp8(x' * float32(1 / scale)) of the float32
 * rotated x', never of the rounded k_rot, and v's codes from v itself. Their rows stream too when
 * every vector store is an aligned piece of a line that the row's other stores complete (the
 * write-combining buffer then writes whole lines, with no read-for-ownership).
 */
#ifndef RP_CPU_ROPE_POOL_SIMD_H
#define RP_CPU_ROPE_POOL_SIMD_H

#include "kernels.h"
#include "sincos.h"

#include <stdint.h>
#include <string.h>

#define RP_ALWAYS_INLINE inline __attribute__((always_inline))

#ifndef SIMD_STREAMING_STORES
#  define SIMD_STREAMING_STORES 1
#endif

enum {
    SIMD_CHUNK = 256, /* frequencies per pass: bounds the cs/sn buffers for any head_dim */
    SIMD_PAD = 16,    /* room past a chunk in cs/sn: a vector step may write up to a whole vector */
    SIMD_STAGE_BYTES = 4096, /* a head row staged for streaming (see simd_streaming) */
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

/* scale * cos and scale * sin of pos * inv_freq[i] for i < n, formed in float64 and rounded to
 * float32 into cs[i] and sn[i]; entries up to SIMD_PAD past n may be written too. Returns nonzero
 * when some angle is NaN or >= 2^31 in magnitude: those entries are not valid and the caller
 * recomputes them with libm. */
static int simd_sincos(const double *inv_freq, int64_t n, double pos, double scale, float *cs, float *sn);

/* QK-norm's float32 path inside the rotation (simd_norm_head): every element x[i] of the head
 * row is loaded as (x[i] * rstd) * w[i], float32 products in that order, before it rotates: the
 * values rp_cpu_norm_row's float32 path would have stored (rstd = float32(rstd) 2^39, w = the
 * staged (w + offset) 2^-39, indexed by head dim). NULL for a call without QK-norm, a constant
 * there once inlined, so the plain rotation is compiled without it. */
typedef struct simd_gain {
    const float *w;
    float rstd;
} simd_gain;

/* NeoX: rotates the pairs (x[j], x[j + half]) for j < n of one head row x = src (dtype dt; half
 * = R/2, the driver offsets src to a chunk), writing dst (which may be src: every pair is read
 * before it is written) and, unless pool is NULL, the pool head row `pool` (at this chunk's pair
 * 0) in format pool_dt: dt, or an fp8 format, which stores fp8(x' * inv_scale) of the float32 x'
 * (one rounding to fp8 of that product). cs/sn hold n entries. stream_dst / stream_pool select
 * streaming stores for dst / pool; dt, pool_dt and both flags are constants once inlined. g: the
 * QK-norm gains (whole-head calls only: src at pair 0), or NULL. */
static RP_ALWAYS_INLINE void simd_rotate(rp_dtype dt, rp_dtype pool_dt, int stream_dst, int stream_pool,
                                         const char *src, char *dst, char *pool, int64_t half,
                                         int64_t n, const float *cs, const float *sn, float inv_scale,
                                         const simd_gain *g);

/* GPT-J: rotates the n elements (n even) of one head row x = src as neighbouring pairs,
 *     out[i] = fma(x[i], cd[i], round(x[i ^ 1] * sd[i])),
 * writing dst (which may be src) and, unless pool is NULL, pool (format pool_dt, as for
 * simd_rotate); cd/sd hold n entries (the duplicated tables of simd_interleave_table). Flags and
 * g as for simd_rotate. */
static RP_ALWAYS_INLINE void simd_rotate_interleaved(rp_dtype dt, rp_dtype pool_dt, int stream_dst,
                                                     int stream_pool, const char *src, char *dst, char *pool,
                                                     int64_t n, const float *cd, const float *sd,
                                                     float inv_scale, const simd_gain *g);

/* n float32 values at src to dtype dt at dst (round to nearest-even), with streaming stores if
 * `stream` (whole, aligned lines only: the caller checked): the QK-norm path's output rows. */
static RP_ALWAYS_INLINE void simd_narrow(rp_dtype dt, int stream, char *dst, const float *src, int64_t n);

/* Copies `bytes` bytes (a multiple of 2) from src to dst, with streaming stores if `stream`. */
static RP_ALWAYS_INLINE void simd_copy(int stream, char *dst, const char *src, int64_t bytes);

/* n elements of dtype dt at src to fp8 codes fp8(x * inv_scale) (pool_dt) at dst, with streaming
 * stores if `stream`: the fp8 pool copy of v, of k's pass-through dims, and of k_rot in the
 * unfused scatter. */
static RP_ALWAYS_INLINE void simd_to_fp8(rp_dtype dt, rp_dtype pool_dt, int stream, uint8_t *dst,
                                         const char *src, int64_t n, float inv_scale);

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
static void simd_fix_slow_angles(const double *inv_freq, int64_t n, double pos, double scale,
                                 float *cs, float *sn)
{
    for (int64_t i = 0; i < n; i++) {
        const double angle = pos * inv_freq[i];
        if (!(fabs(angle) < RP_SINCOS_FAST_LIMIT)) {
            double s, c;
            rp_sincos(angle, &s, &c);
            cs[i] = (float)(scale * c);
            sn[i] = (float)(scale * s);
        }
    }
}

/* GPT-J's per-pair tables: cd[2j] = cd[2j+1] = cs[j], sd[2j] = -sn[j], sd[2j+1] = sn[j]. Once per
 * token and chunk, shared by every head. */
static inline void simd_interleave_table(const float *cs, const float *sn, int64_t n, float *cd, float *sd)
{
    for (int64_t j = 0; j < n; j++) {
        cd[2 * j] = cd[2 * j + 1] = cs[j];
        sd[2 * j] = -sn[j];
        sd[2 * j + 1] = sn[j];
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

enum { SIMD_STREAM_ROWS = 1, SIMD_STREAM_POOL = 2, SIMD_STAGE = 4 };

/* Which outputs take streaming stores in this call (SIMD_STREAM_* bits). Pool rows always do:
 * they are scattered over a pool far larger than the cache and rarely in it, so a store that
 * skips their read-for-ownership saves the read and its latency at every size (on Zen 4, up to
 * 2x on calls of 1 to 256 tokens with fresh slots, and no loss when the rows happen to be cached).
 * q_rot and k_rot stream only in calls beyond RP_STREAM_MIN_BYTES. Either needs every vector
 * store of its rows to cover whole, aligned cache lines, so the stream path never stores part.
 * The rotation's vectors do when each rotated segment (NeoX: R/2 elements, twice; GPT-J: R) is
 * whole lines. When only the row is, in a partial-rotary call (GPT-NeoX's 24 of 96), SIMD_STAGE
 * rotates the lines of each head row that hold rotated dims into an L1 scratch row first and
 * streams them from there, and the pass-through lines straight from the input: a few cached
 * stores and loads instead of giving up streaming: on this VM, interleaved in one process, 0.64x
 * the time of not streaming in calls large enough to stream their rows (GPT-NeoX shapes, T = 256
 * and 4096), but 1.16x at T = 1, so small calls do not stage. Staging the whole row instead of
 * its rotated lines cost 1.13-1.21x the seed call's time at GPT-NeoX-20B's f32 T = 4096 (one
 * thread 1.39-1.53x); these lines alone, 0.96-1.05x (1.02-1.10x). Full-rotary calls keep the
 * seed's rule (no streaming, as for D = 96 in 16-bit types). Rows off the cache lines (NumPy's
 * large arrays and malloc's blocks start 16 bytes past one) are staged the same way, whole, and
 * streamed from the scratch row but for their partial first and last lines (simd_copy_lines).
 * Stored directly, every vector of such a row straddles two lines, each read for ownership: on the
 * AVX-512 VM (Llama-3-8B f32, T = 1024, outputs 16 bytes past a line against on one, interleaved)
 * 1.28-1.53x the time on lines at level avx512 (with QK-norm 1.47x) and 1.24-1.30x at avx2;
 * staged, 1.05-1.15x (1.05x) and 1.07-1.10x (bench/results/cpu-llama3-8b.md, stop 43). Not for
 * rows under 8 lines (bf16 heads of 128: the two partial lines are a third of the row; staged, no
 * faster) nor for 16-bit QK-norm calls, whose staged rows lose the normalisation inside the
 * rotation (simd_norm_head; Qwen3-8B shapes in bf16, T = 1024: 1.32-1.38x the time on lines
 * staged, 0.99-1.17x not). */
static int simd_streaming(const rp_problem *p)
{
    const int64_t elem = (int64_t)rp_dtype_size(p->dtype), R = p->rotary_dim;
    const int64_t segment = (p->style == RP_ROPE_GPTJ ? R : R / 2) * elem;
    if (!SIMD_STREAMING_STORES || (p->head_dim * elem) % SIMD_LINE != 0)
        return 0;
    const int large = rp_cpu_bytes_moved(p) >= RP_STREAM_MIN_BYTES;
    const int rows_on_lines = simd_rows_on_lines(p->q_rot, p->q_rot_stride, elem) &&
                              simd_rows_on_lines(p->k_rot, p->k_rot_stride, elem);
    const int can_stage = R / 2 <= SIMD_CHUNK && p->head_dim * elem <= SIMD_STAGE_BYTES;
    /* rows off the lines stream, staged, where that was measured to pay (see above) */
    const int off_lines_stream = can_stage && p->head_dim * elem >= 8 * SIMD_LINE && !(rp_has_qk_norm(p) && elem == 2);
    int mode = 0;
    if (segment % SIMD_LINE != 0) {
        if (R == p->head_dim || !can_stage)
            return 0;
        mode = SIMD_STAGE;
    } else if (large && !rows_on_lines && off_lines_stream) {
        mode = SIMD_STAGE;
    }
    /* fp8 rows take 8 to 32 bytes a vector step: whole lines only when every rotated segment and
     * the pass-through part start on a line (R a multiple of 64 codes), and are not staged. */
    const int fp8 = rp_pool_is_fp8(p), pool_elem = fp8 ? 1 : (int)elem;
    const int fp8_lines = !fp8 || (R % SIMD_LINE == 0 && p->head_dim % SIMD_LINE == 0 && !(mode & SIMD_STAGE));
    if (fp8_lines && (p->v_head_dim * pool_elem) % SIMD_LINE == 0 &&
        simd_pool_rows_on_lines(p->k_pool, p->k_pool_stride, pool_elem) &&
        simd_pool_rows_on_lines(p->v_pool, p->v_pool_stride, pool_elem))
        mode |= SIMD_STREAM_POOL;
    if (large && (rows_on_lines || ((mode & SIMD_STAGE) && off_lines_stream)))
        mode |= SIMD_STREAM_ROWS;
    if ((mode & SIMD_STAGE) && !(mode & SIMD_STREAM_ROWS))
        return 0; /* staging for the pool rows alone does not pay (T = 1: 1.16x the time) */
    return mode;
}

static inline char *simd_pool_row(const rp_problem *p, void *pool, const int64_t stride[4], int64_t slot,
                                   int64_t head, int64_t pool_elem)
{
    return (char *)pool + rp_pool_offset(p, stride, slot, head) * pool_elem;
}

/* `bytes` bytes from src to dst; with `stream`, dst's whole cache lines take streaming stores and
 * its partial first and last lines (a row off the lines, or its neighbour's) memcpy's ordinary
 * ones: AVX-512's masked byte stores there made the staged call slower than not staging at all
 * (4.2-5.2 ms against 2.8-3.3 at T = 1024 above). */
static RP_ALWAYS_INLINE void simd_copy_lines(int stream, char *dst, const char *src, int64_t bytes)
{
    int64_t head = stream ? (int64_t)(-(uintptr_t)dst % SIMD_LINE) : 0;
    head = head < bytes ? head : bytes;
    const int64_t body = (bytes - head) / SIMD_LINE * SIMD_LINE;
    memcpy(dst, src, (size_t)head);
    simd_copy(stream, dst + head, src + head, body);
    memcpy(dst + head + body, src + head + body, (size_t)(bytes - head - body));
}

/* n float32 values narrowed to dt at dst, streamed as simd_copy_lines streams (through an L1 row
 * when dst is off the lines; n * elem <= SIMD_STAGE_BYTES then: a staged call's row). */
static RP_ALWAYS_INLINE void simd_narrow_lines(rp_dtype dt, int stream, char *dst, const float *src, int64_t n)
{
    if (!stream || (uintptr_t)dst % SIMD_LINE == 0) {
        simd_narrow(dt, stream, dst, src, n);
        return;
    }
    char row[SIMD_STAGE_BYTES] __attribute__((aligned(64)));
    simd_narrow(dt, 0, row, src, n);
    simd_copy_lines(stream, dst, row, n * (dt == RP_F32 ? 4 : 2));
}

/* n elements of dtype dt from src to a pool row of format pool_dt: a copy, or fp8 codes. */
static RP_ALWAYS_INLINE void simd_to_pool(rp_dtype dt, rp_dtype pool_dt, int stream, char *pool,
                                          const char *src, int64_t n, float inv_scale)
{
    const int64_t elem = dt == RP_F32 ? 4 : 2;
    if (pool_dt == dt)
        simd_copy(stream, pool, src, n * elem);
    else
        simd_to_fp8(dt, pool_dt, stream, (uint8_t *)pool, src, n, inv_scale);
}

/* Writes the Hk head rows (n elements each) of token t in src to pool row `slot`: one span when
 * both hold their heads back to back, else head by head. */
static RP_ALWAYS_INLINE void simd_copy_heads(rp_dtype dt, rp_dtype pool_dt, int stream, const rp_problem *p,
                                             const void *src, const int64_t src_stride[3], void *pool,
                                             const int64_t pool_stride[4], int64_t t, int64_t slot,
                                             int64_t n, float inv_scale)
{
    const int64_t elem = dt == RP_F32 ? 4 : 2, pool_elem = pool_dt == dt ? elem : 1;
    const int spans = src_stride[1] == n && pool_stride[2] == n;
    const int64_t heads = spans ? 1 : p->num_kv_heads, count = spans ? n * p->num_kv_heads : n;
    for (int64_t h = 0; h < heads; h++)
        simd_to_pool(dt, pool_dt, stream, simd_pool_row(p, pool, pool_stride, slot, h, pool_elem),
                     simd_row(src, src_stride, t, h, elem), count, inv_scale);
}

/* Touches token t's pool rows (their first and last line in each pool) ahead of the stores. The
 * rows sit on random pages of a pool far larger than the TLB covers; starting the address
 * translations early, and all at once, keeps the page walks off the store path (on Zen 4 with
 * fresh slots: 1.25x at 1 token, 1.4x to 1.5x at 16 to 256 tokens). A pass touches tokens in
 * batches of SIMD_TOUCH_AHEAD, one batch ahead: a touch waits for its page walk before it retires,
 * and with one token ahead each token of a small row (MLA at TP 8: 6.5 KB) waited for one walk;
 * a batch's walks overlap (perf: 24% of the slice's samples sat at the touch, then none; one
 * thread, paired rounds: 0.83x the time at TP 8 T = 16384, 0.93x at 128 heads, Llama-3-8B 1.00x;
 * bench/results/cpu-mla.md). */
enum { SIMD_TOUCH_AHEAD = 8 };

static inline void simd_touch_pool_rows(const rp_problem *p, int64_t t, int64_t pool_elem)
{
    const int64_t slot = rp_load_slot(p, t);
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

/* Pairs [i0, i0 + n) of one head row, in the call's style; tc/ts are cs/sn (NeoX) or the
 * duplicated tables (GPT-J); g: QK-norm's gains (i0 = 0), or NULL. */
static RP_ALWAYS_INLINE void simd_rotate_pairs(const rp_problem *p, rp_dtype dt, rp_dtype pool_dt,
                                               int stream_dst, int stream_pool, const char *src, char *dst,
                                               char *pool, int64_t i0, int64_t n, const float *tc,
                                               const float *ts, float inv_scale, const simd_gain *g)
{
    const int64_t elem = dt == RP_F32 ? 4 : 2, pool_elem = pool_dt == dt ? elem : 1;
    if (p->style == RP_ROPE_GPTJ) {
        simd_rotate_interleaved(dt, pool_dt, stream_dst, stream_pool, src + 2 * i0 * elem, dst + 2 * i0 * elem,
                                pool ? pool + 2 * i0 * pool_elem : NULL, 2 * n, tc, ts, inv_scale, g);
    } else {
        simd_rotate(dt, pool_dt, stream_dst, stream_pool, src + i0 * elem, dst + i0 * elem,
                    pool ? pool + i0 * pool_elem : NULL, p->rotary_dim / 2, n, tc, ts, inv_scale, g);
    }
}

/* A QK-norm head's v = sum / D + eps (rp_cpu_norm_v) and rstd = 1 / sqrt(v). */
typedef struct simd_head_norm {
    double v, rstd;
} simd_head_norm;

/* The norms of heads [h, h + SIMD_NORM_AHEAD) of token t (fewer at the end: `count` heads in all)
 * of the rows at base, formed before any of them rotates. A head's sum of squares, square root
 * and division are a chain of ~100 cycles on Zen 4, which its rotation waited for, head after
 * head (perf: the division's result the slice's hottest wait); formed ahead, the chains of a
 * group overlap one another and the rotations that follow (Qwen3-8B bf16, AVX2, one thread,
 * T = 16: 53 -> 49 us). */
enum { SIMD_NORM_AHEAD = 8 };

static __attribute__((noinline)) void simd_norm_ahead(const rp_problem *p, rp_dtype dt, const void *base,
                                                      const int64_t stride[3], const rp_cpu_norm *norm, int64_t t,
                                                      int64_t h, int64_t count, simd_head_norm *norms)
{
    const int64_t elem = dt == RP_F32 ? 4 : 2;
    float y[RP_CPU_NORM_MAX_DIM] __attribute__((aligned(64)));
    for (int64_t i = 0; i < SIMD_NORM_AHEAD && h + i < count; i++) {
        norms[i].v = rp_cpu_norm_v(p, norm, dt, simd_row(base, stride, t, h + i, elem), y);
        norms[i].rstd = 1.0 / sqrt(norms[i].v);
    }
}

/* n float32 values at src to a pool row of format pool_dt: rounded to dt, or fp8(x * inv_scale). */
static RP_ALWAYS_INLINE void simd_narrow_to_pool(rp_dtype dt, rp_dtype pool_dt, int stream, char *pool,
                                                 const float *src, int64_t n, float inv_scale)
{
    if (pool_dt == dt)
        simd_narrow(dt, stream, pool, src, n);
    else
        simd_to_fp8(RP_F32, pool_dt, stream, (uint8_t *)pool, (const char *)src, n, inv_scale);
}

/* QK-norm (norm: the weight's factors, kernels.h; hn: this head's, simd_norm_ahead) on a head row,
 * one chunk by rp_cpu_norm_fits:
 *  - the float32 path (16-bit inputs, rp_cpu_norm_float32), unless the call stages its streamed
 *    rows (SIMD_STAGE, partial rotary: those stores are not whole lines here): the rotation
 *    normalises each vector as it loads it (simd_gain) and stores dst and the pool as without the
 *    norm; the pass-through dims are normalised from a widened copy and narrowed. One pass over
 *    the row instead of four (normalise, rotate, narrow twice).
 *  - else the row is widened into y and normalised there (rp_cpu_norm_apply), rotated in float32
 *    into a second row (the pass-through dims keep y), and that row is narrowed to dst and the
 *    pool (fp8: fp8(x' * inv_scale) of the float32 x', as without the norm).
 * Either reads its row before it writes (in place: dst = src). A q head has no pool row (NULL):
 * pool_dt and the pool's streaming bit then go unused. */
static RP_ALWAYS_INLINE void simd_norm_head(const rp_problem *p, rp_dtype dt, rp_dtype pool_dt, int mode,
                                            const char *src, char *dst, char *pool, const rp_cpu_norm *norm,
                                            simd_head_norm hn, int64_t n, const float *tc, const float *ts,
                                            float inv_scale)
{
    const int stream_dst = mode & SIMD_STREAM_ROWS, stream_pool = mode & SIMD_STREAM_POOL;
    const int64_t R = p->rotary_dim, D = p->head_dim, elem = dt == RP_F32 ? 4 : 2;
    const int64_t pool_elem = pool_dt == dt ? elem : 1;
    float y[RP_CPU_NORM_MAX_DIM] __attribute__((aligned(64)));
    float out[RP_CPU_NORM_MAX_DIM] __attribute__((aligned(64)));
    if (dt != RP_F32 && !(mode & SIMD_STAGE) && rp_cpu_norm_float32(norm, hn.v)) {
        const simd_gain g = {norm->staged, rp_cpu_norm_scaled_rstd(hn.rstd)};
        if (R < D) /* widened before the rotation may overwrite src */
            rp_cpu_widen_row(dt, src + R * elem, D - R, y + R);
        simd_rotate_pairs(p, dt, pool_dt, stream_dst, stream_pool, src, dst, pool, 0, n, tc, ts, inv_scale, &g);
        if (R == D)
            return;
        for (int64_t i = R; i < D; i++)
            out[i] = (y[i] * g.rstd) * norm->staged[i];
        simd_narrow(dt, stream_dst, dst + R * elem, out + R, D - R);
        if (pool)
            simd_narrow_to_pool(dt, pool_dt, stream_pool, pool + R * pool_elem, out + R, D - R, inv_scale);
        return;
    }
    rp_cpu_widen_row(dt, src, D, y);
    rp_cpu_norm_apply(p, norm, hn.v, hn.rstd, y);
    simd_rotate_pairs(p, RP_F32, RP_F32, 0, 0, (const char *)y, (char *)out, NULL, 0, n, tc, ts, 1.0f, NULL);
    memcpy(out + R, y + R, (size_t)(D - R) * sizeof(float));
    simd_narrow_lines(dt, stream_dst, dst, out, D);
    if (pool)
        simd_narrow_to_pool(dt, pool_dt, stream_pool, pool, out, D, inv_scale);
}

/* simd_norm_head compiled out of line, once per slice (SIMD_SLICE): inlined into the slice beside
 * the plain heads' code, it made the plain call 2-6% slower (AVX2, Qwen3-8B and Llama-3-8B bf16
 * shapes, one thread, T = 1 to 4096, paired rounds). A QK-norm head costs one call more. */
typedef void (*simd_norm_fn)(const rp_problem *p, const char *src, char *dst, char *pool, const rp_cpu_norm *norm,
                             simd_head_norm hn, int64_t n, const float *tc, const float *ts, float inv_scale);

/* One head row src -> dst (and pool unless NULL): pairs [i0, i0 + n) and, with the last chunk,
 * the pass-through dims R..D-1 (not copied onto themselves in place). With SIMD_STAGE and a
 * streaming output, the row (one chunk, by simd_streaming) goes through an L1 scratch row. */
static RP_ALWAYS_INLINE void simd_head(const rp_problem *p, rp_dtype dt, rp_dtype pool_dt, int mode,
                                       int stream_dst, int stream_pool, const char *src, char *dst, char *pool,
                                       int64_t i0, int64_t n, const float *tc, const float *ts, float inv_scale)
{
    const int64_t elem = dt == RP_F32 ? 4 : 2, pool_elem = pool_dt == dt ? elem : 1;
    const int64_t R = p->rotary_dim, D = p->head_dim;
    if ((mode & SIMD_STAGE) && (stream_dst || (pool && stream_pool))) {
        /* Only the lines holding rotated dims go through the scratch row; the pass-through lines
         * after them stream straight from src. An fp8 pool row (never streamed) takes its codes
         * from the float32 rotation itself. */
        char row[SIMD_STAGE_BYTES] __attribute__((aligned(64)));
        char *fp8_pool = pool_dt != dt ? pool : NULL;
        const int64_t staged = (R * elem + SIMD_LINE - 1) / SIMD_LINE * SIMD_LINE, rest = D * elem - staged;
        simd_rotate_pairs(p, dt, pool_dt, 0, 0, src, row, fp8_pool, 0, n, tc, ts, inv_scale, NULL);
        simd_copy(0, row + R * elem, src + R * elem, staged - R * elem);
        simd_copy_lines(stream_dst, dst, row, staged);
        if (fp8_pool) {
            simd_to_fp8(dt, pool_dt, 0, (uint8_t *)pool + R, src + R * elem, D - R, inv_scale);
        } else if (pool) {
            simd_copy(stream_pool, pool, row, staged);
            simd_copy(stream_pool, pool + staged, src + staged, rest);
        }
        if (dst != src)
            simd_copy_lines(stream_dst, dst + staged, src + staged, rest);
        return;
    }
    simd_rotate_pairs(p, dt, pool_dt, stream_dst, stream_pool, src, dst, pool, i0, n, tc, ts, inv_scale, NULL);
    if (R < D && i0 + n == R / 2) {
        /* The pool first: dst may be src (in place). */
        if (pool)
            simd_to_pool(dt, pool_dt, stream_pool, pool + R * pool_elem, src + R * elem, D - R, inv_scale);
        if (dst != src)
            simd_copy(stream_dst, dst + R * elem, src + R * elem, (D - R) * elem);
    }
}

enum { SIMD_PASS_KV = 1, SIMD_PASS_Q = 2 }; /* which heads a pass over tokens handles */

/* q head rows that are not back to back (MLA's q_pe, the last 64 of each 192-wide head) defeat
 * the hardware prefetchers: each row is a few lines every few hundred bytes, and every one was a
 * miss (bf16 DeepSeek-V3 shapes, T = 4096: 8x the time of the same call on a contiguous q). The
 * rows SIMD_Q_AHEAD heads ahead (into the next token's at the end of a token) are requested while
 * this one rotates. */
enum { SIMD_Q_AHEAD = 16 };

static inline void simd_prefetch_q_row(const rp_problem *p, int64_t t, int64_t h, int64_t t_end, int64_t elem)
{
    if (h >= p->num_qo_heads) {
        h -= p->num_qo_heads;
        if (++t >= t_end || h >= p->num_qo_heads)
            return;
    }
    const char *row = simd_row(p->q, p->q_stride, t, h, elem);
    __builtin_prefetch(row, 0, 3);
    __builtin_prefetch(row + p->head_dim * elem - 1, 0, 3);
}

/* The two passes of a streaming block (simd_rope_pool_slice) share its tokens' cos/sin: the k
 * pass keeps them, the q pass reads them instead of computing them again. MLA at TP 8 (one k
 * head a token, bf16, T = 16384, one thread) spent a quarter of the kernel's time in simd_sincos,
 * half of it the q pass's second computation. Up to SIMD_SHARED_PAIRS frequencies a token (D up
 * to 128 at full rotary): 32 KB on the stack. */
enum { SIMD_SHARED_PAIRS = 64 };

/* One pass over tokens [t_begin, t_end). Per token: v to its pool row, then the frequencies'
 * cos/sin, then (SIMD_PASS_KV) the k heads, to k_rot and the pool row, and (SIMD_PASS_Q) the q
 * heads. mode holds SIMD_STREAM_* bits; dt, mode and pass are constants once inlined. shared
 * (NULL, or 2 * rotary_dim / 2 floats a token of the pass, cos then sin): the k pass writes
 * each token's tables there, the q pass reads them. norm_head: the slice's simd_norm_head. */
static RP_ALWAYS_INLINE void simd_rope_pool_pass(const rp_problem *p, rp_parts parts, int64_t t_begin,
                                                 int64_t t_end, rp_dtype dt, rp_dtype pool_dt, int mode,
                                                 int pass, float *shared, simd_norm_fn norm_head)
{
    const int stream_rows = mode & SIMD_STREAM_ROWS, stream_pool = mode & SIMD_STREAM_POOL;
    const int kv = pass & SIMD_PASS_KV, q = pass & SIMD_PASS_Q, pools = kv && parts != RP_PARTS_ROTATE;
    const int gptj = p->style == RP_ROPE_GPTJ;
    const int64_t elem = dt == RP_F32 ? 4 : 2, half = p->rotary_dim / 2, pool_elem = pool_dt == dt ? elem : 1;
    const float k_inv_scale = (float)(1.0 / p->k_scale), v_inv_scale = (float)(1.0 / p->v_scale);
    float cs[SIMD_CHUNK + SIMD_PAD] __attribute__((aligned(64)));
    float sn[SIMD_CHUNK + SIMD_PAD] __attribute__((aligned(64)));
    float cd[2 * SIMD_CHUNK] __attribute__((aligned(64)));
    float sd[2 * SIMD_CHUNK] __attribute__((aligned(64)));
    double angles[SIMD_CHUNK]; /* mRoPE */
    const int q_gaps = q && p->q_stride[1] != p->head_dim; /* see simd_prefetch_q_row */
    rp_cpu_norm q_factors, k_factors;
    const rp_cpu_norm *qg = q ? rp_cpu_norm_prepare(p, &p->q_norm, &q_factors) : NULL;
    const rp_cpu_norm *kg = kv ? rp_cpu_norm_prepare(p, &p->k_norm, &k_factors) : NULL;
    simd_head_norm norms[SIMD_NORM_AHEAD] = {{0.0, 0.0}}; /* of the heads at hand (simd_norm_ahead) */
    for (int64_t t = t_begin; pools && t < t_end && t < t_begin + SIMD_TOUCH_AHEAD; t++)
        simd_touch_pool_rows(p, t, pool_elem);
    for (int64_t t = t_begin; t < t_end; t++) {
        if (pools && (t - t_begin) % SIMD_TOUCH_AHEAD == 0)
            for (int64_t u = t + SIMD_TOUCH_AHEAD; u < t_end && u < t + 2 * SIMD_TOUCH_AHEAD; u++)
                simd_touch_pool_rows(p, u, pool_elem);
        const double pos = (double)rp_load_index(p->positions, p->pos_dtype, p->pos_stride, t);
        const int64_t slot = rp_load_slot(p, t);
        const int write_pool = pools && slot >= 0;
        if (write_pool)
            simd_copy_heads(dt, pool_dt, stream_pool, p, p->v, p->v_stride, p->v_pool, p->v_pool_stride, t,
                            slot, p->v_head_dim, v_inv_scale);
        if (write_pool && parts == RP_PARTS_SCATTER)
            simd_copy_heads(dt, pool_dt, stream_pool, p, p->k_rot, p->k_rot_stride, p->k_pool,
                            p->k_pool_stride, t, slot, p->head_dim, k_inv_scale);
        for (int64_t i0 = 0; parts != RP_PARTS_SCATTER && i0 < half; i0 += SIMD_CHUNK) {
            const int64_t n = half - i0 < SIMD_CHUNK ? half - i0 : SIMD_CHUNK;
            /* mRoPE: each frequency has its own position; its angles (the same float64 products)
             * go through simd_sincos as a table at position 1.0, which multiplies exactly. */
            const double *freq = p->inv_freq + i0, at = p->mrope ? 1.0 : pos;
            float *token_table = shared ? shared + (t - t_begin) * 2 * half : NULL; /* one chunk: i0 = 0 */
            const float *c = cs, *s = sn;
            if (token_table && !kv) {
                c = token_table;
                s = token_table + half;
            } else {
                if (p->mrope) {
                    rp_mrope_angles(p, t, i0, n, angles);
                    freq = angles;
                }
                if (simd_sincos(freq, n, at, p->attention_scaling, cs, sn))
                    simd_fix_slow_angles(freq, n, at, p->attention_scaling, cs, sn);
                if (token_table) {
                    memcpy(token_table, cs, (size_t)n * sizeof(float));
                    memcpy(token_table + half, sn, (size_t)n * sizeof(float));
                }
            }
            if (gptj)
                simd_interleave_table(c, s, n, cd, sd);
            const float *tc = gptj ? cd : c, *ts = gptj ? sd : s;
            for (int64_t h = 0; kv && h < p->num_kv_heads; h++) {
                const char *src = simd_row(p->k, p->k_stride, t, h, elem);
                char *dst = simd_row(p->k_rot, p->k_rot_stride, t, h, elem);
                char *pool = write_pool ? simd_pool_row(p, p->k_pool, p->k_pool_stride, slot, h, pool_elem) : NULL;
                if (kg && h % SIMD_NORM_AHEAD == 0)
                    simd_norm_ahead(p, dt, p->k, p->k_stride, kg, t, h, p->num_kv_heads, norms);
                if (kg)
                    norm_head(p, src, dst, pool, kg, norms[h % SIMD_NORM_AHEAD], n, tc, ts, k_inv_scale);
                else
                    simd_head(p, dt, pool_dt, mode, stream_rows, stream_pool, src, dst, pool, i0, n, tc, ts,
                              k_inv_scale);
            }
            for (int64_t h = 0; q && h < p->num_qo_heads; h++) {
                const char *src = simd_row(p->q, p->q_stride, t, h, elem);
                char *dst = simd_row(p->q_rot, p->q_rot_stride, t, h, elem);
                if (q_gaps)
                    simd_prefetch_q_row(p, t, h + SIMD_Q_AHEAD, t_end, elem);
                if (qg && h % SIMD_NORM_AHEAD == 0)
                    simd_norm_ahead(p, dt, p->q, p->q_stride, qg, t, h, p->num_qo_heads, norms);
                if (qg)
                    norm_head(p, src, dst, NULL, qg, norms[h % SIMD_NORM_AHEAD], n, tc, ts, 1.0f);
                else
                    simd_head(p, dt, dt, mode, stream_rows, 0, src, dst, NULL, i0, n, tc, ts, 1.0f);
            }
        }
    }
}

/* Tokens [t_begin, t_end) with the SIMD_STREAM_* bits in mode. A call large enough to stream its
 * rows goes through blocks of SIMD_STREAM_BLOCK tokens in two passes, k and v (five streams)
 * then q (two): DRAM serves fewer concurrent streams better (Zen 4, Llama-3-8B shapes: 1.25x at
 * 4096 and 16384 tokens). The second pass reads each token's cos/sin from the first (beyond
 * SIMD_SHARED_PAIRS it computes them again, ~50 ns against the ~2 us its q heads take to
 * stream). Smaller calls, cache-resident, take one pass. */
static RP_ALWAYS_INLINE void simd_rope_pool_slice(const rp_problem *p, rp_parts parts, int64_t t_begin,
                                                  int64_t t_end, rp_dtype dt, rp_dtype pool_dt, int mode,
                                                  simd_norm_fn norm_head)
{
    if (!(mode & SIMD_STREAM_ROWS)) {
        simd_rope_pool_pass(p, parts, t_begin, t_end, dt, pool_dt, mode, SIMD_PASS_KV | SIMD_PASS_Q, NULL,
                            norm_head);
    } else {
        /* + SIMD_PAD: a vector step of the last token's sin may read past its n entries */
        float shared[SIMD_STREAM_BLOCK * 2 * SIMD_SHARED_PAIRS + SIMD_PAD] __attribute__((aligned(64)));
        const int share = parts != RP_PARTS_SCATTER && p->rotary_dim / 2 <= SIMD_SHARED_PAIRS;
        for (int64_t b = t_begin; b < t_end; b += SIMD_STREAM_BLOCK) {
            const int64_t e = t_end - b < SIMD_STREAM_BLOCK ? t_end : b + SIMD_STREAM_BLOCK;
            simd_rope_pool_pass(p, parts, b, e, dt, pool_dt, mode, SIMD_PASS_KV, share ? shared : NULL, norm_head);
            simd_rope_pool_pass(p, parts, b, e, dt, pool_dt, mode, SIMD_PASS_Q, share ? shared : NULL, norm_head);
        }
    }
    if (mode)
        simd_stream_fence();
}

/* One function per (dtype, pool format, streaming mode): the same specialisations as a switch
 * inlined into one function per dtype, but compiled as 54 functions instead of 3 holding 18
 * each. gcc 12 -O3 on the AVX-512 file: 114 s and 0.88 GB before, 45 s and 0.43 GB after, text
 * 1.28 MB -> 1.10 MB; the calls cost one indirect call per slice. Each has its QK-norm heads'
 * function beside it (simd_norm_fn). */
typedef void (*simd_slice_fn)(const rp_problem *p, rp_parts parts, int64_t t_begin, int64_t t_end);

#define SIMD_SLICE(DT, PDT, MODE)                                                                     \
    static __attribute__((noinline)) void simd_norm_##DT##_##PDT##_##MODE(                             \
        const rp_problem *p, const char *src, char *dst, char *pool, const rp_cpu_norm *norm,          \
        simd_head_norm hn, int64_t n, const float *tc, const float *ts, float inv_scale)               \
    {                                                                                                  \
        simd_norm_head(p, RP_##DT, RP_##PDT, MODE, src, dst, pool, norm, hn, n, tc, ts, inv_scale);    \
    }                                                                                                  \
    static __attribute__((noinline)) void simd_slice_##DT##_##PDT##_##MODE(                            \
        const rp_problem *p, rp_parts parts, int64_t t_begin, int64_t t_end)                           \
    {                                                                                                  \
        simd_rope_pool_slice(p, parts, t_begin, t_end, RP_##DT, RP_##PDT, MODE,                        \
                             simd_norm_##DT##_##PDT##_##MODE);                                         \
    }
/* The modes simd_streaming returns: 0, POOL (2), ROWS (1), ROWS | POOL (3), STAGE | ROWS (5),
 * STAGE | ROWS | POOL (7); it never returns STAGE without ROWS (4, 6), which take mode 0. */
#define SIMD_SLICES(DT, PDT)                                                                          \
    SIMD_SLICE(DT, PDT, 0) SIMD_SLICE(DT, PDT, 1) SIMD_SLICE(DT, PDT, 2) SIMD_SLICE(DT, PDT, 3)       \
    SIMD_SLICE(DT, PDT, 5) SIMD_SLICE(DT, PDT, 7)
#define SIMD_SLICE_ROW(DT, PDT)                                                                       \
    {simd_slice_##DT##_##PDT##_0, simd_slice_##DT##_##PDT##_1, simd_slice_##DT##_##PDT##_2,           \
     simd_slice_##DT##_##PDT##_3, simd_slice_##DT##_##PDT##_0, simd_slice_##DT##_##PDT##_5,           \
     simd_slice_##DT##_##PDT##_0, simd_slice_##DT##_##PDT##_7}

/* The dtype's kernel: its pool format (the dtype's own, e4m3 or e5m2) and streaming mode pick
 * one of its specialisations. */
#define SIMD_DTYPE_KERNEL(DT, name)                                                                   \
    SIMD_SLICES(DT, DT)                                                                               \
    SIMD_SLICES(DT, F8_E4M3)                                                                          \
    SIMD_SLICES(DT, F8_E5M2)                                                                          \
    static void simd_rope_pool_##name(const rp_problem *p, rp_parts parts, int64_t t_begin, int64_t t_end) \
    {                                                                                                 \
        static const simd_slice_fn slices[3][8] = {SIMD_SLICE_ROW(DT, DT), SIMD_SLICE_ROW(DT, F8_E4M3), \
                                                   SIMD_SLICE_ROW(DT, F8_E5M2)};                      \
        const int format = p->pool_dtype == RP_F8_E4M3 ? 1 : p->pool_dtype == RP_F8_E5M2 ? 2 : 0;    \
        slices[format][simd_streaming(p) & 7](p, parts, t_begin, t_end);                              \
    }

#if defined(__OPTIMIZE__)
SIMD_DTYPE_KERNEL(F32, f32)
SIMD_DTYPE_KERNEL(F16, f16)
SIMD_DTYPE_KERNEL(BF16, bf16)
#else
/* Unoptimised builds (Debug, the sanitizer builds): gcc folds no constant at -O0, so every
 * specialisation would be a whole copy of every path (54 of them took over 15 minutes and 13 GB
 * to compile with ASan + UBSan). One function per dtype, with the pool format and the streaming
 * mode as values, runs the same code. */
static inline rp_dtype simd_pool_format(const rp_problem *p)
{
    return rp_pool_is_fp8(p) ? (rp_dtype)p->pool_dtype : (rp_dtype)p->dtype;
}
static inline int simd_slice_mode(const rp_problem *p)
{
    const int mode = simd_streaming(p);
    return mode == 4 || mode == 6 ? 0 : mode;
}
static void simd_norm_o0(const rp_problem *p, const char *src, char *dst, char *pool, const rp_cpu_norm *norm,
                         simd_head_norm hn, int64_t n, const float *tc, const float *ts, float inv_scale)
{
    simd_norm_head(p, (rp_dtype)p->dtype, simd_pool_format(p), simd_slice_mode(p), src, dst, pool, norm, hn, n,
                   tc, ts, inv_scale);
}
#define SIMD_DTYPE_KERNEL_O0(DT, name)                                                                \
    static void simd_rope_pool_##name(const rp_problem *p, rp_parts parts, int64_t t_begin, int64_t t_end) \
    {                                                                                                 \
        simd_rope_pool_slice(p, parts, t_begin, t_end, RP_##DT, simd_pool_format(p), simd_slice_mode(p), \
                             simd_norm_o0);                                                           \
    }
SIMD_DTYPE_KERNEL_O0(F32, f32)
SIMD_DTYPE_KERNEL_O0(F16, f16)
SIMD_DTYPE_KERNEL_O0(BF16, bf16)
#endif

static void simd_fill_table(rp_cpu_kernels *table, const char *name)
{
    table->name = name;
    table->rope_pool[RP_F32] = simd_rope_pool_f32;
    table->rope_pool[RP_F16] = simd_rope_pool_f16;
    table->rope_pool[RP_BF16] = simd_rope_pool_bf16;
}

#endif /* RP_CPU_ROPE_POOL_SIMD_H */
