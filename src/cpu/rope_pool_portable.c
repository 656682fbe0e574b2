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

/* Rotates pairs [i0, i0+n) of one head row in p's style and, with the last chunk, copies the
 * pass-through dims R..D-1; src may equal dst (in place); pool may be NULL. */
static void rotate_chunk(const rp_problem *p, int64_t i0, int64_t n, const char *src, char *dst,
                         char *pool, const float *cs, const float *sn)
{
    const size_t elem = rp_dtype_size(p->dtype);
    const int64_t R = p->rotary_dim, D = p->head_dim, half = R / 2;
    const int gptj = p->style == RP_ROPE_GPTJ;
    const int64_t a = gptj ? 2 * i0 : i0, b = gptj ? 2 * i0 + 1 : half + i0, step = gptj ? 2 : 1;
    float x[CHUNK], y[CHUNK], ox[CHUNK], oy[CHUNK];
    load_row(p->dtype, src + a * (int64_t)elem, step, n, x);
    load_row(p->dtype, src + b * (int64_t)elem, step, n, y);
    for (int64_t i = 0; i < n; i++) {
        ox[i] = x[i] * cs[i] - y[i] * sn[i];
        oy[i] = y[i] * cs[i] + x[i] * sn[i];
    }
    char *targets[2] = {dst, pool};
    for (int d = 0; d < 2; d++) {
        if (!targets[d])
            continue;
        store_row(p->dtype, ox, n, targets[d] + a * (int64_t)elem, step);
        store_row(p->dtype, oy, n, targets[d] + b * (int64_t)elem, step);
        if (R < D && i0 + n == half && targets[d] != src)
            memcpy(targets[d] + R * (int64_t)elem, src + R * (int64_t)elem, (size_t)(D - R) * elem);
    }
}

static void copy_heads(const rp_problem *p, const char *src, const int64_t src_stride[3],
                       char *dst, const int64_t dst_stride[3], int64_t t, int64_t slot)
{
    const int64_t elem = (int64_t)rp_dtype_size(p->dtype);
    for (int64_t h = 0; h < p->num_kv_heads; h++)
        memcpy(dst + (slot * dst_stride[0] + h * dst_stride[1]) * elem,
               src + (t * src_stride[0] + h * src_stride[1]) * elem, (size_t)(p->head_dim * elem));
}

static void rope_pool_portable(const rp_problem *p, rp_parts parts, int64_t t_begin, int64_t t_end)
{
    const int64_t half = p->rotary_dim / 2, elem = (int64_t)rp_dtype_size(p->dtype);
    const char *q = p->q, *k = p->k, *v = p->v;
    char *q_rot = p->q_rot, *k_rot = p->k_rot, *k_pool = p->k_pool, *v_pool = p->v_pool;
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
                cs[i] = (float)(p->attention_scaling * c);
                sn[i] = (float)(p->attention_scaling * s);
            }
            for (int64_t h = 0; h < p->num_qo_heads; h++)
                rotate_chunk(p, i0, n, q + (t * p->q_stride[0] + h * p->q_stride[1]) * elem,
                             q_rot + (t * p->q_rot_stride[0] + h * p->q_rot_stride[1]) * elem, NULL, cs, sn);
            for (int64_t h = 0; h < p->num_kv_heads; h++)
                rotate_chunk(p, i0, n, k + (t * p->k_stride[0] + h * p->k_stride[1]) * elem,
                             k_rot + (t * p->k_rot_stride[0] + h * p->k_rot_stride[1]) * elem,
                             write_pool ? k_pool + (slot * p->k_pool_stride[0] + h * p->k_pool_stride[1]) * elem
                                        : NULL,
                             cs, sn);
        }
        if (!write_pool)
            continue;
        if (parts == RP_PARTS_SCATTER)
            copy_heads(p, k_rot, p->k_rot_stride, k_pool, p->k_pool_stride, t, slot);
        copy_heads(p, v, p->v_stride, v_pool, p->v_pool_stride, t, slot);
    }
}

void rp_cpu_fill_portable(rp_cpu_kernels *table)
{
    table->name = "portable";
    table->rope_pool[RP_F32] = rope_pool_portable;
    table->rope_pool[RP_F16] = rope_pool_portable;
    table->rope_pool[RP_BF16] = rope_pool_portable;
}
