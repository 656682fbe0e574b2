/*
 * test_cuda_plan.c — the CUDA launch plan (plan.cu), checked on the host: no GPU is needed, so it
 * runs wherever the CUDA backend is built (CI included). For T from 1 to 2^17 tokens, on the
 * multiprocessor counts of an H100/H200 (132), an A100 (108), an L4 (58) and a small part (16),
 * over head shapes, dtypes, RoPE styles, partial rotary, fp8 pools, QK-norm and the three parts
 * of a call:
 *  - every vectorized plan rp_cuda_make_plan returns is one rp_cuda_plan_complete accepts
 *    unchanged (make_plan does not look at its answer: "cannot refuse"), so it launches within
 *    the kernels' launch bounds and shared memory;
 *  - a token's frequency groups are split into whole blocks, a block is 1 to 1024 threads;
 *  - a decode plan of 1.5 waves of blocks or more launches one wave, all resident at once
 *    (wave_sms), and no other plan is capped so;
 *  - QK-norm plans give each head's reduction whole head rows in whole warps (qk_norm.cuh), and
 *    a tuned plan that splits head rows is refused (it would reduce half a head);
 *  - the calls chosen here all take the vectorized kernels.
 */
#include "../test_verify.h"
#include "cuda/cuda_backend.h"

static test_rng rng = {0x706c616eu};

typedef struct plan_case {
    int64_t Hq, Hk, D;
    int style, half_rotary, fp8, norm;
} plan_case;

/* A validated problem of the case at a few tokens; the plan is asked for it at other T (the plan
 * reads T, the shapes, strides and alignment, none of which change with T here). */
static int make_problem(const plan_case *c, rp_dtype dt, fixture *f, void **extra, rp_problem *p)
{
    fixture_init(f, &rng, 4, c->Hq, c->Hk, c->D, 64, dt, RP_I64, 1 << 16, 0);
    rp_rope_pool_args *a = &f->args;
    a->style = c->style;
    a->rotary_dim = c->half_rotary ? c->D / 2 : 0;
    const size_t pool_bytes = (size_t)(64 * c->Hk * c->D);
    *extra = test_alloc(2 * pool_bytes + 2 * (size_t)c->D * rp_dtype_size(dt));
    char *bytes = *extra;
    if (c->fp8) {
        a->k_pool = rp_tensor_3d(bytes, RP_U8, 64, c->Hk, c->D);
        a->v_pool = rp_tensor_3d(bytes + pool_bytes, RP_U8, 64, c->Hk, c->D);
        a->pool_dtype = RP_F8_E4M3;
    }
    if (c->norm) {
        void *w = bytes + 2 * pool_bytes;
        for (int64_t i = 0; i < 2 * c->D; i++)
            test_store(w, dt, i, 1.0);
        a->q_norm_weight = w;
        a->k_norm_weight = (char *)w + (size_t)c->D * rp_dtype_size(dt);
        a->norm_eps = 1e-6;
    }
    char msg[256] = "";
    rp_err err = {msg, sizeof msg};
    const rp_status st = rp_validate(a, p, &err);
    CHECK(st == RP_OK, "%lld/%lld/%lld %s: validation failed: %s", (long long)c->Hq, (long long)c->Hk,
          (long long)c->D, rp_dtype_name(dt), msg);
    return st == RP_OK;
}

static int same_plan(const rp_cuda_plan *x, const rp_cuda_plan *y)
{
    return x->vectorized == y->vectorized && x->groups_per_block == y->groups_per_block && x->chunks == y->chunks &&
           x->heads == y->heads && x->v_pieces == y->v_pieces && x->heads_per_pass == y->heads_per_pass &&
           x->head_chunks == y->head_chunks && x->items_per_thread == y->items_per_thread &&
           x->tokens_per_block == y->tokens_per_block && x->threads_x == y->threads_x &&
           x->overlap_launch == y->overlap_launch && x->grid == y->grid && x->shared_bytes == y->shared_bytes &&
           x->norm_decode_threads == y->norm_decode_threads;
}

/* The checks above for one plan; returns 1 when they hold. */
static int check_plan(const rp_problem *p, rp_parts parts, const rp_cuda_plan *plan, const plan_case *c,
                      const char *what)
{
    const int64_t per_vector = 16 / (int64_t)rp_dtype_size(p->dtype), groups = c->D / 2 / per_vector;
    const int64_t gb = plan->groups_per_block, hy = plan->heads_per_pass, y = plan->tokens_per_block;
    const int before = test_failures;
    CHECK(plan->vectorized, "%s: not vectorized", what);
    if (!plan->vectorized)
        return 0;
    rp_cuda_plan again = *plan;
    const int complete = rp_cuda_plan_complete(p, parts, &again);
    CHECK(complete == 0 && same_plan(&again, plan),
          "%s: rp_cuda_plan_complete %s the plan (block %lld x %lld x %lld, %d items a thread)", what,
          complete ? "refuses" : "changes", (long long)gb, (long long)hy, (long long)y,
          plan->items_per_thread);
    CHECK(gb >= 1 && groups % gb == 0 && plan->chunks * gb == groups, "%s: %lld groups a block of %lld",
          what, (long long)gb, (long long)groups);
    CHECK(gb * hy * y >= 1 && gb * hy * y <= 1024 && plan->grid >= 1, "%s: block %lld x %lld x %lld, grid %u",
          what, (long long)gb, (long long)hy, (long long)y, plan->grid);
    const int norm_decode = c->norm && plan->items_per_thread == 1;
    CHECK(norm_decode ? (plan->norm_decode_threads == RP_NORM_DECODE_SHORT ||
                         plan->norm_decode_threads == RP_NORM_DECODE_RESIDENT) &&
                            gb * hy * y <= plan->norm_decode_threads
                      : plan->norm_decode_threads == 0,
          "%s: QK-norm decode build %d for a block of %lld threads", what, plan->norm_decode_threads,
          (long long)(gb * hy * y));
    const int decode = plan->items_per_thread == 1 && !c->norm;
    CHECK(plan->wave_sms == 0 || decode, "%s: a wave cap (%d SMs) on a plan of %d items a thread%s", what,
          plan->wave_sms, plan->items_per_thread, c->norm ? " with QK-norm" : "");
    if (plan->wave_sms > 0) { /* from 1.5 waves, one wave: every block resident (768 threads an SM) */
        const int64_t per_block = (int64_t)plan->chunks * plan->head_chunks;
        const int64_t wave = plan->wave_sms * (768 / 32 / ((gb * hy * y + 31) / 32));
        const int64_t tiles = (p->num_tokens + y - 1) / y;
        const int64_t want = 2 * tiles * per_block >= 3 * wave && wave >= per_block ? wave / per_block : tiles;
        CHECK(plan->grid == want, "%s: grid %u for %lld tiles of %lld blocks, a wave of %lld (want %lld)", what,
              plan->grid, (long long)tiles, (long long)per_block, (long long)wave, (long long)want);
    }
    if (norm_decode) /* that kernel never loops over further heads (decode.cu) */
        CHECK((int64_t)plan->head_chunks * hy >= plan->heads, "%s: %d head chunks of %lld heads for %d", what,
              plan->head_chunks, (long long)hy, plan->heads);
    if (c->norm && parts != RP_PARTS_SCATTER) {
        CHECK(gb == groups && gb * hy % 32 == 0, "%s: QK-norm block %lld x %lld of heads of %lld groups", what,
              (long long)gb, (long long)hy, (long long)groups);
        if (gb >= 2) { /* the same threads as half head rows: the tune tool's override, refused */
            rp_cuda_plan split = *plan;
            split.groups_per_block = (int)(gb / 2);
            split.heads_per_pass = (int)(hy * 2);
            CHECK(rp_cuda_plan_complete(p, parts, &split) == -1, "%s: a plan of half head rows accepted",
                  what);
        }
    }
    return test_failures == before;
}

/* The plan for case c in bf16 at T tokens on `sms` multiprocessors of compute capability 9.0, for
 * a whole call; returns 0 where the case's problem does not validate (a failed check). */
static int plan_at(const plan_case *c, int sms, int64_t T, rp_cuda_plan *plan)
{
    fixture f;
    void *extra = NULL;
    rp_problem p;
    const int ok = make_problem(c, RP_BF16, &f, &extra, &p);
    if (ok) {
        rp_cuda_state st;
        memset(&st, 0, sizeof st);
        st.num_sms = sms;
        st.compute_capability = 90;
        p.num_tokens = T;
        *plan = rp_cuda_make_plan(&st, &p, RP_PARTS_ALL);
    }
    free(extra);
    fixture_free(&f);
    return ok;
}

static void test_plans_launch_as_made(void)
{
    static const plan_case cases[] = {
        {32, 8, 128, RP_ROPE_NEOX, 0, 0, 0}, {32, 8, 128, RP_ROPE_GPTJ, 0, 0, 0}, {32, 8, 128, RP_ROPE_NEOX, 1, 0, 0},
        {16, 8, 256, RP_ROPE_NEOX, 0, 0, 0}, {16, 16, 256, RP_ROPE_GPTJ, 1, 0, 0}, {32, 4, 64, RP_ROPE_NEOX, 0, 0, 0},
        {8, 1, 128, RP_ROPE_NEOX, 0, 0, 0},  {128, 1, 64, RP_ROPE_GPTJ, 0, 0, 0}, {40, 8, 128, RP_ROPE_NEOX, 0, 0, 0},
        {32, 8, 128, RP_ROPE_NEOX, 0, 1, 0}, {16, 8, 256, RP_ROPE_NEOX, 0, 1, 0}, {32, 8, 128, RP_ROPE_GPTJ, 0, 1, 0},
        {32, 8, 128, RP_ROPE_NEOX, 0, 0, 1}, {16, 8, 256, RP_ROPE_NEOX, 0, 0, 1}, {32, 4, 64, RP_ROPE_NEOX, 0, 0, 1},
        {12, 4, 128, RP_ROPE_NEOX, 0, 0, 1}, {8, 1, 128, RP_ROPE_GPTJ, 0, 0, 1}, {64, 4, 128, RP_ROPE_NEOX, 0, 1, 1},
        {28, 4, 128, RP_ROPE_NEOX, 1, 0, 1},
    };
    static const rp_dtype dtypes[3] = {RP_F32, RP_F16, RP_BF16};
    static const int sms[4] = {132, 108, 58, 16};
    static const rp_parts parts[3] = {RP_PARTS_ALL, RP_PARTS_ROTATE, RP_PARTS_SCATTER};
    long long plans = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (int d = 0; d < 3; d++) {
            const plan_case *c = &cases[i];
            fixture f;
            void *extra = NULL;
            rp_problem p;
            int ok = make_problem(c, dtypes[d], &f, &extra, &p);
            for (int s = 0; s < 4 && ok; s++) {
                rp_cuda_state st;
                memset(&st, 0, sizeof st);
                st.num_sms = sms[s];
                st.compute_capability = 90;
                /* every T to three tokens a multiprocessor (where the decode rules change), then
                 * steps of about 3% to 2^17 */
                for (int64_t T = 1; T <= 131072 && ok; T = T < 3 * sms[s] ? T + 1 : T + T / 32)
                    for (int k = 0; k < 3 && ok; k++) {
                        p.num_tokens = T;
                        const rp_cuda_plan plan = rp_cuda_make_plan(&st, &p, parts[k]);
                        char what[160];
                        snprintf(what, sizeof what, "%lld/%lld/%lld %s %s%s%s%s parts %d, %d SMs, T = %lld",
                                 (long long)c->Hq, (long long)c->Hk, (long long)c->D, rp_dtype_name(dtypes[d]),
                                 c->style == RP_ROPE_GPTJ ? "gptj" : "neox", c->half_rotary ? " R=D/2" : "",
                                 c->fp8 ? " fp8" : "", c->norm ? " qk-norm" : "", (int)parts[k], sms[s], (long long)T);
                        ok = check_plan(&p, parts[k], &plan, c, what);
                        plans++;
                    }
            }
            free(extra);
            fixture_free(&f);
        }
    printf("  %lld plans checked\n", plans);
}

/* Which QK-norm decode build the plan takes (cuda_backend.h), for Qwen3-8B's heads (48 items of 8
 * lanes a token: three blocks of 128 threads): the short one while its blocks all fit at once (4
 * a multiprocessor at 128 registers: to 4/3 tokens a multiprocessor), the resident one where only
 * its blocks do (6 at 80 registers: to 2), the prefill kernel past that; with fp8 pools too. */
static void test_norm_decode_builds(void)
{
    static const plan_case cases[] = {{32, 8, 128, RP_ROPE_NEOX, 0, 0, 1}, {32, 8, 128, RP_ROPE_NEOX, 0, 1, 1}};
    static const int sms[4] = {132, 108, 58, 16};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        fixture f;
        void *extra = NULL;
        rp_problem p;
        if (!make_problem(&cases[i], RP_BF16, &f, &extra, &p))
            continue;
        for (int s = 0; s < 4; s++) {
            rp_cuda_state st;
            memset(&st, 0, sizeof st);
            st.num_sms = sms[s];
            st.compute_capability = 90;
            const int64_t Ts[4] = {1, 4 * sms[s] / 3, 2 * sms[s], 2 * sms[s] + 1};
            const int want[4] = {RP_NORM_DECODE_SHORT, RP_NORM_DECODE_SHORT, RP_NORM_DECODE_RESIDENT, 0};
            for (int t = 0; t < 4; t++) {
                p.num_tokens = Ts[t];
                const rp_cuda_plan plan = rp_cuda_make_plan(&st, &p, RP_PARTS_ALL);
                CHECK(plan.norm_decode_threads == want[t] && (want[t] != 0) == (plan.items_per_thread == 1),
                      "32/8/128%s, %d SMs, T = %lld: build %d, %d items a thread (want build %d)",
                      cases[i].fp8 ? " fp8" : "", sms[s], (long long)Ts[t], plan.norm_decode_threads,
                      plan.items_per_thread, want[t]);
            }
        }
        free(extra);
        fixture_free(&f);
    }
}

/* Decode calls of 1.5 waves of blocks or more launch one, its blocks looping over tokens. On 132
 * multiprocessors, at 768 threads each in whole warps: 4 blocks of 192 threads for 32/8/128 (two
 * a token: 264 tokens at once), 6 of 128 for 16/8/256 (four a token: 198), 2 of 320 for 64/8/128
 * (two a token: 132), 4 of 160 for 32/4/64 (one a token: 528, more than T = 400). 128/1/64 (130
 * heads of 4 groups, 520 threads) takes its heads in three passes of 44 at T = 400, four blocks
 * of 192 threads a multiprocessor: all 400 resident (test_wide_decode_passes). */
static void test_decode_waves(void)
{
    static const struct {
        plan_case c;
        int64_t grid_at_400;
    } cases[] = {
        {{32, 8, 128, RP_ROPE_NEOX, 0, 0, 0}, 264},
        {{16, 8, 256, RP_ROPE_NEOX, 0, 0, 0}, 198},
        {{64, 8, 128, RP_ROPE_NEOX, 0, 0, 0}, 132},
        {{128, 1, 64, RP_ROPE_GPTJ, 0, 0, 0}, 400},
        {{32, 8, 128, RP_ROPE_NEOX, 0, 1, 0}, 264},
        {{32, 4, 64, RP_ROPE_NEOX, 0, 0, 0}, 400}, /* 4 blocks of 160 threads: 528 tokens at once */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int64_t Ts[3] = {1, 100, 400};
        for (int t = 0; t < 3; t++) {
            rp_cuda_plan plan;
            if (!plan_at(&cases[i].c, 132, Ts[t], &plan))
                break;
            const int64_t want = t == 2 ? cases[i].grid_at_400 : Ts[t];
            CHECK(plan.items_per_thread == 1 && plan.tokens_per_block == 1 && plan.wave_sms == 132 &&
                      plan.grid == want,
                  "%lld/%lld/%lld%s, T = %lld: grid %u, %d items a thread, wave of %d SMs (want grid %lld)",
                  (long long)cases[i].c.Hq, (long long)cases[i].c.Hk, (long long)cases[i].c.D,
                  cases[i].c.fp8 ? " fp8" : "", (long long)Ts[t], plan.grid, plan.items_per_thread, plan.wave_sms,
                  (long long)want);
        }
    }
}

/* A decode token wider than half a multiprocessor (128/1/64: 130 heads of 4 groups, 520 threads)
 * keeps one pass to a token a multiprocessor, then takes the fewest passes (at most 8) whose
 * blocks (in whole warps, 768 threads a multiprocessor) are all resident: two passes of 65 heads
 * (288 threads, two a multiprocessor) to two tokens a multiprocessor, three of 44 (192 threads,
 * four) to four. 128/8/128 (144 heads, two blocks of 4 groups a token, 576 threads each): five
 * passes of 29 heads at T = 320 (640 blocks: five a multiprocessor, six of 128 threads fit), six
 * of 24 at T = 512 (eight, eight of 96). Narrower tokens (64/8/128: 320 threads, two fit) always
 * one. */
static void test_wide_decode_passes(void)
{
    static const struct {
        plan_case c;
        int sms;
        int64_t T, heads_per_pass;
    } cases[] = {
        {{128, 1, 64, RP_ROPE_GPTJ, 0, 0, 0}, 132, 1, 130},   {{128, 1, 64, RP_ROPE_GPTJ, 0, 0, 0}, 132, 132, 130},
        {{128, 1, 64, RP_ROPE_GPTJ, 0, 0, 0}, 132, 133, 65},  {{128, 1, 64, RP_ROPE_GPTJ, 0, 0, 0}, 132, 264, 65},
        {{128, 1, 64, RP_ROPE_GPTJ, 0, 0, 0}, 132, 265, 44},  {{128, 1, 64, RP_ROPE_GPTJ, 0, 0, 0}, 132, 527, 44},
        {{128, 1, 64, RP_ROPE_GPTJ, 0, 0, 0}, 108, 109, 65},  {{128, 1, 64, RP_ROPE_GPTJ, 0, 1, 0}, 132, 256, 65},
        {{128, 8, 128, RP_ROPE_NEOX, 0, 0, 0}, 132, 320, 29}, {{128, 8, 128, RP_ROPE_NEOX, 0, 0, 0}, 132, 512, 24},
        {{64, 8, 128, RP_ROPE_NEOX, 0, 0, 0}, 132, 300, 80},  {{64, 8, 128, RP_ROPE_NEOX, 0, 0, 0}, 132, 500, 80},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        rp_cuda_plan plan;
        if (!plan_at(&cases[i].c, cases[i].sms, cases[i].T, &plan))
            continue;
        const int passes = cases[i].heads_per_pass < plan.heads; /* then every block resident: grid T */
        CHECK(plan.items_per_thread == 1 && plan.heads_per_pass == cases[i].heads_per_pass &&
                  (!passes || plan.grid == (unsigned)cases[i].T),
              "%lld/%lld/%lld%s, %d SMs, T = %lld: %d heads a pass, grid %u, %d items a thread (want %lld heads)",
              (long long)cases[i].c.Hq, (long long)cases[i].c.Hk, (long long)cases[i].c.D,
              cases[i].c.fp8 ? " fp8" : "", cases[i].sms, (long long)cases[i].T, plan.heads_per_pass, plan.grid,
              plan.items_per_thread, (long long)cases[i].heads_per_pass);
    }
}

int main(void)
{
    RUN(test_plans_launch_as_made);
    RUN(test_norm_decode_builds);
    RUN(test_decode_waves);
    RUN(test_wide_decode_passes);
    return test_summary("cuda_plan");
}
