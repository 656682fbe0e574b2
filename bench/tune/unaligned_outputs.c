/*
 * unaligned_outputs.c — the CPU call with q_rot / k_rot on a cache line against the same call with
 * them OFFSET bytes past one (NumPy's large arrays and malloc's blocks start 16 bytes past a line),
 * interleaved in one process: Llama-3-8B shapes (with HEAD_DIM=256, 16 q heads of 256), float32
 * (DTYPE=bf16: bfloat16), T = 1024, pool 65536, inputs INPUT_OFFSET bytes past a line; NORM=1 adds
 * QK-norm (float32 weights). Prints the best of 12 rounds of 10 calls each way.
 *
 *     cc -O2 -Iinclude bench/tune/unaligned_outputs.c -Lbuild/src -lropepool -Wl,-rpath,$PWD/build/src \
 *        -o /tmp/unaligned_outputs && [ROPEPOOL_CPU=avx2] [DTYPE=bf16] [HEAD_DIM=256] [NORM=1] \
 *        /tmp/unaligned_outputs [OFFSET [INPUT_OFFSET]]
 */
#include "ropepool.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* `bytes` zeroed bytes starting `offset` bytes past a 2 MiB boundary (never freed: a benchmark). */
static void *buffer(size_t bytes, size_t offset)
{
    const size_t huge = (size_t)2 << 20;
    char *p = aligned_alloc(huge, (bytes + offset + huge) / huge * huge);
    if (p == NULL) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    memset(p, 0, bytes + offset);
    return p + offset;
}

int main(int argc, char **argv)
{
    const char *dtype = getenv("DTYPE"), *head_dim = getenv("HEAD_DIM");
    const rp_dtype dt = dtype && !strcmp(dtype, "bf16") ? RP_BF16 : RP_F32;
    const int64_t T = 1024, D = head_dim && !strcmp(head_dim, "256") ? 256 : 128, Hq = 4096 / D, Hk = 8, P = 65536;
    const size_t out_offset = argc > 1 ? (size_t)atoi(argv[1]) : 16, in_offset = argc > 2 ? (size_t)atoi(argv[2]) : 16;
    const size_t e = rp_dtype_size(dt), q_bytes = (size_t)(T * Hq * D) * e, kv_bytes = (size_t)(T * Hk * D) * e;
    const size_t pool_bytes = (size_t)(P * Hk * D) * e;
    char *q = buffer(q_bytes, in_offset), *k = buffer(kv_bytes, in_offset), *v = buffer(kv_bytes, in_offset);
    char *k_pool = buffer(pool_bytes, in_offset), *v_pool = buffer(pool_bytes, in_offset);
    char *q_rot[2] = {buffer(q_bytes, 0), buffer(q_bytes, out_offset)};
    char *k_rot[2] = {buffer(kv_bytes, 0), buffer(kv_bytes, out_offset)};
    float weights[256];
    for (int i = 0; i < 256; i++)
        weights[i] = 1.0f + (float)i / 1024;
    int64_t *positions = malloc((size_t)T * sizeof *positions), *slots = malloc((size_t)T * sizeof *slots);
    for (int64_t t = 0; t < T; t++) {
        positions[t] = t * 7 % 8192;
        slots[t] = t * 37 % P;
    }
    /* values in [1, 2): float32 bits, or their high halves (bfloat16) */
    for (size_t i = 0; i < q_bytes / e; i++) {
        const uint32_t bits = 0x3f800000u + (uint32_t)(i % 97) * 0x10000u;
        memcpy(q + i * e, (const char *)&bits + (e == 2 ? 2 : 0), e);
    }
    for (size_t i = 0; i < kv_bytes / e; i++) {
        const uint32_t bits = 0x3f800000u + (uint32_t)(i % 89) * 0x10000u;
        memcpy(k + i * e, (const char *)&bits + (e == 2 ? 2 : 0), e);
        memcpy(v + i * e, (const char *)&bits + (e == 2 ? 2 : 0), e);
    }
    rp_context *ctx = NULL;
    char err[256];
    if (rp_context_create(NULL, &ctx, err, sizeof err) != RP_OK) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    double best[2] = {1e9, 1e9};
    for (int round = 0; round < 12; round++)
        for (int w = 0; w < 2; w++) {
            rp_rope_pool_args a;
            memset(&a, 0, sizeof a);
            a.q = rp_tensor_3d(q, dt, T, Hq, D);
            a.k = rp_tensor_3d(k, dt, T, Hk, D);
            a.v = rp_tensor_3d(v, dt, T, Hk, D);
            a.positions = rp_tensor_1d(positions, RP_I64, T);
            a.slots = rp_tensor_1d(slots, RP_I64, T);
            a.k_pool = rp_tensor_3d(k_pool, dt, P, Hk, D);
            a.v_pool = rp_tensor_3d(v_pool, dt, P, Hk, D);
            a.q_rot = rp_tensor_3d(q_rot[w], dt, T, Hq, D);
            a.k_rot = rp_tensor_3d(k_rot[w], dt, T, Hk, D);
            a.head_dim = D;
            a.num_qo_heads = Hq;
            a.num_kv_heads = Hk;
            a.rope_base = 500000.0;
            if (getenv("NORM")) {
                a.q_norm_weight = a.k_norm_weight = weights;
                a.q_norm_weight_dtype = a.k_norm_weight_dtype = RP_F32;
                a.norm_eps = 1e-6;
            }
            const double start = seconds();
            for (int i = 0; i < 10; i++)
                if (rp_rope_pool_fused(ctx, &a, err, sizeof err) != RP_OK) {
                    fprintf(stderr, "%s\n", err);
                    return 1;
                }
            const double per_call = (seconds() - start) / 10;
            best[w] = per_call < best[w] ? per_call : best[w];
        }
    printf("%s %s D=%lld%s: outputs on a line %.0f us, %zu bytes past one %.0f us (%.2fx); inputs %zu bytes past one\n",
           rp_cpu_kernel_name(), rp_dtype_name(dt), (long long)D, getenv("NORM") ? " QK-norm" : "", best[0] * 1e6,
           out_offset, best[1] * 1e6, best[1] / best[0], in_offset);
    rp_context_destroy(ctx);
    return 0;
}
