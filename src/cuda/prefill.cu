/*
 * prefill.cu — the vectorized kernel for calls of several items per thread (kernels.cuh).
 */
#include "items.cuh"
#include "kernels.cuh"

/* The prefill kernel: PREFETCH (RP_PREFILL_PREFETCH) heads per thread whose loads are issued before the table
 * is built, so that each multiprocessor keeps enough bytes in flight; the geometry is the decode
 * kernel's, with a block taking whole tokens. Addresses are computed where they are used (after
 * the wait): holding them across the barrier cost registers and 7% of the time of a prefill call
 * (bench/results/cuda-h200-tuning.md). */
template <rp_dtype DT, int STYLE, int HALF, int FREQ_CAP, bool FP8, bool NORM, int PREFETCH>
__global__ void __launch_bounds__(rp_block_threads(PREFETCH))
rope_pool_prefill(const __grid_constant__ rp_kernel_args<FREQ_CAP> a)
{
    typedef rp_elem<DT> E;
    constexpr int V = E::ELEMS;
    constexpr size_t ELEM = sizeof(typename E::storage);
    /* [tokens][V/2][groups of the block] float4: (cos, sin) of pairs 2c and 2c + 1 of a group,
     * laid out so that a warp's consecutive groups read consecutive 16 bytes. */
    extern __shared__ float4 table[];
    /* QK-norm: the block's staged weights come first (qk_norm.cuh, rp_stage_norm_weights) */
    float *const sw = (float *)table;
    bool staged = false;

    const int GB = blockDim.x, HY = blockDim.y, Y = blockDim.z;
    const int group = blockIdx.y * GB + threadIdx.x;
    const rp_group gr = group_of<HALF, ELEM>(a, group);
    const long long first = gr.first, half_bytes = gr.hi_bytes;
    const long long T = a.num_tokens, num_tiles = a.num_tiles;
    const bool rotates = a.parts != RP_PARTS_SCATTER;
    float4 *cs = table + (NORM ? rp_norm_staged_float4s(a) : 0) + threadIdx.z * (GB * V / 2) + threadIdx.x;

    rp_let_next_kernel_launch();
    rp_wait_for_prior_kernel();
    /* fp8 pools: the scales may come from memory the previous kernel wrote */
    const float k_inv = FP8 ? rp_inv_scale(a.k_scale_ptr, a.k_inv_scale) : 1.0f;
    const float v_inv = FP8 ? rp_inv_scale(a.v_scale_ptr, a.v_inv_scale) : 1.0f;
    for (long long tile = blockIdx.x; tile < num_tiles; tile += gridDim.x) {
        const long long t = tile * Y + threadIdx.z;
        const bool token_ok = t < T;

        /* 0. The position, first: it heads the longest chain (threads y < V of a rotated group
         * build the table). */
        const bool builds_table = rotates && token_ok && (int)threadIdx.y < V && gr.rotated;
        rp_index_words pos = {0, 0};
        if (builds_table)
            pos = rp_index_issue(rp_position_row_of<HALF>(a, pair_of<STYLE, HALF, V>(a, group, threadIdx.y)), a.pos64,
                                 a.pos_stride, t); /* mRoPE: the row of this thread's pair */

        /* 1. This thread's items and the token's slot. */
        uint4 lo[PREFETCH], hi[PREFETCH];
#pragma unroll
        for (int j = 0; j < PREFETCH; j++) {
            const int h = threadIdx.y + j * HY;
            if (token_ok && h < a.heads) {
                const char *p = source_address<ELEM>(a, place_head(a, h), t, first);
                lo[j] = *(const uint4 *)p;
                hi[j] = *(const uint4 *)(p + half_bytes);
            }
        }
        const bool uses_slot = token_ok && a.parts != RP_PARTS_ROTATE;
        rp_index_words slot_words = {-1, -1};
        if (uses_slot)
            slot_words = rp_index_issue(a.slots, a.slot64, a.slot_stride, t);

        /* 2. The (token, frequency) table of this block, while the loads are in flight: thread
         * (g, y) computes pair y (y + HY, ...) of group g, once for all heads. */
        if (rotates) {
            const bool stage = NORM && DT != RP_F32 && a.norm_float32 && tile == blockIdx.x;
            const bool outside = stage && rp_stage_norm_weights<DT>(a, sw);
            if (builds_table)
                for (int j = threadIdx.y; j < V; j += HY) {
                    float s, c;
                    const bool own = j == (int)threadIdx.y;
                    const long long pj = pair_of<STYLE, HALF, V>(a, group, j);
                    /* another pair's row may differ (mRoPE): its position is read again */
                    const long long position = own || !rp_rows_differ<HALF>(a) ? rp_index_value(pos, a.pos64)
                                                   : rp_load_index_dev(rp_position_row(a, pj), a.pos64, a.pos_stride, t);
                    rp_angle_sincos((double)position * a.inv_freq[pj], a.scale, &s, &c);
                    float *entry = (float *)&cs[(j / 2) * GB] + (j % 2) * 2;
                    entry[0] = c;
                    entry[1] = s;
                }
            if (NORM)
                staged = rp_norm_barrier(stage, outside, staged);
            else
                __syncthreads();
        }

        /* 3. Rotate and store. */
        const long long slot = uses_slot ? rp_index_value(slot_words, a.slot64) : -1;
        const bool to_pool = slot >= 0 && slot < a.pool_size;
        long long row = 0;
        const long long block = to_pool ? rp_slot_block(a, slot, &row) : 0;
        /* QK-norm: every lane joins its heads' reductions (all PREFETCH at once), here and in the
         * loop below, whose trip count is then the block's. */
        rp_norm_factor f[PREFETCH];
        if (NORM) {
            bool valid[PREFETCH];
#pragma unroll
            for (int j = 0; j < PREFETCH; j++)
                valid[j] = token_ok && (int)threadIdx.y + j * HY < a.heads;
            rp_norm_rstd<DT, PREFETCH, rp_head_lanes<HALF, V>()>(a, valid, lo, hi, f);
        }
#pragma unroll
        for (int j = 0; j < PREFETCH; j++) {
            const int h = threadIdx.y + j * HY;
            rp_norm_item norm = {}; /* w NULL: not normalised */
            if (NORM)
                norm = rp_norm_of(a, place_head(a, h).kind, (int)first, (int)(first + half_bytes / (long long)ELEM),
                                  f[j], staged ? sw : NULL);
            if (token_ok && h < a.heads)
                finish_placed_item<DT, STYLE, FP8>(a, place_head(a, h), lo[j], hi[j], t, to_pool, block, row, first,
                                              half_bytes, gr.rotated, cs, GB, k_inv, v_inv, norm);
        }
        for (int h = threadIdx.y + PREFETCH * HY; NORM ? h - (int)threadIdx.y < a.heads : token_ok && h < a.heads;
             h += HY) {
            const bool valid = token_ok && h < a.heads;
            const head_place pl = place_head(a, h);
            const char *p = source_address<ELEM>(a, pl, t, first);
            uint4 l = make_uint4(0, 0, 0, 0), u = l;
            if (valid) {
                l = *(const uint4 *)p;
                u = *(const uint4 *)(p + half_bytes);
            }
            rp_norm_item norm = {}; /* w NULL: not normalised */
            if (NORM) {
                rp_norm_factor fh;
                rp_norm_rstd<DT, 1, rp_head_lanes<HALF, V>()>(a, &valid, &l, &u, &fh);
                norm = rp_norm_of(a, pl.kind, (int)first, (int)(first + half_bytes / (long long)ELEM), fh,
                                  staged ? sw : NULL);
            }
            if (valid)
                finish_placed_item<DT, STYLE, FP8>(a, pl, l, u, t, to_pool, block, row, first, half_bytes, gr.rotated, cs,
                                              GB, k_inv, v_inv, norm);
        }
        if (threadIdx.x == 0 && threadIdx.y == 0 && blockIdx.y == 0 && slot >= a.pool_size)
            rp_record_bad_slot(a.status, a.host_status, t, slot, a.pool_size);
        if (rotates && tile + gridDim.x < num_tiles)
            __syncthreads(); /* the next tile rewrites the table */
    }
}

template <rp_dtype DT, int STYLE, int HALF, int FREQ_CAP, bool FP8, bool NORM>
rp_kernel_fn<FREQ_CAP> rp_prefill_kernel(void)
{
    return rope_pool_prefill<DT, STYLE, HALF, FREQ_CAP, FP8, NORM, RP_PREFILL_PREFETCH>;
}

#define RP_INSTANTIATE_PREFILL(DT, STYLE, HALF, FREQ_CAP, FP8)                                                 \
    template rp_kernel_fn<FREQ_CAP> rp_prefill_kernel<DT, STYLE, HALF, FREQ_CAP, FP8, false>(void);
#define RP_INSTANTIATE_PREFILL_NORM(DT, STYLE, HALF, FREQ_CAP, FP8)                                            \
    template rp_kernel_fn<FREQ_CAP> rp_prefill_kernel<DT, STYLE, HALF, FREQ_CAP, FP8, true>(void);
RP_VECTOR_VARIANTS(RP_INSTANTIATE_PREFILL)
RP_NORM_VARIANTS(RP_INSTANTIATE_PREFILL_NORM)
