/*
 * context.c — rp_context: its worker threads and the fork/join that CPU calls use.
 *
 * The caller runs part 0 of a job itself and waits only for the workers that have a part in it.
 * Waiting threads spin (politely) before sleeping on a condition variable.
 *
 * After fork() a child has none of its parent's threads: a context made before the fork then
 * runs its calls on the caller's thread alone without taking any of its locks (a parent thread
 * inside a call at the fork left them held: freq.c computes the table instead of using the
 * cache), and its destruction frees memory without joining workers or destroying the condition
 * variables they sleep on (both would wait forever).
 */
#include "context.h"

#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#  include <immintrin.h>
#  define RP_CPU_RELAX() _mm_pause()
#elif defined(__aarch64__)
#  define RP_CPU_RELAX() __asm__ __volatile__("yield")
#else
#  define RP_CPU_RELAX() ((void)0)
#endif

/* How long a waiting thread spins before it sleeps. Back-to-back calls (one per layer) then find
 * the workers awake: waking a sleeping thread measured 300-700 us on a 2-vCPU VM, more than a
 * whole mid-size call. Spinning yields the CPU every RP_YIELD_EVERY pauses, because the thread
 * being waited for may share this CPU (more threads than cores): without it, a 2-thread call
 * was seen taking ~3 ms instead of ~40 us. */
enum { RP_SPIN_NS = 200 * 1000, RP_YIELD_EVERY = 256 };
enum { RP_PARTS_BITS = 16, RP_MAX_THREADS = 4096 }; /* parts fit in the job word */

typedef struct spinner {
    unsigned rounds;
    struct timespec start;
} spinner;

static int64_t ns_since(const struct timespec *t0)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (int64_t)(now.tv_sec - t0->tv_sec) * 1000000000 + (now.tv_nsec - t0->tv_nsec);
}

/* One round of busy-waiting. Returns 0 once RP_SPIN_NS have passed: time to sleep instead. */
static int spin_once(spinner *s)
{
    if (s->rounds++ == 0)
        clock_gettime(CLOCK_MONOTONIC, &s->start);
    RP_CPU_RELAX();
    if (s->rounds % RP_YIELD_EVERY != 0)
        return 1;
    sched_yield();
    return ns_since(&s->start) < RP_SPIN_NS;
}

/* Incremented in every child of fork(); a context compares it with the value it was made with. */
static atomic_uint fork_generation;
static pthread_once_t fork_handler_once = PTHREAD_ONCE_INIT;

static void count_fork_in_child(void)
{
    atomic_fetch_add_explicit(&fork_generation, 1, memory_order_relaxed);
}

static void install_fork_handler(void)
{
    pthread_atfork(NULL, NULL, count_fork_in_child);
}

int rp_context_made_before_fork(const rp_context *ctx)
{
    return ctx->fork_generation != atomic_load_explicit(&fork_generation, memory_order_relaxed);
}

typedef struct worker_arg {
    rp_context *ctx;
    int index; /* 1 .. num_workers */
} worker_arg;

static void *worker_main(void *p)
{
    worker_arg *wa = p;
    rp_context *ctx = wa->ctx;
    const int index = wa->index;
    free(wa);
    uint_fast64_t seen = 0; /* the job word's initial value: a late-starting worker still sees job 1 */
    for (;;) {
        uint_fast64_t job = atomic_load_explicit(&ctx->job, memory_order_acquire);
        spinner spin = {0};
        while (job == seen && spin_once(&spin))
            job = atomic_load_explicit(&ctx->job, memory_order_acquire);
        if (job == seen) {
            pthread_mutex_lock(&ctx->mutex);
            while ((job = atomic_load_explicit(&ctx->job, memory_order_acquire)) == seen)
                pthread_cond_wait(&ctx->wake, &ctx->mutex);
            pthread_mutex_unlock(&ctx->mutex);
        }
        seen = job;
        const int num_parts = (int)(job & ((1u << RP_PARTS_BITS) - 1));
        if (num_parts == 0)
            return NULL; /* stop */
        if (index >= num_parts)
            continue; /* no part in this job: fn/arg may already belong to the next one */
        ctx->fn(ctx->arg, index, num_parts);
        if (atomic_fetch_sub_explicit(&ctx->pending, 1, memory_order_acq_rel) == 1) {
            pthread_mutex_lock(&ctx->mutex);
            pthread_cond_signal(&ctx->done);
            pthread_mutex_unlock(&ctx->mutex);
        }
    }
}

/* Publishes the next job word (num_parts = 0: stop) and wakes sleeping workers. */
static void publish_job(rp_context *ctx, int num_parts)
{
    pthread_mutex_lock(&ctx->mutex);
    const uint_fast64_t generation = (atomic_load_explicit(&ctx->job, memory_order_relaxed) >> RP_PARTS_BITS) + 1;
    atomic_store_explicit(&ctx->job, (generation << RP_PARTS_BITS) | (uint_fast64_t)num_parts,
                          memory_order_release);
    pthread_cond_broadcast(&ctx->wake);
    pthread_mutex_unlock(&ctx->mutex);
}

void rp_context_parallel(rp_context *ctx, rp_parallel_fn fn, void *arg, int num_parts)
{
    if (ctx == NULL || num_parts <= 1 || num_parts > ctx->num_workers + 1 ||
        rp_context_made_before_fork(ctx) || pthread_mutex_trylock(&ctx->busy) != 0) {
        for (int i = 0; i < num_parts; i++)
            fn(arg, i, num_parts);
        return;
    }
    ctx->fn = fn;
    ctx->arg = arg;
    atomic_store_explicit(&ctx->pending, num_parts - 1, memory_order_relaxed);
    publish_job(ctx, num_parts);

    fn(arg, 0, num_parts);

    spinner spin = {0};
    while (atomic_load_explicit(&ctx->pending, memory_order_acquire) != 0 && spin_once(&spin))
        ;
    if (atomic_load_explicit(&ctx->pending, memory_order_acquire) != 0) {
        pthread_mutex_lock(&ctx->mutex);
        while (atomic_load_explicit(&ctx->pending, memory_order_acquire) != 0)
            pthread_cond_wait(&ctx->done, &ctx->mutex);
        pthread_mutex_unlock(&ctx->mutex);
    }
    pthread_mutex_unlock(&ctx->busy);
}

static int online_cpus(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > 1024 ? 1024 : (int)n;
}

static void stop_workers(rp_context *ctx)
{
    publish_job(ctx, 0);
    for (int i = 0; i < ctx->num_workers; i++)
        pthread_join(ctx->workers[i], NULL);
    ctx->num_workers = 0;
}

rp_status rp_context_create(const rp_context_options *opts, rp_context **out, char *errbuf,
                            size_t errbuf_size)
{
    rp_err err = {errbuf, errbuf_size};
    rp_context_options o = {0};
    if (out == NULL)
        return rp_fail(&err, RP_ERR_INVALID_ARGUMENT, "rp_context_create: out is NULL");
    *out = NULL;
    if (opts)
        o = *opts;
    if (o.num_threads < 0)
        return rp_fail(&err, RP_ERR_INVALID_ARGUMENT,
                       "num_threads must be >= 0 (0 = one per online CPU), got %d", (int)o.num_threads);
    if (o.num_threads > RP_MAX_THREADS)
        return rp_fail(&err, RP_ERR_INVALID_ARGUMENT, "num_threads must be <= %d, got %d",
                       RP_MAX_THREADS, (int)o.num_threads);
    if (o.flags & ~(uint32_t)RP_CONTEXT_CUDA)
        return rp_fail(&err, RP_ERR_INVALID_ARGUMENT, "context flags 0x%x has unknown bits",
                       (unsigned)o.flags);
    for (int i = 0; i < 5; i++)
        if (o.reserved[i] != 0)
            return rp_fail(&err, RP_ERR_INVALID_ARGUMENT,
                           "rp_context_options reserved fields must be 0: reserved[%d] is %u", i,
                           (unsigned)o.reserved[i]);
    /* A device named without the flag would be ignored: refuse it rather than make a CPU-only
     * context the caller did not ask for. */
    if (!(o.flags & RP_CONTEXT_CUDA) && o.cuda_device != 0)
        return rp_fail(&err, RP_ERR_INVALID_ARGUMENT,
                       "cuda_device %d needs flags RP_CONTEXT_CUDA: without it the context serves the CPU "
                       "alone (cuda_device must then be 0)", (int)o.cuda_device);
    if ((o.flags & RP_CONTEXT_CUDA) && o.cuda_device < 0)
        return rp_fail(&err, RP_ERR_INVALID_ARGUMENT, "cuda_device must be >= 0, got %d",
                       (int)o.cuda_device);

    pthread_once(&fork_handler_once, install_fork_handler);
    rp_context *ctx = calloc(1, sizeof *ctx);
    if (ctx == NULL)
        return rp_fail(&err, RP_ERR_OUT_OF_MEMORY, "out of memory creating a context");
    ctx->fork_generation = atomic_load_explicit(&fork_generation, memory_order_relaxed);
    ctx->num_threads = o.num_threads ? o.num_threads : online_cpus();
    ctx->flags = o.flags;
    ctx->cuda_device = o.cuda_device;
    pthread_mutex_init(&ctx->busy, NULL);
    pthread_mutex_init(&ctx->mutex, NULL);
    pthread_mutex_init(&ctx->freq_lock, NULL);
    pthread_cond_init(&ctx->wake, NULL);
    pthread_cond_init(&ctx->done, NULL);

    rp_status st = RP_OK;
    if (o.flags & RP_CONTEXT_CUDA)
        st = rp_cuda_context_init(o.cuda_device, &ctx->cuda_state, &err);
    /* Workers start with every signal blocked (they inherit this thread's mask): a process-directed
     * signal goes to one of the program's own threads, never into a worker. */
    sigset_t all, callers;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &callers);
    if (st == RP_OK && ctx->num_threads > 1) {
        ctx->workers = calloc((size_t)ctx->num_threads - 1, sizeof *ctx->workers);
        if (ctx->workers == NULL)
            st = rp_fail(&err, RP_ERR_OUT_OF_MEMORY, "out of memory creating %d workers",
                         (int)ctx->num_threads - 1);
        for (int i = 1; st == RP_OK && i < ctx->num_threads; i++) {
            worker_arg *wa = malloc(sizeof *wa);
            if (wa == NULL) {
                st = rp_fail(&err, RP_ERR_OUT_OF_MEMORY, "out of memory creating a worker");
                break;
            }
            wa->ctx = ctx;
            wa->index = i;
            int rc = pthread_create(&ctx->workers[ctx->num_workers], NULL, worker_main, wa);
            if (rc != 0) {
                free(wa);
                st = rp_fail(&err, RP_ERR_OUT_OF_MEMORY, "cannot start worker thread %d of %d (error %d)",
                             i, (int)ctx->num_threads - 1, rc);
                break;
            }
            ctx->num_workers++;
        }
    }
    pthread_sigmask(SIG_SETMASK, &callers, NULL);
    if (st != RP_OK) {
        rp_context_destroy(ctx);
        return st;
    }
    *out = ctx;
    return RP_OK;
}

void rp_context_destroy(rp_context *ctx)
{
    if (ctx == NULL)
        return;
    if (rp_context_made_before_fork(ctx)) { /* the parent's workers, condition variables and CUDA state */
        free(ctx->workers);
        /* A parent thread inside a call at the fork may have held freq_lock in the middle of
         * replacing the table (realloc'd, not yet stored): leave the table then. */
        if (pthread_mutex_trylock(&ctx->freq_lock) == 0)
            free(ctx->freq);
        free(ctx);
        return;
    }
    stop_workers(ctx);
    free(ctx->workers);
    if (ctx->cuda_state)
        rp_cuda_context_free(ctx->cuda_state);
    free(ctx->freq);
    pthread_cond_destroy(&ctx->wake);
    pthread_cond_destroy(&ctx->done);
    pthread_mutex_destroy(&ctx->freq_lock);
    pthread_mutex_destroy(&ctx->mutex);
    pthread_mutex_destroy(&ctx->busy);
    free(ctx);
}

int32_t rp_context_num_threads(const rp_context *ctx)
{
    return ctx ? ctx->num_threads : 1;
}

rp_status rp_context_check(rp_context *ctx, void *stream, char *errbuf, size_t errbuf_size)
{
    rp_err err = {errbuf, errbuf_size};
    if (ctx == NULL)
        return rp_fail(&err, RP_ERR_INVALID_ARGUMENT, "rp_context_check: ctx is NULL");
    if (!(ctx->flags & RP_CONTEXT_CUDA))
        return rp_fail(&err, RP_ERR_UNSUPPORTED,
                       "rp_context_check: this context was created without RP_CONTEXT_CUDA; "
                       "CPU calls report bad slots immediately");
    return rp_cuda_context_check(ctx->cuda_state, stream, &err);
}
