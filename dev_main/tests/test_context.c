/*
 * test_context.c — one context shared by several threads calling at once: every call's result
 * equals the single-threaded result, whether it got the workers or ran on its own thread.
 */
#include "test_util.h"

#include <pthread.h>

enum { CALLERS = 4, ROUNDS = 20 };

typedef struct caller {
    rp_context *ctx;
    fixture f;
    void *want_q, *want_kpool;
    int bad;
} caller;

static void *call_many(void *p)
{
    caller *c = p;
    char msg[256];
    const size_t e = rp_dtype_size(c->f.dtype);
    for (int r = 0; r < ROUNDS; r++) {
        memset(c->f.q_rot, 0, (size_t)(c->f.T * c->f.Hq * c->f.D) * e);
        if (rp_rope_pool_fused(c->ctx, &c->f.args, msg, sizeof msg) != RP_OK ||
            memcmp(c->f.q_rot, c->want_q, (size_t)(c->f.T * c->f.Hq * c->f.D) * e) != 0 ||
            memcmp(c->f.k_pool, c->want_kpool, (size_t)(c->f.P * c->f.Hk * c->f.D) * e) != 0)
            c->bad++;
    }
    return NULL;
}

static void test_concurrent_calls_on_one_context(void)
{
    rp_context_options o = {0};
    o.num_threads = 2;
    rp_context *ctx;
    char msg[256];
    CHECK(rp_context_create(&o, &ctx, msg, sizeof msg) == RP_OK, "%s", msg);
    caller c[CALLERS];
    for (int i = 0; i < CALLERS; i++) {
        test_rng r = {100 + (uint64_t)i};
        const rp_dtype dt = i % 2 ? RP_BF16 : RP_F32;
        fixture_init(&c[i].f, &r, 200 + 17 * i, 8, 2, 128, 300, dt, RP_I32, 1 << 17, 1);
        c[i].ctx = ctx;
        c[i].bad = 0;
        /* The expected result: a NULL context runs on the caller's thread alone. */
        CHECK(rp_rope_pool_fused(NULL, &c[i].f.args, msg, sizeof msg) == RP_OK, "%s", msg);
        const size_t e = rp_dtype_size(dt);
        size_t nq = (size_t)(c[i].f.T * 8 * 128) * e, np = (size_t)(300 * 2 * 128) * e;
        c[i].want_q = test_alloc(nq);
        c[i].want_kpool = test_alloc(np);
        memcpy(c[i].want_q, c[i].f.q_rot, nq);
        memcpy(c[i].want_kpool, c[i].f.k_pool, np);
    }
    pthread_t th[CALLERS];
    for (int i = 0; i < CALLERS; i++)
        pthread_create(&th[i], NULL, call_many, &c[i]);
    for (int i = 0; i < CALLERS; i++) {
        pthread_join(th[i], NULL);
        CHECK(c[i].bad == 0, "caller %d: %d of %d calls differed", i, c[i].bad, ROUNDS);
        free(c[i].want_q);
        free(c[i].want_kpool);
        fixture_free(&c[i].f);
    }
    rp_context_destroy(ctx);
}

static void test_per_call_thread_cap_and_many_contexts(void)
{
    char msg[256];
    for (int n = 1; n <= 3; n++) {
        rp_context_options o = {0};
        o.num_threads = n;
        rp_context *ctx;
        CHECK(rp_context_create(&o, &ctx, msg, sizeof msg) == RP_OK, "%s", msg);
        CHECK(rp_context_num_threads(ctx) == n, "threads %d want %d", rp_context_num_threads(ctx), n);
        test_rng r = {9};
        fixture f;
        fixture_init(&f, &r, 500, 4, 4, 64, 600, RP_F16, RP_I64, 1000, 0);
        for (int cap = 0; cap <= 4; cap++) {
            f.args.num_threads = cap;
            CHECK(rp_rope_pool_fused(ctx, &f.args, msg, sizeof msg) == RP_OK, "cap %d: %s", cap, msg);
        }
        fixture_free(&f);
        rp_context_destroy(ctx);
    }
    rp_context_destroy(NULL);
}

/* More threads than cores, and jobs whose part count changes every call: workers without a part
 * in one job must not run (or miss) the next one. */
static void test_oversubscribed_jobs_of_changing_size(void)
{
    rp_context_options o = {0};
    o.num_threads = 6;
    rp_context *ctx;
    char msg[256];
    CHECK(rp_context_create(&o, &ctx, msg, sizeof msg) == RP_OK, "%s", msg);
    test_rng r = {21};
    fixture f;
    fixture_init(&f, &r, 120, 8, 2, 128, 200, RP_F32, RP_I32, 1 << 16, 1);
    const size_t nq = 120 * 8 * 128 * sizeof(float);
    CHECK(rp_rope_pool_fused(NULL, &f.args, msg, sizeof msg) == RP_OK, "%s", msg);
    void *want = test_alloc(nq);
    memcpy(want, f.q_rot, nq);
    const int calls = test_quick() ? 100 : 400;
    int bad = 0;
    for (int call = 0; call < calls; call++) {
        f.args.num_threads = 1 + call % 6;
        memset(f.q_rot, 0, nq);
        bad += rp_rope_pool_fused(ctx, &f.args, msg, sizeof msg) != RP_OK || memcmp(f.q_rot, want, nq) != 0;
    }
    CHECK(bad == 0, "%d of %d calls differed", bad, calls);
    free(want);
    fixture_free(&f);
    rp_context_destroy(ctx);
}

int main(void)
{
    RUN(test_concurrent_calls_on_one_context);
    RUN(test_per_call_thread_cap_and_many_contexts);
    RUN(test_oversubscribed_jobs_of_changing_size);
    return test_summary("test_context");
}
