/*
 * hf_rope.c — transformers' RoPE frequency tables, operation for operation, and its pair styles.
 *
 * transformers (modeling_rope_utils.py, 5.x) computes inv_freq in float32 torch arithmetic, and the
 * model was trained with that float32 table; a float64 evaluation of the same formulas lands up to
 * 3.5 float32 ulps away. So each formula below repeats transformers' float32 operations in its
 * order, each rounded once (the f32_* helpers), with Python scalars rounded to float32 where torch
 * rounds them (a Python float meeting a float32 tensor) and double where Python computes them.
 * Two torch details matter: `x / tensor` is `tensor.reciprocal() * x`, and a tensor ** Python float
 * raises to the double exponent. The only deliberate difference is pow: ours is correctly rounded,
 * torch's CPU powf (SLEEF u10 in vector lanes, libm in the tail) is within 1 ulp.
 *
 * Validation runs completely before inv_freq or *attention_scaling is written (the table is built
 * in a scratch buffer and checked finite first), so a failed call writes nothing.
 */
#include "fp_mode.h"
#include "internal.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One float32 operation, correctly rounded: the exact result of +, -, *, / on two floats fits the
 * double's 53 bits closely enough (53 >= 2 * 24 + 2) that rounding it to float is the float result,
 * and a helper per operation keeps a compiler from contracting a*b + c into one FMA rounding. */

/* double -> float as IEEE rounds it, overflow included: C leaves an out-of-range conversion
 * undefined, so values from FLT_MAX + half an ulp up become infinities here, explicitly. */
static float f32(double x)
{
    const double overflow = 0x1.ffffffp127;
    return x >= overflow ? INFINITY : x <= -overflow ? -INFINITY : (float)x;
}
static float f32_add(float a, float b) { return f32((double)a + (double)b); }
static float f32_sub(float a, float b) { return f32((double)a - (double)b); }
static float f32_mul(float a, float b) { return f32((double)a * (double)b); }
static float f32_div(float a, float b) { return f32((double)a / (double)b); }
/* Correctly rounded except when the exact power lies within a double ulp of a float32 rounding
 * boundary. */
static float f32_pow(float base, double exponent) { return f32(pow((double)base, exponent)); }

/* Python's math.pi. */
static const double hf_pi = 3.141592653589793;

/* transformers' `base ** (torch.arange(0, R, 2).float() / R)`, element j. */
static float pow_of_shape(float base, int64_t j, int64_t rotary_dim)
{
    return f32_pow(base, (double)f32_div((float)(2 * j), (float)rotary_dim));
}

/* The default table 1 / base^(2j/R) (RoPE's own, and the start of linear, dynamic, llama3 and
 * proportional). */
static void default_table(float base, int64_t rotary_dim, float *out)
{
    for (int64_t j = 0; j < rotary_dim / 2; j++)
        out[j] = f32_div(1.0f, pow_of_shape(base, j, rotary_dim));
}

/* Dynamic NTK. Past max_position_embeddings transformers' runtime update forms the grown base from
 * the tensor seq_len in float32; at init (no seq_len, or one within range) it forms it in Python
 * double from max_position_embeddings, which gives theta back. */
static void dynamic_table(const rp_hf_rope_params *p, float *out)
{
    const int64_t r = p->rotary_dim;
    const double exponent = (double)r / (double)(r - 2);
    float base;
    if (p->seq_len > p->max_position_embeddings) {
        float x = f32_mul(f32(p->factor), (float)p->seq_len);
        x = f32_div(x, (float)p->max_position_embeddings);
        x = f32_sub(x, f32(p->factor - 1.0));
        base = f32_mul(f32(p->rope_theta), f32_pow(x, exponent));
    } else {
        const double m = (double)p->max_position_embeddings;
        base = f32(p->rope_theta * pow(p->factor * m / m - (p->factor - 1.0), exponent));
    }
    default_table(base, r, out);
}

static double yarn_get_mscale(double scale, double mscale)
{
    return scale <= 1.0 ? 1.0 : 0.1 * mscale * log(scale) + 1.0;
}

/* find_correction_dim: the dimension whose frequency turns num_rotations times over the original
 * context. */
static double yarn_correction_dim(double num_rotations, int64_t r, double base, double orig)
{
    return ((double)r * log(orig / (num_rotations * 2.0 * hf_pi))) / (2.0 * log(base));
}

static double yarn_factor(const rp_hf_rope_params *p)
{
    return p->factor != 0.0 ? p->factor
                            : (double)p->max_position_embeddings /
                                  (double)p->original_max_position_embeddings;
}

static double yarn_table(const rp_hf_rope_params *p, float *out)
{
    const int64_t r = p->rotary_dim;
    const double factor = yarn_factor(p);
    double scaling = p->attention_factor;
    if (scaling == 0.0)
        scaling = (p->mscale != 0.0 && p->mscale_all_dim != 0.0)
                      ? yarn_get_mscale(factor, p->mscale) / yarn_get_mscale(factor, p->mscale_all_dim)
                      : yarn_get_mscale(factor, 1.0);
    const double beta_fast = p->beta_fast != 0.0 ? p->beta_fast : 32.0;
    const double beta_slow = p->beta_slow != 0.0 ? p->beta_slow : 1.0;
    const double orig = (double)p->original_max_position_embeddings;
    double low = yarn_correction_dim(beta_fast, r, p->rope_theta, orig);
    double high = yarn_correction_dim(beta_slow, r, p->rope_theta, orig);
    if (!(p->flags & RP_HF_YARN_NO_TRUNCATE)) {
        low = floor(low);
        high = ceil(high);
    }
    low = fmax(low, 0.0);
    high = fmin(high, (double)(r - 1));
    if (low == high)
        high += 0.001; /* transformers' guard against a zero-width ramp */
    const float low32 = f32(low), width32 = f32(high - low), factor32 = f32(factor);
    for (int64_t j = 0; j < r / 2; j++) {
        const float pos = pow_of_shape(f32(p->rope_theta), j, r);
        const float extrapolation = f32_div(1.0f, pos);
        const float interpolation = f32_div(1.0f, f32_mul(factor32, pos));
        float ramp = f32_div(f32_sub((float)j, low32), width32);
        ramp = ramp < 0.0f ? 0.0f : (ramp > 1.0f ? 1.0f : ramp);
        const float extrapolation_factor = f32_sub(1.0f, ramp);
        out[j] = f32_add(f32_mul(interpolation, f32_sub(1.0f, extrapolation_factor)),
                         f32_mul(extrapolation, extrapolation_factor));
    }
    return scaling;
}

static double longrope_table(const rp_hf_rope_params *p, float *out)
{
    const double factor = yarn_factor(p);
    const double orig = (double)p->original_max_position_embeddings;
    double scaling = p->attention_factor;
    if (scaling == 0.0)
        scaling = factor <= 1.0 ? 1.0 : sqrt(1.0 + log(factor) / log(orig));
    const double *ext = p->seq_len > p->original_max_position_embeddings ? p->long_factor
                                                                         : p->short_factor;
    for (int64_t j = 0; j < p->rotary_dim / 2; j++)
        out[j] = f32_div(1.0f, f32_mul(f32(ext[j]), pow_of_shape(f32(p->rope_theta), j,
                                                                   p->rotary_dim)));
    return scaling;
}

static void llama3_table(const rp_hf_rope_params *p, float *out)
{
    const double old = (double)p->original_max_position_embeddings;
    const float factor = f32(p->factor), low = f32(p->low_freq_factor);
    const float low_wavelen = f32(old / p->low_freq_factor);
    const float high_wavelen = f32(old / p->high_freq_factor);
    const float band = f32(p->high_freq_factor - p->low_freq_factor);
    default_table(f32(p->rope_theta), p->rotary_dim, out);
    for (int64_t j = 0; j < p->rotary_dim / 2; j++) {
        const float inv = out[j];
        const float wavelen = f32_mul(f32_div(1.0f, inv), f32(2.0 * hf_pi));
        const float llama = wavelen > low_wavelen ? f32_div(inv, factor) : inv;
        const float smooth = f32_div(f32_sub(f32_mul(f32_div(1.0f, wavelen), f32(old)), low), band);
        const float smoothed = f32_add(f32_div(f32_mul(f32_sub(1.0f, smooth), llama), factor),
                                       f32_mul(smooth, llama));
        const int medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
        out[j] = medium ? smoothed : llama;
    }
}

/* transformers' proportional rope (Gemma 4's full attention, LFM3's): the default table over the
 * whole head R, for only the first int(partial_rotary_factor * R // 2) pairs (Python's float
 * arithmetic: a double product, then floor division by 2), zeros for the rest, the whole divided by
 * factor in float32. rp_rope_pool_fused leaves a pair of frequency 0 unrotated (cos 1, sin 0), as
 * transformers' cos/sin of the full-width table do. */
static void proportional_table(const rp_hf_rope_params *p, float *out)
{
    const int64_t rotated = (int64_t)floor(p->partial_rotary_factor * (double)p->rotary_dim / 2.0);
    default_table(f32(p->rope_theta), p->rotary_dim, out);
    for (int64_t j = 0; j < p->rotary_dim / 2; j++)
        out[j] = j < rotated ? f32_div(out[j], f32(p->factor)) : 0.0f;
}

static const char *const hf_type_names[] = {"default", "linear", "dynamic", "yarn", "longrope",
                                            "llama3", "proportional"};

static int positive_finite(double x) { return isfinite(x) && x > 0.0; }

/* A parameter that rounds to infinity in float32, in which transformers builds the table: printed to
 * the digits that tell it from FLT_MAX, below which it would not overflow. */
static rp_status refuse_float32_overflow(rp_err *err, const char *name, double value)
{
    char v[RP_NUMBER_TEXT], most[RP_NUMBER_TEXT];
    rp_format_past(v, most, value, FLT_MAX, 6);
    return rp_fail(err, RP_ERR_INVALID_ARGUMENT, "%s %s overflows float32, in which the table is built", name, v);
}

/* Every check, before anything is computed. */
static rp_status check_params(const rp_hf_rope_params *p, rp_err *err)
{
    if (p->rope_type < RP_HF_ROPE_DEFAULT || p->rope_type > RP_HF_ROPE_PROPORTIONAL)
        return rp_fail(err, RP_ERR_INVALID_ARGUMENT, "rope_type %d is not an rp_hf_rope_type",
                       (int)p->rope_type);
    const char *type = hf_type_names[p->rope_type];
    if (p->flags & ~RP_HF_YARN_NO_TRUNCATE)
        return rp_fail(err, RP_ERR_INVALID_ARGUMENT, "flags 0x%x has unknown bits", (unsigned)p->flags);
    for (size_t i = 0; i < sizeof p->reserved / sizeof p->reserved[0]; i++)
        if (p->reserved[i] != 0)
            return rp_fail(err, RP_ERR_INVALID_ARGUMENT, "reserved[%zu] must be 0", i);
    const int64_t min_dim = p->rope_type == RP_HF_ROPE_DYNAMIC ? 4 : 2;
    if (p->rotary_dim < min_dim || p->rotary_dim % 2 != 0 || p->rotary_dim > (1 << 24))
        return rp_fail(err, RP_ERR_INVALID_ARGUMENT,
                       "rotary_dim must be even and in [%lld, 2^24] for rope type '%s', got %lld",
                       (long long)min_dim, type, (long long)p->rotary_dim);
    if (!positive_finite(p->rope_theta) || (p->rope_type == RP_HF_ROPE_YARN && p->rope_theta <= 1.0))
        return rp_fail(err, RP_ERR_INVALID_ARGUMENT, "rope_theta must be finite and > %s, got %g",
                       p->rope_type == RP_HF_ROPE_YARN ? "1 for yarn" : "0", p->rope_theta);
    /* transformers rounds both to float32 (a Python float meeting a float32 tensor): beyond
     * FLT_MAX the table would be built from infinity, all zeros but for 1. */
    if (!isfinite(f32(p->rope_theta)))
        return refuse_float32_overflow(err, "rope_theta", p->rope_theta);
    if (isfinite(p->factor) && !isfinite(f32(p->factor)))
        return refuse_float32_overflow(err, "factor", p->factor);
    if (p->seq_len < 0)
        return rp_fail(err, RP_ERR_INVALID_ARGUMENT, "seq_len must be >= 0, got %lld",
                       (long long)p->seq_len);
    const int factor_required = p->rope_type == RP_HF_ROPE_LINEAR || p->rope_type == RP_HF_ROPE_DYNAMIC ||
                                p->rope_type == RP_HF_ROPE_LLAMA3 || p->rope_type == RP_HF_ROPE_PROPORTIONAL;
    const int factor_derived = p->rope_type == RP_HF_ROPE_YARN || p->rope_type == RP_HF_ROPE_LONGROPE;
    if (factor_required && !positive_finite(p->factor))
        return rp_fail(err, RP_ERR_INVALID_ARGUMENT, "factor must be finite and > 0 for rope type '%s', got %g",
                       type, p->factor);
    if (factor_derived && p->factor != 0.0 && !positive_finite(p->factor))
        return rp_fail(err, RP_ERR_INVALID_ARGUMENT,
                       "factor must be finite and > 0 (or 0: derived) for rope type '%s', got %g", type,
                       p->factor);
    if (factor_derived && p->attention_factor != 0.0 && !positive_finite(p->attention_factor))
        return rp_fail(err, RP_ERR_INVALID_ARGUMENT,
                       "attention_factor must be finite and > 0 (or 0: derived), got %g",
                       p->attention_factor);
    if ((p->rope_type == RP_HF_ROPE_DYNAMIC || (factor_derived && p->factor == 0.0)) &&
        p->max_position_embeddings <= 0)
        return rp_fail(err, RP_ERR_INVALID_ARGUMENT,
                       "max_position_embeddings must be > 0 for rope type '%s'%s, got %lld", type,
                       factor_derived ? " without a factor" : "", (long long)p->max_position_embeddings);
    if ((factor_derived || p->rope_type == RP_HF_ROPE_LLAMA3) && p->original_max_position_embeddings <= 0)
        return rp_fail(err, RP_ERR_INVALID_ARGUMENT,
                       "original_max_position_embeddings must be > 0 for rope type '%s', got %lld", type,
                       (long long)p->original_max_position_embeddings);
    if (p->rope_type == RP_HF_ROPE_YARN) {
        const double values[4] = {p->beta_fast, p->beta_slow, p->mscale, p->mscale_all_dim};
        static const char *const names[4] = {"beta_fast", "beta_slow", "mscale", "mscale_all_dim"};
        for (int i = 0; i < 4; i++)
            if (!isfinite(values[i]) || values[i] < 0.0)
                return rp_fail(err, RP_ERR_INVALID_ARGUMENT, "%s must be finite and >= 0, got %g",
                               names[i], values[i]);
    }
    if (p->rope_type == RP_HF_ROPE_LONGROPE)
        for (int which = 0; which < 2; which++) {
            const double *f = which ? p->long_factor : p->short_factor;
            const char *name = which ? "long_factor" : "short_factor";
            if (f == NULL)
                return rp_fail(err, RP_ERR_INVALID_ARGUMENT, "%s is NULL (longrope needs rotary_dim/2 = %lld)",
                               name, (long long)(p->rotary_dim / 2));
            for (int64_t j = 0; j < p->rotary_dim / 2; j++) {
                if (!positive_finite(f[j]))
                    return rp_fail(err, RP_ERR_INVALID_ARGUMENT, "%s[%lld] must be finite and > 0, got %g",
                                   name, (long long)j, f[j]);
                if (!isfinite(f32(f[j]))) { /* the table divides by it in float32: by infinity, 0 */
                    char entry[48]; /* a factor name and an int64 index */
                    snprintf(entry, sizeof entry, "%s[%lld]", name, (long long)j);
                    return refuse_float32_overflow(err, entry, f[j]);
                }
            }
        }
    /* Outside [0, 1] transformers' table is not R/2 long (more rotated pairs than the head has, or
     * an empty arange and more than R/2 zeros): no model could use it. */
    if (p->rope_type == RP_HF_ROPE_PROPORTIONAL &&
        !(p->partial_rotary_factor >= 0.0 && p->partial_rotary_factor <= 1.0))
        return rp_fail(err, RP_ERR_INVALID_ARGUMENT,
                       "partial_rotary_factor must be in [0, 1] for rope type 'proportional', got %g",
                       p->partial_rotary_factor);
    if (p->rope_type == RP_HF_ROPE_LLAMA3) {
        if (!positive_finite(p->low_freq_factor) || !isfinite(p->high_freq_factor) ||
            p->high_freq_factor <= p->low_freq_factor)
            return rp_fail(err, RP_ERR_INVALID_ARGUMENT,
                           "llama3 needs 0 < low_freq_factor < high_freq_factor, got %g and %g",
                           p->low_freq_factor, p->high_freq_factor);
    }
    return RP_OK;
}

static rp_status hf_rope_frequencies(const rp_hf_rope_params *params, double *inv_freq,
                                     double *attention_scaling, char *errbuf, size_t errbuf_size);

/* In the default floating-point mode whatever the caller's (fp_mode.h): transformers' float32
 * steps rounded to nearest */
rp_status rp_hf_rope_frequencies(const rp_hf_rope_params *params, double *inv_freq,
                                 double *attention_scaling, char *errbuf, size_t errbuf_size)
{
    const rp_fp_mode mode = rp_fp_mode_enter();
    const rp_status st = hf_rope_frequencies(params, inv_freq, attention_scaling, errbuf, errbuf_size);
    rp_fp_mode_leave(mode);
    return st;
}

static rp_status hf_rope_frequencies(const rp_hf_rope_params *params, double *inv_freq,
                                     double *attention_scaling, char *errbuf, size_t errbuf_size)
{
    rp_err err = {errbuf, errbuf_size};
    if (params == NULL || inv_freq == NULL || attention_scaling == NULL)
        return rp_fail(&err, RP_ERR_INVALID_ARGUMENT, "params, inv_freq and attention_scaling must not be NULL");
    rp_status status = check_params(params, &err);
    if (status != RP_OK)
        return status;
    const int64_t half = params->rotary_dim / 2;
    float *table = malloc((size_t)half * sizeof *table);
    if (table == NULL)
        return rp_fail(&err, RP_ERR_OUT_OF_MEMORY, "no memory for %lld frequencies", (long long)half);
    double scaling = 1.0;
    switch (params->rope_type) {
    case RP_HF_ROPE_DEFAULT: default_table(f32(params->rope_theta), params->rotary_dim, table); break;
    case RP_HF_ROPE_LINEAR:
        default_table(f32(params->rope_theta), params->rotary_dim, table);
        for (int64_t j = 0; j < half; j++)
            table[j] = f32_div(table[j], f32(params->factor));
        break;
    case RP_HF_ROPE_DYNAMIC: dynamic_table(params, table); break;
    case RP_HF_ROPE_YARN: scaling = yarn_table(params, table); break;
    case RP_HF_ROPE_LONGROPE: scaling = longrope_table(params, table); break;
    case RP_HF_ROPE_LLAMA3: llama3_table(params, table); break;
    default: proportional_table(params, table); break;
    }
    /* Inputs that pass the checks can still overflow float32 (a huge factor or theta). */
    for (int64_t j = 0; j < half; j++)
        if (!isfinite(table[j]) || table[j] < 0.0f) {
            status = rp_fail(&err, RP_ERR_INVALID_ARGUMENT,
                             "rope type '%s' gives frequency %lld = %g in float32: check its parameters",
                             hf_type_names[params->rope_type], (long long)j, (double)table[j]);
            break;
        }
    /* What rp_rope_pool_fused takes: a normal float32 value (its kernels scale cos and sin in
     * float32). */
    if (status == RP_OK && !(scaling >= FLT_MIN && scaling <= FLT_MAX)) {
        char v[RP_NUMBER_TEXT], lo[RP_NUMBER_TEXT], hi[RP_NUMBER_TEXT];
        rp_format_outside(v, lo, hi, scaling, FLT_MIN, FLT_MAX, 6);
        status = rp_fail(&err, RP_ERR_INVALID_ARGUMENT,
                         "rope type '%s' gives attention scaling %s, outside float32's normal range [%s, %s]: "
                         "check its parameters", hf_type_names[params->rope_type], v, lo, hi);
    }
    if (status == RP_OK) {
        for (int64_t j = 0; j < half; j++)
            inv_freq[j] = (double)table[j];
        *attention_scaling = scaling;
    }
    free(table);
    return status;
}

/* ---- pair styles ------------------------------------------------------------------------------ */

/* The style of a model whose attention asks `if config.rope_interleave:`: GPT-J pairs, unless the
 * config sets rope_interleave false (rotate_half). */
enum { HF_FOLLOWS_INTERLEAVE = -1 };

/* Read from each model's modeling code in transformers 5 (rotate_half on halves = NeoX; even/odd
 * pairs, rotate_every_two, repeat_interleave'd cos/sin or view_as_complex = GPT-J), except
 * chatglm, which transformers does not ship: THUDM's remote code pairs adjacent channels. */
static const struct hf_style_entry {
    const char *model_type;
    int32_t style; /* an rp_rope_style, or HF_FOLLOWS_INTERLEAVE */
} hf_styles[] = {
    {"llama", RP_ROPE_NEOX},        {"mistral", RP_ROPE_NEOX},       {"mixtral", RP_ROPE_NEOX},
    {"qwen2", RP_ROPE_NEOX},        {"qwen2_moe", RP_ROPE_NEOX},     {"qwen3", RP_ROPE_NEOX},
    {"qwen3_moe", RP_ROPE_NEOX},    {"qwen2_vl", RP_ROPE_NEOX},      {"qwen2_vl_text", RP_ROPE_NEOX},
    {"qwen2_5_vl", RP_ROPE_NEOX},   {"qwen2_5_vl_text", RP_ROPE_NEOX}, {"qwen3_vl", RP_ROPE_NEOX},
    {"qwen3_vl_text", RP_ROPE_NEOX}, {"qwen3_vl_moe", RP_ROPE_NEOX}, {"qwen3_vl_moe_text", RP_ROPE_NEOX},
    {"phi", RP_ROPE_NEOX},          {"phi3", RP_ROPE_NEOX},
    {"gpt_neox", RP_ROPE_NEOX},     {"gemma", RP_ROPE_NEOX},         {"gemma2", RP_ROPE_NEOX},
    {"gemma3", RP_ROPE_NEOX},       {"gemma3_text", RP_ROPE_NEOX},   {"starcoder2", RP_ROPE_NEOX},
    {"olmo", RP_ROPE_NEOX},         {"granite", RP_ROPE_NEOX},       {"stablelm", RP_ROPE_NEOX},
    {"falcon", RP_ROPE_NEOX},       {"gpt_oss", RP_ROPE_NEOX},       {"olmo2", RP_ROPE_NEOX},
    {"smollm3", RP_ROPE_NEOX},      {"seed_oss", RP_ROPE_NEOX},      {"exaone4", RP_ROPE_NEOX},
    {"hunyuan_v1_dense", RP_ROPE_NEOX}, {"apertus", RP_ROPE_NEOX},   {"arcee", RP_ROPE_NEOX},
    {"granitemoe", RP_ROPE_NEOX},
    /* Gemma 4 and its derivatives, LFM3: rotate_half over the whole head, whose proportional
     * table (full attention) holds zeros past its rotated pairs. */
    {"gemma4", RP_ROPE_NEOX},       {"gemma4_text", RP_ROPE_NEOX},   {"gemma4_unified", RP_ROPE_NEOX},
    {"gemma4_unified_text", RP_ROPE_NEOX}, {"diffusion_gemma", RP_ROPE_NEOX},
    {"diffusion_gemma_text", RP_ROPE_NEOX}, {"lfm3", RP_ROPE_NEOX},
    /* GLM-4.5/4.6/4.7: transformers' Glm4MoeAttention rotates halves, unlike glm and glm4. */
    {"glm4_moe", RP_ROPE_NEOX},
    {"gptj", RP_ROPE_GPTJ},         {"codegen", RP_ROPE_GPTJ},       {"glm", RP_ROPE_GPTJ},
    {"glm4", RP_ROPE_GPTJ},         {"cohere", RP_ROPE_GPTJ},        {"cohere2", RP_ROPE_GPTJ},
    {"chatglm", RP_ROPE_GPTJ},      {"deepseek_v2", RP_ROPE_GPTJ},   {"ernie4_5", RP_ROPE_GPTJ},
    {"helium", RP_ROPE_GPTJ},
    /* DeepSeek-V3 and the MLA families that copy its attention. Kimi-K2's config.json names
     * kimi_k2, which transformers reads as deepseek_v3 (Kimi_K25Config renames it); sarvam_mla runs
     * DeepseekV3Model. */
    {"deepseek_v3", HF_FOLLOWS_INTERLEAVE},   {"kimi_k2", HF_FOLLOWS_INTERLEAVE},
    {"sarvam_mla", HF_FOLLOWS_INTERLEAVE},    {"glm4_moe_lite", HF_FOLLOWS_INTERLEAVE},
    {"mistral4", HF_FOLLOWS_INTERLEAVE},      {"axk1", HF_FOLLOWS_INTERLEAVE},
    {"youtu", HF_FOLLOWS_INTERLEAVE},
    /* DeepSeek-V3's MLA whose attention calls apply_rotary_pos_emb_interleave unconditionally (their
     * config classes drop rope_interleave): GPT-J pairs on qk_rope_head_dim whatever the config says.
     * The DSA indexers of deepseek_v32 and axk2 rotate halves of their own keys, a cache apart. */
    {"longcat_flash", RP_ROPE_GPTJ}, {"deepseek_v32", RP_ROPE_GPTJ}, {"glm_moe_dsa", RP_ROPE_GPTJ},
    {"hy_v4", RP_ROPE_GPTJ},        {"axk2", RP_ROPE_GPTJ},          {"bailing_hybrid", RP_ROPE_GPTJ},
    /* MLA with rotate_half (MiniCPM3Attention calls apply_rotary_pos_emb). */
    {"minicpm3", RP_ROPE_NEOX},
};

rp_status rp_hf_rope_style(const char *model_type, int32_t rope_interleave, int32_t *style,
                           char *errbuf, size_t errbuf_size)
{
    rp_err err = {errbuf, errbuf_size};
    if (model_type == NULL || style == NULL)
        return rp_fail(&err, RP_ERR_INVALID_ARGUMENT, "model_type and style must not be NULL");
    if (rope_interleave < -1 || rope_interleave > 1)
        return rp_fail(&err, RP_ERR_INVALID_ARGUMENT, "rope_interleave must be -1, 0 or 1, got %d",
                       (int)rope_interleave);
    for (size_t i = 0; i < sizeof hf_styles / sizeof hf_styles[0]; i++)
        if (strcmp(model_type, hf_styles[i].model_type) == 0) {
            *style = hf_styles[i].style;
            if (*style == HF_FOLLOWS_INTERLEAVE)
                *style = rope_interleave == 0 ? RP_ROPE_NEOX : RP_ROPE_GPTJ;
            return RP_OK;
        }
    return rp_fail(&err, RP_ERR_UNSUPPORTED,
                   "model_type '%s' is not in ropepool's table of transformers RoPE styles: pass the "
                   "style explicitly (is_neox=True / RP_ROPE_NEOX for rotate-half pairs (j, j + R/2), "
                   "is_neox=False / RP_ROPE_GPTJ for adjacent pairs (2j, 2j + 1))", model_type);
}
