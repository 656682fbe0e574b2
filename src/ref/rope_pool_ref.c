/*
 * rope_pool_ref.c — the scalar reference kernel: every dtype, every stride, both pair styles, any
 * rotary_dim, table and attention scaling; float64 throughout, one rounding at the end. It is the
 * header's formula written out: the definition the fast kernels are tested against, and the
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

/* Rotates the pair (x[a], x[b]) of one head by (c, n) = s * (cos, sin). Reads both inputs before
 * any write, so the in-place call (dst == src) is safe; `pool` (may be NULL) receives the same
 * values as dst. */
static void rotate_pair(const rp_problem *p, const void *src, const int64_t src_stride[3],
                        void *dst, const int64_t dst_stride[3], void *pool,
                        const int64_t pool_stride[3], int64_t t, int64_t slot, int64_t h,
                        int64_t a, int64_t b, double c, double n)
{
    const double x = load(src, p->dtype, at(src_stride, t, h, a));
    const double y = load(src, p->dtype, at(src_stride, t, h, b));
    const double out_x = x * c - y * n, out_y = y * c + x * n;
    if (dst) {
        store(dst, p->dtype, at(dst_stride, t, h, a), out_x);
        store(dst, p->dtype, at(dst_stride, t, h, b), out_y);
    }
    if (pool) {
        store(pool, p->dtype, at(pool_stride, slot, h, a), out_x);
        store(pool, p->dtype, at(pool_stride, slot, h, b), out_y);
    }
}

/* Dims [from, D) of head h: src row t to dst row `row`, bit for bit (memmove: in place, src may
 * be dst). */
static void copy_dims(const rp_problem *p, const void *src, const int64_t src_stride[3], int64_t t,
                      void *dst, const int64_t dst_stride[3], int64_t row, int64_t h, int64_t from)
{
    const size_t elem = rp_dtype_size(p->dtype);
    for (int64_t i = from; i < p->head_dim; i++)
        memmove((char *)dst + at(dst_stride, row, h, i) * (int64_t)elem,
                (const char *)src + at(src_stride, t, h, i) * (int64_t)elem, elem);
}

void rp_ref_rope_pool(const rp_problem *p, rp_parts parts, int64_t t_begin, int64_t t_end)
{
    const int64_t R = p->rotary_dim, half = R / 2;
    const int gptj = p->style == RP_ROPE_GPTJ;
    for (int64_t t = t_begin; t < t_end; t++) {
        const int64_t pos = rp_load_index(p->positions, p->pos_dtype, p->pos_stride, t);
        const int64_t slot = rp_load_index(p->slots, p->slot_dtype, p->slot_stride, t);
        const int write_pool = slot >= 0 && parts != RP_PARTS_ROTATE;
        if (parts != RP_PARTS_SCATTER) {
            for (int64_t j = 0; j < half; j++) {
                const double angle = (double)pos * p->inv_freq[j];
                const double c = p->attention_scaling * cos(angle), n = p->attention_scaling * sin(angle);
                const int64_t a = gptj ? 2 * j : j, b = gptj ? 2 * j + 1 : j + half;
                for (int64_t h = 0; h < p->num_qo_heads; h++)
                    rotate_pair(p, p->q, p->q_stride, p->q_rot, p->q_rot_stride, NULL, NULL, t,
                                slot, h, a, b, c, n);
                for (int64_t h = 0; h < p->num_kv_heads; h++)
                    rotate_pair(p, p->k, p->k_stride, p->k_rot, p->k_rot_stride,
                                write_pool ? p->k_pool : NULL, p->k_pool_stride, t, slot, h, a, b, c, n);
            }
            for (int64_t h = 0; h < p->num_qo_heads; h++)
                copy_dims(p, p->q, p->q_stride, t, p->q_rot, p->q_rot_stride, t, h, R);
            for (int64_t h = 0; h < p->num_kv_heads; h++) {
                if (write_pool)
                    copy_dims(p, p->k, p->k_stride, t, p->k_pool, p->k_pool_stride, slot, h, R);
                copy_dims(p, p->k, p->k_stride, t, p->k_rot, p->k_rot_stride, t, h, R);
            }
        }
        if (!write_pool)
            continue;
        for (int64_t h = 0; h < p->num_kv_heads; h++) {
            if (parts == RP_PARTS_SCATTER)
                copy_dims(p, p->k_rot, p->k_rot_stride, t, p->k_pool, p->k_pool_stride, slot, h, 0);
            copy_dims(p, p->v, p->v_stride, t, p->v_pool, p->v_pool_stride, slot, h, 0);
        }
    }
}
