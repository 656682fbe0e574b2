/*
 * rope_pool_ref.c — the scalar reference kernel: every dtype, every stride, float64 throughout,
 * one rounding at the end. It is the definition the fast kernels are tested against, and the
 * fallback when head_dim is not contiguous. Clarity over speed.
 */
#include "../dtype.h"
#include "../internal.h"

#include <math.h>
#include <string.h>

static double load(const void *base, rp_dtype dtype, int64_t offset)
{
    switch (dtype) {
    case RP_F32: return ((const float *)base)[offset];
    case RP_F16: return rp_f16_bits_to_double(((const uint16_t *)base)[offset]);
    default: return rp_bf16_bits_to_float(((const uint16_t *)base)[offset]);
    }
}

static void store(void *base, rp_dtype dtype, int64_t offset, double value)
{
    switch (dtype) {
    case RP_F32: ((float *)base)[offset] = (float)value; break;
    case RP_F16: ((uint16_t *)base)[offset] = rp_double_to_f16_bits(value); break;
    default: ((uint16_t *)base)[offset] = rp_double_to_bf16_bits(value); break;
    }
}

static int64_t at(const int64_t stride[3], int64_t a, int64_t b, int64_t c)
{
    return a * stride[0] + b * stride[1] + c * stride[2];
}

/* Rotates the pair (x[i], x[i+half]) of one head. Reads both inputs before any write, so the
 * in-place call (dst == src) is safe; `pool` (may be NULL) receives the same values as dst. */
static void rotate_pair(const rp_problem *p, const void *src, const int64_t src_stride[3],
                        void *dst, const int64_t dst_stride[3], void *pool,
                        const int64_t pool_stride[3], int64_t t, int64_t slot, int64_t h,
                        int64_t i, double c, double s)
{
    const int64_t half = p->head_dim / 2;
    const double x = load(src, p->dtype, at(src_stride, t, h, i));
    const double y = load(src, p->dtype, at(src_stride, t, h, i + half));
    const double out_x = x * c - y * s, out_y = y * c + x * s;
    if (dst) {
        store(dst, p->dtype, at(dst_stride, t, h, i), out_x);
        store(dst, p->dtype, at(dst_stride, t, h, i + half), out_y);
    }
    if (pool) {
        store(pool, p->dtype, at(pool_stride, slot, h, i), out_x);
        store(pool, p->dtype, at(pool_stride, slot, h, i + half), out_y);
    }
}

static void copy_row(const rp_problem *p, const void *src, const int64_t src_stride[3], int64_t t,
                     void *dst, const int64_t dst_stride[3], int64_t slot, int64_t h)
{
    const size_t elem = rp_dtype_size(p->dtype);
    for (int64_t i = 0; i < p->head_dim; i++)
        memcpy((char *)dst + at(dst_stride, slot, h, i) * (int64_t)elem,
               (const char *)src + at(src_stride, t, h, i) * (int64_t)elem, elem);
}

void rp_ref_rope_pool(const rp_problem *p, rp_parts parts, int64_t t_begin, int64_t t_end)
{
    const int64_t half = p->head_dim / 2;
    for (int64_t t = t_begin; t < t_end; t++) {
        const int64_t pos = rp_load_index(p->positions, p->pos_dtype, p->pos_stride, t);
        const int64_t slot = rp_load_index(p->slots, p->slot_dtype, p->slot_stride, t);
        const int write_pool = slot >= 0 && parts != RP_PARTS_ROTATE;
        if (parts != RP_PARTS_SCATTER) {
            for (int64_t i = 0; i < half; i++) {
                const double angle = (double)pos * p->inv_freq[i];
                const double c = cos(angle), s = sin(angle);
                for (int64_t h = 0; h < p->num_qo_heads; h++)
                    rotate_pair(p, p->q, p->q_stride, p->q_rot, p->q_rot_stride, NULL, NULL, t,
                                slot, h, i, c, s);
                for (int64_t h = 0; h < p->num_kv_heads; h++)
                    rotate_pair(p, p->k, p->k_stride, p->k_rot, p->k_rot_stride,
                                write_pool ? p->k_pool : NULL, p->k_pool_stride, t, slot, h, i, c, s);
            }
        }
        if (!write_pool)
            continue;
        for (int64_t h = 0; h < p->num_kv_heads; h++) {
            if (parts == RP_PARTS_SCATTER)
                copy_row(p, p->k_rot, p->k_rot_stride, t, p->k_pool, p->k_pool_stride, slot, h);
            copy_row(p, p->v, p->v_stride, t, p->v_pool, p->v_pool_stride, slot, h);
        }
    }
}
