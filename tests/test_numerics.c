/*
 * test_numerics.c — accuracy against the float64 formula for every kernel level and dtype, at
 * extreme positions; bit-identical results for any thread count.
 */
#include "test_levels.h"

#include "cpu/kernels.h"
#include "dtype.h"
#include "internal.h"
#include "ref/verify.h"

static test_rng rng = {2024};

static void test_every_level_within_bound_at_extreme_positions(void)
{
    static const int64_t dims[][3] = {{8, 2, 128}, {4, 4, 64}, {2, 1, 256}, {3, 1, 96}, {2, 2, 2}, {1, 1, 34}};
    for (int l = 0; l < num_levels; l++) {
        if (!levels[l].supported)
            continue;
        double worst = 0.0;
        for (int d = 0; d < 3; d++)
            for (size_t s = 0; s < sizeof dims / sizeof dims[0]; s++)
                for (int idx = 0; idx < 2; idx++) {
                    fixture f;
                    fixture_init_extreme(&f, &rng, dims[s], dtypes[d], idx ? RP_I64 : RP_I32);
                    run_level(&levels[l], &f, RP_PARTS_ALL);
                    char what[96];
                    snprintf(what, sizeof what, "%s %s D=%lld %s", levels[l].name,
                             rp_dtype_name(dtypes[d]), (long long)dims[s][2], idx ? "int64" : "int32");
                    verify_fixture(&f, what, &worst);
                    fixture_free(&f);
                }
        report_worst(&levels[l], worst);
    }
}

/* Both styles, R in {2, D - 2, D/2, D}, each table kind and attention scaling, on head dims that
 * are and are not vector multiples (80, 96), at extreme positions: within the bound, pass-through
 * dims exact; the reference exactly the float64 formula rounded once. */
static void test_every_level_serves_every_variant(void)
{
    static const int64_t dims[][3] = {{3, 1, 80}, {2, 2, 96}, {4, 2, 128}, {2, 1, 256}, {1, 1, 64}};
    for (int l = 0; l < num_levels; l++) {
        if (!levels[l].supported)
            continue;
        double worst = 0.0;
        for (int d = 0; d < 3; d++)
            for (size_t s = 0; s < sizeof dims / sizeof dims[0]; s++)
                for (int v = 0; v < NUM_TEST_VARIANTS; v++) {
                    if (test_quick() && l < 2 && (v + (int)s + d) % 2)
                        continue; /* quick runs: reference and portable take half, SIMD levels all */
                    fixture f;
                    fixture_init_extreme(&f, &rng, dims[s], dtypes[d], v % 2 ? RP_I64 : RP_I32);
                    fixture_set_variant(&f, &rng, &test_variants[v]);
                    run_level(&levels[l], &f, RP_PARTS_ALL);
                    char what[160], name[64];
                    snprintf(what, sizeof what, "%s %s %s", levels[l].name, rp_dtype_name(dtypes[d]),
                             variant_name(&test_variants[v], dims[s][2], name, sizeof name));
                    verify_fixture(&f, what, &worst);
                    fixture_free(&f);
                }
        report_worst(&levels[l], worst);
    }
}

/* An all-zero table leaves every pair unrotated: with s = 1 the outputs are the inputs bit for
 * bit, and with s = 2 (exact in binary) exactly twice them. */
static void test_zero_frequencies_leave_pairs_unrotated(void)
{
    static const rope_variant zero[2] = {{RP_ROPE_GPTJ, -2, TABLE_ZERO, 1.0}, {RP_ROPE_NEOX, 0, TABLE_ZERO, 2.0}};
    for (int l = 0; l < num_levels; l++) {
        if (!levels[l].supported)
            continue;
        for (int d = 0; d < 3; d++)
            for (int z = 0; z < 2; z++) {
                fixture f;
                fixture_init(&f, &rng, 7, 3, 2, 96, 8, dtypes[d], RP_I32, 1 << 30, 0);
                fixture_set_variant(&f, &rng, &zero[z]);
                run_level(&levels[l], &f, RP_PARTS_ALL);
                int same = 1;
                for (int64_t i = 0; i < f.T * f.Hq * f.D; i++) {
                    double x, y;
                    if (dtypes[d] == RP_F32) {
                        x = ((float *)f.q)[i];
                        y = ((float *)f.q_rot)[i];
                    } else if (dtypes[d] == RP_F16) {
                        x = rp_f16_bits_to_double(((uint16_t *)f.q)[i]);
                        y = rp_f16_bits_to_double(((uint16_t *)f.q_rot)[i]);
                    } else {
                        x = rp_bf16_bits_to_float(((uint16_t *)f.q)[i]);
                        y = rp_bf16_bits_to_float(((uint16_t *)f.q_rot)[i]);
                    }
                    const int64_t dim = i % f.D;
                    same &= y == (dim < f.D - 2 || z == 1 ? zero[z].attention_scaling * x : x);
                }
                CHECK(same, "%s %s zero table s=%g: q_rot is not s * q", levels[l].name,
                      rp_dtype_name(dtypes[d]), zero[z].attention_scaling);
                fixture_free(&f);
            }
    }
}

/* int64 positions beyond int32 take the exact libm path in the fast kernels. */
static void test_int64_positions_beyond_int32(void)
{
    static const int64_t big[] = {(int64_t)1 << 31, (int64_t)1 << 40, ((int64_t)1 << 53) - 1,
                                  -((int64_t)1 << 45) + 12345, INT64_MAX, INT64_MIN};
    static const int variants[] = {0, 2, 5, 7};
    for (int l = 0; l < num_levels; l++) {
        if (!levels[l].supported)
            continue;
        double worst = 0.0;
        for (int v = 0; v < 4; v++) {
            fixture f;
            fixture_init(&f, &rng, 6, 2, 1, 64, 8, RP_F32, RP_I64, 10, 0);
            fixture_set_variant(&f, &rng, &test_variants[variants[v]]);
            for (int t = 0; t < 6; t++)
                ((int64_t *)f.positions)[t] = big[t];
            run_level(&levels[l], &f, RP_PARTS_ALL);
            char what[128], name[64];
            snprintf(what, sizeof what, "%s %s", levels[l].name,
                     variant_name(&test_variants[variants[v]], 64, name, sizeof name));
            verify_fixture(&f, what, &worst);
            fixture_free(&f);
        }
    }
}

/* The checker itself must be able to fail: a result two bounds away is caught. */
static void test_verifier_catches_a_wrong_element(void)
{
    fixture f;
    fixture_init(&f, &rng, 3, 2, 1, 16, 4, RP_F32, RP_I32, 100000, 0);
    run_level(&levels[0], &f, RP_PARTS_ALL);
    float *q_rot = f.q_rot;
    q_rot[5] += 4e-6f * (1.0f + fabsf(q_rot[5]));
    double freq[512];
    rp_problem p = problem_of(&f, freq);
    rp_verify_result r;
    rp_ref_verify(&p, &r);
    CHECK(r.failures == 1, "verifier missed a wrong element (failures %lld)", (long long)r.failures);
    /* An angle formed in float32, as peers do, is caught at large positions. */
    ((int32_t *)f.positions)[0] = 1000000;
    run_level(&levels[0], &f, RP_PARTS_ALL);
    for (int i = 0; i < 8; i++) {
        const float *q = f.q;
        float angle = (float)1000000 * (float)freq[i];
        float c = cosf(angle), s = sinf(angle);
        q_rot[i] = q[i] * c - q[i + 8] * s;
        q_rot[i + 8] = q[i + 8] * c + q[i] * s;
    }
    rp_ref_verify(&p, &r);
    CHECK(r.failures > 0, "verifier accepted float32 angles at position 1e6");
    fixture_free(&f);

    /* A changed pass-through element, and GPT-J results checked as NeoX ones, are caught. */
    fixture_init(&f, &rng, 3, 2, 1, 16, 4, RP_F32, RP_I32, 100000, 0);
    const rope_variant gptj = {RP_ROPE_GPTJ, 8, TABLE_DEFAULT, 0.0};
    fixture_set_variant(&f, &rng, &gptj);
    run_level(&levels[0], &f, RP_PARTS_ALL);
    p = problem_of(&f, freq);
    rp_ref_verify(&p, &r);
    CHECK(r.failures == 0, "verifier rejects a correct GPT-J result: %s", r.first_failure);
    p.style = RP_ROPE_NEOX;
    rp_ref_verify(&p, &r);
    CHECK(r.failures > 0, "verifier accepted GPT-J pairs as NeoX ones");
    p.style = RP_ROPE_GPTJ;
    q_rot = f.q_rot;
    q_rot[16 + 12] = nextafterf(q_rot[16 + 12], 10.0f);
    rp_ref_verify(&p, &r);
    CHECK(r.failures == 1, "verifier missed a pass-through element off by one ulp (failures %lld)",
          (long long)r.failures);
    fixture_free(&f);
}

static void test_split_parts_equal_fused(void)
{
    for (int l = 1; l < num_levels; l++) {
        if (!levels[l].supported)
            continue;
        for (int d = 0; d < 3 * NUM_TEST_VARIANTS; d++) {
            fixture f, g;
            test_rng r1 = {99}, r2 = {99};
            fixture_init(&f, &r1, 9, 4, 2, 64, 32, dtypes[d % 3], RP_I32, 50000, 1);
            fixture_init(&g, &r2, 9, 4, 2, 64, 32, dtypes[d % 3], RP_I32, 50000, 1);
            fixture_set_variant(&f, &r1, &test_variants[d / 3]);
            fixture_set_variant(&g, &r2, &test_variants[d / 3]);
            run_level(&levels[l], &f, RP_PARTS_ALL);
            run_level(&levels[l], &g, RP_PARTS_ROTATE);
            run_level(&levels[l], &g, RP_PARTS_SCATTER);
            const size_t e = rp_dtype_size(dtypes[d % 3]);
            CHECK(memcmp(f.q_rot, g.q_rot, 9 * 4 * 64 * e) == 0 && memcmp(f.k_rot, g.k_rot, 9 * 2 * 64 * e) == 0 &&
                      memcmp(f.k_pool, g.k_pool, 32 * 2 * 64 * e) == 0 && memcmp(f.v_pool, g.v_pool, 32 * 2 * 64 * e) == 0,
                  "%s %s variant %d: rotate + scatter differs from the fused call", levels[l].name,
                  rp_dtype_name(dtypes[d % 3]), d / 3);
            fixture_free(&f);
            fixture_free(&g);
        }
    }
}

static void test_bit_identical_for_any_thread_count(void)
{
    static const rope_variant variants[3] = {{RP_ROPE_NEOX, 0, TABLE_DEFAULT, 0.0},
                                             {RP_ROPE_GPTJ, 64, TABLE_F64, 1.2},
                                             {RP_ROPE_NEOX, 32, TABLE_F32, 0.0}};
    for (int d = 0; d < 9; d++) {
        unsigned char *first[4] = {0};
        size_t sizes[4] = {0};
        for (int threads = 1; threads <= 5; threads++) {
            rp_context_options o = {0};
            o.num_threads = threads;
            rp_context *ctx;
            char msg[256];
            CHECK(rp_context_create(&o, &ctx, msg, sizeof msg) == RP_OK, "%s", msg);
            fixture f;
            test_rng r = {5};
            fixture_init(&f, &r, 301, 8, 2, 128, 400, dtypes[d % 3], RP_I32, 1 << 20, 1);
            fixture_set_variant(&f, &r, &variants[d / 3]);
            CHECK(rp_rope_pool_fused(ctx, &f.args, msg, sizeof msg) == RP_OK, "%s", msg);
            const size_t e = rp_dtype_size(dtypes[d % 3]);
            void *outs[4] = {f.q_rot, f.k_rot, f.k_pool, f.v_pool};
            size_t n[4] = {301 * 8 * 128 * e, 301 * 2 * 128 * e, 400 * 2 * 128 * e, 400 * 2 * 128 * e};
            for (int i = 0; i < 4; i++) {
                if (threads == 1) {
                    first[i] = test_alloc(n[i]);
                    memcpy(first[i], outs[i], n[i]);
                    sizes[i] = n[i];
                } else {
                    CHECK(memcmp(first[i], outs[i], sizes[i]) == 0, "%s variant %d output %d differs at %d threads",
                          rp_dtype_name(dtypes[d % 3]), d / 3, i, threads);
                }
            }
            fixture_free(&f);
            rp_context_destroy(ctx);
        }
        for (int i = 0; i < 4; i++)
            free(first[i]);
    }
}

/* ---- the fast kernels' own paths: tails, misaligned rows, in place, parts, streaming stores ---- */

/* One tensor of a call, copied into a bigger buffer with padded strides: token stride
 * n1 * (D + pad1) + pad0, head stride D + pad1, starting `shift` elements past a 64-byte boundary,
 * so rows land anywhere relative to cache lines. Padding holds a pattern that must survive. */
typedef struct padded {
    unsigned char *mem;
    size_t bytes;
    rp_tensor t;
} padded;

static padded pad_tensor(const rp_tensor *src, int64_t pad0, int64_t pad1, int64_t shift)
{
    const size_t e = rp_dtype_size((rp_dtype)src->dtype);
    const int64_t n0 = src->shape[0], n1 = src->shape[1], D = src->shape[2];
    padded p;
    p.t = *src;
    p.t.strides[1] = D + pad1;
    p.t.strides[0] = n1 * (D + pad1) + pad0;
    p.bytes = ((size_t)(shift + n0 * p.t.strides[0]) * e + 63) / 64 * 64;
    p.mem = aligned_alloc(64, p.bytes);
    CHECK(p.mem != NULL, "out of memory");
    memset(p.mem, 0x5a, p.bytes);
    p.t.data = p.mem + (size_t)shift * e;
    for (int64_t a = 0; a < n0; a++)
        for (int64_t b = 0; b < n1; b++)
            memcpy((char *)p.t.data + (a * p.t.strides[0] + b * p.t.strides[1]) * (int64_t)e,
                   (const char *)src->data + (a * src->strides[0] + b * src->strides[1]) * (int64_t)e,
                   (size_t)D * e);
    return p;
}

/* Copies the rows of p back into the contiguous tensor dst. */
static void unpad_tensor(const padded *p, const rp_tensor *dst)
{
    const int64_t e = (int64_t)rp_dtype_size((rp_dtype)dst->dtype);
    for (int64_t a = 0; a < dst->shape[0]; a++)
        for (int64_t b = 0; b < dst->shape[1]; b++)
            memcpy((char *)dst->data + (a * dst->strides[0] + b * dst->strides[1]) * e,
                   (const char *)p->t.data + (a * p->t.strides[0] + b * p->t.strides[1]) * e,
                   (size_t)(dst->shape[2] * e));
}

/* 1 if every byte of p's buffer outside the rows the call may write equals `before`: all rows
 * (token, head) of q_rot/k_rot, or the rows (slot, head) of a pool when `slots` is not NULL. */
static int only_rows_written(const padded *p, const unsigned char *before, const fixture *f,
                             const int64_t *slots)
{
    unsigned char *written = calloc(p->bytes, 1);
    const int64_t e = (int64_t)rp_dtype_size((rp_dtype)p->t.dtype);
    for (int64_t t = 0; t < f->T; t++) {
        const int64_t row = slots ? slots[t] : t;
        for (int64_t h = 0; row >= 0 && h < p->t.shape[1]; h++) {
            const int64_t at = (unsigned char *)p->t.data - p->mem +
                               (row * p->t.strides[0] + h * p->t.strides[1]) * e;
            memset(written + at, 1, (size_t)(p->t.shape[2] * e));
        }
    }
    int same = 1;
    for (size_t i = 0; i < p->bytes; i++)
        same &= written[i] || p->mem[i] == before[i];
    free(written);
    return same;
}

typedef struct layout {
    int64_t pad0, pad1, shift; /* all 0: rows on cache lines (D * element size permitting) */
    int in_place;
} layout;

/* Runs one level on f's data moved into padded, shifted buffers (each tensor a little
 * differently), checks the outputs against the float64 formula, checks that nothing outside the
 * rows the parts write changed, and copies the outputs back into f's own buffers. */
static void check_padded_call(const level *lv, fixture *f, layout L, rp_parts parts, const char *what)
{
    rp_rope_pool_args *a = &f->args;
    const int64_t s = L.shift, p0 = L.pad0, p1 = L.pad1;
    padded q = pad_tensor(&a->q, p0, p1, s), k = pad_tensor(&a->k, p1, p0, s ? s + 1 : 0);
    padded v = pad_tensor(&a->v, p0 ? p0 + 1 : 0, p1, s);
    padded q_rot = pad_tensor(&a->q_rot, p0, p1 ? p1 + 1 : 0, s ? s + 2 : 0);
    padded k_rot = pad_tensor(&a->k_rot, p0, p1, s);
    padded k_pool = pad_tensor(&a->k_pool, p0, p1, s ? s + 3 : 0), v_pool = pad_tensor(&a->v_pool, p1, p0, s);
    padded *outs[4] = {L.in_place ? &q : &q_rot, L.in_place ? &k : &k_rot, &k_pool, &v_pool};
    unsigned char *before[4];
    for (int i = 0; i < 4; i++) {
        before[i] = test_alloc(outs[i]->bytes);
        memcpy(before[i], outs[i]->mem, outs[i]->bytes);
    }
    const rp_rope_pool_args saved = *a;
    a->q = q.t, a->k = k.t, a->v = v.t, a->k_pool = k_pool.t, a->v_pool = v_pool.t;
    a->q_rot = outs[0]->t;
    a->k_rot = outs[1]->t;
    if (parts == RP_PARTS_SCATTER)
        run_level(lv, f, RP_PARTS_ROTATE);
    run_level(lv, f, parts);

    /* Verify against the inputs as they were (for an in-place call, the saved copies); after
     * ROTATE alone, no slot counts as written. */
    double freq[512];
    rp_problem p = problem_of(f, freq);
    *a = saved;
    if (L.in_place) {
        p.q = before[0] + ((unsigned char *)q.t.data - q.mem);
        p.k = before[1] + ((unsigned char *)k.t.data - k.mem);
    }
    int64_t *slots = test_alloc((size_t)f->T * sizeof *slots);
    for (int64_t t = 0; t < f->T; t++)
        slots[t] = parts == RP_PARTS_ROTATE ? -1 : rp_load_index(f->slots, f->index_dtype, 1, t);
    p.slots = slots;
    p.slot_dtype = RP_I64;
    p.slot_stride = 1;
    rp_verify_result r;
    rp_ref_verify(&p, &r);
    CHECK(r.failures == 0, "%s: %lld of %lld wrong; first: %s", what, (long long)r.failures,
          (long long)r.checked, r.first_failure);
    static const char *const names[4] = {"q_rot", "k_rot", "k_pool", "v_pool"};
    for (int i = 0; i < 4; i++)
        CHECK(only_rows_written(outs[i], before[i], f, i >= 2 ? slots : NULL),
              "%s: %s written outside its rows", what, names[i]);
    const rp_tensor *dst[4] = {&a->q_rot, &a->k_rot, &a->k_pool, &a->v_pool};
    for (int i = 0; i < 4; i++)
        unpad_tensor(outs[i], dst[i]);
    padded *all[7] = {&q, &k, &v, &q_rot, &k_rot, &k_pool, &v_pool};
    for (int i = 0; i < 7; i++)
        free(all[i]->mem);
    for (int i = 0; i < 4; i++)
        free(before[i]);
    free(slots);
}

/* Every even head_dim shape class: tails of 1..15 pairs (D = 2, 30, 34), whole vectors (96, 128,
 * 256), on rows on and off cache lines, out of place with each of the three parts and in place. */
static void test_fast_kernels_on_tails_misaligned_rows_in_place_and_parts(void)
{
    static const int64_t dims[] = {2, 30, 34, 96, 128, 256};
    static const layout layouts[] = {{0, 0, 0, 0}, {1, 3, 1, 0}, {5, 1, 3, 0}, {0, 0, 0, 1}, {3, 1, 1, 1}};
    static const rp_parts parts[] = {RP_PARTS_ALL, RP_PARTS_ROTATE, RP_PARTS_SCATTER};
    for (int l = 2; l < num_levels; l++) {
        if (!levels[l].supported)
            continue;
        for (int d = 0; d < 3; d++)
            for (size_t s = 0; s < sizeof dims / sizeof dims[0]; s++)
                for (size_t y = 0; y < sizeof layouts / sizeof layouts[0]; y++)
                    for (int part = 0; part < (layouts[y].in_place ? 1 : 3); part++) {
                        fixture f;
                        fixture_init(&f, &rng, 13, 3, 2, dims[s], 20, dtypes[d], d == 1 ? RP_I64 : RP_I32,
                                     1 << 22, 1);
                        char what[128];
                        snprintf(what, sizeof what, "%s %s D=%lld pads %lld/%lld shift %lld%s part %d",
                                 levels[l].name, rp_dtype_name(dtypes[d]), (long long)dims[s],
                                 (long long)layouts[y].pad0, (long long)layouts[y].pad1,
                                 (long long)layouts[y].shift, layouts[y].in_place ? " in place" : "", part);
                        check_padded_call(&levels[l], &f, layouts[y], parts[part], what);
                        fixture_free(&f);
                    }
    }
}

/* Every variant on strided rows off cache lines and in place, each part of the unfused split too,
 * at head dims 80, 96, 128 and GPT-J's 256: within the bound, nothing outside the rows written. */
static void test_variants_on_strided_rows_in_place_and_parts(void)
{
    static const int64_t dims[] = {80, 96, 128, 256};
    static const layout layouts[] = {{0, 0, 0, 0}, {1, 3, 1, 0}, {0, 0, 0, 1}, {3, 1, 1, 1}};
    static const rp_parts parts[] = {RP_PARTS_ALL, RP_PARTS_ROTATE, RP_PARTS_SCATTER};
    for (int l = 0; l < num_levels; l++) {
        if (!levels[l].supported)
            continue;
        for (int d = 0; d < 3; d++)
            for (size_t s = 0; s < sizeof dims / sizeof dims[0]; s++)
                for (int v = 0; v < NUM_TEST_VARIANTS; v++)
                    for (size_t y = 0; y < sizeof layouts / sizeof layouts[0]; y++) {
                        const int part = layouts[y].in_place ? 0 : (int)((s + (size_t)v) % 3);
                        fixture f;
                        fixture_init(&f, &rng, 5, 3, 2, dims[s], 8, dtypes[d], RP_I32, 1 << 22, 1);
                        fixture_set_variant(&f, &rng, &test_variants[v]);
                        char what[192], name[64];
                        snprintf(what, sizeof what, "%s %s %s pads %lld/%lld shift %lld%s part %d",
                                 levels[l].name, rp_dtype_name(dtypes[d]),
                                 variant_name(&test_variants[v], dims[s], name, sizeof name),
                                 (long long)layouts[y].pad0, (long long)layouts[y].pad1,
                                 (long long)layouts[y].shift, layouts[y].in_place ? " in place" : "", part);
                        check_padded_call(&levels[l], &f, layouts[y], parts[part], what);
                        fixture_free(&f);
                    }
    }
}

/* Angles past the vector range reduction mixed with ordinary ones in one vector: a rope_base
 * below 1 makes the frequencies grow to ~1000, so int32 positions reach angles beyond 2^31. */
static void test_fast_kernels_mix_libm_and_vector_lanes(void)
{
    for (int l = 2; l < num_levels; l++) {
        if (!levels[l].supported)
            continue;
        double worst = 0.0;
        for (int d = 0; d < 3; d++) {
            fixture f;
            fixture_init(&f, &rng, 40, 2, 1, 64, 40, dtypes[d], RP_I32, 1000, 0);
            for (int64_t t = 0; t < f.T; t++)
                test_store(f.positions, f.index_dtype, t, (double)extreme_position(&rng, t));
            f.args.rope_base = 0.001;
            run_level(&levels[l], &f, RP_PARTS_ALL);
            verify_fixture(&f, levels[l].name, &worst);
            fixture_free(&f);
        }
    }
}

/* f16 and bf16 outputs that land on subnormals, overflow, infinities and NaN: rounding must stay
 * exact there (a converter that flushes bf16 subnormals to zero fails), NaN must stay NaN. */
static void test_fast_kernels_round_subnormals_and_specials(void)
{
    for (int l = 1; l < num_levels; l++) {
        if (!levels[l].supported)
            continue;
        for (int d = 1; d < 3; d++) {
            double worst = 0.0;
            fixture f;
            fixture_init(&f, &rng, 24, 2, 2, 34, 24, dtypes[d], RP_I32, 1 << 20, 0);
            /* f16: subnormals below 6.1e-5, overflow past 65504; bf16: subnormals below 1.2e-38. */
            const int f16 = dtypes[d] == RP_F16;
            const double tiny = f16 ? 0x1p-20 : 0x1p-130, huge = f16 ? 6e4 : 3e38;
            uint16_t *q = f.q, *k = f.k;
            for (int64_t i = 0; i < f.T * f.Hq * f.D; i++) {
                const double x = rng_uniform(&rng, -1, 1) * (i % 3 == 2 ? huge : tiny);
                q[i] = f16 ? rp_double_to_f16_bits(x) : rp_double_to_bf16_bits(x);
            }
            for (int64_t i = 0; i < f.T * f.Hk * f.D; i++) {
                const double x = rng_uniform(&rng, -1, 1) * tiny;
                k[i] = f16 ? rp_double_to_f16_bits(x) : rp_double_to_bf16_bits(x);
            }
            const uint16_t inf = f16 ? 0x7c00 : 0x7f80, nan = f16 ? 0x7e00 : 0x7fc0;
            q[5] = inf;
            q[6] = (uint16_t)(inf | 0x8000);
            q[7] = nan;
            k[3] = nan;
            run_level(&levels[l], &f, RP_PARTS_ALL);
            verify_fixture(&f, levels[l].name, &worst);
            fixture_free(&f);
        }
    }
}

/* Calls large enough for streaming stores (RP_STREAM_MIN_BYTES), with rows on cache lines, and
 * shifted off them (staged, streamed but for each row's partial first and last lines): within
 * the bound, pools exact, nothing else written (the partial lines' other bytes included), and
 * bit-identical to the same tokens run as small calls with ordinary stores. The variants cover the
 * direct streaming path (segments of whole lines: NeoX 128, GPT-J 64 of 128; staged when shifted),
 * the staged one (NeoX 24 of 96, GPT-J 40 of 80) and none (bf16 NeoX 96: half a row is 1.5 lines);
 * bf16 also with QK-norm, which normalises inside the direct path's rotation (simd_norm_head) and
 * through a float32 row in the staged one. */
static void test_fast_kernels_large_calls_stream_the_same_bits(void)
{
    static const struct {
        int64_t D;
        rope_variant v;
    } cases[] = {{128, {RP_ROPE_NEOX, 0, TABLE_DEFAULT, 0.0}}, {128, {RP_ROPE_GPTJ, 64, TABLE_F64, 1.2}},
                 {96, {RP_ROPE_NEOX, 24, TABLE_F32, 0.0}},     {80, {RP_ROPE_GPTJ, 40, TABLE_DEFAULT, 0.0}},
                 {96, {RP_ROPE_NEOX, 0, TABLE_DEFAULT, 0.0}}};
    const int64_t Hq = 8, Hk = 4;
    for (int l = 2; l < num_levels; l++) {
        if (!levels[l].supported)
            continue;
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
            for (int run = 0; run < 3; run++) { /* f32; bf16; bf16 with QK-norm */
                const int d = run ? 2 : 0, norm = run == 2;
                const rp_dtype dt = dtypes[d];
                const size_t e = rp_dtype_size(dt);
                const int64_t D = cases[c].D;
                const int64_t T = RP_STREAM_MIN_BYTES / ((2 * Hq + 5 * Hk) * D * (int64_t)e) + 7, P = T + 5;
                for (int shift = 0; shift < 2; shift++) {
                    if (test_quick() && shift != (int)(c + d / 2 + norm) % 2)
                        continue; /* quick runs (emulated): one layout per case and dtype, alternating */
                    fixture f, g;
                    norm_weights wf = {NULL, NULL}, wg = {NULL, NULL};
                    test_rng r1 = {77}, r2 = {77};
                    fixture_init(&f, &r1, T, Hq, Hk, D, P, dt, RP_I32, 1 << 20, 1);
                    fixture_init(&g, &r2, T, Hq, Hk, D, P, dt, RP_I32, 1 << 20, 1);
                    fixture_set_variant(&f, &r1, &cases[c].v);
                    fixture_set_variant(&g, &r2, &cases[c].v);
                    if (norm) {
                        set_norm(&r1, &f, &wf, NORM_BOTH, dt, 0.0);
                        set_norm(&r2, &g, &wg, NORM_BOTH, dt, 0.0);
                    }
                    char what[160], name[64];
                    snprintf(what, sizeof what, "%s %s %s T=%lld %s%s", levels[l].name, rp_dtype_name(dt),
                             variant_name(&cases[c].v, D, name, sizeof name), (long long)T,
                             shift ? "shifted" : "on cache lines", norm ? ", QK-norm" : "");
                    const layout L = {0, 0, shift, 0};
                    check_padded_call(&levels[l], &f, L, RP_PARTS_ALL, what);
                    for (int64_t t0 = 0; t0 < T; t0 += 16) { /* each piece far below the threshold */
                        const int64_t n = T - t0 < 16 ? T - t0 : 16;
                        fixture piece = g;
                        rp_rope_pool_args *a = &piece.args;
                        piece.T = n;
                        a->q = rp_tensor_3d((char *)g.q + (size_t)(t0 * Hq * D) * e, dt, n, Hq, D);
                        a->k = rp_tensor_3d((char *)g.k + (size_t)(t0 * Hk * D) * e, dt, n, Hk, D);
                        a->v = rp_tensor_3d((char *)g.v + (size_t)(t0 * Hk * D) * e, dt, n, Hk, D);
                        a->q_rot = rp_tensor_3d((char *)g.q_rot + (size_t)(t0 * Hq * D) * e, dt, n, Hq, D);
                        a->k_rot = rp_tensor_3d((char *)g.k_rot + (size_t)(t0 * Hk * D) * e, dt, n, Hk, D);
                        a->positions = rp_tensor_1d((int32_t *)g.positions + t0, RP_I32, n);
                        a->slots = rp_tensor_1d((int32_t *)g.slots + t0, RP_I32, n);
                        run_level(&levels[l], &piece, RP_PARTS_ALL);
                    }
                    CHECK(memcmp(f.q_rot, g.q_rot, (size_t)(T * Hq * D) * e) == 0 &&
                              memcmp(f.k_rot, g.k_rot, (size_t)(T * Hk * D) * e) == 0 &&
                              memcmp(f.k_pool, g.k_pool, (size_t)(P * Hk * D) * e) == 0 &&
                              memcmp(f.v_pool, g.v_pool, (size_t)(P * Hk * D) * e) == 0,
                          "%s: one large call differs from small calls", what);
                    /* The unfused parts stream too: ROTATE leaves the pools alone, SCATTER after
                     * it copies k_rot. */
                    for (int part = RP_PARTS_ROTATE; shift == 0 && d == 0 && part <= RP_PARTS_SCATTER; part++)
                        check_padded_call(&levels[l], &f, L, (rp_parts)part, what);
                    free(wf.q);
                    free(wf.k);
                    free(wg.q);
                    free(wg.k);
                    fixture_free(&f);
                    fixture_free(&g);
                }
            }
    }
}

/* FNV-1a over `bytes` bytes, continuing from h. */
static uint64_t digest(uint64_t h, const void *data, size_t bytes)
{
    for (size_t i = 0; i < bytes; i++)
        h = (h ^ ((const unsigned char *)data)[i]) * 0x100000001b3ull;
    return h;
}

/* Gives f's call a caller table that every platform computes alike (exactly rounded arithmetic):
 * rope_base's table and the tests' random ones come from libm's pow, whose last bit differs
 * between platforms now and then. Entries that are zero stay zero. */
static void fixture_use_portable_table(fixture *f)
{
    const int64_t half = (f->args.rotary_dim ? f->args.rotary_dim : f->D) / 2;
    if (!f->inv_freq) {
        f->inv_freq = test_alloc((size_t)half * sizeof *f->inv_freq);
        for (int64_t j = 0; j < half; j++)
            f->inv_freq[j] = 1.0;
    }
    for (int64_t j = 0; j < half; j++)
        f->inv_freq[j] = f->inv_freq[j] == 0.0 ? 0.0 : 1.0 / (1.0 + 0.75 * (double)(j * j));
    f->args.inv_freq = f->inv_freq;
}

/* The SIMD levels (avx2, avx512, neon) do the same operations in the same order, so they give the
 * same bits on every machine and a model's outputs do not depend on where it runs (each level is
 * checked against float64 elsewhere; this is extra). Checked through a digest of every output of
 * a fixed set of calls, recorded on x86-64, where AVX2 and AVX-512 both give it: a machine
 * compares whichever SIMD levels it has with it (the aarch64 build under QEMU in make
 * test-aarch64). Tables and angles keep clear of libm, which is each platform's own: the
 * frequencies are exactly rounded ones, and angles stay below 2^31 (no fallback). Inputs are
 * finite: a NaN result's sign and payload are each ISA's own (x86 and Arm choose differently among
 * NaN operands, and x86's default NaN is negative), which no contract fixes. A change that alters
 * the SIMD numerics on purpose records the new digest, printed here on failure. */
static void check_recorded_bits(const char *what, uint64_t recorded,
                                uint64_t (*run_cases)(const level *lv, uint64_t h, double *worst))
{
    int checked = 0;
    for (int l = 2; l < num_levels; l++) {
        if (!levels[l].supported)
            continue;
        double worst = 0.0;
        const uint64_t h = run_cases(&levels[l], 0xcbf29ce484222325ull, &worst);
        CHECK(h == recorded, "%s, %s: outputs' digest 0x%016llx, recorded 0x%016llx", levels[l].name, what,
              (unsigned long long)h, (unsigned long long)recorded);
        checked++;
    }
    if (!checked)
        printf("skip: this CPU runs no SIMD level\n");
}

/* h continued over the outputs of f's call (pool elements of pool_elem bytes). */
static uint64_t digest_outputs(uint64_t h, const fixture *f, size_t pool_elem)
{
    const size_t e = rp_dtype_size(f->dtype);
    h = digest(h, f->q_rot, (size_t)(f->T * f->Hq * f->D) * e);
    h = digest(h, f->k_rot, (size_t)(f->T * f->Hk * f->D) * e);
    h = digest(h, f->k_pool, (size_t)(f->P * f->Hk * f->D) * pool_elem);
    return digest(h, f->v_pool, (size_t)(f->P * f->Hk * f->D) * pool_elem);
}

static const rp_dtype pool_formats[] = {0, RP_F8_E4M3, RP_F8_E5M2}; /* 0: the inputs' dtype */

/* Every dtype and test variant, whole-vector and tail head sizes, the inputs' dtype and fp8 e4m3 /
 * e5m2 pools. */
#define SIMD_OUTPUT_DIGEST 0x8c9e6133419eee0cull

static uint64_t variant_cases(const level *lv, uint64_t h, double *worst)
{
    static const int64_t dims[] = {2, 34, 128, 96, 80};
    for (int d = 0; d < 3 * NUM_TEST_VARIANTS; d++)
        for (int s = 0; s < 5; s++)
            for (int pf = 0; pf < 3; pf++) {
                fixture f;
                test_rng r = {11};
                fixture_init(&f, &r, 29, 3, 2, dims[s], 40, dtypes[d % 3], RP_I64, 1 << 30, 1);
                fixture_set_variant(&f, &r, &test_variants[d / 3]);
                fixture_use_portable_table(&f);
                if (pool_formats[pf])
                    fixture_use_fp8_pools(&f, pool_formats[pf]);
                run_level(lv, &f, RP_PARTS_ALL);
                h = digest_outputs(h, &f, pool_formats[pf] ? 1 : rp_dtype_size(dtypes[d % 3]));
                if (pool_formats[pf]) /* the fp8 paths are checked against float64 here too */
                    verify_fixture(&f, lv->name, worst);
                fixture_free(&f);
            }
    return h;
}

/* QK-norm (its float32 path inside the rotation and the float64 one, for heads of ordinary and
 * of extreme magnitudes, weights in the data's dtype or float32, offset 0 or 1, either weight
 * alone) and mRoPE (each section kind, rows at extreme positions), alone and together, with every
 * pool format: paths of their own in the SIMD kernels (simd_norm_head, the mRoPE angle table)
 * that the variant cases above do not reach. Checked against float64 too. */
#define SIMD_NORM_MROPE_DIGEST 0x0219505e092f8d8full

static uint64_t norm_mrope_cases(const level *lv, uint64_t h, double *worst)
{
    static const int64_t dims[] = {34, 128, 80, 64};
    for (int d = 0; d < 3 * NUM_TEST_VARIANTS; d++)
        for (int s = 0; s < 4; s++) {
            const rp_dtype dt = dtypes[d % 3];
            const int v = d / 3, norm = (d + s) % 4 != 3, mrope = (d + s) % 2 == 0;
            fixture f;
            norm_weights w = {NULL, NULL};
            test_rng r = {17};
            fixture_init(&f, &r, 13, 3, 2, dims[s], 16, dt, RP_I64, 1 << 30, 1);
            fixture_set_variant(&f, &r, &test_variants[v]);
            fixture_use_portable_table(&f);
            if (mrope) {
                const int64_t half = (f.args.rotary_dim ? f.args.rotary_dim : f.D) / 2;
                f.args.mrope_interleaved = (uint32_t)mrope_section_for((v + s) % NUM_SECTIONS, half,
                                                                       f.args.mrope_section);
                fixture_use_mrope_rows(&f, &r, POS_EXTREME);
            }
            if (norm) {
                set_norm(&r, &f, &w, (v + s) % 3, s % 2 ? RP_F32 : dt, (double)(v % 2));
                if (s >= 2)
                    extreme_heads(&f);
                else
                    scale_heads(&f);
            }
            const int pf = (d + s) % 3;
            if (pool_formats[pf])
                fixture_use_fp8_pools(&f, pool_formats[pf]);
            run_level(lv, &f, RP_PARTS_ALL);
            h = digest_outputs(h, &f, pool_formats[pf] ? 1 : rp_dtype_size(dt));
            verify_fixture(&f, lv->name, worst);
            free(w.q);
            free(w.k);
            fixture_free(&f);
        }
    return h;
}

static void test_simd_levels_give_the_recorded_bits(void)
{
    check_recorded_bits("variants", SIMD_OUTPUT_DIGEST, variant_cases);
    check_recorded_bits("QK-norm and mRoPE", SIMD_NORM_MROPE_DIGEST, norm_mrope_cases);
}

int main(void)
{
    find_levels();
    printf("dispatch chose: %s\n", rp_cpu_kernel_name());
    RUN(test_every_level_within_bound_at_extreme_positions);
    RUN(test_every_level_serves_every_variant);
    RUN(test_zero_frequencies_leave_pairs_unrotated);
    RUN(test_int64_positions_beyond_int32);
    RUN(test_verifier_catches_a_wrong_element);
    RUN(test_split_parts_equal_fused);
    RUN(test_bit_identical_for_any_thread_count);
    RUN(test_fast_kernels_on_tails_misaligned_rows_in_place_and_parts);
    RUN(test_variants_on_strided_rows_in_place_and_parts);
    RUN(test_fast_kernels_mix_libm_and_vector_lanes);
    RUN(test_fast_kernels_round_subnormals_and_specials);
    RUN(test_fast_kernels_large_calls_stream_the_same_bits);
    RUN(test_simd_levels_give_the_recorded_bits);
    return test_summary("test_numerics");
}
