/*
 * presets.c — attention shapes of real models, as one GPU of their usual deployment sees them
 * (Llama-3-70B is normally tensor-parallel over 8 GPUs: 64/8 heads become 8/1 per GPU).
 * rope_base is each model's published rope_theta. The second group are RoPE variants, each as
 * its config.json states it: llama3/YaRN/LongRoPE frequency scaling (rope_table.c), GPT-J pairs,
 * partial rotary.
 */
#include "bench.h"

#include <string.h>

static const bench_shape presets[] = {
    {.name = "llama3-8b", .model = "Llama-3-8B", .hq = 32, .hk = 8, .d = 128, .rope_base = 500000.0},
    {.name = "llama3-70b-tp8", .model = "Llama-3-70B, one GPU of tensor-parallel 8", .hq = 8, .hk = 1, .d = 128, .rope_base = 500000.0},
    {.name = "qwen2.5-7b", .model = "Qwen2.5-7B", .hq = 28, .hk = 4, .d = 128, .rope_base = 1000000.0},
    {.name = "mistral-7b", .model = "Mistral-7B v0.3", .hq = 32, .hk = 8, .d = 128, .rope_base = 1000000.0},
    {.name = "gemma2-9b", .model = "Gemma-2-9B", .hq = 16, .hk = 8, .d = 256, .rope_base = 10000.0},
    {.name = "phi3-mini", .model = "Phi-3-mini", .hq = 32, .hk = 32, .d = 96, .rope_base = 10000.0},
    /* Qwen3-8B: q_norm / k_norm (RMSNorm over each head, rms_norm_eps 1e-6) before RoPE */
    {.name = "qwen3-8b", .model = "Qwen3-8B (QK-norm)", .hq = 32, .hk = 8, .d = 128, .rope_base = 1000000.0,
     .qk_norm = 1},
    /* Gemma-3-12B: heads of 256 with q_norm / k_norm ((1 + w) weights: the same work). Its sliding-
     * window layers (5 of 6) use rope_local_base_freq 10000; the global ones rope_theta 1e6 with
     * linear scaling x8, at the same cost */
    {.name = "gemma3-12b", .model = "Gemma-3-12B (QK-norm, sliding-window layers)", .hq = 16, .hk = 8, .d = 256,
     .rope_base = 10000.0, .qk_norm = 1},
    {.name = "tinyllama-1.1b", .model = "TinyLlama-1.1B (head_dim 64)", .hq = 32, .hk = 4, .d = 64, .rope_base = 10000.0},
    /* rope_scaling {"rope_type": "llama3", "factor": 8, "low_freq_factor": 1, "high_freq_factor": 4,
     * "original_max_position_embeddings": 8192} */
    {.name = "llama3.1-8b", .model = "Llama-3.1-8B (llama3 scaling)", .hq = 32, .hk = 8, .d = 128,
     .rope_base = 500000.0, .scaling = BENCH_ROPE_LLAMA3, .factor = 8, .original_max = 8192, .low = 1,
     .high = 4},
    /* Qwen's README for 128K contexts: {"type": "yarn", "factor": 4,
     * "original_max_position_embeddings": 32768}; beta_fast 32, beta_slow 1 (transformers' defaults) */
    {.name = "qwen2.5-7b-yarn", .model = "Qwen2.5-7B with YaRN x4", .hq = 28, .hk = 4, .d = 128,
     .rope_base = 1000000.0, .scaling = BENCH_ROPE_YARN, .factor = 4, .original_max = 32768, .low = 1,
     .high = 32},
    /* longrope, original_max_position_embeddings 4096, max_position_embeddings 131072 (factor 32);
     * the long_factor list is a plausible smooth one, not Phi-3's own (rope_table.c) */
    {.name = "phi3-mini-128k", .model = "Phi-3-mini-128k (LongRoPE, plausible factors)", .hq = 32, .hk = 32,
     .d = 96, .rope_base = 10000.0, .scaling = BENCH_ROPE_LONGROPE, .factor = 32, .original_max = 4096},
    /* n_head 16, n_embd 4096, rotary_dim 64: interleaved pairs on the first quarter of each head */
    {.name = "gpt-j-6b", .model = "GPT-J-6B (GPT-J pairs, rotary_dim 64)", .hq = 16, .hk = 16, .d = 256,
     .rope_base = 10000.0, .style = RP_ROPE_GPTJ, .rotary_dim = 64},
    /* num_attention_heads 64, hidden_size 6144, rotary_pct 0.25: 24 of 96 dims; the whole model
     * (41 GB in bf16) fits one 80 GB+ GPU, so one GPU sees all 64 heads */
    {.name = "gpt-neox-20b", .model = "GPT-NeoX-20B (rotary_pct 0.25)", .hq = 64, .hk = 64, .d = 96,
     .rope_base = 10000.0, .rotary_dim = 24},
    /* num_attention_heads 32, multi_query_group_num 2, kv_channels 128, partial_rotary_factor 0.5,
     * interleaved pairs (transformers' Glm4 rotates x[0::2], x[1::2]) */
    {.name = "glm4-9b", .model = "GLM-4-9B (GPT-J pairs, partial 0.5)", .hq = 32, .hk = 2, .d = 128,
     .rope_base = 10000.0, .style = RP_ROPE_GPTJ, .rotary_dim = 64},
    /* Multimodal RoPE on an image's tokens (inputs.c: t constant, h and w on a grid). Qwen2.5-VL-7B:
     * num_attention_heads 28, num_key_value_heads 4, rope_theta 1e6, mrope_section [16, 24, 24] in
     * consecutive chunks; Qwen3-VL-8B: 32 / 8, rope_theta 5e6, [24, 20, 20] interleaved */
    {.name = "qwen2.5-vl-7b", .model = "Qwen2.5-VL-7B (mRoPE [16, 24, 24])", .hq = 28, .hk = 4, .d = 128,
     .rope_base = 1000000.0, .mrope_section = {16, 24, 24}},
    {.name = "qwen3-vl-8b", .model = "Qwen3-VL-8B (interleaved mRoPE [24, 20, 20])", .hq = 32, .hk = 8, .d = 128,
     .rope_base = 5000000.0, .mrope_section = {24, 20, 20}, .mrope_interleaved = 1},
    /* DeepSeek-V3 / R1 MLA (config: kv_lora_rank 512, qk_rope_head_dim 64, qk_nope_head_dim 128,
     * rope_theta 10000, rope_scaling yarn factor 40, original_max_position_embeddings 4096,
     * beta_fast 32, beta_slow 1, mscale 1, mscale_all_dim 1): q_pe = q[..., 128:] of q [T, Hq, 192]
     * and k_pe [T, 1, 64] rotate (GPT-J pairs), c_kv [T, 1, 512] is copied, and the cache row per
     * slot is [c_kv | k_pe], 576 wide. Hq 128 is one GPU's heads at DP attention, 16 at TP 8. */
    {.name = "deepseek-v3-mla", .model = "DeepSeek-V3 MLA (Hq 128)", .hq = 128, .hk = 1, .d = 64,
     .rope_base = 10000.0, .style = RP_ROPE_GPTJ, .scaling = BENCH_ROPE_YARN, .factor = 40, .original_max = 4096,
     .low = 1, .high = 32, .mscale = 1, .mscale_all_dim = 1, .q_head_dim = 192, .v_head_dim = 512, .latent = 1},
    {.name = "deepseek-v3-mla-tp8", .model = "DeepSeek-V3 MLA, TP 8 (Hq 16)", .hq = 16, .hk = 1, .d = 64,
     .rope_base = 10000.0, .style = RP_ROPE_GPTJ, .scaling = BENCH_ROPE_YARN, .factor = 40, .original_max = 4096,
     .low = 1, .high = 32, .mscale = 1, .mscale_all_dim = 1, .q_head_dim = 192, .v_head_dim = 512, .latent = 1},
};

const bench_shape *bench_presets(int *count)
{
    *count = (int)(sizeof presets / sizeof presets[0]);
    return presets;
}

const bench_shape *bench_find_preset(const char *name)
{
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
        if (strcmp(presets[i].name, name) == 0)
            return &presets[i];
    return NULL;
}
