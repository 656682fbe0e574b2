/*
 * rope_pool_ref.c — the scalar reference kernel: every dtype, every stride, both pair styles, any
 * rotary_dim, table, attention scaling and mRoPE section rule; float64 throughout, one rounding at the end. It is the
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

/* Stores value as element i of the pool head row at element offset `row` (rp_pool_offset): in
 * the inputs' dtype, or as fp8(value / scale), rounded once from the float64 value. */
static void store_pool(const rp_problem *p, void *pool, const int64_t stride[4], int64_t row,
                       int64_t i, double value, double scale)
{
    const int64_t offset = row + i * stride[3];
    if (rp_pool_is_fp8(p))
        ((uint8_t *)pool)[offset] = rp_double_to_fp8_bits(value / scale, p->pool_dtype == RP_F8_E5M2);
    else
        store(pool, p->dtype, offset, value);
}

double rp_norm_gain(const rp_problem *p, const rp_norm_weight *w, int64_t i)
{
    return load(w->data, w->dtype, i) + p->norm_offset;
}

double rp_norm_rstd(const rp_problem *p, const void *src, const int64_t stride[3], int64_t t, int64_t h)
{
    double sum = 0.0;
    for (int64_t i = 0; i < p->head_dim; i++) {
        const double x = load(src, p->dtype, at(stride, t, h, i));
        sum += x * x;
    }
    return 1.0 / sqrt(sum / (double)p->head_dim + p->norm_eps);
}

/* The value RoPE takes at dim i of head h of token t: the input, or with QK-norm (w->data) the
 * normalised x * rstd * (w[i] + offset), rstd being that head's. */
static double input(const rp_problem *p, const void *src, const int64_t stride[3], const rp_norm_weight *w,
                    double rstd, int64_t t, int64_t h, int64_t i)
{
    const double x = load(src, p->dtype, at(stride, t, h, i));
    return w->data ? x * rstd * rp_norm_gain(p, w, i) : x;
}

/* Rotates the pair (a, b) of one head by (c, n) = s * (cos, sin). Reads both inputs before any
 * write, so the in-place call (dst == src) is safe. When write_pool, k_pool's head row at element
 * offset pool_row receives the same float64 values (rounded to the pool's format). */
static void rotate_pair(const rp_problem *p, const void *src, const int64_t src_stride[3],
                        const rp_norm_weight *w, double rstd, void *dst, const int64_t dst_stride[3],
                        int write_pool, int64_t pool_row, int64_t t, int64_t h, int64_t a, int64_t b,
                        double c, double n)
{
    const double x = input(p, src, src_stride, w, rstd, t, h, a);
    const double y = input(p, src, src_stride, w, rstd, t, h, b);
    const double out_x = x * c - y * n, out_y = y * c + x * n;
    if (dst) {
        store(dst, p->dtype, at(dst_stride, t, h, a), out_x);
        store(dst, p->dtype, at(dst_stride, t, h, b), out_y);
    }
    if (write_pool) {
        store_pool(p, p->k_pool, p->k_pool_stride, pool_row, a, out_x, p->k_scale);
        store_pool(p, p->k_pool, p->k_pool_stride, pool_row, b, out_y, p->k_scale);
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

/* Dims [from, n) of head h of token t of src into the pool head row at element offset pool_row:
 * a bit copy, or fp8(value / scale) for fp8 pools. */
static void copy_to_pool(const rp_problem *p, const void *src, const int64_t src_stride[3], int64_t t,
                         int64_t h, int64_t from, int64_t n, void *pool, const int64_t pool_stride[4],
                         int64_t pool_row, double scale)
{
    const size_t elem = rp_dtype_size(p->dtype);
    for (int64_t i = from; i < n; i++) {
        const int64_t in = at(src_stride, t, h, i);
        if (rp_pool_is_fp8(p))
            store_pool(p, pool, pool_stride, pool_row, i, load(src, p->dtype, in), scale);
        else
            memcpy((char *)pool + (pool_row + i * pool_stride[3]) * (int64_t)elem,
                   (const char *)src + in * (int64_t)elem, elem);
    }
}

/* One head of token t: its pairs rotated, then its pass-through dims R..D-1 (the pool first:
 * dst may be src, in place), bit copies, or with QK-norm the normalised values. Heads are the
 * outer loop so that a head's rstd is computed once; cos and sin are recomputed per head. */
static void rope_head(const rp_problem *p, const void *src, const int64_t src_stride[3], const rp_norm_weight *w,
                      void *dst, const int64_t dst_stride[3], int write_pool, int64_t slot, int64_t t,
                      int64_t h)
{
    const int64_t R = p->rotary_dim, half = R / 2;
    const int gptj = p->style == RP_ROPE_GPTJ;
    const int64_t pool_row = write_pool ? rp_pool_offset(p, p->k_pool_stride, slot, h) : 0;
    const double rstd = w->data ? rp_norm_rstd(p, src, src_stride, t, h) : 1.0;
    for (int64_t j = 0; j < half; j++) {
        /* mRoPE: the row of frequency j (row 0, the only one, without it) */
        const int64_t pos = rp_load_position(p, t, rp_mrope_row(p->mrope_section, p->mrope_interleaved, j));
        const double angle = (double)pos * p->inv_freq[j];
        const double c = p->attention_scaling * cos(angle), n = p->attention_scaling * sin(angle);
        const int64_t a = gptj ? 2 * j : j, b = gptj ? 2 * j + 1 : j + half;
        rotate_pair(p, src, src_stride, w, rstd, dst, dst_stride, write_pool, pool_row, t, h, a, b, c, n);
    }
    if (!w->data) {
        if (write_pool)
            copy_to_pool(p, src, src_stride, t, h, R, p->head_dim, p->k_pool, p->k_pool_stride, pool_row,
                         p->k_scale);
        copy_dims(p, src, src_stride, t, dst, dst_stride, t, h, R);
        return;
    }
    for (int64_t i = R; i < p->head_dim; i++) {
        const double y = input(p, src, src_stride, w, rstd, t, h, i);
        if (write_pool)
            store_pool(p, p->k_pool, p->k_pool_stride, pool_row, i, y, p->k_scale);
        store(dst, p->dtype, at(dst_stride, t, h, i), y);
    }
}

void rp_ref_rope_pool(const rp_problem *p, rp_parts parts, int64_t t_begin, int64_t t_end)
{
    for (int64_t t = t_begin; t < t_end; t++) {
        const int64_t slot = rp_load_slot(p, t);
        const int write_pool = slot >= 0 && parts != RP_PARTS_ROTATE;
        for (int64_t h = 0; parts != RP_PARTS_SCATTER && h < p->num_qo_heads; h++)
            rope_head(p, p->q, p->q_stride, &p->q_norm, p->q_rot, p->q_rot_stride, 0, slot, t, h);
        for (int64_t h = 0; parts != RP_PARTS_SCATTER && h < p->num_kv_heads; h++)
            rope_head(p, p->k, p->k_stride, &p->k_norm, p->k_rot, p->k_rot_stride, write_pool, slot, t, h);
        if (!write_pool)
            continue;
        for (int64_t h = 0; h < p->num_kv_heads; h++) {
            /* The unfused scatter stores k_rot as computed, so an fp8 pool rounds twice there. */
            if (parts == RP_PARTS_SCATTER)
                copy_to_pool(p, p->k_rot, p->k_rot_stride, t, h, 0, p->head_dim, p->k_pool, p->k_pool_stride,
                             rp_pool_offset(p, p->k_pool_stride, slot, h), p->k_scale);
            copy_to_pool(p, p->v, p->v_stride, t, h, 0, p->v_head_dim, p->v_pool, p->v_pool_stride,
                         rp_pool_offset(p, p->v_pool_stride, slot, h), p->v_scale);
        }
    }
}
