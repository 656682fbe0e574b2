/*
 * context.h — the rp_context structure, shared by context.c (threads), freq.c (frequency cache)
 * and the entry point.
 */
#ifndef RP_CONTEXT_H
#define RP_CONTEXT_H

#include "internal.h"

#include <pthread.h>
#include <stdatomic.h>

struct rp_context {
    int32_t num_threads; /* the caller's thread included */

    /* Worker threads 1 .. num_threads-1; the caller is part 0. `busy` is held by the call that
     * owns the workers; a concurrent call that cannot take it runs alone on its own thread. */
    pthread_t *workers;
    int num_workers;
    pthread_mutex_t busy;
    pthread_mutex_t mutex; /* guards the sleeping side of wake/done */
    pthread_cond_t wake, done;
    /* The current job, published in one word: (generation << 16) | num_parts. A worker reads the
     * job's size together with its generation, so a worker without a part in it never touches
     * fn/arg and need not be waited for. num_parts == 0 means "stop". */
    atomic_uint_fast64_t job;
    atomic_int pending; /* workers with a part in the current job that have not finished it */
    rp_parallel_fn fn;
    void *arg;

    /* Frequency table of the last (rope_base, rotary_dim) seen; freq_dim is that rotary_dim. */
    pthread_mutex_t freq_lock;
    double freq_base;
    int64_t freq_dim;
    double *freq;

    /* The process generation the context was made in (context.c: fork_generation): in a child of
     * fork() its workers are the parent's, so calls run on the caller's thread alone. */
    unsigned fork_generation;

    /* CUDA */
    uint32_t flags;
    int32_t cuda_device;
    void *cuda_state;
};

#endif /* RP_CONTEXT_H */
