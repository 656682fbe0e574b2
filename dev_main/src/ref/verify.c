/*
 * verify.c — checks a finished call against the float64 formula and the contract's error bound.
 * Used by the tests and by the benchmark's verification pass; not part of the public API.
 *
 * Bound, per rotated output element y of pair (a, b) (the float64 formula on the given inputs,
 * with the problem's style, rotary_dim R, table and attention scaling s):
 *     |out - y| <= ulp_dtype(y) + 8 * 2^-24 * s * (|x[a]| + |x[b]|)
 * and an output equal to y correctly rounded always passes (that covers overflow to infinity).
 * With s > 1, elements whose s * (|x[a]| + |x[b]|) exceeds the float32 maximum are not checked:
 * the header's contract leaves them out, because a float32 product such as x[b] * n may overflow
 * to infinity there although the float64 result is finite.
 * With QK-norm, x is the float64 normalised value of the head, the factor is 10 instead of 8 and
 * s * 2^-148 is added (the header's bound); the pass-through dims then hold it within ulp +
 * 2 * 2^-24 * |x| + 2^-149.
 * Without it, dims R..D-1 of q_rot and k_rot must equal q and k bit for bit, v_pool rows must equal v, and
 * k_pool rows must equal k_rot. fp8 pools hold the correctly rounded fp8 of value / scale (K: the
 * float64 formula, not k_rot; V: v), except within the kernel's own arithmetic error of a
 * rounding midpoint (check_fp8).
 */
#include "verify.h"

#include "../dtype.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double load(const void *base, rp_dtype dtype, int64_t offset)
{
    switch (dtype) {
    case RP_F32: return ((const float *)base)[offset];
    case RP_F16: return rp_f16_bits_to_double(((const uint16_t *)base)[offset]);
    default: return rp_bf16_bits_to_float(((const uint16_t *)base)[offset]);
    }
}

static double round_to(rp_dtype dtype, double y)
{
    switch (dtype) {
    case RP_F32: return (float)y;
    case RP_F16: return rp_f16_bits_to_double(rp_double_to_f16_bits(y));
    default: return rp_bf16_bits_to_float(rp_double_to_bf16_bits(y));
    }
}

/* The spacing of the dtype's numbers at |y|. */
static double ulp_of(rp_dtype dtype, double y)
{
    const int mant_bits = dtype == RP_F32 ? 23 : dtype == RP_F16 ? 10 : 7;
    const int min_exp = dtype == RP_F32 ? -126 : dtype == RP_F16 ? -14 : -126;
    int e;
    frexp(y, &e); /* |y| in [2^(e-1), 2^e) */
    e -= 1;
    if (y == 0.0 || e < min_exp)
        e = min_exp;
    return ldexp(1.0, e - mant_bits);
}

static int64_t at(const int64_t stride[3], int64_t a, int64_t b, int64_t c)
{
    return a * stride[0] + b * stride[1] + c * stride[2];
}

static void note_failure(rp_verify_result *r, const char *what, int64_t t, int64_t h, int64_t i,
                         double got, double want, double bound)
{
    if (r->failures++ == 0)
        snprintf(r->first_failure, sizeof r->first_failure,
                 "%s[token %lld, head %lld, dim %lld] = %.9g, float64 formula %.9g, bound %.3g",
                 what, (long long)t, (long long)h, (long long)i, got, want, bound);
}

/* The kernels' error on one element, beyond the dtype's last rounding, is factor * 2^-24 times
 * scaled_inputs, plus `absolute` (QK-norm: the float32 rounding of normalised values below the
 * normal range is absolute, 2^-150 each). */
static void check_value(rp_verify_result *r, rp_dtype dtype, const char *what, int64_t t, int64_t h,
                        int64_t i, double got, double want, double scaled_inputs, double factor,
                        double absolute, int beyond_range)
{
    const double bound = ulp_of(dtype, want) + factor * 0x1p-24 * scaled_inputs + absolute;
    if (beyond_range)
        return;
    r->checked++;
    if (isnan(want) || isnan(got)) {
        if (!(isnan(want) && isnan(got)))
            note_failure(r, what, t, h, i, got, want, bound);
        return;
    }
    if (got == round_to(dtype, want))
        return;
    const double ratio = fabs(got - want) / bound;
    if (!(ratio <= r->worst_ratio))
        r->worst_ratio = ratio;
    if (!(ratio <= 1.0))
        note_failure(r, what, t, h, i, got, want, bound);
}

/* fp8 pools: code `got` must be the correctly rounded fp8 of value / scale, where value is the
 * float64 formula, except that a kernel whose own arithmetic error is at most err (in units of
 * value) may land on either neighbour of a rounding midpoint within err: the codes that
 * fp8((value -+ err) / scale) give bound the acceptable ones (rounding is monotonic). */
static void check_fp8(const rp_problem *p, rp_verify_result *r, const char *what, int64_t t, int64_t h,
                      int64_t i, uint8_t got, double value, double err, double scale)
{
    const int e5m2 = p->pool_dtype == RP_F8_E5M2;
    const double g = rp_fp8_bits_to_double(got, e5m2);
    r->checked++;
    if (isnan(value) || isnan(g)) {
        if (!(isnan(value) && isnan(g)))
            note_failure(r, what, t, h, i, g, value / scale, err / scale);
        return;
    }
    if (isinf(value))
        err = 0.0; /* an infinite formula saturates, exactly */
    const double lo = rp_fp8_bits_to_double(rp_double_to_fp8_bits((value - err) / scale, e5m2), e5m2);
    const double hi = rp_fp8_bits_to_double(rp_double_to_fp8_bits((value + err) / scale, e5m2), e5m2);
    if (!(lo <= g && g <= hi))
        note_failure(r, what, t, h, i, g, value / scale, err / scale);
}

/* A float32 kernel's error on the fp8 path beyond the rotation's: value * float32(1 / scale),
 * rounded to float32 (a few float32 ulps). None when scale is 1: the product is exact. */
static double scale_error(double value, double scale)
{
    return scale == 1.0 ? 0.0 : 0x1p-21 * fabs(value);
}

/* The rotation's input at dim i of head h: the element, or with QK-norm (w->data) the float64
 * normalised value, rstd[h] being the head's. */
static double input(const rp_problem *p, const void *src, const int64_t stride[3], const rp_norm_weight *w,
                    const double *rstd, int64_t t, int64_t h, int64_t i)
{
    const double x = load(src, p->dtype, at(stride, t, h, i));
    return w->data ? x * rstd[h] * rp_norm_gain(p, w, i) : x;
}

/* Pair (a, b) of every head of token t, rotated by (c, n) = s * (cos, sin). With fp8 pools and
 * fp8_slot >= 0, k_pool's row fp8_slot must hold the fp8 of the same float64 values. */
static void check_rotation(const rp_problem *p, rp_verify_result *r, const char *what,
                           const void *src, const int64_t src_stride[3], const rp_norm_weight *w,
                           const double *rstd, const void *out, const int64_t out_stride[3], int64_t heads,
                           int64_t t, double c, double n, int64_t a, int64_t b, int64_t fp8_slot)
{
    const double factor = w->data ? 10.0 : 8.0, absolute = w->data ? p->attention_scaling * 0x1p-148 : 0.0;
    for (int64_t h = 0; h < heads; h++) {
        const double x = input(p, src, src_stride, w, rstd, t, h, a);
        const double y = input(p, src, src_stride, w, rstd, t, h, b);
        const double scaled = p->attention_scaling * (fabs(x) + fabs(y));
        const int beyond = p->attention_scaling > 1.0 && scaled > 0x1.fffffep127; /* FLT_MAX */
        const double want_a = x * c - y * n, want_b = y * c + x * n;
        check_value(r, p->dtype, what, t, h, a, load(out, p->dtype, at(out_stride, t, h, a)), want_a, scaled,
                    factor, absolute, beyond);
        check_value(r, p->dtype, what, t, h, b, load(out, p->dtype, at(out_stride, t, h, b)), want_b, scaled,
                    factor, absolute, beyond);
        if (fp8_slot < 0 || beyond)
            continue;
        /* The rotation's error (the bound above without the dtype's rounding), the float32
         * rounding of the rotated value, and the scaling's. */
        const uint8_t *row = (const uint8_t *)p->k_pool + rp_pool_offset(p, p->k_pool_stride, fp8_slot, h);
        const double ea = factor * 0x1p-24 * (scaled + fabs(want_a)) + scale_error(want_a, p->k_scale);
        const double eb = factor * 0x1p-24 * (scaled + fabs(want_b)) + scale_error(want_b, p->k_scale);
        check_fp8(p, r, "k_pool (fp8 of the float64 rotation)", t, h, a, row[a * p->k_pool_stride[3]], want_a,
                  ea, p->k_scale);
        check_fp8(p, r, "k_pool (fp8 of the float64 rotation)", t, h, b, row[b * p->k_pool_stride[3]], want_b,
                  eb, p->k_scale);
    }
}

/* Bit-exact comparison of dims [from, D) of the `heads` head rows src[t] and dst[row]. */
static void check_copy(const rp_problem *p, rp_verify_result *r, const char *what, const void *src,
                       const int64_t src_stride[3], const void *dst, const int64_t dst_stride[3],
                       int64_t heads, int64_t t, int64_t row, int64_t from)
{
    const size_t elem = rp_dtype_size(p->dtype);
    for (int64_t h = 0; h < heads; h++)
        for (int64_t i = from; i < p->head_dim; i++) {
            const char *a = (const char *)src + at(src_stride, t, h, i) * (int64_t)elem;
            const char *b = (const char *)dst + at(dst_stride, row, h, i) * (int64_t)elem;
            r->checked++;
            if (memcmp(a, b, elem) != 0)
                note_failure(r, what, t, h, i, load(dst, p->dtype, at(dst_stride, row, h, i)),
                             load(src, p->dtype, at(src_stride, t, h, i)), 0.0);
        }
}

/* QK-norm: dims [R, D) of the `heads` normalised head rows of token t in out, and for fp8 pools
 * (fp8_slot >= 0) in k_pool's row fp8_slot: the float64 normalised value within ulp + 2 * 2^-24
 * of it (its one float32 rounding, then the dtype's). */
static void check_normalised_dims(const rp_problem *p, rp_verify_result *r, const char *what, const void *src,
                                  const int64_t src_stride[3], const rp_norm_weight *w, const double *rstd,
                                  const void *out, const int64_t out_stride[3], int64_t heads, int64_t t,
                                  int64_t fp8_slot)
{
    for (int64_t h = 0; h < heads; h++)
        for (int64_t i = p->rotary_dim; i < p->head_dim; i++) {
            const double y = input(p, src, src_stride, w, rstd, t, h, i);
            check_value(r, p->dtype, what, t, h, i, load(out, p->dtype, at(out_stride, t, h, i)), y, fabs(y),
                        2.0, 0x1p-149, 0);
            if (fp8_slot < 0)
                continue;
            const uint8_t *row = (const uint8_t *)p->k_pool + rp_pool_offset(p, p->k_pool_stride, fp8_slot, h);
            check_fp8(p, r, "k_pool (pass-through, fp8 of normalised k)", t, h, i, row[i * p->k_pool_stride[3]],
                      y, 0x1p-23 * fabs(y) + scale_error(y, p->k_scale), p->k_scale);
        }
}

/* Dims [from, n) of the Hk head rows src[t] against pool row `slot`: bit-exact copies, or for
 * fp8 pools fp8(src / scale) up to the float32 scaling error. */
static void check_pool_row(const rp_problem *p, rp_verify_result *r, const char *what, const void *src,
                           const int64_t src_stride[3], const void *pool, const int64_t pool_stride[4],
                           int64_t t, int64_t slot, int64_t from, int64_t n, double scale)
{
    const size_t elem = rp_dtype_size(p->dtype);
    for (int64_t h = 0; h < p->num_kv_heads; h++) {
        const int64_t row = rp_pool_offset(p, pool_stride, slot, h);
        for (int64_t i = from; i < n; i++) {
            const int64_t in = at(src_stride, t, h, i), to = row + i * pool_stride[3];
            const double value = load(src, p->dtype, in);
            if (rp_pool_is_fp8(p)) {
                check_fp8(p, r, what, t, h, i, ((const uint8_t *)pool)[to], value, scale_error(value, scale),
                          scale);
                continue;
            }
            r->checked++;
            if (memcmp((const char *)src + in * (int64_t)elem, (const char *)pool + to * (int64_t)elem, elem))
                note_failure(r, what, t, h, i, load(pool, p->dtype, to), value, 0.0);
        }
    }
}

void rp_ref_verify(const rp_problem *p, rp_verify_result *r)
{
    rp_ref_verify_parts(p, RP_PARTS_ALL, r);
}

void rp_ref_verify_parts(const rp_problem *p, rp_parts parts, rp_verify_result *r)
{
    memset(r, 0, sizeof *r);
    const int64_t R = p->rotary_dim, half = R / 2, Hq = p->num_qo_heads, Hk = p->num_kv_heads;
    const int gptj = p->style == RP_ROPE_GPTJ, fp8 = rp_pool_is_fp8(p);
    const int from_k_rot = fp8 && parts == RP_PARTS_SCATTER; /* the unfused scatter's fp8 pool */
    const rp_norm_weight *qw = &p->q_norm, *kw = &p->k_norm;
    /* Each head's QK-norm rstd for the token being checked: q's heads, then k's. */
    double *rstd = malloc((size_t)(Hq + Hk) * sizeof *rstd);
    if (rstd == NULL) {
        r->failures = 1;
        snprintf(r->first_failure, sizeof r->first_failure, "out of memory for %lld heads", (long long)(Hq + Hk));
        return;
    }
    for (int64_t t = 0; t < p->num_tokens; t++) {
        const int64_t slot = rp_load_index(p->slots, p->slot_dtype, p->slot_stride, t);
        for (int64_t h = 0; h < Hq + Hk; h++)
            rstd[h] = h < Hq ? (qw->data ? rp_norm_rstd(p, p->q, p->q_stride, t, h) : 1.0)
                             : (kw->data ? rp_norm_rstd(p, p->k, p->k_stride, t, h - Hq) : 1.0);
        for (int64_t j = 0; j < half; j++) {
            const int64_t pos = rp_load_position(p, t, rp_mrope_row(p->mrope_section, p->mrope_interleaved, j));
            const double angle = (double)pos * p->inv_freq[j];
            const double c = p->attention_scaling * cos(angle), n = p->attention_scaling * sin(angle);
            const int64_t a = gptj ? 2 * j : j, b = gptj ? 2 * j + 1 : j + half;
            check_rotation(p, r, "q_rot", p->q, p->q_stride, qw, rstd, p->q_rot, p->q_rot_stride, Hq, t, c, n,
                           a, b, -1);
            check_rotation(p, r, "k_rot", p->k, p->k_stride, kw, rstd + Hq, p->k_rot, p->k_rot_stride, Hk, t,
                           c, n, a, b, fp8 && !from_k_rot ? slot : -1);
        }
        if (qw->data)
            check_normalised_dims(p, r, "q_rot (pass-through, normalised q)", p->q, p->q_stride, qw, rstd,
                                  p->q_rot, p->q_rot_stride, Hq, t, -1);
        else
            check_copy(p, r, "q_rot (pass-through, vs q)", p->q, p->q_stride, p->q_rot, p->q_rot_stride, Hq,
                       t, t, R);
        if (kw->data)
            check_normalised_dims(p, r, "k_rot (pass-through, normalised k)", p->k, p->k_stride, kw,
                                  rstd + Hq, p->k_rot, p->k_rot_stride, Hk, t,
                                  fp8 && !from_k_rot ? slot : -1);
        else
            check_copy(p, r, "k_rot (pass-through, vs k)", p->k, p->k_stride, p->k_rot, p->k_rot_stride, Hk,
                       t, t, R);
        if (slot < 0)
            continue;
        if (from_k_rot)
            check_pool_row(p, r, "k_pool (fp8 of k_rot, unfused)", p->k_rot, p->k_rot_stride, p->k_pool,
                           p->k_pool_stride, t, slot, 0, p->head_dim, p->k_scale);
        else if (fp8 && !kw->data) /* the rotated dims were checked with the rotation; the pass-through ones hold k */
            check_pool_row(p, r, "k_pool (pass-through, fp8 of k)", p->k, p->k_stride, p->k_pool,
                           p->k_pool_stride, t, slot, R, p->head_dim, p->k_scale);
        else if (!fp8)
            check_pool_row(p, r, "k_pool (vs k_rot)", p->k_rot, p->k_rot_stride, p->k_pool, p->k_pool_stride,
                           t, slot, 0, p->head_dim, 1.0);
        check_pool_row(p, r, "v_pool (vs v)", p->v, p->v_stride, p->v_pool, p->v_pool_stride, t, slot, 0,
                       p->v_head_dim, p->v_scale);
    }
    free(rstd);
}
