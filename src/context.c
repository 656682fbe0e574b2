/*
 * context.c — rp_context: its worker threads and the fork/join that CPU calls use.
 *
 * Workers spin briefly after each job before sleeping on a condition variable, so that the
 * back-to-back calls of an inference step (one per layer) find them awake: waking a sleeping
 * thread costs tens of microseconds, more than a whole decode-size call.
 */
#include "context.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#  include <immintrin.h>
#  define RP_CPU_RELAX() _mm_pause()
#elif defined(__aarch64__)
#  define RP_CPU_RELAX() __asm__ __volatile__("yield")
#else
#  define RP_CPU_RELAX() ((void)0)
#endif

/* Pause instructions a worker spins through before it sleeps. PAUSE takes ~10 to ~140 cycles
 * depending on the CPU: this is ~1.8 ms on Zen 4, during which back-to-back calls find the worker
 * awake (waking a sleeping one measured 300-700 us on a 2-vCPU VM). */
enum { RP_SPIN_ROUNDS = 1 << 16 };

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
    uint_fast64_t seen = 0;
    for (;;) {
        uint_fast64_t gen = atomic_load_explicit(&ctx->generation, memory_order_acquire);
        for (int spin = 0; gen == seen && spin < RP_SPIN_ROUNDS; spin++) {
            RP_CPU_RELAX();
            gen = atomic_load_explicit(&ctx->generation, memory_order_acquire);
        }
        if (gen == seen) {
            pthread_mutex_lock(&ctx->mutex);
            while ((gen = atomic_load_explicit(&ctx->generation, memory_order_acquire)) == seen)
                pthread_cond_wait(&ctx->wake, &ctx->mutex);
            pthread_mutex_unlock(&ctx->mutex);
        }
        seen = gen;
        if (atomic_load_explicit(&ctx->stop, memory_order_acquire))
            return NULL;
        /* Every worker acknowledges every job, even one without a part for it, so that the next
         * job's fields are never written while a late worker is still reading these. */
        if (index < ctx->num_parts)
            ctx->fn(ctx->arg, index, ctx->num_parts);
        if (atomic_fetch_sub_explicit(&ctx->pending, 1, memory_order_acq_rel) == 1) {
            pthread_mutex_lock(&ctx->mutex);
            pthread_cond_signal(&ctx->done);
            pthread_mutex_unlock(&ctx->mutex);
        }
    }
}

void rp_context_parallel(rp_context *ctx, rp_parallel_fn fn, void *arg, int num_parts)
{
    if (ctx == NULL || num_parts <= 1 || num_parts > ctx->num_workers + 1 ||
        pthread_mutex_trylock(&ctx->busy) != 0) {
        for (int i = 0; i < num_parts; i++)
            fn(arg, i, num_parts);
        return;
    }
    ctx->fn = fn;
    ctx->arg = arg;
    ctx->num_parts = num_parts;
    atomic_store_explicit(&ctx->pending, ctx->num_workers, memory_order_relaxed);
    pthread_mutex_lock(&ctx->mutex);
    atomic_fetch_add_explicit(&ctx->generation, 1, memory_order_release);
    pthread_cond_broadcast(&ctx->wake);
    pthread_mutex_unlock(&ctx->mutex);

    fn(arg, 0, num_parts);

    for (int spin = 0; atomic_load_explicit(&ctx->pending, memory_order_acquire) != 0; spin++) {
        if (spin < RP_SPIN_ROUNDS) {
            RP_CPU_RELAX();
            continue;
        }
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
    pthread_mutex_lock(&ctx->mutex);
    atomic_store_explicit(&ctx->stop, 1, memory_order_release);
    atomic_fetch_add_explicit(&ctx->generation, 1, memory_order_release);
    pthread_cond_broadcast(&ctx->wake);
    pthread_mutex_unlock(&ctx->mutex);
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
    if (o.flags & ~(uint32_t)RP_CONTEXT_CUDA)
        return rp_fail(&err, RP_ERR_INVALID_ARGUMENT, "context flags 0x%x has unknown bits",
                       (unsigned)o.flags);
    for (int i = 0; i < 5; i++)
        if (o.reserved[i] != 0)
            return rp_fail(&err, RP_ERR_INVALID_ARGUMENT,
                           "rp_context_options reserved fields must be 0");
    if ((o.flags & RP_CONTEXT_CUDA) && o.cuda_device < 0)
        return rp_fail(&err, RP_ERR_INVALID_ARGUMENT, "cuda_device must be >= 0, got %d",
                       (int)o.cuda_device);

    rp_context *ctx = calloc(1, sizeof *ctx);
    if (ctx == NULL)
        return rp_fail(&err, RP_ERR_OUT_OF_MEMORY, "out of memory creating a context");
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
