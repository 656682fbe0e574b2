/*
 * rope_table.c — the frequency tables of the scaled presets: the library's transformers-exact
 * tables (rp_hf_rope_frequencies, the float32 table transformers computes) from the preset's
 * rope_scaling numbers, so the benchmark times the call with the table a served model uses and
 * checks it against the float64 reference with that table.
 */
#include "bench.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

int bench_rope_table(const bench_shape *s, double *inv_freq, double *attention_scaling)
{
    const int64_t R = s->rotary_dim ? s->rotary_dim : s->d;
    *attention_scaling = 1.0;
    if (s->scaling == BENCH_ROPE_DEFAULT)
        return 0;
    rp_hf_rope_params h;
    memset(&h, 0, sizeof h);
    h.rotary_dim = R;
    h.rope_theta = s->rope_base;
    h.factor = s->factor;
    h.original_max_position_embeddings = (int64_t)s->original_max;
    /* LongRoPE: Phi-3's long_factor list is not copied here: a plausible smooth one (1 at the
     * highest frequency rising to `factor` at the lowest), used for a sequence at the full
     * context (seq_len = factor x the original window picks long_factor). */
    double short_factor[256], long_factor[256];
    if (s->scaling == BENCH_ROPE_LLAMA3) {
        h.rope_type = RP_HF_ROPE_LLAMA3;
        h.low_freq_factor = s->low;
        h.high_freq_factor = s->high;
    } else if (s->scaling == BENCH_ROPE_YARN) {
        h.rope_type = RP_HF_ROPE_YARN;
        h.beta_slow = s->low;
        h.beta_fast = s->high;
        h.mscale = s->mscale;
        h.mscale_all_dim = s->mscale_all_dim;
    } else {
        const int64_t half = R / 2;
        if (half > 256) {
            fprintf(stderr, "ropepool-bench: longrope presets take rotary_dim <= 512, got %lld\n", (long long)R);
            return -1;
        }
        for (int64_t j = 0; j < half; j++) {
            const double x = half > 1 ? (double)j / (double)(half - 1) : 0.0;
            short_factor[j] = 1.0;
            long_factor[j] = 1.0 + (s->factor - 1.0) * x * x * x;
        }
        h.rope_type = RP_HF_ROPE_LONGROPE;
        h.short_factor = short_factor;
        h.long_factor = long_factor;
        h.seq_len = (int64_t)(s->factor * s->original_max);
        h.max_position_embeddings = h.seq_len;
    }
    char why[256];
    if (rp_hf_rope_frequencies(&h, inv_freq, attention_scaling, why, sizeof why) != RP_OK) {
        fprintf(stderr, "ropepool-bench: the preset's rope table: %s\n", why);
        return -1;
    }
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
    else if (s->v_head_dim && n >= 0 && (size_t)n < size)
        snprintf(buf + n, size - (size_t)n, ", MLA: q_pe of %lld, v %lld%s", (long long)(s->q_head_dim ? s->q_head_dim : s->d),
                 (long long)s->v_head_dim, s->latent ? ", one latent row" : "");
    return buf;
}
