/*
 * contexts.c — the module's rp_contexts: one for the CPU, one per CUDA device, each created on
 * first use and kept for the life of the process (a context owns worker threads and a frequency
 * cache: creating one per call would cost more than the call).
 *
 * Creation happens with the GIL held (and no Python code runs between the last look for a context
 * and its creation), so two Python threads never create the same context. After
 * fork() the child has none of the parent's worker threads: it forgets the contexts (leaking their
 * memory rather than joining threads that do not exist there) and creates its own on first use.
 */
#include "binding.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

enum { MAX_CUDA_DEVICES = 64, MESSAGE_SIZE = 512 };

static rp_context *cpu_context;
static rp_context *cuda_contexts[MAX_CUDA_DEVICES];

static void forget_contexts_in_child(void)
{
    cpu_context = NULL;
    for (int i = 0; i < MAX_CUDA_DEVICES; i++)
        cuda_contexts[i] = NULL;
}

int rpy_contexts_init(void)
{
    const int rc = pthread_atfork(NULL, NULL, forget_contexts_in_child);
    if (rc != 0) {
        errno = rc;
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    return 0;
}

/* ROPEPOOL_NUM_THREADS: the CPU context's thread count; unset or empty = 0 (one per online CPU). */
static int threads_from_environment(int32_t *out)
{
    long long value;
    if (rpy_env_integer("ROPEPOOL_NUM_THREADS", 0, 4096, 0, &value) < 0)
        return rpy_refuse("ROPEPOOL_NUM_THREADS must be an integer in [0, 4096] (0 = one thread per CPU), got '%s'",
                          getenv("ROPEPOOL_NUM_THREADS"));
    *out = (int32_t)value;
    return 0;
}

static rp_context *create(const rp_context_options *opts)
{
    rp_context *ctx = NULL;
    char message[MESSAGE_SIZE];
    const rp_status st = rp_context_create(opts, &ctx, message, sizeof message);
    if (st != RP_OK)
        return (rp_context *)rpy_raise(st, message);
    return ctx;
}

rp_context *rpy_cpu_context(void)
{
    if (cpu_context != NULL)
        return cpu_context;
    rp_context_options opts = {0};
    if (threads_from_environment(&opts.num_threads) < 0)
        return NULL;
    return cpu_context = create(&opts);
}

int rpy_any_cuda_context(void)
{
    for (int i = 0; i < MAX_CUDA_DEVICES; i++)
        if (cuda_contexts[i] != NULL)
            return 1;
    return 0;
}

rp_context *rpy_cuda_context(int device, int create_if_missing)
{
    if (device < 0 || device >= MAX_CUDA_DEVICES) {
        rpy_refuse("CUDA device index %d is out of range [0, %d)", device, (int)MAX_CUDA_DEVICES);
        return NULL;
    }
    if (cuda_contexts[device] != NULL || !create_if_missing)
        return cuda_contexts[device];
    /* Creating a context allocates device memory, which a CUDA graph capture forbids. */
    const int capturing = rpy_torch_is_capturing();
    if (capturing < 0)
        return NULL;
    /* The question ran Python code, where another thread may have taken the GIL and made this
     * device's context: a second one would replace it, and a bad slot its kernels had recorded
     * would never be reported. */
    if (cuda_contexts[device] != NULL)
        return cuda_contexts[device];
    if (capturing) {
        rpy_refuse("ropepool has no context for cuda:%d yet, and creating one allocates device memory, which "
                   "CUDA graph capture forbids: call rope_pool_fused once on cuda:%d before capturing (a warm-up "
                   "run)", device, device);
        return NULL;
    }
    /* CUDA calls run on the device: the context needs no CPU worker threads. */
    rp_context_options opts = {0};
    opts.num_threads = 1;
    opts.flags = RP_CONTEXT_CUDA;
    opts.cuda_device = device;
    return cuda_contexts[device] = create(&opts);
}
