/*
 * cuda_absent.c — the CUDA backend hooks of a build without nvcc: every CUDA request is refused
 * with a message that says why.
 */
#include "internal.h"

static rp_status no_cuda(rp_err *err)
{
    return rp_fail(err, RP_ERR_UNSUPPORTED,
                   "this ropepool was built without its CUDA backend (nvcc was not found at build time)");
}

rp_status rp_cuda_context_init(int32_t device, void **state, rp_err *err)
{
    (void)device;
    *state = NULL;
    return no_cuda(err);
}

void rp_cuda_context_free(void *state)
{
    (void)state;
}

rp_status rp_cuda_context_check(void *state, void *stream, rp_err *err)
{
    (void)state;
    (void)stream;
    return no_cuda(err);
}

rp_status rp_cuda_rope_pool(void *state, const rp_problem *p, rp_parts parts, uint32_t flags,
                            void *stream, rp_err *err)
{
    (void)state;
    (void)p;
    (void)parts;
    (void)flags;
    (void)stream;
    return no_cuda(err);
}

int rp_has_cuda(void)
{
    return 0;
}
