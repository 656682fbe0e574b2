/*
 * rope_pool.cu — the CUDA backend's entry: rp_cuda_rope_pool checks what only CUDA limits, then
 * rp_cuda_launch fills the kernels' parameter block and dispatches from runtime sizes to the
 * compiled variants (kernels.cuh) with the plan's geometry (plan.cu).
 */
#include "kernels.cuh"

#include <stddef.h>
#include <string.h>

/* ---- dispatch --------------------------------------------------------------------------------- */

template <int FREQ_CAP>
static void fill_args(rp_kernel_args<FREQ_CAP> *a, const rp_cuda_state *st, const rp_problem *p,
                      rp_parts parts, const rp_cuda_plan *plan)
{
    a->q = p->q;
    a->k = p->k;
    a->v = p->v;
    a->positions = p->positions;
    a->slots = p->slots;
    a->q_rot = p->q_rot;
    a->k_rot = p->k_rot;
    a->k_pool = p->k_pool;
    a->v_pool = p->v_pool;
    a->status = st->status;
    a->host_status = st->host_status_dev;
    /* pools: [block, head, dim] here, the row in block apart */
    const int64_t k_pool[3] = {p->k_pool_stride[0], p->k_pool_stride[2], p->k_pool_stride[3]};
    const int64_t v_pool[3] = {p->v_pool_stride[0], p->v_pool_stride[2], p->v_pool_stride[3]};
    const int64_t *strides[T_COUNT] = {p->q_stride,     p->k_stride, p->v_stride, p->q_rot_stride,
                                       p->k_rot_stride, k_pool,      v_pool};
    for (int t = 0; t < T_COUNT; t++)
        for (int d = 0; d < 3; d++)
            a->stride[t][d] = strides[t][d];
    if (plan->vectorized && plan->v_pieces > 1) /* v's pieces of D dims as heads (plan.cu) */
        a->stride[T_V][1] = a->stride[T_V_POOL][1] = p->head_dim;
    a->pool_row_stride[0] = p->k_pool_stride[1];
    a->pool_row_stride[1] = p->v_pool_stride[1];
    a->block_size = p->block_size;
    a->inv_block_size = 1.0 / (double)p->block_size;
    a->block_shift = p->block_shift;
    a->pool_fp8 = p->pool_dtype == RP_F8_E4M3 ? RP_POOL_E4M3 : p->pool_dtype == RP_F8_E5M2 ? RP_POOL_E5M2 : RP_POOL_SAME;
    a->k_inv_scale = (float)(1.0 / p->k_scale);
    a->v_inv_scale = (float)(1.0 / p->v_scale);
    a->k_scale_ptr = p->k_scale_ptr;
    a->v_scale_ptr = p->v_scale_ptr;
    a->v_head_dim = (int)p->v_head_dim;
    a->pos_stride = p->pos_stride;
    a->slot_stride = p->slot_stride;
    a->num_tokens = p->num_tokens;
    a->pool_size = p->pool_size;
    a->num_qo_heads = (int)p->num_qo_heads;
    a->num_kv_heads = (int)p->num_kv_heads;
    a->half_dim = (int)(p->head_dim / 2);
    a->style = (int)p->style;
    a->rotary_dim = (int)p->rotary_dim;
    a->rot_half = (int)(p->rotary_dim / 2);
    a->rot_groups = a->rot_half / (int)(16 / rp_dtype_size(p->dtype));
    a->scale = p->attention_scaling;
    for (int r = 0; r < 3; r++)
        a->mrope_section[r] = p->mrope_section[r];
    a->mrope_interleaved = p->mrope_interleaved;
    a->pos_row_bytes = p->pos_row_stride * (long long)rp_dtype_size(p->pos_dtype);
    a->pos64 = p->pos_dtype == RP_I64;
    a->slot64 = p->slot_dtype == RP_I64;
    a->parts = (int)parts;
    a->heads = plan->heads;
    a->num_tiles = plan->tokens_per_block > 0 ? (p->num_tokens + plan->tokens_per_block - 1) / plan->tokens_per_block : 0;
    a->q_norm = p->q_norm.data;
    a->k_norm = p->k_norm.data;
    a->q_norm_f32 = p->q_norm.dtype == RP_F32;
    a->k_norm_f32 = p->k_norm.dtype == RP_F32;
    a->norm_eps = p->norm_eps;
    a->norm_offset = p->norm_offset;
    a->norm_float32 = p->dtype != RP_F32 && (double)(float)p->norm_offset == p->norm_offset;
    a->norm_inv_dim = 1.0 / (double)p->head_dim;
    memcpy(a->inv_freq, p->inv_freq, (size_t)a->rot_half * sizeof(double));
}

/* Launches kernel<<<grid, block, shared_bytes, stream>>>(args), with programmatic stream
 * serialization when the plan asks for it. */
template <typename Args>
static cudaError_t launch(void (*kernel)(Args), dim3 grid, dim3 block, size_t shared_bytes,
                          cudaStream_t stream, int overlap_launch, const Args &args)
{
    cudaLaunchConfig_t config = {};
    config.gridDim = grid;
    config.blockDim = block;
    config.dynamicSmemBytes = shared_bytes;
    config.stream = stream;
    cudaLaunchAttribute attribute = {};
    attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute.val.programmaticStreamSerializationAllowed = 1;
    config.attrs = &attribute;
    config.numAttrs = overlap_launch ? 1 : 0;
    return cudaLaunchKernelEx(&config, kernel, args);
}

template <rp_dtype DT, int STYLE, int HALF, int FREQ_CAP, bool FP8 = false, int NORM = 0>
static cudaError_t launch_vectorized(const rp_cuda_state *st, const rp_problem *p, rp_parts parts,
                                     const rp_cuda_plan *plan, cudaStream_t stream)
{
    rp_kernel_args<FREQ_CAP> a;
    fill_args(&a, st, p, parts, plan);
    const dim3 grid(plan->grid, (unsigned)plan->chunks, (unsigned)plan->head_chunks);
    const dim3 block((unsigned)plan->groups_per_block, (unsigned)plan->heads_per_pass,
                     (unsigned)plan->tokens_per_block);
    const rp_kernel_fn<FREQ_CAP> kernel = plan->items_per_thread >= 2
                                              ? rp_prefill_kernel<DT, STYLE, HALF, FREQ_CAP, FP8, NORM != 0>()
                                              : rp_decode_kernel<DT, STYLE, HALF, FREQ_CAP, FP8, NORM>();
    return launch(kernel, grid, block, plan->shared_bytes, stream, plan->overlap_launch, a);
}

template <rp_dtype DT, int FREQ_CAP>
static cudaError_t launch_strided(const rp_cuda_state *st, const rp_problem *p, rp_parts parts,
                                  const rp_cuda_plan *plan, cudaStream_t stream)
{
    rp_kernel_args<FREQ_CAP> a;
    fill_args(&a, st, p, parts, plan);
    return launch(rp_strided_kernel<DT, FREQ_CAP>(), dim3(plan->grid), dim3((unsigned)plan->threads_x), 0, stream,
                  plan->overlap_launch, a);
}

/* A QK-norm variant, with fp8 pools or without (kernels.cuh compiles both for each geometry), and
 * the plan's build of the decode kernel (the prefill kernel has one). */
template <rp_dtype DT, int STYLE, int HALF, int FREQ_CAP>
static cudaError_t launch_norm(bool fp8, const rp_cuda_state *st, const rp_problem *p, rp_parts parts,
                               const rp_cuda_plan *plan, cudaStream_t stream)
{
    enum { SHORT = RP_NORM_DECODE_SHORT, RESIDENT = RP_NORM_DECODE_RESIDENT };
    if (plan->norm_decode_threads == RESIDENT)
        return fp8 ? launch_vectorized<DT, STYLE, HALF, FREQ_CAP, true, RESIDENT>(st, p, parts, plan, stream)
                   : launch_vectorized<DT, STYLE, HALF, FREQ_CAP, false, RESIDENT>(st, p, parts, plan, stream);
    return fp8 ? launch_vectorized<DT, STYLE, HALF, FREQ_CAP, true, SHORT>(st, p, parts, plan, stream)
               : launch_vectorized<DT, STYLE, HALF, FREQ_CAP, false, SHORT>(st, p, parts, plan, stream);
}

/* The variants of kernels.cuh: either style over the whole head, without mRoPE, gets head_dim as a compile-time constant
 * for the common sizes (64, 128, 256); the others run the same code with a runtime head_dim and
 * rotary_dim. Frequencies up to RP_CUDA_MAX_HEAD_DIM / 2. */
template <rp_dtype DT>
static cudaError_t launch_dtype(const rp_cuda_state *st, const rp_problem *p, rp_parts parts,
                                const rp_cuda_plan *plan, cudaStream_t stream)
{
    const int64_t pairs = p->rotary_dim / 2;
    /* the head size a kernel is compiled for: R = D without mRoPE (kernel_args.cuh, rp_position_row_of) */
    const int64_t whole = p->rotary_dim == p->head_dim && !p->mrope ? pairs : 0;
    if (!plan->vectorized)
        return pairs <= 256 ? launch_strided<DT, 256>(st, p, parts, plan, stream)
                            : launch_strided<DT, RP_CUDA_MAX_HEAD_DIM / 2>(st, p, parts, plan, stream);
    if (rp_has_qk_norm(p)) { /* kernels.cuh's RP_NORM_VARIANTS */
        const bool fp8 = rp_pool_is_fp8(p);
        if (p->style == RP_ROPE_GPTJ)
            return launch_norm<DT, RP_ROPE_GPTJ, 0, 256>(fp8, st, p, parts, plan, stream);
        switch (whole) {
        case 64: return launch_norm<DT, RP_ROPE_NEOX, 64, 64>(fp8, st, p, parts, plan, stream);
        case 128: return launch_norm<DT, RP_ROPE_NEOX, 128, 128>(fp8, st, p, parts, plan, stream);
        default: return launch_norm<DT, RP_ROPE_NEOX, 0, 256>(fp8, st, p, parts, plan, stream);
        }
    }
    if (rp_pool_is_fp8(p)) /* pairs <= RP_VECTOR_FP8_MAX_PAIRS: the plan saw to it */
        return p->style == RP_ROPE_GPTJ ? launch_vectorized<DT, RP_ROPE_GPTJ, 0, 256, true>(st, p, parts, plan, stream)
               : whole == 64  ? launch_vectorized<DT, RP_ROPE_NEOX, 64, 64, true>(st, p, parts, plan, stream)
               : whole == 128 ? launch_vectorized<DT, RP_ROPE_NEOX, 128, 128, true>(st, p, parts, plan, stream)
                              : launch_vectorized<DT, RP_ROPE_NEOX, 0, 256, true>(st, p, parts, plan, stream);
    if (p->style == RP_ROPE_GPTJ)
        switch (whole) {
        case 32: return launch_vectorized<DT, RP_ROPE_GPTJ, 32, 32>(st, p, parts, plan, stream);
        case 64: return launch_vectorized<DT, RP_ROPE_GPTJ, 64, 64>(st, p, parts, plan, stream);
        case 128: return launch_vectorized<DT, RP_ROPE_GPTJ, 128, 128>(st, p, parts, plan, stream);
        default:
            return pairs <= 256 ? launch_vectorized<DT, RP_ROPE_GPTJ, 0, 256>(st, p, parts, plan, stream)
                                : launch_vectorized<DT, RP_ROPE_GPTJ, 0, RP_CUDA_MAX_HEAD_DIM / 2>(st, p, parts, plan, stream);
        }
    switch (whole) {
    case 32: return launch_vectorized<DT, RP_ROPE_NEOX, 32, 32>(st, p, parts, plan, stream);
    case 64: return launch_vectorized<DT, RP_ROPE_NEOX, 64, 64>(st, p, parts, plan, stream);
    case 128: return launch_vectorized<DT, RP_ROPE_NEOX, 128, 128>(st, p, parts, plan, stream);
    default:
        return pairs <= 256 ? launch_vectorized<DT, RP_ROPE_NEOX, 0, 256>(st, p, parts, plan, stream)
                            : launch_vectorized<DT, RP_ROPE_NEOX, 0, RP_CUDA_MAX_HEAD_DIM / 2>(st, p, parts, plan, stream);
    }
}

extern "C" rp_status rp_cuda_launch(const rp_cuda_state *st, const rp_problem *p, rp_parts parts,
                                    const rp_cuda_plan *plan, cudaStream_t stream, rp_err *err)
{
    cudaError_t e;
    switch (p->dtype) {
    case RP_F32: e = launch_dtype<RP_F32>(st, p, parts, plan, stream); break;
    case RP_F16: e = launch_dtype<RP_F16>(st, p, parts, plan, stream); break;
    case RP_BF16: e = launch_dtype<RP_BF16>(st, p, parts, plan, stream); break;
    default:
        return rp_fail(err, RP_ERR_UNSUPPORTED, "the CUDA backend has no kernel for dtype %s",
                       rp_dtype_name(p->dtype));
    }
    if (e == cudaSuccess)
        e = cudaGetLastError();
    return e == cudaSuccess ? RP_OK : rp_cuda_fail(err, e, "rope_pool_fused kernel launch");
}

/* ---- the backend hook ------------------------------------------------------------------------- */

extern "C" rp_status rp_cuda_rope_pool(void *state, const rp_problem *p, rp_parts parts,
                                       uint32_t flags, void *stream_handle, rp_err *err)
{
    const rp_cuda_state *st = (const rp_cuda_state *)state;
    const cudaStream_t stream = (cudaStream_t)stream_handle;
    if (p->head_dim > RP_CUDA_MAX_HEAD_DIM)
        return rp_fail(err, RP_ERR_UNSUPPORTED,
                       "head_dim %lld is not supported on CUDA: the CUDA backend takes head_dim up to %d",
                       (long long)p->head_dim, RP_CUDA_MAX_HEAD_DIM);
    /* Run on the context's device; give the caller back its own current device. */
    int previous = -1;
    rp_status status = rp_cuda_enter_device(st->device, &previous, err);
    if (status != RP_OK)
        return status;
    /* A slot an earlier kernel could not write raises here at the latest (no synchronisation). */
    status = rp_cuda_take_earlier_bad_slot(st, err);
    if (status == RP_OK && (flags & RP_CHECK_SLOTS))
        status = rp_cuda_check_slots(p, stream, err);
    if (status == RP_OK) {
        const rp_cuda_plan plan = rp_cuda_make_plan(st, p, parts);
        if (!plan.vectorized && rp_has_qk_norm(p))
            status = rp_fail(err, RP_ERR_UNSUPPORTED,
                             "q_norm_weight / k_norm_weight (QK-norm) on CUDA need the vectorized kernels: head "
                             "rows contiguous and 16-byte aligned, head_dim / 2 and rotary_dim / 2 multiples of "
                             "%d, head_dim / %d a power of two up to 32 and v_head_dim a multiple of head_dim (v heads "
                             "end to end unless one); got head_dim %lld, rotary_dim %lld, v_head_dim %lld: run "
                             "this call on the CPU",
                             (int)(16 / rp_dtype_size(p->dtype)), (int)(32 / rp_dtype_size(p->dtype)),
                             (long long)p->head_dim, (long long)p->rotary_dim, (long long)p->v_head_dim);
        else
            status = rp_cuda_launch(st, p, parts, &plan, stream, err);
    }
    rp_cuda_leave_device(st->device, previous);
    return status;
}
