/*
 * test_cuda_mrope.c — multimodal RoPE on the GPU: every kernel (decode, prefill, strided) within
 * the bound of the float64 formula for both section rules, several sections (empty h or w),
 * partial rotary, caller tables and attention scaling, int32 and int64 positions [3, T] of any
 * strides; text tokens (three equal rows) bit-identical to the plain call, paged and fp8 pools
 * included; a captured graph reads the positions rows at each replay.
 */
#include "cuda_test_util.h"

static test_rng rng = {1819};
static rp_context *ctx;

static const rp_dtype dtypes[3] = {RP_F32, RP_F16, RP_BF16};

/* Model heads (decode and prefill kernels), few heads (a table builder computes several pairs, of
 * several rows), and odd sizes (the strided kernel). */
static const int64_t shapes[][3] = {{28, 4, 128}, {32, 8, 128}, {1, 1, 128}, {4, 2, 64}, {3, 1, 96}, {2, 1, 34}};

static void test_every_kernel_follows_both_rules_within_bound(void)
{
    const int64_t Ts[] = {1, 7, 300, 1500};
    const int nT = test_quick() ? 2 : 4;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int d = 0; d < 3; d++)
            for (int i = 0; i < nT; i++)
                for (int v = 0; v < NUM_TEST_VARIANTS; v++) {
                    const int sec = (v + (int)s + d + i) % NUM_SECTIONS;
                    if ((v + i + d) % 3 != 0)
                        continue; /* every variant, section kind and size; not every combination */
                    const int64_t T = Ts[i], Hq = shapes[s][0], Hk = shapes[s][1], D = shapes[s][2];
                    fixture f;
                    fixture_init(&f, &rng, T, Hq, Hk, D, T + 64, dtypes[d], (i + v) % 2 ? RP_I64 : RP_I32, 131072, 1);
                    fixture_set_variant(&f, &rng, &test_variants[v]);
                    const int64_t R = variant_rotary_dim(&test_variants[v], D);
                    f.args.mrope_interleaved = (uint32_t)mrope_section_for(sec, R / 2, f.args.mrope_section);
                    fixture_use_mrope_rows(&f, &rng, (v + i) % 2 ? POS_EXTREME : POS_IMAGE);
                    char what[200], name[64];
                    snprintf(what, sizeof what, "%lld/%lld/%lld %s T=%lld %s %s [%d, %d, %d]", (long long)Hq,
                             (long long)Hk, (long long)D, rp_dtype_name(dtypes[d]), (long long)T,
                             variant_name(&test_variants[v], D, name, sizeof name),
                             f.args.mrope_interleaved ? "interleaved" : "chunked", (int)f.args.mrope_section[0],
                             (int)f.args.mrope_section[1], (int)f.args.mrope_section[2]);
                    run_and_verify_fixture(ctx, &f, what);
                    fixture_free(&f);
                }
}

/* Paged NHD pools of blocks of 16 rows over f's flat buffers. */
static void use_nhd(fixture *f)
{
    rp_rope_pool_args *a = &f->args;
    for (int i = 0; i < 2; i++) {
        rp_tensor *t = i ? &a->v_pool : &a->k_pool;
        const rp_tensor flat = *t;
        t->ndim = 4;
        t->shape[0] = f->P / 16;
        t->shape[1] = 16;
        t->shape[2] = f->Hk;
        t->shape[3] = f->D;
        t->strides[3] = 1;
        t->strides[2] = f->D;
        t->strides[1] = f->Hk * f->D;
        t->strides[0] = 16 * f->Hk * f->D;
        t->data = flat.data;
    }
    a->kv_layout = RP_KV_NHD;
}

static void test_equal_rows_give_the_plain_call_bit_for_bit(void)
{
    const int64_t Ts[] = {1, 64, 2000};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int d = 0; d < 3; d++)
            for (int i = 0; i < 3; i++)
                for (int pools = 0; pools < 3; pools++) { /* flat, NHD, fp8 e4m3 */
                    const int64_t T = Ts[i], Hq = shapes[s][0], Hk = shapes[s][1], D = shapes[s][2];
                    fixture plain, m;
                    test_rng a = rng, b = rng;
                    rng_next(&rng);
                    fixture_init(&plain, &a, T, Hq, Hk, D, 2048 + 64, dtypes[d], RP_I32, 131072, 1);
                    fixture_init(&m, &b, T, Hq, Hk, D, 2048 + 64, dtypes[d], RP_I32, 131072, 1);
                    const rope_variant *v = &test_variants[(s + (size_t)d + (size_t)i) % NUM_TEST_VARIANTS];
                    fixture_set_variant(&plain, &a, v);
                    fixture_set_variant(&m, &b, v);
                    if (pools == 1) {
                        use_nhd(&plain);
                        use_nhd(&m);
                    } else if (pools == 2) {
                        plain.args.k_pool.dtype = plain.args.v_pool.dtype = RP_U8;
                        m.args.k_pool.dtype = m.args.v_pool.dtype = RP_U8;
                        plain.args.pool_dtype = m.args.pool_dtype = RP_F8_E4M3;
                    }
                    const int64_t R = variant_rotary_dim(v, D);
                    m.args.mrope_interleaved =
                        (uint32_t)mrope_section_for((int)(s + (size_t)i) % NUM_SECTIONS, R / 2, m.args.mrope_section);
                    fixture_use_mrope_rows(&m, &rng, POS_EQUAL);
                    mirror mp = {0}, mm = {0};
                    mirror_fixture(&mp, &plain);
                    mirror_fixture(&mm, &m);
                    run_on_device(ctx, &mp, &plain.args, "plain");
                    run_on_device(ctx, &mm, &m.args, "mrope, equal rows");
                    CHECK(fixtures_same_outputs(&plain, &m, pools == 2 ? 1 : rp_dtype_size(dtypes[d])),
                          "%lld/%lld/%lld %s T=%lld pools %d: equal rows differ from the plain call", (long long)Hq,
                          (long long)Hk, (long long)D, rp_dtype_name(dtypes[d]), (long long)T, pools);
                    mirror_free(&mp);
                    mirror_free(&mm);
                    fixture_free(&plain);
                    fixture_free(&m);
                }
}

/* Captured once, replayed with new positions rows written to device memory in between: each
 * replay rotates by the rows of its time (the kernel reads them; nothing is baked in). */
static void test_graph_replay_reads_new_position_rows(void)
{
    const int64_t T = 256, Hq = 28, Hk = 4, D = 128, P = 512;
    fixture f;
    fixture_init(&f, &rng, T, Hq, Hk, D, P, RP_BF16, RP_I64, 131072, 1);
    f.args.mrope_section[0] = 16;
    f.args.mrope_section[1] = 24;
    f.args.mrope_section[2] = 24;
    fixture_use_mrope_rows(&f, &rng, POS_IMAGE);
    mirror m = {0};
    mirror_fixture(&m, &f);
    rp_rope_pool_args d = mirror_args(&m, &f.args, 0);
    captured_call call = capture_call(ctx, &d);
    const size_t bytes = (size_t)(3 * T) * sizeof(int64_t);
    int64_t *rows = test_alloc(bytes);
    for (int replay = 0; replay < 3; replay++) {
        for (int64_t t = 0; t < T; t++)
            for (int r = 0; r < 3; r++)
                rows[3 * t + r] = replay == 1 ? extreme_position(&rng, t + r) : 5000 * replay + (r ? (r == 1 ? t / 16 : t % 16) : 0);
        memcpy(f.positions, rows, bytes);
        mirror_upload(&m);
        captured_call_replay(&call);
        mirror_download(&m);
        char what[64];
        snprintf(what, sizeof what, "graph replay %d", replay);
        verify_outputs(&f.args, &f.args, what);
    }
    free(rows);
    captured_call_free(&call);
    mirror_free(&m);
    fixture_free(&f);
}

int main(void)
{
    if (cuda_test_no_gpu())
        return CUDA_TEST_SKIP;
    ctx = cuda_test_context(0);
    RUN(test_every_kernel_follows_both_rules_within_bound);
    RUN(test_equal_rows_give_the_plain_call_bit_for_bit);
    RUN(test_graph_replay_reads_new_position_rows);
    rp_context_destroy(ctx);
    return test_summary("test_cuda_mrope");
}
