/*
 * rope_pool_portable.c — the CPU kernel for any processor: plain C that compilers vectorise,
 * used where no SIMD kernel fits. Same algorithm as the SIMD kernels: per token, the angles'
 * sin/cos in float64 (sincos.h), once, then every head's rotation in float32.
 */
#include "../dtype.h"
#include "../internal.h"
#include "kernels.h"
#include "sincos.h"

#include <string.h>

enum { CHUNK = 256 }; /* pairs per pass: bounds the stack buffers for any head_dim */

static void load_row(rp_dtype dtype, const void *src, int64_t n, float *dst)
{
    if (dtype == RP_F32) {
        memcpy(dst, src, (size_t)n * sizeof(float));
    } else if (dtype == RP_F16) {
        for (int64_t i = 0; i < n; i++)
            dst[i] = rp_f16_bits_to_float(((const uint16_t *)src)[i]);
    } else {
        for (int64_t i = 0; i < n; i++)
            dst[i] = rp_bf16_bits_to_float(((const uint16_t *)src)[i]);
    }
}

static void store_row(rp_dtype dtype, const float *src, int64_t n, void *dst)
{
    if (dtype == RP_F32) {
        memcpy(dst, src, (size_t)n * sizeof(float));
    } else if (dtype == RP_F16) {
        for (int64_t i = 0; i < n; i++)
            ((uint16_t *)dst)[i] = rp_double_to_f16_bits(src[i]);
    } else {
        for (int64_t i = 0; i < n; i++)
            ((uint16_t *)dst)[i] = rp_float_to_bf16_bits(src[i]);
    }
}

/* n float32 values to an fp8 pool row: fp8(x * inv_scale), one rounding of the float32 product
 * (dtype.h's converter on a float32 value is exact). */
static void store_fp8(int e5m2, const float *src, int64_t n, float inv_scale, uint8_t *dst)
{
    for (int64_t i = 0; i < n; i++)
        dst[i] = rp_double_to_fp8_bits((double)(src[i] * inv_scale), e5m2);
}

/* Rotates pairs [i0, i0+n) of one head row; src may equal dst (in place). pool (may be NULL) is
 * the k_pool head row; inv_scale = 1 / k_scale in float32 for fp8 pools. */
static void rotate_chunk(const rp_problem *p, int64_t i0, int64_t n, const char *src, char *dst,
                         char *pool, float inv_scale, const float *cs, const float *sn)
{
    const rp_dtype dtype = p->dtype;
    const int64_t half = p->head_dim / 2;
    const size_t elem = rp_dtype_size(dtype);
    float x[CHUNK], y[CHUNK], ox[CHUNK], oy[CHUNK];
    load_row(dtype, src + i0 * elem, n, x);
    load_row(dtype, src + (half + i0) * elem, n, y);
    for (int64_t i = 0; i < n; i++) {
        ox[i] = x[i] * cs[i] - y[i] * sn[i];
        oy[i] = y[i] * cs[i] + x[i] * sn[i];
    }
    store_row(dtype, ox, n, dst + i0 * elem);
    store_row(dtype, oy, n, dst + (half + i0) * elem);
    if (!pool)
        return;
    if (rp_pool_is_fp8(p)) { /* from the float32 rotation, not from the rounded k_rot */
        const int e5m2 = p->pool_dtype == RP_F8_E5M2;
        store_fp8(e5m2, ox, n, inv_scale, (uint8_t *)pool + i0);
        store_fp8(e5m2, oy, n, inv_scale, (uint8_t *)pool + half + i0);
    } else {
        store_row(dtype, ox, n, pool + i0 * elem);
        store_row(dtype, oy, n, pool + (half + i0) * elem);
    }
}

/* Head rows (n elements) of token t in src to pool row `slot`: a copy, or fp8(x / scale). */
static void copy_heads(const rp_problem *p, const char *src, const int64_t src_stride[3], char *pool,
                       const int64_t pool_stride[4], int64_t t, int64_t slot, int64_t n, double scale)
{
    const int64_t elem = (int64_t)rp_dtype_size(p->dtype);
    const int fp8 = rp_pool_is_fp8(p), e5m2 = p->pool_dtype == RP_F8_E5M2;
    const float inv_scale = (float)(1.0 / scale);
    for (int64_t h = 0; h < p->num_kv_heads; h++) {
        const char *from = src + (t * src_stride[0] + h * src_stride[1]) * elem;
        char *to = pool + rp_pool_offset(p, pool_stride, slot, h) * (fp8 ? 1 : elem);
        if (!fp8) {
            memcpy(to, from, (size_t)(n * elem));
            continue;
        }
        float x[CHUNK];
        for (int64_t i0 = 0; i0 < n; i0 += CHUNK) {
            const int64_t m = n - i0 < CHUNK ? n - i0 : CHUNK;
            load_row(p->dtype, from + i0 * elem, m, x);
            store_fp8(e5m2, x, m, inv_scale, (uint8_t *)to + i0);
        }
    }
}

static void rope_pool_portable(const rp_problem *p, rp_parts parts, int64_t t_begin, int64_t t_end)
{
    const int64_t half = p->head_dim / 2, elem = (int64_t)rp_dtype_size(p->dtype);
    const int64_t pool_elem = (int64_t)rp_dtype_size(p->pool_dtype);
    const char *q = p->q, *k = p->k, *v = p->v;
    char *q_rot = p->q_rot, *k_rot = p->k_rot, *k_pool = p->k_pool, *v_pool = p->v_pool;
    const float k_inv_scale = (float)(1.0 / p->k_scale);
    float cs[CHUNK], sn[CHUNK];
    for (int64_t t = t_begin; t < t_end; t++) {
        const int64_t pos = rp_load_index(p->positions, p->pos_dtype, p->pos_stride, t);
        const int64_t slot = rp_load_index(p->slots, p->slot_dtype, p->slot_stride, t);
        const int write_pool = slot >= 0 && parts != RP_PARTS_ROTATE;
        for (int64_t i0 = 0; parts != RP_PARTS_SCATTER && i0 < half; i0 += CHUNK) {
            const int64_t n = half - i0 < CHUNK ? half - i0 : CHUNK;
            for (int64_t i = 0; i < n; i++) {
                double s, c;
                rp_sincos((double)pos * p->inv_freq[i0 + i], &s, &c);
                cs[i] = (float)c;
                sn[i] = (float)s;
            }
            for (int64_t h = 0; h < p->num_qo_heads; h++)
                rotate_chunk(p, i0, n, q + (t * p->q_stride[0] + h * p->q_stride[1]) * elem,
                             q_rot + (t * p->q_rot_stride[0] + h * p->q_rot_stride[1]) * elem, NULL, 1.0f,
                             cs, sn);
            for (int64_t h = 0; h < p->num_kv_heads; h++)
                rotate_chunk(p, i0, n, k + (t * p->k_stride[0] + h * p->k_stride[1]) * elem,
                             k_rot + (t * p->k_rot_stride[0] + h * p->k_rot_stride[1]) * elem,
                             write_pool ? k_pool + rp_pool_offset(p, p->k_pool_stride, slot, h) * pool_elem
                                        : NULL,
                             k_inv_scale, cs, sn);
        }
        if (!write_pool)
            continue;
        if (parts == RP_PARTS_SCATTER)
            copy_heads(p, k_rot, p->k_rot_stride, k_pool, p->k_pool_stride, t, slot, p->head_dim, p->k_scale);
        copy_heads(p, v, p->v_stride, v_pool, p->v_pool_stride, t, slot, p->v_head_dim, p->v_scale);
    }
}

void rp_cpu_fill_portable(rp_cpu_kernels *table)
{
    table->name = "portable";
    table->rope_pool[RP_F32] = rope_pool_portable;
    table->rope_pool[RP_F16] = rope_pool_portable;
    table->rope_pool[RP_BF16] = rope_pool_portable;
}
