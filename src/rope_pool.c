/*
 * rope_pool.c — the public entry point: validate everything, then hand the problem to the backend
 * that owns the tensors' memory.
 */
#include "context.h"
#include "fp_mode.h"

#include <stdlib.h>

enum { RP_FREQ_ON_STACK = 512 }; /* head_dim up to 1024 needs no allocation */

rp_status rp_rope_pool_fused(rp_context *ctx, const rp_rope_pool_args *args, char *errbuf,
                             size_t errbuf_size)
{
    return rp_rope_pool_run(ctx, args, RP_PARTS_ALL, errbuf, errbuf_size);
}

static rp_status run(rp_context *ctx, const rp_rope_pool_args *args, rp_parts parts, char *errbuf,
                     size_t errbuf_size);

/* In the default floating-point mode whatever the caller's (fp_mode.h) */
rp_status rp_rope_pool_run(rp_context *ctx, const rp_rope_pool_args *args, rp_parts parts,
                           char *errbuf, size_t errbuf_size)
{
    const rp_fp_mode mode = rp_fp_mode_enter();
    const rp_status st = run(ctx, args, parts, errbuf, errbuf_size);
    rp_fp_mode_leave(mode);
    return st;
}

static rp_status run(rp_context *ctx, const rp_rope_pool_args *args, rp_parts parts, char *errbuf,
                     size_t errbuf_size)
{
    rp_err err = {errbuf, errbuf_size};
    rp_problem p;
    if (errbuf && errbuf_size)
        errbuf[0] = '\0';
    rp_status st = rp_validate(args, &p, &err);
    if (st != RP_OK)
        return st;
    const int on_cuda = args->q.device.type == RP_DEVICE_CUDA;
    /* A ROPEPOOL_CPU that refuses every CPU call refuses RP_VALIDATE_ONLY's too: it needs no memory,
     * and a lazy binding must not accept at the call what its evaluation will refuse. */
    if ((!on_cuda && (st = rp_cpu_check_settings(&err)) != RP_OK) || (args->flags & RP_VALIDATE_ONLY))
        return st;

    if (on_cuda) {
        if (!rp_has_cuda())
            return rp_fail(&err, RP_ERR_UNSUPPORTED,
                           "tensors are on cuda:%d, but this ropepool was built without its CUDA backend "
                           "(nvcc was not found at build time)", (int)args->q.device.index);
        if (ctx == NULL || !(ctx->flags & RP_CONTEXT_CUDA))
            return rp_fail(&err, RP_ERR_INVALID_ARGUMENT,
                           "tensors are on cuda:%d: pass a context created with RP_CONTEXT_CUDA "
                           "and cuda_device = %d",
                           (int)args->q.device.index, (int)args->q.device.index);
        if (ctx->cuda_device != args->q.device.index)
            return rp_fail(&err, RP_ERR_INVALID_ARGUMENT,
                           "tensors are on cuda:%d but the context serves cuda:%d",
                           (int)args->q.device.index, (int)ctx->cuda_device);
    } else if ((st = rp_resolve_host_scales(&p, &err)) != RP_OK ||
               (st = rp_validate_slots(&p, p.slots, &err)) != RP_OK) {
        return st;
    }
    if (p.num_tokens == 0)
        return RP_OK;

    /* The caller's table is used in place; rope_base's comes from the context's cache. */
    const int64_t half = p.rotary_dim / 2;
    double stack_freq[RP_FREQ_ON_STACK];
    double *freq = NULL;
    if (!p.caller_freq) {
        freq = half <= RP_FREQ_ON_STACK ? stack_freq : malloc((size_t)half * sizeof *freq);
        if (freq == NULL)
            return rp_fail(&err, RP_ERR_OUT_OF_MEMORY, "out of memory for %lld frequencies", (long long)half);
        rp_context_inv_freq(ctx, p.rope_base, p.rotary_dim, freq);
        p.inv_freq = freq;
    }

    if (on_cuda)
        st = rp_cuda_rope_pool(ctx->cuda_state, &p, parts, args->flags, args->stream, &err);
    else
        st = rp_cpu_rope_pool(ctx, &p, parts, args->num_threads, &err);

    if (freq != stack_freq)
        free(freq);
    return st;
}
