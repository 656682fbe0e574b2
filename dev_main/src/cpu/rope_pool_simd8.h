/*
 * rope_pool_simd8.h — the rotation, narrowing and fp8 loops of the two kernels that work on 8
 * float32 values per step (AVX2: one __m256; NEON: two float32x4_t), with their one shared way
 * of finishing a row: a last step of fewer than 8 values runs on zero-padded copies. The AVX-512
 * kernel masks its tails instead and has its own loops.
 *
 * The ISA file includes rope_pool_simd.h, defines these, then includes this header:
 *   simd8                   8 float32 values
 *   simd8_scale             the fp8 pools' 1 / scale, broadcast; SIMD8_SCALE(float) makes one
 *   load8(dt, p)            8 elements of dtype dt at p, widened to float32
 *   store8(dt, stream, p, v)           v rounded to dtype dt at p (streaming if asked)
 *   store8_fp8(fmt, stream, p, v, s)   fp8(v * s) in format fmt: 8 bytes at p
 *   store16(dt, stream, p, v, w)       store8 of v then w (streaming: p 32-byte aligned)
 *   store16_fp8(fmt, stream, p, v, w, s)  the same for fp8: 16 bytes at p (streaming: p 16-byte
 *                                      aligned)
 * The rotation loops step 16 values at a time where they can, so that an ISA may pack two steps'
 * results into one store (a streamed row is whole lines: its 16-value stores stay aligned).
 *   rotate8_values(x, y, cs, sn, &x', &y')  NeoX: x' = fma(x, c, -(y * n)), y' = fma(y, c, x * n)
 *   rotate_pairs8_values(v, cd, sd)    GPT-J: fma(v, cd, swap_pairs(v) * sd)
 * An ISA without streaming stores ignores `stream` (SIMD_STREAMING_STORES 0 keeps it 0).
 */
#ifndef RP_CPU_ROPE_POOL_SIMD8_H
#define RP_CPU_ROPE_POOL_SIMD8_H

/* One rotated vector of dtype dt to its output row and, unless pool is NULL, its pool row. */
static RP_ALWAYS_INLINE void store8_outputs(rp_dtype dt, rp_dtype pool_dt, int stream_dst, int stream_pool,
                                            char *dst, char *pool, simd8 v, simd8_scale inv_scale)
{
    store8(dt, stream_dst, dst, v);
    if (pool && pool_dt == dt)
        store8(dt, stream_pool, pool, v);
    else if (pool)
        store8_fp8(pool_dt, stream_pool, pool, v, inv_scale);
}

/* 8 NeoX pairs: x from xs, y from ys; results to xd/yd and, unless xp is NULL, xp/yp (yp is not
 * looked at when xp is NULL). */
static RP_ALWAYS_INLINE void rotate8(rp_dtype dt, rp_dtype pool_dt, int stream_dst, int stream_pool,
                                     const char *xs, const char *ys, char *xd, char *yd, char *xp, char *yp,
                                     const float *cs, const float *sn, simd8_scale inv_scale)
{
    simd8 out_x, out_y;
    rotate8_values(load8(dt, xs), load8(dt, ys), cs, sn, &out_x, &out_y);
    store8_outputs(dt, pool_dt, stream_dst, stream_pool, xd, xp, out_x, inv_scale);
    store8_outputs(dt, pool_dt, stream_dst, stream_pool, yd, xp ? yp : NULL, out_y, inv_scale);
}

/* store8_outputs for 16 values (v, then w): one store16 / store16_fp8 each. */
static RP_ALWAYS_INLINE void store16_outputs(rp_dtype dt, rp_dtype pool_dt, int stream_dst, int stream_pool,
                                             char *dst, char *pool, simd8 v, simd8 w, simd8_scale inv_scale)
{
    store16(dt, stream_dst, dst, v, w);
    if (pool && pool_dt == dt)
        store16(dt, stream_pool, pool, v, w);
    else if (pool)
        store16_fp8(pool_dt, stream_pool, pool, v, w, inv_scale);
}

/* 16 NeoX pairs, two rotate8 steps whose halves leave in one store16 (store16_fp8) each. */
static RP_ALWAYS_INLINE void rotate16(rp_dtype dt, rp_dtype pool_dt, int stream_dst, int stream_pool,
                                      const char *xs, const char *ys, char *xd, char *yd, char *xp, char *yp,
                                      const float *cs, const float *sn, simd8_scale inv_scale)
{
    const int64_t eight = dt == RP_F32 ? 32 : 16;
    simd8 x0, y0, x1, y1;
    rotate8_values(load8(dt, xs), load8(dt, ys), cs, sn, &x0, &y0);
    rotate8_values(load8(dt, xs + eight), load8(dt, ys + eight), cs + 8, sn + 8, &x1, &y1);
    store16_outputs(dt, pool_dt, stream_dst, stream_pool, xd, xp, x0, x1, inv_scale);
    store16_outputs(dt, pool_dt, stream_dst, stream_pool, yd, xp ? yp : NULL, y0, y1, inv_scale);
}

static RP_ALWAYS_INLINE void simd_rotate(rp_dtype dt, rp_dtype pool_dt, int stream_dst, int stream_pool,
                                         const char *src, char *dst, char *pool, int64_t half,
                                         int64_t n, const float *cs, const float *sn, float inv_scale)
{
    const int64_t elem = dt == RP_F32 ? 4 : 2, hb = half * elem, pool_elem = pool_dt == dt ? elem : 1;
    const simd8_scale scale = SIMD8_SCALE(inv_scale);
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) {
        const int64_t at = j * elem, pool_at = j * pool_elem;
        rotate16(dt, pool_dt, stream_dst, stream_pool, src + at, src + at + hb, dst + at, dst + at + hb,
                 pool ? pool + pool_at : NULL, pool ? pool + pool_at + half * pool_elem : NULL, cs + j, sn + j,
                 scale);
    }
    for (; j + 8 <= n; j += 8) {
        const int64_t at = j * elem, pool_at = j * pool_elem;
        rotate8(dt, pool_dt, stream_dst, stream_pool, src + at, src + at + hb, dst + at, dst + at + hb,
                pool ? pool + pool_at : NULL, pool ? pool + pool_at + half * pool_elem : NULL, cs + j, sn + j,
                scale);
    }
    if (j == n)
        return;
    /* The last n - j < 8 pairs: one step on zero-padded copies (streaming needs whole lines, so
     * it never reaches here). */
    const size_t at = (size_t)(j * elem), bytes = (size_t)((n - j) * elem);
    char in[2][32] = {{0}}, out[2][32], codes[2][8];
    float c[8] = {0}, s[8] = {0};
    memcpy(in[0], src + at, bytes);
    memcpy(in[1], src + at + hb, bytes);
    memcpy(c, cs + j, (size_t)(n - j) * sizeof(float));
    memcpy(s, sn + j, (size_t)(n - j) * sizeof(float));
    const int fp8 = pool && pool_dt != dt;
    rotate8(dt, pool_dt, 0, 0, in[0], in[1], out[0], out[1], fp8 ? codes[0] : NULL, fp8 ? codes[1] : NULL, c, s,
            scale);
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

/* GPT-J: 8 elements (4 neighbouring pairs) from xs to xd and, unless xp is NULL, xp. */
static RP_ALWAYS_INLINE void rotate_pairs8(rp_dtype dt, rp_dtype pool_dt, int stream_dst, int stream_pool,
                                           const char *xs, char *xd, char *xp, const float *cd, const float *sd,
                                           simd8_scale inv_scale)
{
    store8_outputs(dt, pool_dt, stream_dst, stream_pool, xd, xp, rotate_pairs8_values(load8(dt, xs), cd, sd),
                   inv_scale);
}

static RP_ALWAYS_INLINE void simd_rotate_interleaved(rp_dtype dt, rp_dtype pool_dt, int stream_dst,
                                                     int stream_pool, const char *src, char *dst, char *pool,
                                                     int64_t n, const float *cd, const float *sd,
                                                     float inv_scale)
{
    const int64_t elem = dt == RP_F32 ? 4 : 2, pool_elem = pool_dt == dt ? elem : 1;
    const simd8_scale scale = SIMD8_SCALE(inv_scale);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) { /* 16 at a time, as simd_rotate */
        const simd8 v0 = rotate_pairs8_values(load8(dt, src + i * elem), cd + i, sd + i);
        const simd8 v1 = rotate_pairs8_values(load8(dt, src + (i + 8) * elem), cd + i + 8, sd + i + 8);
        store16_outputs(dt, pool_dt, stream_dst, stream_pool, dst + i * elem, pool ? pool + i * pool_elem : NULL,
                        v0, v1, scale);
    }
    for (; i + 8 <= n; i += 8)
        rotate_pairs8(dt, pool_dt, stream_dst, stream_pool, src + i * elem, dst + i * elem,
                      pool ? pool + i * pool_elem : NULL, cd + i, sd + i, scale);
    if (i == n)
        return;
    /* The last n - i < 8 elements (whole pairs): one step on zero-padded copies. */
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

static RP_ALWAYS_INLINE void simd_narrow(rp_dtype dt, int stream, char *dst, const float *src, int64_t n)
{
    const int64_t elem = dt == RP_F32 ? 4 : 2;
    int64_t j = 0;
    for (; j + 16 <= n; j += 16)
        store16(dt, stream, dst + j * elem, load8(RP_F32, (const char *)(src + j)),
                load8(RP_F32, (const char *)(src + j + 8)));
    for (; j + 8 <= n; j += 8)
        store8(dt, stream, dst + j * elem, load8(RP_F32, (const char *)(src + j)));
    if (j < n) { /* the last n - j < 8 values through a zero-padded copy */
        float in[8] = {0};
        char out[32];
        memcpy(in, src + j, (size_t)(n - j) * sizeof(float));
        store8(dt, 0, out, load8(RP_F32, (const char *)in));
        memcpy(dst + j * elem, out, (size_t)((n - j) * elem));
    }
}

static RP_ALWAYS_INLINE void simd_to_fp8(rp_dtype dt, rp_dtype pool_dt, int stream, uint8_t *dst,
                                         const char *src, int64_t n, float inv_scale)
{
    const int64_t elem = dt == RP_F32 ? 4 : 2;
    const simd8_scale scale = SIMD8_SCALE(inv_scale);
    int64_t j = 0;
#ifdef SIMD8_HAS_STORE16_FP8_BF16
    if (dt == RP_BF16 && inv_scale == 1.0f) /* on 16-bit lanes: the values are their own products */
        for (; j + 16 <= n; j += 16)
            store16_fp8_bf16(pool_dt, stream, (char *)dst + j, src + j * elem);
#endif
    /* 16 codes a step; a streamed row is whole lines, so each 16-byte store is aligned */
    for (; j + 16 <= n; j += 16)
        store16_fp8(pool_dt, stream, (char *)dst + j, load8(dt, src + j * elem), load8(dt, src + (j + 8) * elem),
                    scale);
    for (; j + 8 <= n; j += 8)
        store8_fp8(pool_dt, stream, (char *)dst + j, load8(dt, src + j * elem), scale);
    if (j < n) { /* the last n - j < 8 elements through a zero-padded copy */
        char in[32] = {0}, codes[8];
        memcpy(in, src + j * elem, (size_t)((n - j) * elem));
        store8_fp8(pool_dt, 0, codes, load8(dt, in), scale);
        memcpy(dst + j, codes, (size_t)(n - j));
    }
}

#endif
