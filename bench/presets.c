/*
 * presets.c — attention shapes of real models, as one GPU of their usual deployment sees them
 * (Llama-3-70B is normally tensor-parallel over 8 GPUs: 64/8 heads become 8/1 per GPU).
 * rope_base is each model's published rope_theta.
 */
#include "bench.h"

#include <string.h>

static const bench_shape presets[] = {
    {"llama3-8b", "Llama-3-8B", 32, 8, 128, 500000.0},
    {"llama3-70b-tp8", "Llama-3-70B, one GPU of tensor-parallel 8", 8, 1, 128, 500000.0},
    {"qwen2.5-7b", "Qwen2.5-7B", 28, 4, 128, 1000000.0},
    {"mistral-7b", "Mistral-7B v0.3", 32, 8, 128, 1000000.0},
    {"gemma2-9b", "Gemma-2-9B", 16, 8, 256, 10000.0},
    {"phi3-mini", "Phi-3-mini", 32, 32, 96, 10000.0},
    {"tinyllama-1.1b", "TinyLlama-1.1B (head_dim 64)", 32, 4, 64, 10000.0},
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
