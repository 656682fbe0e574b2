/*
 * test_hf_rope.c — rp_hf_rope_frequencies and rp_hf_rope_style from C: tables equal to what
 * transformers 5.24 holds for Llama-3.1-8B and DeepSeek-V3, and 5.25 for a Gemma-4-like
 * full-attention layer (values from
 * python/tests/fixtures/hf_rope.json, where every recorded config is checked), float32 values,
 * refusals that name the field and write nothing, and the style table.
 */
#include "test_util.h"

static rp_hf_rope_params llama31(void)
{
    rp_hf_rope_params p = {0};
    p.rope_type = RP_HF_ROPE_LLAMA3;
    p.rotary_dim = 128;
    p.rope_theta = 500000.0;
    p.factor = 8.0;
    p.low_freq_factor = 1.0;
    p.high_freq_factor = 4.0;
    p.original_max_position_embeddings = 8192;
    return p;
}

static void test_llama31_table_is_transformers_buffer(void)
{
    const rp_hf_rope_params p = llama31();
    double inv[64], s = 0.0;
    char msg[256] = "";
    CHECK(rp_hf_rope_frequencies(&p, inv, &s, msg, sizeof msg) == RP_OK, "%s", msg);
    /* Unscaled (j = 20), smoothed band (40, 45), divided by factor (50, 63). */
    static const struct { int j; double value; } expected[] = {
        {0, 0x1p+0},           {20, 0x1.0f5386p-6},   {40, 0x1.1f91f0p-15},
        {45, 0x1.9ca3eap-17},  {50, 0x1.280d96p-18},  {63, 0x1.4985fep-22},
    };
    for (size_t i = 0; i < sizeof expected / sizeof expected[0]; i++)
        CHECK(inv[expected[i].j] == expected[i].value, "inv_freq[%d] = %a, transformers %a", expected[i].j,
              inv[expected[i].j], expected[i].value);
    for (int j = 0; j < 64; j++)
        CHECK(inv[j] == (double)(float)inv[j], "inv_freq[%d] = %a is not a float32 value", j, inv[j]);
    CHECK(s == 1.0, "attention_scaling %g", s);
}

static void test_deepseek_v3_yarn_table_and_mscale(void)
{
    rp_hf_rope_params p = {0};
    p.rope_type = RP_HF_ROPE_YARN;
    p.rotary_dim = 64; /* qk_rope_head_dim */
    p.rope_theta = 10000.0;
    p.factor = 40.0;
    p.beta_fast = 32.0;
    p.beta_slow = 1.0;
    p.mscale = 1.0;
    p.mscale_all_dim = 1.0;
    p.original_max_position_embeddings = 4096;
    double inv[32], s = 0.0;
    char msg[256] = "";
    CHECK(rp_hf_rope_frequencies(&p, inv, &s, msg, sizeof msg) == RP_OK, "%s", msg);
    CHECK(inv[0] == 0x1p+0 && inv[10] == 0x1.ccab84p-5 && inv[20] == 0x1.9e7c6ep-11 &&
              inv[31] == 0x1.bf749ep-19,
          "got %a %a %a %a", inv[0], inv[10], inv[20], inv[31]);
    CHECK(s == 1.0, "mscale == mscale_all_dim gives 1, got %.17g", s);
    /* mscale alone: 0.1 * mscale * ln(40) + 1 over the mscale_all_dim = 0 default of 1. */
    p.mscale = 0.707;
    p.mscale_all_dim = 0.0;
    CHECK(rp_hf_rope_frequencies(&p, inv, &s, msg, sizeof msg) == RP_OK, "%s", msg);
    CHECK(s == 0.1 * log(40.0) + 1.0, "attention_scaling %.17g", s);
}

static void test_dynamic_within_range_is_default_and_grows_past_it(void)
{
    rp_hf_rope_params p = {0};
    p.rope_type = RP_HF_ROPE_DEFAULT;
    p.rotary_dim = 128;
    p.rope_theta = 10000.0;
    double base[64], inv[64], s;
    CHECK(rp_hf_rope_frequencies(&p, base, &s, NULL, 0) == RP_OK, "default");
    p.rope_type = RP_HF_ROPE_DYNAMIC;
    p.factor = 2.0;
    p.max_position_embeddings = 4096;
    p.seq_len = 4096;
    CHECK(rp_hf_rope_frequencies(&p, inv, &s, NULL, 0) == RP_OK, "dynamic");
    CHECK(memcmp(inv, base, sizeof inv) == 0, "seq_len <= max_position_embeddings keeps the default table");
    p.seq_len = 16384;
    CHECK(rp_hf_rope_frequencies(&p, inv, &s, NULL, 0) == RP_OK, "dynamic grown");
    CHECK(inv[0] == 1.0 && inv[63] < base[63] * 0.5, "a grown base lowers frequencies: %a vs %a", inv[63],
          base[63]);
}

/* Gemma 4's full attention (transformers' "proportional" rope): R = head_dim = 512, theta 1e6, the
 * first int(0.25 * 512 // 2) = 64 pairs rotated, the other 192 of frequency 0; factor 8 divides the
 * rotated ones in float32. */
static void test_proportional_table_is_gemma4_full_attention(void)
{
    rp_hf_rope_params p = {0};
    p.rope_type = RP_HF_ROPE_PROPORTIONAL;
    p.rotary_dim = 512;
    p.rope_theta = 1e6;
    p.factor = 1.0;
    p.partial_rotary_factor = 0.25;
    static double inv[256], eighth[256];
    double s = 0.0;
    char msg[256] = "";
    CHECK(rp_hf_rope_frequencies(&p, inv, &s, msg, sizeof msg) == RP_OK, "%s", msg);
    CHECK(inv[0] == 1.0 && inv[1] == 0x1.e519fp-1 && inv[31] == 0x1.8062cap-3 && inv[63] == 0x1.116b1p-5,
          "got %a %a %a %a", inv[0], inv[1], inv[31], inv[63]);
    for (int j = 64; j < 256; j++)
        CHECK(inv[j] == 0.0, "inv_freq[%d] = %a past the rotated pairs", j, inv[j]);
    CHECK(s == 1.0, "attention_scaling %g", s);
    p.factor = 8.0;
    CHECK(rp_hf_rope_frequencies(&p, eighth, &s, msg, sizeof msg) == RP_OK, "%s", msg);
    for (int j = 0; j < 256; j++)
        CHECK(eighth[j] == inv[j] / 8.0, "factor 8: inv_freq[%d] = %a, want %a", j, eighth[j], inv[j] / 8.0);
    /* 0 rotates nothing (a value, not "absent"); 1 is the default table over the head */
    p.partial_rotary_factor = 0.0;
    CHECK(rp_hf_rope_frequencies(&p, inv, &s, msg, sizeof msg) == RP_OK && inv[0] == 0.0, "%s", msg);
    p.partial_rotary_factor = 1.0;
    p.factor = 1.0;
    CHECK(rp_hf_rope_frequencies(&p, inv, &s, msg, sizeof msg) == RP_OK, "%s", msg);
    p.rope_type = RP_HF_ROPE_DEFAULT;
    CHECK(rp_hf_rope_frequencies(&p, eighth, &s, msg, sizeof msg) == RP_OK, "%s", msg);
    CHECK(memcmp(inv, eighth, sizeof inv) == 0, "partial_rotary_factor 1, factor 1: the default table");
}

/* The call fails with `status`, its message contains `needle`, and the outputs keep their sentinel. */
static void expect_refusal(const rp_hf_rope_params *p, rp_status status, const char *needle)
{
    double inv[8] = {-7.0, -7.0, -7.0, -7.0, -7.0, -7.0, -7.0, -7.0}, s = -7.0;
    char msg[256] = "";
    const rp_status got = rp_hf_rope_frequencies(p, inv, &s, msg, sizeof msg);
    CHECK(got == status, "status %s, message '%s'", rp_status_name(got), msg);
    CHECK(strstr(msg, needle) != NULL, "message '%s' lacks '%s'", msg, needle);
    for (int j = 0; j < 8; j++)
        CHECK(inv[j] == -7.0, "inv_freq[%d] written by a failed call", j);
    CHECK(s == -7.0, "attention_scaling written by a failed call");
}

/* Llama-3.1's parameters with one field changed must be refused with `needle`, writing nothing. */
#define LLAMA31_REFUSED_WITH(field, value, needle)                                                \
    do {                                                                                          \
        rp_hf_rope_params p_ = llama31();                                                         \
        p_.field = value;                                                                         \
        expect_refusal(&p_, RP_ERR_INVALID_ARGUMENT, needle);                                     \
    } while (0)

static void test_bad_parameters_are_refused_by_name_and_write_nothing(void)
{
    LLAMA31_REFUSED_WITH(rotary_dim, 15, "rotary_dim must be even");
    LLAMA31_REFUSED_WITH(rope_type, 9, "rope_type 9");
    LLAMA31_REFUSED_WITH(factor, 0.0, "factor must be finite and > 0 for rope type 'llama3'");
    LLAMA31_REFUSED_WITH(high_freq_factor, 1.0, "low_freq_factor < high_freq_factor");
    LLAMA31_REFUSED_WITH(original_max_position_embeddings, 0, "original_max_position_embeddings must be > 0");
    LLAMA31_REFUSED_WITH(rope_theta, NAN, "rope_theta");
    LLAMA31_REFUSED_WITH(reserved[2], 1, "reserved[2]");
    /* transformers builds the table in float32: a theta or factor past FLT_MAX would make it of
     * infinity (all zeros but for 1), which is refused rather than returned */
    LLAMA31_REFUSED_WITH(rope_theta, 1e300, "rope_theta 1e+300 overflows float32");
    LLAMA31_REFUSED_WITH(factor, 1e50, "factor 1e+50 overflows float32");

    /* an attention scaling rp_rope_pool_fused would refuse (outside float32's normal range) */
    rp_hf_rope_params y = {0};
    y.rope_type = RP_HF_ROPE_YARN;
    y.rotary_dim = 16;
    y.rope_theta = 10000.0;
    y.factor = 4.0;
    y.original_max_position_embeddings = 4096;
    y.beta_fast = 32.0;
    y.beta_slow = 1.0;
    y.attention_factor = 1e-300;
    expect_refusal(&y, RP_ERR_INVALID_ARGUMENT, "gives attention scaling 1e-300, outside float32's normal range");
    y.attention_factor = 1e300;
    expect_refusal(&y, RP_ERR_INVALID_ARGUMENT, "gives attention scaling 1e+300, outside float32's normal range");

    rp_hf_rope_params d = {0};
    d.rope_type = RP_HF_ROPE_DYNAMIC;
    d.rotary_dim = 16;
    d.rope_theta = 10000.0;
    d.factor = 2.0;
    expect_refusal(&d, RP_ERR_INVALID_ARGUMENT, "max_position_embeddings must be > 0 for rope type 'dynamic'");

    rp_hf_rope_params l = {0};
    const double shorts[8] = {1, 1, 1, 1, 1, 1, 1, 1}, longs[8] = {1, 2, 3, 4, 5, 6, 0, 8};
    l.rope_type = RP_HF_ROPE_LONGROPE;
    l.rotary_dim = 16;
    l.rope_theta = 10000.0;
    l.original_max_position_embeddings = 4096;
    l.factor = 32.0;
    l.short_factor = shorts;
    expect_refusal(&l, RP_ERR_INVALID_ARGUMENT, "long_factor is NULL");
    l.long_factor = longs;
    expect_refusal(&l, RP_ERR_INVALID_ARGUMENT, "long_factor[6] must be finite and > 0");
    /* finite, but infinity in float32, where the table divides by it: its frequency would be 0 */
    const double huge_shorts[8] = {1, 1, 1e300, 1, 1, 1, 1, 1}, good_longs[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    l.short_factor = huge_shorts;
    l.long_factor = good_longs;
    expect_refusal(&l, RP_ERR_INVALID_ARGUMENT, "short_factor[2] 1e+300 overflows float32");

    rp_hf_rope_params g = {0};
    g.rope_type = RP_HF_ROPE_PROPORTIONAL;
    g.rotary_dim = 16;
    g.rope_theta = 1e6;
    g.partial_rotary_factor = 0.25;
    expect_refusal(&g, RP_ERR_INVALID_ARGUMENT, "factor must be finite and > 0 for rope type 'proportional'");
    g.factor = 1.0;
    const double bad_partial[3] = {1.5, -0.25, NAN};
    for (int i = 0; i < 3; i++) {
        g.partial_rotary_factor = bad_partial[i];
        expect_refusal(&g, RP_ERR_INVALID_ARGUMENT, "partial_rotary_factor must be in [0, 1] for rope type 'proportional'");
    }

    /* Valid-looking numbers that overflow float32: refused after computing, still nothing written. */
    rp_hf_rope_params o = {0};
    o.rope_type = RP_HF_ROPE_LINEAR;
    o.rotary_dim = 16;
    o.rope_theta = 10000.0;
    o.factor = 1e-300;
    expect_refusal(&o, RP_ERR_INVALID_ARGUMENT, "in float32");
}

static void test_style_table_follows_transformers(void)
{
    static const struct { const char *model_type; int32_t interleave; int32_t style; } cases[] = {
        {"llama", -1, RP_ROPE_NEOX},       {"qwen3_vl_text", -1, RP_ROPE_NEOX}, {"gpt_neox", -1, RP_ROPE_NEOX},
        {"glm4_moe", -1, RP_ROPE_NEOX},    {"gptj", -1, RP_ROPE_GPTJ},          {"glm4", -1, RP_ROPE_GPTJ},
        {"chatglm", -1, RP_ROPE_GPTJ},     {"deepseek_v2", 0, RP_ROPE_GPTJ},    {"deepseek_v3", -1, RP_ROPE_GPTJ},
        {"deepseek_v3", 1, RP_ROPE_GPTJ},  {"deepseek_v3", 0, RP_ROPE_NEOX}, {"gemma4_text", -1, RP_ROPE_NEOX},
        {"lfm3", -1, RP_ROPE_NEOX},
        /* Kimi-K2's config.json says kimi_k2, which transformers reads as deepseek_v3 (Kimi-K2.5's
         * config renames it): the same rope_interleave rule */
        {"kimi_k2", -1, RP_ROPE_GPTJ},     {"kimi_k2", 1, RP_ROPE_GPTJ},        {"kimi_k2", 0, RP_ROPE_NEOX},
        /* the MLA families whose attention copies DeepSeek-V3's `if self.config.rope_interleave:` */
        {"sarvam_mla", -1, RP_ROPE_GPTJ},  {"sarvam_mla", 0, RP_ROPE_NEOX},     {"glm4_moe_lite", -1, RP_ROPE_GPTJ},
        {"glm4_moe_lite", 1, RP_ROPE_GPTJ}, {"glm4_moe_lite", 0, RP_ROPE_NEOX}, {"mistral4", -1, RP_ROPE_GPTJ},
        {"mistral4", 0, RP_ROPE_NEOX},     {"axk1", -1, RP_ROPE_GPTJ},          {"axk1", 0, RP_ROPE_NEOX},
        {"youtu", 1, RP_ROPE_GPTJ},        {"youtu", 0, RP_ROPE_NEOX},
        /* MLA that always calls apply_rotary_pos_emb_interleave: a config's flag changes nothing */
        {"deepseek_v32", -1, RP_ROPE_GPTJ}, {"deepseek_v32", 0, RP_ROPE_GPTJ},  {"longcat_flash", 0, RP_ROPE_GPTJ},
        {"glm_moe_dsa", 0, RP_ROPE_GPTJ},  {"hy_v4", 0, RP_ROPE_GPTJ},          {"axk2", 0, RP_ROPE_GPTJ},
        {"bailing_hybrid", 0, RP_ROPE_GPTJ}, {"minicpm3", -1, RP_ROPE_NEOX},    {"minicpm3", 1, RP_ROPE_NEOX},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int32_t style = -1;
        char msg[256] = "";
        CHECK(rp_hf_rope_style(cases[i].model_type, cases[i].interleave, &style, msg, sizeof msg) == RP_OK &&
                  style == cases[i].style,
              "%s (rope_interleave %d): style %d, %s", cases[i].model_type, (int)cases[i].interleave,
              (int)style, msg);
    }
    int32_t style = 42;
    char msg[256] = "";
    CHECK(rp_hf_rope_style("my_new_model", -1, &style, msg, sizeof msg) == RP_ERR_UNSUPPORTED, "unknown type");
    CHECK(strstr(msg, "'my_new_model'") && strstr(msg, "pass the style explicitly"), "message: %s", msg);
    CHECK(style == 42, "style written for an unknown model type");
}

/* A field value from a menu that mixes the plausible with what must be refused. */
static double pick(test_rng *r)
{
    static const double menu[] = {0.0, 1.0, 2.0, 4.0, 8.0, 40.0, 0.707, 10000.0, 5e5, 1e-300, 1e300,
                                  -1.0, NAN, INFINITY};
    return rng_next(r) % 3 == 0 ? rng_uniform(r, 0.0, 64.0) : menu[rng_next(r) % (sizeof menu / sizeof menu[0])];
}

static void test_random_parameters_end_in_a_table_or_a_clean_refusal(void)
{
    test_rng r = {20261203};
    enum { HALF_MAX = 64 };
    double shorts[HALF_MAX], longs[HALF_MAX];
    int ok = 0;
    for (int iter = 0; iter < 20000; iter++) {
        rp_hf_rope_params p = {0};
        p.rope_type = (int32_t)(rng_next(&r) % 8) - (iter % 50 == 0);
        p.flags = (uint32_t)(rng_next(&r) % 3);
        p.rotary_dim = (int64_t)(rng_next(&r) % (2 * HALF_MAX + 2));
        p.rope_theta = pick(&r);
        p.factor = pick(&r);
        p.attention_factor = rng_next(&r) % 2 ? 0.0 : pick(&r);
        p.seq_len = (int64_t)(rng_next(&r) % 20000) - 10;
        p.max_position_embeddings = (int64_t)(rng_next(&r) % 10000) - 10;
        p.original_max_position_embeddings = (int64_t)(rng_next(&r) % 10000) - 10;
        p.beta_fast = pick(&r);
        p.beta_slow = pick(&r);
        p.mscale = pick(&r);
        p.mscale_all_dim = pick(&r);
        p.low_freq_factor = pick(&r);
        p.high_freq_factor = pick(&r);
        p.partial_rotary_factor = rng_next(&r) % 2 ? rng_uniform(&r, 0.0, 1.0) : pick(&r);
        for (int j = 0; j < HALF_MAX; j++) {
            shorts[j] = rng_next(&r) % 97 ? rng_uniform(&r, 0.5, 2.0) : pick(&r);
            longs[j] = rng_next(&r) % 97 ? rng_uniform(&r, 1.0, 60.0) : pick(&r);
        }
        p.short_factor = rng_next(&r) % 20 ? shorts : NULL;
        p.long_factor = rng_next(&r) % 20 ? longs : NULL;
        double inv[HALF_MAX + 1], s = -7.0;
        for (int j = 0; j <= HALF_MAX; j++)
            inv[j] = -7.0;
        char msg[256] = "";
        const rp_status st = rp_hf_rope_frequencies(&p, inv, &s, msg, sizeof msg);
        if (st == RP_OK) {
            ok++;
            CHECK(isfinite(s) && s > 0.0, "iteration %d: attention_scaling %g", iter, s);
            for (int64_t j = 0; j < p.rotary_dim / 2; j++)
                CHECK(isfinite(inv[j]) && inv[j] >= 0.0 && inv[j] == (double)(float)inv[j],
                      "iteration %d: inv_freq[%lld] = %g", iter, (long long)j, inv[j]);
            CHECK(inv[p.rotary_dim / 2] == -7.0, "iteration %d: wrote past rotary_dim/2", iter);
        } else {
            CHECK(st == RP_ERR_INVALID_ARGUMENT && msg[0] != '\0', "iteration %d: %s '%s'", iter,
                  rp_status_name(st), msg);
            CHECK(s == -7.0 && inv[0] == -7.0, "iteration %d: a refused call wrote", iter);
        }
    }
    CHECK(ok > 1000, "only %d of 20000 random parameter sets were valid", ok);
}

int main(void)
{
    RUN(test_llama31_table_is_transformers_buffer);
    RUN(test_deepseek_v3_yarn_table_and_mscale);
    RUN(test_dynamic_within_range_is_default_and_grows_past_it);
    RUN(test_proportional_table_is_gemma4_full_attention);
    RUN(test_bad_parameters_are_refused_by_name_and_write_nothing);
    RUN(test_style_table_follows_transformers);
    RUN(test_random_parameters_end_in_a_table_or_a_clean_refusal);
    return test_summary("hf_rope");
}
