/*
 * test_context.c — one context shared by several threads calling at once: every call's result
 * equals the single-threaded result, whether it got the workers or ran on its own thread. The
 * caller's floating-point modes, a context used in a child of fork() (also one forked while another
 * thread was inside a call), the workers' signal mask, slots another thread changes during a call.
 */
#include "test_levels.h"

#include <fenv.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <unistd.h>
#ifdef __linux__
#  include <dirent.h>
#endif

enum { CALLERS = 4, ROUNDS = 20 };

typedef struct caller {
    rp_context *ctx;
    fixture f;
    void *want_q, *want_kpool;
    int bad;
} caller;

/* A context of num_threads threads (the caller's included). */
static rp_context *context_of(int num_threads)
{
    rp_context_options o = {0};
    o.num_threads = num_threads;
    rp_context *ctx = NULL;
    char msg[256];
    CHECK(rp_context_create(&o, &ctx, msg, sizeof msg) == RP_OK, "%s", msg);
    return ctx;
}

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
    rp_context *ctx = context_of(2);
    char msg[256];
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
    rp_context *ctx = context_of(6);
    char msg[256];
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

/* The calling thread's flush-to-zero / denormals-are-zero mode (torch.set_flush_denormal, a
 * -ffast-math program) must not reach the call: its slice came out flushed while the workers'
 * did not, so results depended on the thread count. Workers made while it is on inherit it and
 * must not use it either. The caller's mode is put back. */
#if defined(__x86_64__) || defined(__i386__)
#  include <xmmintrin.h>
typedef unsigned fp_mode;
static fp_mode get_mode(void) { return _mm_getcsr(); }
static void set_mode(fp_mode m) { _mm_setcsr(m); }
static const fp_mode FLUSHING = 0x8040; /* FTZ | DAZ */
#elif defined(__aarch64__)
typedef uint64_t fp_mode;
static fp_mode get_mode(void) { uint64_t m; __asm__ __volatile__("mrs %0, fpcr" : "=r"(m)); return m; }
static void set_mode(fp_mode m) { __asm__ __volatile__("msr fpcr, %0" : : "r"(m)); }
static const fp_mode FLUSHING = (fp_mode)1 << 24; /* FZ */
#endif

static void test_callers_flush_to_zero_mode_is_not_used(void)
{
#if defined(__x86_64__) || defined(__i386__) || defined(__aarch64__)
    test_rng r = {33};
    fixture f;
    fixture_init(&f, &r, 64, 8, 8, 128, 64, RP_F32, RP_I32, 1 << 16, 0); /* 256 KiB a tensor: every thread works */
    float *q = f.q, *k = f.k;
    for (int64_t i = 0; i < f.T * f.Hq * f.D; i++)
        q[i] *= 0x1p-127f; /* subnormal inputs, and outputs */
    for (int64_t i = 0; i < f.T * f.Hk * f.D; i++)
        k[i] *= 0x1p-127f;
    const size_t nq = (size_t)(f.T * f.Hq * f.D) * sizeof(float), nk = (size_t)(f.P * f.Hk * f.D) * sizeof(float);
    char msg[256];
    rp_context_options o = {0};
    o.num_threads = 3;
    rp_context *before, *during;
    CHECK(rp_context_create(&o, &before, msg, sizeof msg) == RP_OK, "%s", msg);
    f.args.num_threads = 1;
    CHECK(rp_rope_pool_fused(before, &f.args, msg, sizeof msg) == RP_OK, "%s", msg);
    void *want_q = test_alloc(nq), *want_kpool = test_alloc(nk);
    memcpy(want_q, f.q_rot, nq);
    memcpy(want_kpool, f.k_pool, nk);
    const fp_mode mode = get_mode();
    set_mode(mode | FLUSHING);
    CHECK(rp_context_create(&o, &during, msg, sizeof msg) == RP_OK, "%s", msg);
    int bad = 0;
    for (int call = 0; call < 6; call++) {
        f.args.num_threads = 1 + call % 3;
        memset(f.q_rot, 0, nq);
        bad += rp_rope_pool_fused(call < 3 ? before : during, &f.args, msg, sizeof msg) != RP_OK ||
               memcmp(f.q_rot, want_q, nq) != 0 || memcmp(f.k_pool, want_kpool, nk) != 0;
    }
    const fp_mode after = get_mode();
    set_mode(mode);
    CHECK(bad == 0, "%d of 6 calls differed from the default mode's result", bad);
    CHECK(after == (mode | FLUSHING), "the caller's mode was not put back");
    free(want_q);
    free(want_kpool);
    fixture_free(&f);
    rp_context_destroy(before);
    rp_context_destroy(during);
#endif
}

/* A caller's rounding mode must not reach the call either: rope_base's frequency table (pow() on
 * the caller's thread) came out rounded upward, thousands of output bits changed at large
 * positions, and the context cached that table for later callers in the default mode. Nor may it
 * reach transformers' tables. Each call must equal a default-mode call on a fresh context. */
static void test_callers_rounding_mode_is_not_used(void)
{
    test_rng r = {34};
    fixture f;
    fixture_init(&f, &r, 32, 4, 2, 128, 64, RP_F32, RP_I64, 1 << 16, 0);
    int64_t *pos = f.positions;
    for (int64_t t = 0; t < f.T; t++)
        pos[t] = 2147483647 - 977 * t; /* where one ulp of a frequency moves the angle most */
    const size_t nq = (size_t)(f.T * f.Hq * f.D) * sizeof(float), nk = (size_t)(f.P * f.Hk * f.D) * sizeof(float);
    char msg[256];
    CHECK(rp_rope_pool_fused(NULL, &f.args, msg, sizeof msg) == RP_OK, "%s", msg);
    void *want_q = test_alloc(nq), *want_kpool = test_alloc(nk);
    memcpy(want_q, f.q_rot, nq);
    memcpy(want_kpool, f.k_pool, nk);
    rp_hf_rope_params hp;
    memset(&hp, 0, sizeof hp);
    hp.rope_type = RP_HF_ROPE_YARN;
    hp.rope_theta = 10000.0;
    hp.rotary_dim = f.D;
    hp.factor = 40.0;
    hp.original_max_position_embeddings = 4096;
    double want_freq[64], want_scaling, freq[64], scaling;
    CHECK(rp_hf_rope_frequencies(&hp, want_freq, &want_scaling, msg, sizeof msg) == RP_OK, "%s", msg);
    rp_context *ctx;
    CHECK(rp_context_create(NULL, &ctx, msg, sizeof msg) == RP_OK, "%s", msg);
    const int modes[] = {FE_UPWARD, FE_DOWNWARD, FE_TOWARDZERO, FE_TONEAREST};
    for (int m = 0; m < 4; m++) {
        int bad = 0;
        for (int use_ctx = 0; use_ctx < 2; use_ctx++) {
            memset(f.q_rot, 0, nq);
            fesetround(modes[m]);
            bad += rp_rope_pool_fused(use_ctx ? ctx : NULL, &f.args, msg, sizeof msg) != RP_OK;
            const int after = fegetround();
            fesetround(FE_TONEAREST);
            bad += after != modes[m] || memcmp(f.q_rot, want_q, nq) != 0 || memcmp(f.k_pool, want_kpool, nk) != 0;
        }
        fesetround(modes[m]);
        bad += rp_hf_rope_frequencies(&hp, freq, &scaling, msg, sizeof msg) != RP_OK;
        fesetround(FE_TONEAREST);
        bad += memcmp(freq, want_freq, sizeof freq) != 0 || scaling != want_scaling;
        CHECK(bad == 0, "rounding mode %d: %d results differed from the default mode's, or the mode was not put back",
              m, bad);
    }
    free(want_q);
    free(want_kpool);
    fixture_free(&f);
    rp_context_destroy(ctx);
}

/* Forks; the child calls on ctx (a hang ends it with SIGALRM), compares q_rot with want_q, destroys
 * ctx and exits 0 when all went well. Returns the child's wait status. */
static int forked_call_status(rp_context *ctx, fixture *f, const void *want_q, size_t nq)
{
    char msg[256];
    fflush(NULL);
    const pid_t child = fork();
    CHECK(child >= 0, "fork failed");
    if (child == 0) {
        alarm(20);
        memset(f->q_rot, 0, nq);
        const int ok = rp_rope_pool_fused(ctx, &f->args, msg, sizeof msg) == RP_OK && memcmp(f->q_rot, want_q, nq) == 0;
        rp_context_destroy(ctx);
        _exit(ok ? 0 : 1);
    }
    int status = 0;
    CHECK(waitpid(child, &status, 0) == child, "waitpid failed");
    return status;
}

/* The child of a fork() has none of the context's workers: a call big enough to use them runs on
 * the child's thread alone (it used to wait for them forever), gives the serial result, and the
 * context can be destroyed there; the parent's context keeps its workers. */
static void test_a_context_made_before_fork_serves_the_child(void)
{
    rp_context *ctx = context_of(3);
    char msg[256];
    test_rng r = {77};
    fixture f; /* 1.8 MB of f32 data: split among the workers */
    fixture_init(&f, &r, 300, 8, 2, 128, 320, RP_F32, RP_I32, 1 << 17, 1);
    const size_t nq = (size_t)(300 * 8 * 128) * sizeof(float);
    CHECK(rp_rope_pool_fused(NULL, &f.args, msg, sizeof msg) == RP_OK, "%s", msg);
    void *want_q = test_alloc(nq);
    memcpy(want_q, f.q_rot, nq);
    CHECK(rp_rope_pool_fused(ctx, &f.args, msg, sizeof msg) == RP_OK, "%s", msg); /* the workers ran */
    const int status = forked_call_status(ctx, &f, want_q, nq);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0,
          "the child's call or destroy %s (status 0x%x)", WIFSIGNALED(status) ? "hung or crashed" : "failed",
          (unsigned)status);
    memset(f.q_rot, 0, nq);
    CHECK(rp_rope_pool_fused(ctx, &f.args, msg, sizeof msg) == RP_OK && memcmp(f.q_rot, want_q, nq) == 0,
          "the parent's call after the fork: %s", msg);
    free(want_q);
    fixture_free(&f);
    rp_context_destroy(ctx);
}

/* A fork while another thread is inside a call on the context: that thread held the context's
 * locks (the frequency cache's, here recomputed on every call since rope_base changes) at the
 * fork, and the child's call and destroy used to wait for them forever. */
typedef struct busy_caller {
    rp_context *ctx;
    fixture f;
    atomic_int stop;
} busy_caller;

static void *call_until_stopped(void *p)
{
    busy_caller *b = p;
    char msg[256];
    for (double base = 10000; !atomic_load(&b->stop); base += 1) {
        b->f.args.rope_base = base; /* a new frequency table under the cache's lock every call */
        (void)rp_rope_pool_fused(b->ctx, &b->f.args, msg, sizeof msg);
    }
    return NULL;
}

static void test_fork_while_another_thread_is_in_a_call(void)
{
    busy_caller b;
    b.ctx = context_of(2);
    atomic_init(&b.stop, 0);
    test_rng rb = {5};
    fixture_init(&b.f, &rb, 2, 1, 1, 1024, 4, RP_F32, RP_I32, 1 << 17, 0); /* 512 frequencies */
    char msg[256];
    test_rng r = {78};
    fixture f;
    fixture_init(&f, &r, 300, 8, 2, 128, 320, RP_F32, RP_I32, 1 << 17, 1);
    const size_t nq = (size_t)(300 * 8 * 128) * sizeof(float);
    CHECK(rp_rope_pool_fused(NULL, &f.args, msg, sizeof msg) == RP_OK, "%s", msg);
    void *want_q = test_alloc(nq);
    memcpy(want_q, f.q_rot, nq);
    pthread_t th;
    pthread_create(&th, NULL, call_until_stopped, &b);
    const int forks = test_quick() ? 10 : 40; /* the lock was caught held within 3 forks */
    int failed = 0;
    for (int i = 0; i < forks && !failed; i++) {
        const int status = forked_call_status(b.ctx, &f, want_q, nq);
        failed = !WIFEXITED(status) || WEXITSTATUS(status) != 0;
        CHECK(!failed, "fork %d: the child's call or destroy %s (status 0x%x)", i,
              WIFSIGNALED(status) ? "hung or crashed" : "failed", (unsigned)status);
    }
    atomic_store(&b.stop, 1);
    pthread_join(th, NULL);
    free(want_q);
    fixture_free(&f);
    fixture_free(&b.f);
    rp_context_destroy(b.ctx);
}

/* The ids of this process's threads other than the main one, into ids[0 .. return) (at most max;
 * -1 if /proc/self/task cannot be listed). Linux only. */
static int thread_ids(int *ids, int max)
{
    DIR *tasks = opendir("/proc/self/task");
    if (tasks == NULL)
        return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(tasks)) != NULL && n < max;)
        if (e->d_name[0] != '.' && atoi(e->d_name) != (int)getpid())
            ids[n++] = atoi(e->d_name);
    closedir(tasks);
    return n;
}

/* Workers block every signal: a process-directed signal is handled by one of the program's own
 * threads. Linux: each thread's blocked set is in /proc/self/task/TID/status. Only the threads
 * the context started are looked at: others may be there (a sanitizer's, an emulator's: QEMU's
 * user mode has its own, and a thread of an earlier test may still be leaving). */
static void test_workers_block_signals(void)
{
#ifdef __linux__
    enum { MAX_THREADS = 256 };
    int before[MAX_THREADS], after[MAX_THREADS];
    const int num_before = thread_ids(before, MAX_THREADS);
    rp_context *ctx = context_of(3);
    const int num_after = thread_ids(after, MAX_THREADS);
    CHECK(num_before >= 0 && num_after >= 0, "cannot list /proc/self/task");
    int blocking = 0, others = 0;
    for (int i = 0; i < num_after; i++) {
        int old = 0;
        for (int j = 0; j < num_before && !old; j++)
            old = after[i] == before[j];
        if (old)
            continue;
        char path[64], line[256];
        snprintf(path, sizeof path, "/proc/self/task/%d/status", after[i]);
        FILE *st = fopen(path, "r");
        unsigned long long blocked = 0;
        while (st && fgets(line, sizeof line, st))
            if (sscanf(line, "SigBlk: %llx", &blocked) == 1)
                break;
        if (st)
            fclose(st);
        const unsigned long long term = 1ull << (SIGTERM - 1), alrm = 1ull << (SIGALRM - 1);
        if ((blocked & term) && (blocked & alrm))
            blocking++;
        else
            others++;
    }
    /* >= 2: a sanitizer may start a thread of its own beside the first workers (TSan's) */
    CHECK(blocking >= 2 && others == 0, "%d threads the context started block SIGTERM and SIGALRM, %d do not "
          "(want its 2 workers, and none)", blocking, others);
    sigset_t mine;
    pthread_sigmask(SIG_SETMASK, NULL, &mine);
    CHECK(!sigismember(&mine, SIGTERM), "the caller's signal mask was not put back");
    rp_context_destroy(ctx);
#endif
}

/* Slots another thread changes while a call runs (a Python thread can: the binding releases the
 * GIL for the call) are the caller's race, but must never move a write outside the pools: every
 * slot was validated before the first write, then read again by the kernel, which wrote past the
 * pool for a slot changed in between (a Python loop storing P into slots[-1] during calls hit the
 * row after the pool within 4 calls). Modelled here without a race: each level runs a problem
 * validated with slots in range whose slots are then changed to rows past the pool. */
static void test_slots_changed_after_validation_never_write_outside_the_pools(void)
{
    enum { T = 24, Hq = 4, Hk = 2, D = 64, P = 32, GUARD = 8, ROW = Hk * D };
    static const rp_parts passes[][2] = {{RP_PARTS_ALL, RP_PARTS_ALL}, {RP_PARTS_ROTATE, RP_PARTS_SCATTER}};
    for (int l = 0; l < num_levels; l++) {
        if (!levels[l].supported)
            continue;
        for (int d = 0; d < 3; d++)
            for (int pass = 0; pass < 2; pass++) {
                test_rng r = {500 + (uint64_t)d};
                fixture f; /* pools of P + GUARD rows, passed as their first P */
                fixture_init(&f, &r, T, Hq, Hk, D, P + GUARD, dtypes[d], d == 1 ? RP_I64 : RP_I32, 1 << 20, 1);
                for (int64_t t = 0; t < T; t++)
                    if (t % 4 != 3)
                        test_store(f.slots, f.index_dtype, t, (double)((t + 5) % P));
                f.args.k_pool.shape[0] = f.args.v_pool.shape[0] = P;
                const size_t e = rp_dtype_size(dtypes[d]), pool_bytes = (size_t)((P + GUARD) * ROW) * e;
                unsigned char *k_before = test_alloc(pool_bytes), *v_before = test_alloc(pool_bytes);
                memcpy(k_before, f.k_pool, pool_bytes);
                memcpy(v_before, f.v_pool, pool_bytes);
                rp_cpu_kernels table = {0};
                fill_reference(&table);
                levels[l].fill(&table);
                double freq[512];
                rp_problem p = problem_of(&f, freq);
                CHECK(rp_validate_slots(&p, f.slots, &(rp_err){NULL, 0}) == RP_OK, "the slots do not validate");
                for (int64_t t = 0; t < T; t += 3) /* after validation: rows P .. P + GUARD - 1 */
                    test_store(f.slots, f.index_dtype, t, (double)(P + t % GUARD));
                for (int i = 0; i < 2 && (i == 0 || passes[pass][1] != RP_PARTS_ALL); i++)
                    table.rope_pool[dtypes[d]](&p, passes[pass][i], 0, T);
                CHECK(memcmp((unsigned char *)f.k_pool + (size_t)(P * ROW) * e, k_before + (size_t)(P * ROW) * e,
                             (size_t)(GUARD * ROW) * e) == 0 &&
                      memcmp((unsigned char *)f.v_pool + (size_t)(P * ROW) * e, v_before + (size_t)(P * ROW) * e,
                             (size_t)(GUARD * ROW) * e) == 0,
                      "%s, %s, %s: a slot changed after validation wrote past the pool", levels[l].name,
                      rp_dtype_name(dtypes[d]), pass ? "rotate then scatter" : "fused");
                /* Tokens whose slots were not changed wrote their rows as usual. */
                for (int64_t t = 1; t < T; t++)
                    if (t % 3 != 0 && t % 4 != 3)
                        CHECK(memcmp((unsigned char *)f.v_pool + (size_t)(((t + 5) % P) * ROW) * e,
                                     (unsigned char *)f.v + (size_t)(t * ROW) * e, (size_t)ROW * e) == 0 &&
                              memcmp((unsigned char *)f.k_pool + (size_t)(((t + 5) % P) * ROW) * e,
                                     (unsigned char *)f.k_rot + (size_t)(t * ROW) * e, (size_t)ROW * e) == 0,
                              "%s, %s, %s: token %lld's pool rows were not written", levels[l].name,
                              rp_dtype_name(dtypes[d]), pass ? "rotate then scatter" : "fused", (long long)t);
                free(k_before);
                free(v_before);
                fixture_free(&f);
            }
    }
}

int main(void)
{
    RUN(test_concurrent_calls_on_one_context);
    RUN(test_per_call_thread_cap_and_many_contexts);
    RUN(test_oversubscribed_jobs_of_changing_size);
    RUN(test_callers_flush_to_zero_mode_is_not_used);
    RUN(test_callers_rounding_mode_is_not_used);
    RUN(test_a_context_made_before_fork_serves_the_child);
    RUN(test_fork_while_another_thread_is_in_a_call);
    RUN(test_workers_block_signals);
    find_levels();
    RUN(test_slots_changed_after_validation_never_write_outside_the_pools);
    return test_summary("test_context");
}
