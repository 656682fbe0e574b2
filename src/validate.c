/*
 * validate.c — every check on a call, in one place, before anything is written.
 *
 * The seed's checks come first, in its order, with its exact texts (shapes printed as Python
 * tuples), so that sglang users see the messages they know. Ours follow; each names the argument
 * and the value at fault. The first failing check is the one reported.
 */
#include "internal.h"
#include "overlap.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { SHAPE_TEXT = 160 };

typedef struct named {
    const char *name;
    const rp_tensor *t;
} named;

/* A plain-pointer input (QK-norm weight, inv_freq, scale pointer), described as a 1-D tensor. */
typedef struct named_1d {
    const char *name;
    rp_tensor t;
} named_1d;

static int shape_is(const rp_tensor *t, int64_t d0, int64_t d1, int64_t d2)
{
    return t->shape[0] == d0 && t->shape[1] == d1 && t->shape[2] == d2;
}

static int same_shape(const rp_tensor *a, const rp_tensor *b)
{
    if (a->ndim != b->ndim)
        return 0;
    for (int i = 0; i < a->ndim && i < RP_MAX_DIMS; i++)
        if (a->shape[i] != b->shape[i])
            return 0;
    return 1;
}

/* The element count, for messages; INT64_MAX when it does not fit (shapes are non-negative). */
static int64_t numel(const rp_tensor *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->ndim && i < RP_MAX_DIMS; i++)
        if (__builtin_mul_overflow(n, t->shape[i], &n))
            return INT64_MAX;
    return n;
}

/* Where each layout keeps the head and dim axes of a pool, for the shape checks and the strides. */
typedef struct pool_dims {
    const char *name, *shape;
    int block, row, head, dim; /* dimension indices; flat pools have no row dimension (-1) */
} pool_dims;

static const pool_dims layouts[3] = {
    {"flat", "[pool_size, num_kv_heads, head_dim]", 0, -1, 1, 2},
    {"NHD", "[num_blocks, block_size, num_kv_heads, head_dim]", 0, 1, 2, 3},
    {"HND", "[num_blocks, num_kv_heads, block_size, head_dim]", 0, 2, 1, 3},
};

static int is_fp8(int32_t dtype)
{
    return dtype == RP_F8_E4M3 || dtype == RP_F8_E5M2;
}

/* The storage format both pools hold: an fp8 format, or q's dtype (the seed's rule). */
static rp_status check_pool_format(const rp_rope_pool_args *a, rp_err *err)
{
    const rp_status bad = RP_ERR_INVALID_ARGUMENT;
    const int32_t kd = a->k_pool.dtype, vd = a->v_pool.dtype, pd = a->pool_dtype;
    const int fp8ish = is_fp8(kd) || is_fp8(vd) || kd == RP_U8 || vd == RP_U8;
    if (pd != 0 && !is_fp8(pd) && (pd != kd || kd == RP_U8)) /* uint8 is storage, not a format */
        return rp_fail(err, bad, "pool_dtype %s (%d) is not a pool format: use RP_F8_E4M3 (14) or "
                       "RP_F8_E5M2 (15) for uint8 pools, or 0", rp_dtype_name((rp_dtype)pd), (int)pd);
    if (fp8ish && kd != vd)
        return rp_fail(err, bad, "k_pool and v_pool must have one format, got %s vs %s",
                       rp_dtype_name((rp_dtype)kd), rp_dtype_name((rp_dtype)vd));
    if (kd == RP_U8 && pd == 0)
        return rp_fail(err, bad, "k_pool and v_pool are uint8: set pool_dtype to RP_F8_E4M3 (14) or "
                       "RP_F8_E5M2 (15) to name their fp8 format");
    if (pd != 0 && kd != RP_U8 && pd != kd)
        return rp_fail(err, bad, "pool_dtype %s does not match the pools' dtype %s: pool_dtype names the "
                       "format of uint8 pools only", rp_dtype_name((rp_dtype)pd), rp_dtype_name((rp_dtype)kd));
    if (!fp8ish && (kd != a->q.dtype || vd != a->q.dtype))
        return rp_fail(err, bad, "pool dtypes must match q/k/v dtype");
    return RP_OK;
}

static rp_dtype pool_format(const rp_rope_pool_args *a)
{
    return a->k_pool.dtype == RP_U8 ? (rp_dtype)a->pool_dtype : (rp_dtype)a->k_pool.dtype;
}

/* The kernels store fp8(x * float32(1 / scale)): 1 / scale must be a normal float32 (a smaller
 * scale makes it infinite, and 0 * inf a NaN code; a larger one loses its bits). */
#define RP_SCALE_MIN (1.0 / FLT_MAX)
#define RP_SCALE_MAX (1.0 / FLT_MIN)

static int scale_usable(double scale)
{
    return scale >= RP_SCALE_MIN && scale <= RP_SCALE_MAX;
}

/* A dtype as messages name it: its name, or its number where it is none ropepool knows. */
static const char *dtype_text(char *buf, size_t size, int32_t dtype)
{
    const char *name = rp_dtype_name((rp_dtype)dtype);
    if (strcmp(name, rp_dtype_name(RP_DTYPE_OTHER)) != 0)
        return name;
    snprintf(buf, size, "%d (not a dtype ropepool knows)", (int)dtype);
    return buf;
}

/* A scale outside [RP_SCALE_MIN, RP_SCALE_MAX], given as a number or (via_ptr) through name_ptr. */
static rp_status refuse_scale_range(rp_err *err, const char *name, int via_ptr, double scale)
{
    char v[RP_NUMBER_TEXT], lo[RP_NUMBER_TEXT], hi[RP_NUMBER_TEXT];
    rp_format_outside(v, lo, hi, scale, RP_SCALE_MIN, RP_SCALE_MAX, 9);
    return rp_fail(err, RP_ERR_INVALID_ARGUMENT, "%s%s %s%s outside [%s, %s]: the kernels multiply by 1 / %s in "
                   "float32, which must be a normal float32", name, via_ptr ? "_ptr points to" : "", v,
                   via_ptr ? "," : " is", lo, hi, name);
}

/* A scale argument: 0 (= 1), or positive and finite; other than 1 only with fp8 pools. */
static rp_status check_scale(const rp_rope_pool_args *a, const char *name, double scale,
                             const float *ptr, rp_err *err)
{
    const rp_status bad = RP_ERR_INVALID_ARGUMENT;
    const rp_dtype fmt = pool_format(a);
    if (scale != 0.0 && !(isfinite(scale) && scale > 0.0))
        return rp_fail(err, bad, "%s must be a positive finite number (0 = 1.0), got %g", name, scale);
    /* before the range, which only fp8 pools have: on other pools any scale but 1 is the mistake */
    if (!is_fp8(fmt) && scale != 0.0 && scale != 1.0)
        return rp_fail(err, bad, "%s %g needs fp8 pools: k_pool and v_pool are %s, which take no scale",
                       name, scale, rp_dtype_name(fmt));
    if (scale != 0.0 && !scale_usable(scale))
        return refuse_scale_range(err, name, 0, scale);
    if (!is_fp8(fmt) && ptr != NULL)
        return rp_fail(err, bad, "%s_ptr is set but k_pool and v_pool are %s, which take no scale: "
                       "pass NULL", name, rp_dtype_name(fmt));
    if (ptr != NULL && scale != 0.0 && scale != 1.0)
        return rp_fail(err, bad, "%s %g and %s_ptr are both given: pass one (%s = 0 with a pointer)",
                       name, scale, name, name);
    if (ptr != NULL && (uintptr_t)ptr % sizeof(float) != 0)
        return rp_fail(err, bad, "%s_ptr %p is not aligned to its 4-byte float32", name, (const void *)ptr);
    return RP_OK;
}

/* mRoPE is on when mrope_section is: a real section sums to rotary_dim / 2 >= 1, so all zero
 * can only mean "none". */
static int has_mrope(const rp_rope_pool_args *a)
{
    return a->mrope_section[0] != 0 || a->mrope_section[1] != 0 || a->mrope_section[2] != 0;
}

/* The seed's checks, verbatim (sgl_kernel/metal.py, rope_pool_fused); mRoPE's positions [3, T]
 * take the place of its 1-D positions, with their own messages. */
static rp_status check_seed(const rp_rope_pool_args *a, rp_err *err)
{
    char s1[SHAPE_TEXT], s2[SHAPE_TEXT];
    const rp_status bad = RP_ERR_INVALID_ARGUMENT;
    if (a->q.ndim != 3 || a->k.ndim != 3 || a->v.ndim != 3)
        return rp_fail(err, bad, "rope_pool_fused expects q/k/v to be 3-D");
    const int mrope = has_mrope(a);
    if ((a->positions.ndim != 1 && !mrope) || a->slots.ndim != 1)
        return rp_fail(err, bad, "rope_pool_fused expects positions/slots to be 1-D");
    if (mrope && a->positions.ndim != 2)
        return rp_fail(err, bad, "mrope_section [%d, %d, %d] is set, so positions must be 2-D [3, num_tokens] "
                       "(rows t, h, w), got %d-D positions %s", (int)a->mrope_section[0],
                       (int)a->mrope_section[1], (int)a->mrope_section[2], (int)a->positions.ndim,
                       rp_format_shape(s1, sizeof s1, &a->positions));
    if (a->kv_layout != RP_KV_FLAT && a->kv_layout != RP_KV_NHD && a->kv_layout != RP_KV_HND)
        return rp_fail(err, bad, "kv_layout %d is unknown: use RP_KV_FLAT (0), RP_KV_NHD (1) or RP_KV_HND (2)",
                       (int)a->kv_layout);
    if (a->kv_layout == RP_KV_FLAT && (a->k_pool.ndim != 3 || a->v_pool.ndim != 3))
        return rp_fail(err, bad, "rope_pool_fused expects pool tensors to be 3-D");
    if (a->kv_layout != RP_KV_FLAT && (a->k_pool.ndim != 4 || a->v_pool.ndim != 4))
        return rp_fail(err, bad, "kv_layout %s expects 4-D pools %s, got k_pool %s and v_pool %s",
                       layouts[a->kv_layout].name, layouts[a->kv_layout].shape,
                       rp_format_shape(s1, sizeof s1, &a->k_pool), rp_format_shape(s2, sizeof s2, &a->v_pool));
    const int64_t T = a->q.shape[0];
    if (!shape_is(&a->q, T, a->num_qo_heads, a->head_dim))
        return rp_fail(err, bad, "q shape must be [num_tokens, num_qo_heads, head_dim], got %s",
                       rp_format_shape(s1, sizeof s1, &a->q));
    if (!shape_is(&a->k, T, a->num_kv_heads, a->head_dim))
        return rp_fail(err, bad, "k shape must be [num_tokens, num_kv_heads, head_dim], got %s",
                       rp_format_shape(s1, sizeof s1, &a->k));
    if (a->v_head_dim == 0 && !same_shape(&a->v, &a->k))
        return rp_fail(err, bad, "v shape must match k shape, got %s vs %s",
                       rp_format_shape(s1, sizeof s1, &a->v), rp_format_shape(s2, sizeof s2, &a->k));
    if (a->v_head_dim < 0)
        return rp_fail(err, bad, "v_head_dim must be positive (0 = head_dim), got %lld",
                       (long long)a->v_head_dim);
    if (a->v_head_dim > 0 && !shape_is(&a->v, T, a->num_kv_heads, a->v_head_dim))
        return rp_fail(err, bad, "v shape must be [num_tokens, num_kv_heads, v_head_dim] = (%lld, %lld, %lld), got %s",
                       (long long)T, (long long)a->num_kv_heads, (long long)a->v_head_dim,
                       rp_format_shape(s1, sizeof s1, &a->v));
    if (mrope && (a->positions.shape[0] != 3 || a->positions.shape[1] != T))
        return rp_fail(err, bad, "mrope_section is set, so positions must be [3, num_tokens] = (3, %lld) "
                       "(rows t, h, w), got %s", (long long)T, rp_format_shape(s1, sizeof s1, &a->positions));
    if ((!mrope && a->positions.shape[0] != T) || a->slots.shape[0] != T)
        return rp_fail(err, bad, "positions/slots must have one entry per token");
    const pool_dims L = layouts[a->kv_layout];
    if (a->k_pool.shape[L.head] != a->num_kv_heads || a->k_pool.shape[L.dim] != a->head_dim) {
        if (a->kv_layout == RP_KV_FLAT)
            return rp_fail(err, bad, "k_pool has incompatible shape %s",
                           rp_format_shape(s1, sizeof s1, &a->k_pool));
        return rp_fail(err, bad, "k_pool has incompatible shape %s for kv_layout %s %s: num_kv_heads %lld "
                       "and head_dim %lld must be dimensions %d and %d",
                       rp_format_shape(s1, sizeof s1, &a->k_pool), L.name, L.shape,
                       (long long)a->num_kv_heads, (long long)a->head_dim, L.head, L.dim);
    }
    if (a->v_head_dim == 0 && !same_shape(&a->v_pool, &a->k_pool))
        return rp_fail(err, bad, "v_pool shape must match k_pool shape, got %s vs %s",
                       rp_format_shape(s1, sizeof s1, &a->v_pool),
                       rp_format_shape(s2, sizeof s2, &a->k_pool));
    if (a->v_head_dim > 0) {
        int match = a->v_pool.shape[L.dim] == a->v_head_dim;
        for (int d = 0; d < a->k_pool.ndim; d++)
            match &= d == L.dim || a->v_pool.shape[d] == a->k_pool.shape[d];
        if (!match)
            return rp_fail(err, bad, "v_pool shape must be k_pool's with v_head_dim %lld as dimension %d, "
                           "got %s vs %s", (long long)a->v_head_dim, L.dim,
                           rp_format_shape(s1, sizeof s1, &a->v_pool),
                           rp_format_shape(s2, sizeof s2, &a->k_pool));
    }
    if (a->q.dtype != a->k.dtype || a->q.dtype != a->v.dtype)
        return rp_fail(err, bad, "q/k/v dtypes must match");
    return check_pool_format(a, err);
}

/* The RoPE variant: style, rotary_dim, the caller's frequencies (every entry is read: a NaN in
 * the table would otherwise reach the outputs silently) and the attention scaling. */
static rp_status check_variant(const rp_rope_pool_args *a, rp_err *err)
{
    const rp_status bad = RP_ERR_INVALID_ARGUMENT;
    if (a->style != RP_ROPE_NEOX && a->style != RP_ROPE_GPTJ)
        return rp_fail(err, bad, "style %d is not a rope style: use RP_ROPE_NEOX (0) or RP_ROPE_GPTJ (1)",
                       (int)a->style);
    const long long R = (long long)a->rotary_dim, D = (long long)a->head_dim;
    if (R < 0 || R == 1)
        return rp_fail(err, bad, "rotary_dim must be >= 2 (0 = head_dim), got %lld", R);
    if (R % 2 != 0)
        return rp_fail(err, bad, "rotary_dim must be even, got %lld", R);
    if (R > D)
        return rp_fail(err, bad, "rotary_dim %lld is larger than head_dim %lld", R, D);
    const int64_t half = (a->rotary_dim ? a->rotary_dim : a->head_dim) / 2;
    /* the angle position * f must stay finite for every int64 position (|position| <= 2^63):
     * beyond, sin and cos of infinity would be NaN outputs */
    const double most_freq = DBL_MAX / 0x1p63;
    if (a->inv_freq == NULL && a->rope_base < 1.0 && half > 1) {
        /* below 1, rope_base's frequencies grow with j: the last one, rope_base^(-(R-2)/R), is the
         * largest (computed as rp_compute_inv_freq computes it) */
        const double largest = pow(a->rope_base, -(double)(2 * (half - 1)) / (double)(2 * half));
        if (!(largest <= most_freq)) {
            char v[RP_NUMBER_TEXT], most[RP_NUMBER_TEXT];
            rp_format_past(v, most, largest, most_freq, 6);
            return rp_fail(err, bad,
                           "rope_base %g is too small for rotary_dim %lld: its largest frequency "
                           "rope_base^(-%lld/%lld) = %s would overflow the angle position * frequency in float64 "
                           "for positions near 2^63 (at most %s, as for inv_freq)",
                           a->rope_base, (long long)(2 * half), (long long)(2 * half - 2), (long long)(2 * half),
                           v, most);
        }
    }
    for (int64_t j = 0; a->inv_freq != NULL && j < half; j++) {
        if (!(isfinite(a->inv_freq[j]) && a->inv_freq[j] >= 0.0))
            return rp_fail(err, bad, "inv_freq[%lld] must be finite and >= 0, got %g", (long long)j,
                           a->inv_freq[j]);
        if (a->inv_freq[j] > most_freq) {
            char v[RP_NUMBER_TEXT], most[RP_NUMBER_TEXT];
            rp_format_past(v, most, a->inv_freq[j], most_freq, 6);
            return rp_fail(err, bad,
                           "inv_freq[%lld] = %s is too large: the angle position * inv_freq would overflow "
                           "float64 for positions near 2^63 (at most %s)", (long long)j, v, most);
        }
    }
    if (a->attention_scaling != 0.0 && !(isfinite(a->attention_scaling) && a->attention_scaling > 0.0))
        return rp_fail(err, bad, "attention_scaling must be positive and finite (0 = 1.0), got %g",
                       a->attention_scaling);
    /* The kernels hold s * cos and s * sin as float32: beyond FLT_MAX they overflow, below FLT_MIN
     * they lose the bits the error bound counts on (it scales with s). */
    if (a->attention_scaling != 0.0 && !(a->attention_scaling >= FLT_MIN && a->attention_scaling <= FLT_MAX)) {
        char v[RP_NUMBER_TEXT], lo[RP_NUMBER_TEXT], hi[RP_NUMBER_TEXT];
        rp_format_outside(v, lo, hi, a->attention_scaling, FLT_MIN, FLT_MAX, 9);
        return rp_fail(err, bad, "attention_scaling %s is outside float32's normal range [%s, %s], in which "
                       "the kernels scale cos and sin", v, lo, hi);
    }
    const int32_t *sec = a->mrope_section;
    if (sec[0] < 0 || sec[1] < 0 || sec[2] < 0)
        return rp_fail(err, bad, "mrope_section [%d, %d, %d] must be three non-negative counts of frequencies "
                       "(t, h, w)", (int)sec[0], (int)sec[1], (int)sec[2]);
    if (has_mrope(a) && (int64_t)sec[0] + sec[1] + sec[2] != half)
        return rp_fail(err, bad, "mrope_section [%d, %d, %d] sums to %lld, but must sum to rotary_dim / 2 = %lld",
                       (int)sec[0], (int)sec[1], (int)sec[2], (long long)sec[0] + sec[1] + sec[2], (long long)half);
    if (a->mrope_interleaved > 1)
        return rp_fail(err, bad, "mrope_interleaved must be 0 or 1, got %u", (unsigned)a->mrope_interleaved);
    if (a->mrope_interleaved && !has_mrope(a))
        return rp_fail(err, bad, "mrope_interleaved is set but mrope_section is not: interleaving needs the "
                       "section [t, h, w]");
    return RP_OK;
}

/* QK-norm: each weight's dtype (q's or float32) and alignment; eps and offset need a weight, and
 * with one eps must be positive and finite (no default: it is the model's) and offset finite. */
static rp_status check_norm(const rp_rope_pool_args *a, rp_err *err)
{
    const rp_status bad = RP_ERR_INVALID_ARGUMENT;
    const char *names[2] = {"q_norm_weight", "k_norm_weight"};
    const void *data[2] = {a->q_norm_weight, a->k_norm_weight};
    const int32_t dtypes[2] = {a->q_norm_weight_dtype, a->k_norm_weight_dtype};
    for (int i = 0; i < 2; i++) {
        const rp_dtype dt = (rp_dtype)(dtypes[i] ? dtypes[i] : a->q.dtype);
        if (data[i] == NULL && dtypes[i] != 0)
            return rp_fail(err, bad, "%s_dtype is %s but %s is NULL", names[i], rp_dtype_name(dt), names[i]);
        char text[48];
        if (dt != RP_F32 && dt != (rp_dtype)a->q.dtype)
            return rp_fail(err, bad, "%s dtype must be q's dtype %s%s, got %s", names[i],
                           rp_dtype_name((rp_dtype)a->q.dtype), a->q.dtype == RP_F32 ? "" : " or float32",
                           dtype_text(text, sizeof text, dt));
        if ((uintptr_t)data[i] % rp_dtype_size(dt) != 0 && !(a->flags & RP_VALIDATE_ONLY))
            return rp_fail(err, bad, "%s %p is not aligned to its %zu-byte %s elements", names[i], data[i],
                           rp_dtype_size(dt), rp_dtype_name(dt));
    }
    if (data[0] == NULL && data[1] == NULL) {
        /* name only what was set: 0 is the field's "not set", which the caller may never have written */
        if (a->norm_eps != 0.0 && a->norm_weight_offset != 0.0)
            return rp_fail(err, bad, "norm_eps %g and norm_weight_offset %g need q_norm_weight or "
                           "k_norm_weight, and neither is given", a->norm_eps, a->norm_weight_offset);
        if (a->norm_eps != 0.0 || a->norm_weight_offset != 0.0)
            return rp_fail(err, bad, "%s %g needs q_norm_weight or k_norm_weight, and neither is given",
                           a->norm_eps != 0.0 ? "norm_eps" : "norm_weight_offset",
                           a->norm_eps != 0.0 ? a->norm_eps : a->norm_weight_offset);
        return RP_OK;
    }
    if (!(isfinite(a->norm_eps) && a->norm_eps > 0.0))
        return rp_fail(err, bad, "norm_eps must be a positive finite number with a QK-norm weight "
                       "(the model's rms_norm_eps, e.g. 1e-06), got %g", a->norm_eps);
    if (!isfinite(a->norm_weight_offset))
        return rp_fail(err, bad, "norm_weight_offset must be finite (0, or 1 for (1 + w) weights), got %g",
                       a->norm_weight_offset);
    return RP_OK;
}

static rp_status check_scalars(const rp_rope_pool_args *a, rp_err *err)
{
    const rp_status bad = RP_ERR_INVALID_ARGUMENT;
    rp_status st;
    const rp_dtype dt = (rp_dtype)a->q.dtype;
    char text[48];
    if (dt != RP_F32 && dt != RP_F16 && dt != RP_BF16) {
        if (dt == RP_DTYPE_UNSET)
            return rp_fail(err, bad, "q dtype is not set (rp_tensor.dtype is 0)");
        return rp_fail(err, bad, "q/k/v dtype %s is not supported: use float32, float16 or bfloat16",
                       dtype_text(text, sizeof text, a->q.dtype));
    }
    const named index_arrays[] = {{"positions", &a->positions}, {"slots", &a->slots}};
    for (int i = 0; i < 2; i++) {
        const rp_dtype it = (rp_dtype)index_arrays[i].t->dtype;
        if (it != RP_I32 && it != RP_I64)
            return rp_fail(err, bad, "%s dtype must be int32 or int64, got %s", index_arrays[i].name,
                           dtype_text(text, sizeof text, index_arrays[i].t->dtype));
    }
    if (a->head_dim <= 0 || a->head_dim % 2 != 0)
        return rp_fail(err, bad, "head_dim must be a positive even number, got %lld",
                       (long long)a->head_dim);
    if (a->num_qo_heads <= 0)
        return rp_fail(err, bad, "num_qo_heads must be positive, got %lld",
                       (long long)a->num_qo_heads);
    if (a->num_kv_heads <= 0)
        return rp_fail(err, bad, "num_kv_heads must be positive, got %lld",
                       (long long)a->num_kv_heads);
    if (!(isfinite(a->rope_base) && a->rope_base > 0.0))
        return rp_fail(err, bad, "rope_base must be a positive finite number, got %g", a->rope_base);
    /* Below DBL_MIN the frequencies rope_base^(-2j/R), up to 1 / rope_base, overflow float64. */
    if (a->inv_freq == NULL && a->rope_base < DBL_MIN) {
        char v[RP_NUMBER_TEXT], least[RP_NUMBER_TEXT];
        rp_format_past(v, least, a->rope_base, DBL_MIN, 6);
        return rp_fail(err, bad, "rope_base %s is below float64's normal range (%s): its frequencies "
                       "rope_base^(-2j/rotary_dim) would overflow", v, least);
    }

    if ((st = check_variant(a, err)) != RP_OK || (st = check_norm(a, err)) != RP_OK)
        return st;
    if ((st = check_scale(a, "k_scale", a->k_scale, a->k_scale_ptr, err)) != RP_OK ||
        (st = check_scale(a, "v_scale", a->v_scale, a->v_scale_ptr, err)) != RP_OK)
        return st;
    if (a->num_threads < 0)
        return rp_fail(err, bad, "num_threads must be >= 0 (0 = the context's), got %d", (int)a->num_threads);
    if (a->flags & ~(uint32_t)(RP_CHECK_SLOTS | RP_VALIDATE_ONLY))
        return rp_fail(err, bad, "flags 0x%x has unknown bits (known: RP_CHECK_SLOTS = 0x1, "
                                 "RP_VALIDATE_ONLY = 0x2)",
                       (unsigned)a->flags);
    if (a->reserved0 != 0)
        return rp_fail(err, bad, "rp_rope_pool_args reserved fields must be 0 (zero-initialise the struct): "
                       "reserved0 is %u", (unsigned)a->reserved0);
    for (size_t i = 0; i < sizeof a->reserved / sizeof a->reserved[0]; i++)
        if (a->reserved[i] != 0)
            return rp_fail(err, bad, "rp_rope_pool_args reserved fields must be 0 (zero-initialise the struct): "
                           "reserved[%zu] is %llu", i, (unsigned long long)a->reserved[i]);
    return RP_OK;
}

static const char *device_text(char *buf, size_t size, rp_device d)
{
    if (d.type == 0 || d.type == RP_DEVICE_CPU)
        snprintf(buf, size, "cpu");
    else if (d.type == RP_DEVICE_CUDA)
        snprintf(buf, size, "cuda:%d", (int)d.index);
    else
        snprintf(buf, size, "device type %d", (int)d.type);
    return buf;
}

static int same_device(rp_device a, rp_device b)
{
    const int ta = a.type == 0 ? RP_DEVICE_CPU : a.type, tb = b.type == 0 ? RP_DEVICE_CPU : b.type;
    return ta == tb && (ta == RP_DEVICE_CPU || a.index == b.index);
}

/* 0 when tensors a and b (indices into check_memory's table) cannot share a byte: one is empty or
 * their byte ranges are disjoint. rp_tensors_overlap starts with the same test. */
static int ranges_meet(const rp_extent *ext, const int *empty, int a, int b)
{
    return !empty[a] && !empty[b] && ext[a].begin < ext[b].end && ext[b].begin < ext[a].end;
}

/* Outputs: shapes and dtypes; then, for all nine tensors, memory: devices, data, alignment,
 * addressable strides; then writability and aliasing of the outputs. */
static rp_status check_memory(const rp_rope_pool_args *a, rp_err *err)
{
    char s1[SHAPE_TEXT], s2[SHAPE_TEXT];
    const rp_status bad = RP_ERR_INVALID_ARGUMENT;
    const named rot[2][2] = {{{"q_rot", &a->q_rot}, {"q", &a->q}}, {{"k_rot", &a->k_rot}, {"k", &a->k}}};
    for (int i = 0; i < 2; i++) {
        const rp_tensor *out = rot[i][0].t, *in = rot[i][1].t;
        if (!same_shape(out, in))
            return rp_fail(err, bad, "%s shape must match %s shape, got %s vs %s", rot[i][0].name,
                           rot[i][1].name, rp_format_shape(s1, sizeof s1, out),
                           rp_format_shape(s2, sizeof s2, in));
        if (out->dtype != in->dtype)
            return rp_fail(err, bad, "%s dtype must match %s dtype, got %s vs %s", rot[i][0].name,
                           rot[i][1].name, rp_dtype_name((rp_dtype)out->dtype),
                           rp_dtype_name((rp_dtype)in->dtype));
    }

    const named all[9] = {{"q", &a->q},           {"k", &a->k},         {"v", &a->v},
                          {"positions", &a->positions}, {"slots", &a->slots},
                          {"k_pool", &a->k_pool}, {"v_pool", &a->v_pool},
                          {"q_rot", &a->q_rot},   {"k_rot", &a->k_rot}};
    const named *inputs = all, *outputs = all + 5;
    for (int i = 0; i < 9; i++) {
        const rp_tensor *t = all[i].t;
        for (int d = 0; d < t->ndim; d++)
            if (t->shape[d] < 0)
                return rp_fail(err, bad, "%s shape %s has a negative dimension", all[i].name,
                               rp_format_shape(s1, sizeof s1, t));
        /* Checked before RP_VALIDATE_ONLY returns: every size computed from the shapes (the pool
         * size num_blocks * block_size among them) then fits in int64. */
        if (numel(t) == INT64_MAX)
            return rp_fail(err, bad, "%s shape %s has 2^63 elements or more", all[i].name,
                           rp_format_shape(s1, sizeof s1, t));
        const size_t elem_size = rp_dtype_size((rp_dtype)t->dtype);
        if (elem_size > 1 && numel(t) > INT64_MAX / (int64_t)elem_size)
            return rp_fail(err, bad, "%s shape %s has 2^63 bytes or more", all[i].name,
                           rp_format_shape(s1, sizeof s1, t));
        if (t->reserved != 0 || (t->flags & ~(uint32_t)RP_TENSOR_READ_ONLY))
            return rp_fail(err, bad, "%s: rp_tensor reserved bits must be 0 (flags 0x%x, reserved 0x%x)",
                           all[i].name, (unsigned)t->flags, (unsigned)t->reserved);
        if (t->device.type != 0 && t->device.type != RP_DEVICE_CPU && t->device.type != RP_DEVICE_CUDA)
            return rp_fail(err, bad, "%s has unknown device type %d", all[i].name, (int)t->device.type);
        if (t->device.type == RP_DEVICE_CUDA && t->device.index < 0)
            return rp_fail(err, bad, "%s is on cuda:%d: a CUDA device index must be >= 0", all[i].name,
                           (int)t->device.index);
        if (t->device.type != RP_DEVICE_CUDA && t->device.index != 0)
            return rp_fail(err, bad, "%s is on the CPU but has device index %d (0 for the CPU)", all[i].name,
                           (int)t->device.index);
        if (!same_device(t->device, a->q.device))
            return rp_fail(err, bad, "all tensors must be on one device: %s is on %s but q is on %s",
                           all[i].name, device_text(s1, sizeof s1, t->device),
                           device_text(s2, sizeof s2, a->q.device));
    }
    for (int o = 0; o < 4; o++)
        if (outputs[o].t->flags & RP_TENSOR_READ_ONLY)
            return rp_fail(err, bad, "%s is read-only, but the call writes it", outputs[o].name);
    if (a->flags & RP_VALIDATE_ONLY) /* the caller has no memory yet: stop before the data */
        return RP_OK;
    /* Byte ranges, kept for the aliasing checks below: tensors whose ranges are disjoint (the
     * usual case) need no exact test, which a decode-size call could not afford 26 times. */
    rp_extent ext[9];
    int empty[9];
    for (int i = 0; i < 9; i++) {
        const rp_tensor *t = all[i].t;
        const size_t elem = rp_dtype_size((rp_dtype)t->dtype);
        if ((empty[i] = rp_tensor_is_empty(t)))
            continue;
        if (t->data == NULL)
            return rp_fail(err, bad, "%s data is NULL but it has %lld elements", all[i].name,
                           (long long)numel(t));
        if (((uintptr_t)t->data & (elem - 1)) != 0) /* elem is 2, 4 or 8 by now */
            return rp_fail(err, bad, "%s data %p is not aligned to its %zu-byte %s elements",
                           all[i].name, t->data, elem, rp_dtype_name((rp_dtype)t->dtype));
        if (!rp_tensor_extent(t, &ext[i]))
            return rp_fail(err, bad, "%s strides overflow the address space for shape %s",
                           all[i].name, rp_format_shape(s1, sizeof s1, t));
    }
    for (int o = 0; o < 4; o++) {
        const rp_tensor *t = outputs[o].t;
        if (rp_tensor_self_overlaps(t)) {
            rp_tensor strides = *t; /* printed as a tuple, like the shape */
            memcpy(strides.shape, t->strides, sizeof strides.shape);
            return rp_fail(err, RP_ERR_OVERLAP, "%s has overlapping elements (strides %s for shape %s)",
                           outputs[o].name, rp_format_shape(s2, sizeof s2, &strides),
                           rp_format_shape(s1, sizeof s1, t));
        }
    }
    /* The inputs that are plain arrays, described here as tensors: the QK-norm weights ([D]), the
     * caller's frequencies ([R/2] float64, read while q_rot is written) and the scales. */
    const int64_t half = (a->rotary_dim ? a->rotary_dim : a->head_dim) / 2;
    const rp_dtype qd = (rp_dtype)a->q.dtype;
    const named_1d side[5] = {
        {"q_norm_weight", rp_tensor_1d((void *)a->q_norm_weight,
                                       a->q_norm_weight_dtype ? (rp_dtype)a->q_norm_weight_dtype : qd, a->head_dim)},
        {"k_norm_weight", rp_tensor_1d((void *)a->k_norm_weight,
                                       a->k_norm_weight_dtype ? (rp_dtype)a->k_norm_weight_dtype : qd, a->head_dim)},
        {"inv_freq", rp_tensor_1d((void *)a->inv_freq, RP_F64, half)},
        {"k_scale_ptr", rp_tensor_1d((void *)a->k_scale_ptr, RP_F32, 1)},
        {"v_scale_ptr", rp_tensor_1d((void *)a->v_scale_ptr, RP_F32, 1)},
    };
    for (int w = 0; w < 5; w++) {
        rp_extent e;
        if (side[w].t.data != NULL && !rp_tensor_is_empty(&side[w].t) && !rp_tensor_extent(&side[w].t, &e))
            return rp_fail(err, bad, "%s %p with %lld elements wraps the address space", side[w].name,
                           side[w].t.data, (long long)side[w].t.shape[0]);
    }
    for (int o = 0; o < 4; o++) {
        const rp_tensor *out = outputs[o].t;
        for (int i = 0; i < 5; i++) {
            const rp_tensor *in = inputs[i].t;
            if (!ranges_meet(ext, empty, 5 + o, i))
                continue;
            const int in_place = (out == &a->q_rot && in == &a->q) || (out == &a->k_rot && in == &a->k);
            if (in_place && out->data == in->data) {
                int identical = 1;
                for (int d = 0; d < 3; d++)
                    identical &= out->strides[d] == in->strides[d] || out->shape[d] <= 1;
                if (identical && (in->flags & RP_TENSOR_READ_ONLY))
                    return rp_fail(err, bad, "%s is read-only, but %s = %s writes it in place", inputs[i].name,
                                   outputs[o].name, inputs[i].name);
                if (identical)
                    continue;
            }
            if (rp_tensors_overlap(out, in))
                return rp_fail(err, RP_ERR_OVERLAP,
                               "%s overlaps %s: outputs may share memory with inputs only as "
                               "q_rot = q or k_rot = k (same data, shape and strides)",
                               outputs[o].name, inputs[i].name);
        }
        for (int p = 0; p < o; p++)
            if (ranges_meet(ext, empty, 5 + o, 5 + p) && rp_tensors_overlap(out, outputs[p].t))
                return rp_fail(err, RP_ERR_OVERLAP, "%s overlaps %s: outputs must not share memory",
                               outputs[o].name, outputs[p].name);
        for (int w = 0; w < 5; w++)
            if (side[w].t.data != NULL && !empty[5 + o] && rp_tensors_overlap(out, &side[w].t))
                return rp_fail(err, RP_ERR_OVERLAP, "%s overlaps %s: outputs must not share memory with inputs",
                               outputs[o].name, side[w].name);
    }
    return RP_OK;
}

static void copy3(int64_t dst[3], const rp_tensor *t)
{
    dst[0] = t->strides[0];
    dst[1] = t->strides[1];
    dst[2] = t->strides[2];
}

/* A pool's strides as [block, row, head, dim]; flat pools are blocks of one row. */
static void pool_strides(int64_t dst[4], const rp_tensor *t, pool_dims L)
{
    dst[0] = t->strides[L.block];
    dst[1] = L.row < 0 ? 0 : t->strides[L.row];
    dst[2] = t->strides[L.head];
    dst[3] = t->strides[L.dim];
}

rp_status rp_validate(const rp_rope_pool_args *a, rp_problem *p, rp_err *err)
{
    rp_status st;
    if (a == NULL)
        return rp_fail(err, RP_ERR_INVALID_ARGUMENT, "args is NULL");
    if ((st = check_seed(a, err)) != RP_OK || (st = check_scalars(a, err)) != RP_OK ||
        (st = check_memory(a, err)) != RP_OK)
        return st;

    const pool_dims L = layouts[a->kv_layout];
    p->num_tokens = a->q.shape[0];
    p->num_qo_heads = a->num_qo_heads;
    p->num_kv_heads = a->num_kv_heads;
    p->head_dim = a->head_dim;
    p->v_head_dim = a->v_head_dim ? a->v_head_dim : a->head_dim;
    p->block_size = L.row < 0 ? 1 : a->k_pool.shape[L.row];
    p->num_blocks = a->k_pool.shape[0];
    p->pool_size = p->num_blocks * p->block_size; /* fits: the pools' element counts do (check_memory) */
    p->block_shift = -1;
    for (int b = 0; b < 63 && p->block_shift < 0; b++)
        if (p->block_size == (int64_t)1 << b)
            p->block_shift = b;
    p->kv_layout = a->kv_layout;
    p->dtype = (rp_dtype)a->q.dtype;
    p->pool_dtype = pool_format(a);
    p->k_scale = a->k_scale != 0.0 ? a->k_scale : 1.0;
    p->v_scale = a->v_scale != 0.0 ? a->v_scale : 1.0;
    p->k_scale_ptr = a->k_scale_ptr;
    p->v_scale_ptr = a->v_scale_ptr;
    p->pos_dtype = (rp_dtype)a->positions.dtype;
    p->slot_dtype = (rp_dtype)a->slots.dtype;
    p->q = a->q.data;
    p->k = a->k.data;
    p->v = a->v.data;
    p->positions = a->positions.data;
    p->slots = a->slots.data;
    p->q_rot = a->q_rot.data;
    p->k_rot = a->k_rot.data;
    p->k_pool = a->k_pool.data;
    p->v_pool = a->v_pool.data;
    copy3(p->q_stride, &a->q);
    copy3(p->k_stride, &a->k);
    copy3(p->v_stride, &a->v);
    copy3(p->q_rot_stride, &a->q_rot);
    copy3(p->k_rot_stride, &a->k_rot);
    pool_strides(p->k_pool_stride, &a->k_pool, L);
    pool_strides(p->v_pool_stride, &a->v_pool, L);
    p->mrope = has_mrope(a);
    p->pos_stride = a->positions.strides[p->mrope ? 1 : 0];
    p->pos_row_stride = p->mrope ? a->positions.strides[0] : 0;
    p->slot_stride = a->slots.strides[0];
    const int64_t *inner[5] = {p->q_stride, p->k_stride, p->v_stride, p->q_rot_stride, p->k_rot_stride};
    p->inner_contiguous = p->k_pool_stride[3] == 1 && p->v_pool_stride[3] == 1;
    for (int i = 0; i < 5; i++)
        p->inner_contiguous &= inner[i][2] == 1;
    p->rotary_dim = a->rotary_dim ? a->rotary_dim : a->head_dim;
    p->style = (rp_rope_style)a->style;
    p->attention_scaling = a->attention_scaling != 0.0 ? a->attention_scaling : 1.0;
    p->rope_base = a->rope_base;
    p->inv_freq = a->inv_freq;
    p->caller_freq = a->inv_freq != NULL;
    p->mrope_interleaved = (int)a->mrope_interleaved;
    for (int r = 0; r < 3; r++) /* without mRoPE, {R/2, 0, 0}: row 0 for every frequency */
        p->mrope_section[r] = p->mrope ? a->mrope_section[r] : r == 0 ? (int32_t)(p->rotary_dim / 2) : 0;
    p->q_norm.data = a->q_norm_weight;
    p->q_norm.dtype = (rp_dtype)(a->q_norm_weight_dtype ? a->q_norm_weight_dtype : a->q.dtype);
    p->k_norm.data = a->k_norm_weight;
    p->k_norm.dtype = (rp_dtype)(a->k_norm_weight_dtype ? a->k_norm_weight_dtype : a->q.dtype);
    p->norm_eps = a->norm_eps;
    p->norm_offset = a->norm_weight_offset;
    return RP_OK;
}

rp_status rp_fail_slot_out_of_range(rp_err *err, int64_t slot, int64_t token, int64_t pool_size)
{
    return rp_fail(err, RP_ERR_SLOT_OUT_OF_RANGE,
                   "slot %lld of token %lld is out of range for a pool of %lld slots "
                   "(valid: 0 <= slot < %lld; negative skips the write)",
                   (long long)slot, (long long)token, (long long)pool_size, (long long)pool_size);
}

/* Open-addressing set of slots seen so far, mapping slot -> first token. */
typedef struct slot_entry {
    int64_t slot; /* -1 = empty (only slots >= 0 are stored) */
    int64_t token;
} slot_entry;

rp_status rp_validate_slots(const rp_problem *p, const void *slots, rp_err *err)
{
    const int64_t T = p->num_tokens;
    enum { STACK_ENTRIES = 512 };
    slot_entry stack[STACK_ENTRIES];
    /* The set holds at most min(T, pool_size) slots (the loop stops at the first out of range),
     * at most half full. A T of 2^58 (stride-0 inputs) must not wrap its size to a small block. */
    const uint64_t most = (uint64_t)(T < p->pool_size ? T : p->pool_size);
    if (most > SIZE_MAX / sizeof(slot_entry) / 4)
        return rp_fail(err, RP_ERR_OUT_OF_MEMORY, "out of memory checking %lld slots for duplicates",
                       (long long)T);
    size_t cap = 16;
    while (cap < 2 * most)
        cap *= 2;
    slot_entry *set = stack;
    if (cap > STACK_ENTRIES && (set = malloc(cap * sizeof *set)) == NULL)
        return rp_fail(err, RP_ERR_OUT_OF_MEMORY, "out of memory checking %lld slots for duplicates",
                       (long long)T);
    for (size_t i = 0; i < cap; i++)
        set[i].slot = -1;
    rp_status st = RP_OK;
    for (int64_t t = 0; t < T && st == RP_OK; t++) {
        const int64_t slot = rp_load_index(slots, p->slot_dtype, p->slot_stride, t);
        if (slot < 0)
            continue;
        if (slot >= p->pool_size) {
            if (p->kv_layout == RP_KV_FLAT)
                st = rp_fail_slot_out_of_range(err, slot, t, p->pool_size);
            else
                st = rp_fail(err, RP_ERR_SLOT_OUT_OF_RANGE,
                             "slot %lld of token %lld is out of range for a paged pool of %lld blocks x "
                             "block_size %lld = %lld slots (valid: 0 <= slot < %lld; negative skips the write)",
                             (long long)slot, (long long)t, (long long)p->num_blocks,
                             (long long)p->block_size, (long long)p->pool_size, (long long)p->pool_size);
            break;
        }
        size_t h = (size_t)(((uint64_t)slot * 0x9e3779b97f4a7c15ull) >> 17) & (cap - 1);
        while (set[h].slot >= 0 && set[h].slot != slot)
            h = (h + 1) & (cap - 1);
        if (set[h].slot == slot)
            st = rp_fail(err, RP_ERR_DUPLICATE_SLOT,
                         "slot %lld is used by tokens %lld and %lld: each slot may be written once per call",
                         (long long)slot, (long long)set[h].token, (long long)t);
        set[h].slot = slot;
        set[h].token = t;
    }
    if (set != stack)
        free(set);
    return st;
}

/* One scale pointer: the float32 it points to must be a usable scale. */
static rp_status read_host_scale(const char *name, const float *ptr, double *scale, rp_err *err)
{
    if (ptr == NULL)
        return RP_OK;
    const float value = *ptr;
    if (!(isfinite(value) && value > 0.0f))
        return rp_fail(err, RP_ERR_INVALID_ARGUMENT,
                       "%s_ptr points to %g: the scale must be a positive finite number", name, (double)value);
    if (!scale_usable(value))
        return refuse_scale_range(err, name, 1, value);
    *scale = value;
    return RP_OK;
}

rp_status rp_resolve_host_scales(rp_problem *p, rp_err *err)
{
    rp_status st = read_host_scale("k_scale", p->k_scale_ptr, &p->k_scale, err);
    return st != RP_OK ? st : read_host_scale("v_scale", p->v_scale_ptr, &p->v_scale, err);
}
