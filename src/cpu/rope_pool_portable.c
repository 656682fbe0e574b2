/*
 * rope_pool_portable.c — the CPU kernel for any processor: plain C that compilers vectorise,
 * used where no SIMD kernel fits. Same algorithm as the SIMD kernels: per token, the angles'
 * sin/cos in float64 (sincos.h), scaled by s and rounded once, then every head's rotation in
 * float32; GPT-J pairs are read and written with an element step of 2.
 */
#include "../dtype.h"
#include "../internal.h"
#include "kernels.h"
#include "sincos.h"

#include <string.h>

enum { CHUNK = 256 }; /* pairs per pass: bounds the stack buffers for any head_dim */

/* n elements src[0], src[step], ... (step 1: NeoX halves; 2: GPT-J's even or odd elements). */
static void load_row(rp_dtype dtype, const void *src, int64_t step, int64_t n, float *dst)
{
    if (dtype == RP_F32) {
        for (int64_t i = 0; i < n; i++)
            dst[i] = ((const float *)src)[i * step];
    } else if (dtype == RP_F16) {
        for (int64_t i = 0; i < n; i++)
            dst[i] = rp_f16_bits_to_float(((const uint16_t *)src)[i * step]);
    } else {
        for (int64_t i = 0; i < n; i++)
            dst[i] = rp_bf16_bits_to_float(((const uint16_t *)src)[i * step]);
    }
}

static void store_row(rp_dtype dtype, const float *src, int64_t n, void *dst, int64_t step)
{
    if (dtype == RP_F32) {
        for (int64_t i = 0; i < n; i++)
            ((float *)dst)[i * step] = src[i];
    } else if (dtype == RP_F16) {
        for (int64_t i = 0; i < n; i++)
            ((uint16_t *)dst)[i * step] = rp_double_to_f16_bits(src[i]);
    } else {
        for (int64_t i = 0; i < n; i++)
            ((uint16_t *)dst)[i * step] = rp_float_to_bf16_bits(src[i]);
    }
}

/* n float32 values to fp8 codes fp8(x * inv_scale) at dst[0], dst[step], ...: one rounding of the
 * float32 product (dtype.h's converter is exact on a float32 value). */
static void store_fp8(int e5m2, const float *src, int64_t n, float inv_scale, uint8_t *dst, int64_t step)
{
    for (int64_t i = 0; i < n; i++)
        dst[i * step] = rp_double_to_fp8_bits((double)(src[i] * inv_scale), e5m2);
}

/* n elements of src (dtype) to an fp8 pool row. */
static void copy_fp8(const rp_problem *p, const char *src, int64_t n, float inv_scale, uint8_t *dst)
{
    float x[CHUNK];
    const int64_t elem = (int64_t)rp_dtype_size(p->dtype);
    for (int64_t i0 = 0; i0 < n; i0 += CHUNK) {
        const int64_t m = n - i0 < CHUNK ? n - i0 : CHUNK;
        load_row(p->dtype, src + i0 * elem, 1, m, x);
        store_fp8(p->pool_dtype == RP_F8_E5M2, x, m, inv_scale, dst + i0, 1);
    }
}

/* Rotates pairs [i0, i0+n) of one head row in p's style and, with the last chunk, copies the
 * pass-through dims R..D-1; src may equal dst (in place); pool (the k_pool head row) may be NULL.
 * An fp8 pool takes fp8(x' * inv_scale) of the float32 x', not of the rounded k_rot. With QK-norm
 * the row's values come from `normed`, the whole head normalised in float32 (kernels.h), and the
 * pass-through dims receive them too. */
static void rotate_chunk(const rp_problem *p, int64_t i0, int64_t n, const char *src, const float *normed,
                         char *dst, char *pool, float inv_scale, const float *cs, const float *sn)
{
    const size_t elem = rp_dtype_size(p->dtype);
    const int64_t R = p->rotary_dim, D = p->head_dim, half = R / 2;
    const int gptj = p->style == RP_ROPE_GPTJ;
    const int64_t a = gptj ? 2 * i0 : i0, b = gptj ? 2 * i0 + 1 : half + i0, step = gptj ? 2 : 1;
    float x[CHUNK], y[CHUNK], ox[CHUNK], oy[CHUNK];
    const rp_dtype in_dt = normed ? RP_F32 : p->dtype;
    const char *in = normed ? (const char *)normed : src;
    const int64_t in_elem = normed ? 4 : (int64_t)elem;
    load_row(in_dt, in + a * in_elem, step, n, x);
    load_row(in_dt, in + b * in_elem, step, n, y);
    for (int64_t i = 0; i < n; i++) {
        ox[i] = x[i] * cs[i] - y[i] * sn[i];
        oy[i] = y[i] * cs[i] + x[i] * sn[i];
    }
    if (pool && rp_pool_is_fp8(p)) {
        const int e5m2 = p->pool_dtype == RP_F8_E5M2;
        store_fp8(e5m2, ox, n, inv_scale, (uint8_t *)pool + a, step);
        store_fp8(e5m2, oy, n, inv_scale, (uint8_t *)pool + b, step);
        if (R < D && i0 + n == half && normed)
            store_fp8(e5m2, normed + R, D - R, inv_scale, (uint8_t *)pool + R, 1);
        else if (R < D && i0 + n == half)
            copy_fp8(p, src + R * (int64_t)elem, D - R, inv_scale, (uint8_t *)pool + R);
        pool = NULL;
    }
    char *targets[2] = {dst, pool};
    for (int d = 0; d < 2; d++) {
        if (!targets[d])
            continue;
        store_row(p->dtype, ox, n, targets[d] + a * (int64_t)elem, step);
        store_row(p->dtype, oy, n, targets[d] + b * (int64_t)elem, step);
        if (R < D && i0 + n == half && normed)
            store_row(p->dtype, normed + R, D - R, targets[d] + R * (int64_t)elem, 1);
        else if (R < D && i0 + n == half && targets[d] != src)
            memcpy(targets[d] + R * (int64_t)elem, src + R * (int64_t)elem, (size_t)(D - R) * elem);
    }
}

/* Head rows (n elements) of token t in src to pool row `slot`: a copy, or fp8(x / scale). */
static void copy_heads(const rp_problem *p, const char *src, const int64_t src_stride[3], char *pool,
                       const int64_t pool_stride[4], int64_t t, int64_t slot, int64_t n, double scale)
{
    const int64_t elem = (int64_t)rp_dtype_size(p->dtype), pool_elem = (int64_t)rp_dtype_size(p->pool_dtype);
    for (int64_t h = 0; h < p->num_kv_heads; h++) {
        const char *from = src + (t * src_stride[0] + h * src_stride[1]) * elem;
        char *to = pool + rp_pool_offset(p, pool_stride, slot, h) * pool_elem;
        if (rp_pool_is_fp8(p))
            copy_fp8(p, from, n, (float)(1.0 / scale), (uint8_t *)to);
        else
            memcpy(to, from, (size_t)(n * elem));
    }
}

static void rope_pool_portable(const rp_problem *p, rp_parts parts, int64_t t_begin, int64_t t_end)
{
    const int64_t half = p->rotary_dim / 2, elem = (int64_t)rp_dtype_size(p->dtype);
    const int64_t pool_elem = (int64_t)rp_dtype_size(p->pool_dtype);
    const char *q = p->q, *k = p->k, *v = p->v;
    char *q_rot = p->q_rot, *k_rot = p->k_rot, *k_pool = p->k_pool, *v_pool = p->v_pool;
    const float k_inv_scale = (float)(1.0 / p->k_scale);
    float cs[CHUNK], sn[CHUNK], normed[RP_CPU_NORM_MAX_DIM];
    double angles[CHUNK]; /* mRoPE */
    rp_cpu_norm q_factors, k_factors;
    const rp_cpu_norm *qg = rp_cpu_norm_prepare(p, &p->q_norm, &q_factors);
    const rp_cpu_norm *kg = rp_cpu_norm_prepare(p, &p->k_norm, &k_factors);
    for (int64_t t = t_begin; t < t_end; t++) {
        const int64_t pos = rp_load_index(p->positions, p->pos_dtype, p->pos_stride, t);
        const int64_t slot = rp_load_slot(p, t);
        const int write_pool = slot >= 0 && parts != RP_PARTS_ROTATE;
        for (int64_t i0 = 0; parts != RP_PARTS_SCATTER && i0 < half; i0 += CHUNK) {
            const int64_t n = half - i0 < CHUNK ? half - i0 : CHUNK;
            /* mRoPE: each frequency's own angle, times 1.0 (exact); else pos times the table */
            const double *freq = p->inv_freq + i0, at = p->mrope ? 1.0 : (double)pos;
            if (p->mrope) {
                rp_mrope_angles(p, t, i0, n, angles);
                freq = angles;
            }
            for (int64_t i = 0; i < n; i++) {
                double s, c;
                rp_sincos(at * freq[i], &s, &c);
                cs[i] = (float)(p->attention_scaling * c);
                sn[i] = (float)(p->attention_scaling * s);
            }
            /* With QK-norm a head is one chunk (rp_cpu_norm_fits): normalised once, here. */
            for (int64_t h = 0; h < p->num_qo_heads; h++) {
                const char *src = q + (t * p->q_stride[0] + h * p->q_stride[1]) * elem;
                if (qg)
                    rp_cpu_norm_row(p, p->dtype, src, qg, normed);
                rotate_chunk(p, i0, n, src, qg ? normed : NULL,
                             q_rot + (t * p->q_rot_stride[0] + h * p->q_rot_stride[1]) * elem, NULL, 1.0f,
                             cs, sn);
            }
            for (int64_t h = 0; h < p->num_kv_heads; h++) {
                const char *src = k + (t * p->k_stride[0] + h * p->k_stride[1]) * elem;
                if (kg)
                    rp_cpu_norm_row(p, p->dtype, src, kg, normed);
                rotate_chunk(p, i0, n, src, kg ? normed : NULL,
                             k_rot + (t * p->k_rot_stride[0] + h * p->k_rot_stride[1]) * elem,
                             write_pool ? k_pool + rp_pool_offset(p, p->k_pool_stride, slot, h) * pool_elem
                                        : NULL,
                             k_inv_scale, cs, sn);
            }
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
