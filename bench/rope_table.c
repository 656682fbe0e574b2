/*
 * rope_table.c — the frequency tables of the scaled presets, with transformers' formulas
 * (modeling_rope_utils.py: _compute_llama3_parameters, _compute_yarn_parameters,
 * _compute_longrope_parameters) evaluated in float64. The benchmark times the call and checks it
 * against the float64 reference with whatever table it is given, so float64 tables are as good as
 * transformers' float32 ones here.
 */
#include "bench.h"

#include <math.h>
#include <stdio.h>

static const double two_pi = 6.283185307179586;

/* Llama 3.1: wavelengths beyond L0 / low_freq_factor are divided by factor, those below
 * L0 / high_freq_factor kept, the band between blended. */
static void llama3(const bench_shape *s, int64_t half, double *f)
{
    const double low_wavelen = s->original_max / s->low, high_wavelen = s->original_max / s->high;
    for (int64_t j = 0; j < half; j++) {
        const double wavelen = two_pi / f[j];
        if (wavelen > low_wavelen) {
            f[j] /= s->factor;
        } else if (!(wavelen < high_wavelen)) {
            const double smooth = (s->original_max / wavelen - s->low) / (s->high - s->low);
            f[j] = (1.0 - smooth) * f[j] / s->factor + smooth * f[j];
        }
    }
}

/* YaRN: dims whose rotations over L0 fall between beta_fast and beta_slow ramp from
 * extrapolation (kept) to interpolation (divided by factor); attention scaling 0.1 ln(factor) + 1. */
static double yarn(const bench_shape *s, int64_t R, double *f)
{
    const double beta_slow = s->low, beta_fast = s->high, log_base = log(s->rope_base);
    double low = floor(R * log(s->original_max / (beta_fast * two_pi)) / (2 * log_base));
    double high = ceil(R * log(s->original_max / (beta_slow * two_pi)) / (2 * log_base));
    low = low > 0 ? low : 0;
    high = high < R - 1 ? high : R - 1;
    if (low == high)
        high += 0.001;
    for (int64_t j = 0; j < R / 2; j++) {
        double ramp = ((double)j - low) / (high - low);
        ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
        const double extrapolation = 1.0 - ramp;
        f[j] = f[j] / s->factor * (1.0 - extrapolation) + f[j] * extrapolation;
    }
    return s->factor > 1 ? 0.1 * log(s->factor) + 1.0 : 1.0;
}

/* LongRoPE: each frequency divided by its own factor. Phi-3's long_factor list is not copied
 * here: a plausible smooth one (1 at the highest frequency rising to `factor` at the lowest)
 * times the same. Attention scaling sqrt(1 + ln(factor) / ln(L0)). */
static double longrope(const bench_shape *s, int64_t half, double *f)
{
    for (int64_t j = 0; j < half; j++) {
        const double x = half > 1 ? (double)j / (double)(half - 1) : 0.0;
        f[j] /= 1.0 + (s->factor - 1.0) * x * x * x;
    }
    return s->factor > 1 ? sqrt(1.0 + log(s->factor) / log(s->original_max)) : 1.0;
}

int bench_rope_table(const bench_shape *s, double *inv_freq, double *attention_scaling)
{
    const int64_t R = s->rotary_dim ? s->rotary_dim : s->d;
    *attention_scaling = 1.0;
    if (s->scaling == BENCH_ROPE_DEFAULT)
        return 0;
    for (int64_t j = 0; j < R / 2; j++)
        inv_freq[j] = pow(s->rope_base, -(double)(2 * j) / (double)R);
    if (s->scaling == BENCH_ROPE_LLAMA3)
        llama3(s, R / 2, inv_freq);
    else if (s->scaling == BENCH_ROPE_YARN)
        *attention_scaling = yarn(s, R, inv_freq);
    else
        *attention_scaling = longrope(s, R / 2, inv_freq);
    return 1;
}

const char *bench_variant_text(const bench_shape *s, double attention_scaling, char *buf, size_t size)
{
    static const char *const tables[] = {"rope_base's table", "llama3 table", "yarn table", "longrope table"};
    const int n = snprintf(buf, size, "%s R=%lld/%lld, %s, attention scaling %.4g%s",
                           s->style == RP_ROPE_GPTJ ? "gptj" : "neox", (long long)(s->rotary_dim ? s->rotary_dim : s->d),
                           (long long)s->d, tables[s->scaling], attention_scaling, s->qk_norm ? ", QK-norm" : "");
    if ((s->mrope_section[0] || s->mrope_section[1] || s->mrope_section[2]) && n >= 0 && (size_t)n < size)
        snprintf(buf + n, size - (size_t)n, ", %smrope [%d, %d, %d]", s->mrope_interleaved ? "interleaved " : "",
                 (int)s->mrope_section[0], (int)s->mrope_section[1], (int)s->mrope_section[2]);
    return buf;
}
