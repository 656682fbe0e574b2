/*
 * test_mrope.c — multimodal RoPE (mrope_section, mrope_interleaved) on every CPU kernel level:
 * within the bound of the float64 formula for both section rules, several sections (empty h or
 * w ones included), partial rotary, caller tables and attention scaling; each frequency takes the
 * row the rule names (checked against plain calls on that row, bit for bit); three equal
 * rows give the plain call's bits; bad sections and positions are refused, nothing written.
 */
#include "test_levels.h"

static test_rng rng = {1818};

/* The section rules as the issue states them, written out apart from the library's. */
static int expected_row(const int32_t s[3], int interleaved, int64_t j)
{
    if (interleaved) {
        if (j % 3 == 1 && j < 3 * (int64_t)s[1])
            return 1;
        if (j % 3 == 2 && j < 3 * (int64_t)s[2])
            return 2;
        return 0;
    }
    return j < s[0] ? 0 : j < (int64_t)s[0] + s[1] ? 1 : 2;
}

static size_t pair_bytes_equal(const fixture *f, const void *a, const void *b, int64_t heads, int64_t j)
{
    const rp_rope_pool_args *x = &f->args;
    const int64_t R = x->rotary_dim ? x->rotary_dim : f->D;
    const int gptj = x->style == RP_ROPE_GPTJ;
    const int64_t e0 = gptj ? 2 * j : j, e1 = gptj ? 2 * j + 1 : j + R / 2;
    const size_t elem = rp_dtype_size(f->dtype);
    size_t differ = 0;
    for (int64_t t = 0; t < f->T; t++)
        for (int64_t h = 0; h < heads; h++) {
            const size_t row = (size_t)((t * heads + h) * f->D);
            differ += memcmp((const char *)a + (row + (size_t)e0) * elem, (const char *)b + (row + (size_t)e0) * elem, elem) != 0;
            differ += memcmp((const char *)a + (row + (size_t)e1) * elem, (const char *)b + (row + (size_t)e1) * elem, elem) != 0;
        }
    return differ;
}

/* f has run with mRoPE at level lv (q_rot/k_rot hold the result). For each row r, the plain call
 * on row r must give, bit for bit, the pairs whose frequency takes row r. */
static void check_rows_against_plain_calls(const level *lv, fixture *f, const char *what)
{
    const size_t elem = rp_dtype_size(f->dtype);
    const size_t qn = (size_t)(f->T * f->Hq * f->D) * elem, kn = (size_t)(f->T * f->Hk * f->D) * elem;
    void *q_m = test_alloc(qn), *k_m = test_alloc(kn);
    memcpy(q_m, f->q_rot, qn);
    memcpy(k_m, f->k_rot, kn);
    const rp_rope_pool_args saved = f->args;
    const int64_t R = saved.rotary_dim ? saved.rotary_dim : f->D;
    for (int r = 0; r < 3; r++) {
        f->args.positions = rp_tensor_1d((char *)f->positions + (size_t)r * rp_dtype_size(f->index_dtype),
                                         f->index_dtype, f->T);
        f->args.positions.strides[0] = saved.positions.strides[1];
        memset(f->args.mrope_section, 0, sizeof f->args.mrope_section);
        f->args.mrope_interleaved = 0;
        run_level(lv, f, RP_PARTS_ROTATE);
        for (int64_t j = 0; j < R / 2; j++) {
            if (expected_row(saved.mrope_section, (int)saved.mrope_interleaved, j) != r)
                continue;
            const size_t dq = pair_bytes_equal(f, q_m, f->q_rot, f->Hq, j);
            const size_t dk = pair_bytes_equal(f, k_m, f->k_rot, f->Hk, j);
            CHECK(dq == 0 && dk == 0, "%s: pair %lld (row %d): %zu q and %zu k elements differ from the plain call on row %d",
                  what, (long long)j, r, dq, dk, r);
        }
    }
    f->args = saved;
    free(q_m);
    free(k_m);
}

static void test_every_level_follows_both_section_rules_within_bound(void)
{
    static const int64_t dims[][3] = {{4, 2, 128}, {3, 1, 96}, {2, 2, 64}};
    for (int l = 0; l < num_levels; l++) {
        if (!levels[l].supported)
            continue;
        double worst = 0.0;
        for (int d = 0; d < 3; d++)
            for (size_t s = 0; s < sizeof dims / sizeof dims[0]; s++)
                for (int v = 0; v < NUM_TEST_VARIANTS; v++)
                    for (int sec = 0; sec < NUM_SECTIONS; sec++) {
                        if ((v + sec + d + (int)s) % (test_quick() ? 6 : 2))
                            continue; /* every variant and section kind, not every combination */
                        fixture f;
                        fixture_init_extreme(&f, &rng, dims[s], dtypes[d], v % 2 ? RP_I64 : RP_I32);
                        fixture_set_variant(&f, &rng, &test_variants[v]);
                        const int64_t R = variant_rotary_dim(&test_variants[v], f.D);
                        f.args.mrope_interleaved = (uint32_t)mrope_section_for(sec, R / 2, f.args.mrope_section);
                        fixture_use_mrope_rows(&f, &rng, (sec + v) % 2 ? POS_EXTREME : POS_IMAGE);
                        run_level(&levels[l], &f, RP_PARTS_ALL);
                        char what[200], name[64];
                        snprintf(what, sizeof what, "%s %s %s %s [%d, %d, %d]", levels[l].name,
                                 rp_dtype_name(dtypes[d]), variant_name(&test_variants[v], f.D, name, sizeof name),
                                 f.args.mrope_interleaved ? "interleaved" : "chunked", (int)f.args.mrope_section[0],
                                 (int)f.args.mrope_section[1], (int)f.args.mrope_section[2]);
                        verify_fixture(&f, what, &worst);
                        check_rows_against_plain_calls(&levels[l], &f, what);
                        fixture_free(&f);
                    }
        report_worst(&levels[l], worst);
    }
}

/* Text tokens (three equal rows) give the plain call's bits: at every level, with both rules,
 * every variant; and through the public call with a context's threads, on fp8 pools too. */
static void test_equal_rows_give_the_plain_call_bit_for_bit(void)
{
    static const int64_t dims[3] = {4, 2, 128};
    for (int l = 0; l < num_levels; l++) {
        if (!levels[l].supported)
            continue;
        for (int d = 0; d < 3; d++)
            for (int v = 0; v < NUM_TEST_VARIANTS; v++) {
                fixture plain, m;
                test_rng a = {(uint64_t)(77 + v)}, b = a;
                fixture_init_extreme(&plain, &a, dims, dtypes[d], RP_I64);
                fixture_set_variant(&plain, &a, &test_variants[v]);
                fixture_init_extreme(&m, &b, dims, dtypes[d], RP_I64);
                fixture_set_variant(&m, &b, &test_variants[v]);
                const int64_t R = variant_rotary_dim(&test_variants[v], m.D);
                m.args.mrope_interleaved = (uint32_t)mrope_section_for(v % NUM_SECTIONS, R / 2, m.args.mrope_section);
                fixture_use_mrope_rows(&m, &rng, POS_EQUAL);
                run_level(&levels[l], &plain, RP_PARTS_ALL);
                run_level(&levels[l], &m, RP_PARTS_ALL);
                CHECK(fixtures_same_outputs(&plain, &m, rp_dtype_size(dtypes[d])), "%s %s variant %d: equal rows differ from the plain call",
                      levels[l].name, rp_dtype_name(dtypes[d]), v);
                fixture_free(&plain);
                fixture_free(&m);
            }
    }
    rp_context *ctx = NULL;
    rp_context_options opts = {0};
    opts.num_threads = 2;
    CHECK(rp_context_create(&opts, &ctx, NULL, 0) == RP_OK, "context");
    for (int fp8 = 0; fp8 < 2; fp8++) {
        static const int64_t big[3] = {8, 2, 128};
        fixture plain, m;
        test_rng a = {5}, b = a;
        fixture_init(&plain, &a, 300, big[0], big[1], big[2], 512, RP_BF16, RP_I32, 100000, 1);
        fixture_init(&m, &b, 300, big[0], big[1], big[2], 512, RP_BF16, RP_I32, 100000, 1);
        if (fp8) {
            fixture_use_fp8_pools(&plain, RP_F8_E4M3);
            fixture_use_fp8_pools(&m, RP_F8_E4M3);
        }
        m.args.mrope_section[0] = 16;
        m.args.mrope_section[1] = 24;
        m.args.mrope_section[2] = 24;
        fixture_use_mrope_rows(&m, &rng, POS_EQUAL);
        call_ok_on(ctx, &plain.args, "plain");
        call_ok_on(ctx, &m.args, "mrope, equal rows");
        CHECK(fixtures_same_outputs(&plain, &m, fp8 ? 1 : 2), "public call%s: equal rows differ from the plain call",
              fp8 ? " (fp8 pools)" : "");
        fixture_free(&plain);
        fixture_free(&m);
    }
    rp_context_destroy(ctx);
}

/* ---- errors ----------------------------------------------------------------------------------- */

/* The error fixture (6 tokens, D 64: R/2 = 32) with positions [3, 6]. */
static void rows_3(fixture *f)
{
    fixture_use_mrope_rows(f, &rng, POS_IMAGE);
}

static void section_sums_wrong(fixture *f)
{
    rows_3(f);
    f->args.mrope_section[0] = f->args.mrope_section[1] = f->args.mrope_section[2] = 10;
}

static void section_negative(fixture *f)
{
    rows_3(f);
    f->args.mrope_section[0] = -1;
    f->args.mrope_section[1] = 17;
    f->args.mrope_section[2] = 16;
}

static void section_for_partial_rotary_sums_to_head(fixture *f)
{
    rows_3(f);
    f->args.rotary_dim = 32;
    f->args.mrope_section[0] = 16;
    f->args.mrope_section[1] = f->args.mrope_section[2] = 8;
}

static void section_with_1d_positions(fixture *f)
{
    f->args.mrope_section[0] = 16;
    f->args.mrope_section[1] = f->args.mrope_section[2] = 8;
}

static void section_with_2_rows(fixture *f)
{
    section_with_1d_positions(f);
    rows_3(f);
    f->args.positions.shape[0] = 2;
}

static void section_with_3d_positions(fixture *f)
{
    section_with_2_rows(f);
    f->args.positions.shape[0] = 3;
    f->args.positions.ndim = 3;
    f->args.positions.shape[2] = 1;
}

static void rows_without_section(fixture *f)
{
    rows_3(f);
}

static void interleaved_without_section(fixture *f)
{
    f->args.mrope_interleaved = 1;
}

static void interleaved_not_a_flag(fixture *f)
{
    section_with_1d_positions(f);
    rows_3(f);
    f->args.mrope_interleaved = 2;
}

static void test_bad_sections_and_positions_are_refused_writing_nothing(void)
{
    const rp_status bad = RP_ERR_INVALID_ARGUMENT;
    expect_call_error(&rng, "sum", section_sums_wrong, bad,
                      "mrope_section [10, 10, 10] sums to 30, but must sum to rotary_dim / 2 = 32");
    expect_call_error(&rng, "negative", section_negative, bad,
                      "mrope_section [-1, 17, 16] must be three non-negative counts of frequencies (t, h, w)");
    expect_call_error(&rng, "partial rotary", section_for_partial_rotary_sums_to_head, bad,
                      "mrope_section [16, 8, 8] sums to 32, but must sum to rotary_dim / 2 = 16");
    expect_call_error(&rng, "1-D positions", section_with_1d_positions, bad,
                      "mrope_section [16, 8, 8] is set, so positions must be 2-D [3, num_tokens] (rows t, h, w), "
                      "got 1-D positions (6,)");
    expect_call_error(&rng, "2 rows", section_with_2_rows, bad,
                      "mrope_section is set, so positions must be [3, num_tokens] = (3, 6) (rows t, h, w), got (2, 6)");
    expect_call_error(&rng, "3-D positions", section_with_3d_positions, bad,
                      "mrope_section [16, 8, 8] is set, so positions must be 2-D [3, num_tokens] (rows t, h, w), "
                      "got 3-D positions (3, 6, 1)");
    expect_call_error(&rng, "rows without a section", rows_without_section, bad,
                      "rope_pool_fused expects positions/slots to be 1-D");
    expect_call_error(&rng, "interleaved alone", interleaved_without_section, bad,
                      "mrope_interleaved is set but mrope_section is not: interleaving needs the section [t, h, w]");
    expect_call_error(&rng, "interleaved 2", interleaved_not_a_flag, bad, "mrope_interleaved must be 0 or 1, got 2");
}

/* A zero-initialised struct keeps its size: the fields live in the old reserved space. */
static void test_fields_fill_reserved_space_abi_unchanged(void)
{
    CHECK(sizeof(rp_rope_pool_args) == offsetof(rp_rope_pool_args, mrope_section) + 16 + 14 * 8,
          "rp_rope_pool_args grew: %zu bytes", sizeof(rp_rope_pool_args));
}

int main(void)
{
    find_levels();
    RUN(test_every_level_follows_both_section_rules_within_bound);
    RUN(test_equal_rows_give_the_plain_call_bit_for_bit);
    RUN(test_bad_sections_and_positions_are_refused_writing_nothing);
    RUN(test_fields_fill_reserved_space_abi_unchanged);
    return test_summary("test_mrope");
}
