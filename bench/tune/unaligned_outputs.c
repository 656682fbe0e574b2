/*
 * unaligned_outputs.c — the CPU call with q_rot / k_rot on a cache line against the same call with
 * them OFFSET bytes past one (NumPy's large arrays and malloc's blocks start 16 bytes past a line),
 * interleaved in one process: Llama-3-8B shapes, float32, T = 1024, pool 65536, inputs INPUT_OFFSET
 * bytes past a line. Prints the best of 12 rounds of 10 calls each way.
 *
 *     cc -O2 -Iinclude bench/tune/unaligned_outputs.c -Lbuild/src -lropepool -Wl,-rpath,$PWD/build/src \
 *        -o /tmp/unaligned_outputs && [ROPEPOOL_CPU=avx2] /tmp/unaligned_outputs [OFFSET [INPUT_OFFSET]]
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
    const int64_t T = 1024, Hq = 32, Hk = 8, D = 128, P = 65536;
    const size_t out_offset = argc > 1 ? (size_t)atoi(argv[1]) : 16, in_offset = argc > 2 ? (size_t)atoi(argv[2]) : 16;
    const size_t q_bytes = (size_t)(T * Hq * D) * 4, kv_bytes = (size_t)(T * Hk * D) * 4;
    const size_t pool_bytes = (size_t)(P * Hk * D) * 4;
    float *q = buffer(q_bytes, in_offset), *k = buffer(kv_bytes, in_offset), *v = buffer(kv_bytes, in_offset);
    float *k_pool = buffer(pool_bytes, in_offset), *v_pool = buffer(pool_bytes, in_offset);
    float *q_rot[2] = {buffer(q_bytes, 0), buffer(q_bytes, out_offset)};
    float *k_rot[2] = {buffer(kv_bytes, 0), buffer(kv_bytes, out_offset)};
    int64_t *positions = malloc((size_t)T * sizeof *positions), *slots = malloc((size_t)T * sizeof *slots);
    for (int64_t t = 0; t < T; t++) {
        positions[t] = t * 7 % 8192;
        slots[t] = t * 37 % P;
    }
    for (size_t i = 0; i < q_bytes / 4; i++)
        q[i] = (float)(i % 97) * 0.01f;
    for (size_t i = 0; i < kv_bytes / 4; i++) {
        k[i] = (float)(i % 89) * 0.01f;
        v[i] = 1.0f;
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
            a.q = rp_tensor_3d(q, RP_F32, T, Hq, D);
            a.k = rp_tensor_3d(k, RP_F32, T, Hk, D);
            a.v = rp_tensor_3d(v, RP_F32, T, Hk, D);
            a.positions = rp_tensor_1d(positions, RP_I64, T);
            a.slots = rp_tensor_1d(slots, RP_I64, T);
            a.k_pool = rp_tensor_3d(k_pool, RP_F32, P, Hk, D);
            a.v_pool = rp_tensor_3d(v_pool, RP_F32, P, Hk, D);
            a.q_rot = rp_tensor_3d(q_rot[w], RP_F32, T, Hq, D);
            a.k_rot = rp_tensor_3d(k_rot[w], RP_F32, T, Hk, D);
            a.head_dim = D;
            a.num_qo_heads = Hq;
            a.num_kv_heads = Hk;
            a.rope_base = 500000.0;
            const double start = seconds();
            for (int i = 0; i < 10; i++)
                if (rp_rope_pool_fused(ctx, &a, err, sizeof err) != RP_OK) {
                    fprintf(stderr, "%s\n", err);
                    return 1;
                }
            const double per_call = (seconds() - start) / 10;
            best[w] = per_call < best[w] ? per_call : best[w];
        }
    printf("%s: outputs on a line %.0f us, %zu bytes past one %.0f us (%.2fx); inputs %zu bytes past one\n",
           rp_cpu_kernel_name(), best[0] * 1e6, out_offset, best[1] * 1e6, best[1] / best[0], in_offset);
    rp_context_destroy(ctx);
    return 0;
}
