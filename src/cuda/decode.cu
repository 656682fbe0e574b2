/*
 * decode.cu — the vectorized kernel for calls of one item per thread (kernels.cuh).
 */
#include "items.cuh"
#include "kernels.cuh"

#include <stddef.h>

/* The decode kernel: one item per thread (heads past blockDim.y are looped over after it). HALF: head_dim
 * / 2 when compiled for one head_dim, 0 for any (up to FREQ_CAP). NORM: QK-norm, compiled for
 * RP_NORM_DECODE_SHORT or RP_NORM_DECODE_RESIDENT threads a block (cuda_backend.h), or 0. The
 * resident build (80 registers) holds less: no float32 weights of 16-bit inputs ahead (read where
 * used) and no loop over further heads (its plans give every head a block: grid z), without which
 * its reduction and weights spilled 200 bytes; the short build keeps both, and with them the
 * shortest chain (without, at 108 registers, Qwen3-8B ran 2.57 us at T = 1 against 2.24, and the
 * plain kernel's decode 4% slower from the loop's new shape; an H100, stop 40).
 *
 * Block (x, y, z) = (frequency group, head, token): thread (g, h, y) serves group g of heads h,
 * h + blockDim.y, ... of token tile * blockDim.z + y, so no index needs a division. Grid (x, y) =
 * (token tile, chunk of blockDim.x groups): decode splits a token's groups over several blocks,
 * each computing only its own frequencies, so that more multiprocessors share a token. QK-norm
 * calls keep a head's groups in one block (its reduction) and split the token's heads instead:
 * grid z = chunk of blockDim.y heads, each block building the token's table for its heads.
 *
 * A decode call is a chain of latencies, and most of its time was instructions on parameters
 * (bench/results/cuda-h200-tuning.md: 2.3 us a call at T = 1, against 0.7 us for a plain copy of
 * its bytes). So before waiting for the previous kernel, each thread turns the parameters into
 * its item's addresses and (if it builds the table) its frequency: with programmatic dependent
 * launch that work overlaps the previous kernel, and after the wait a decode call is one chain of loads,
 * float64 sin/cos, one barrier, rotation and stores. */
template <rp_dtype DT, int STYLE, int HALF, int FREQ_CAP, bool FP8, int NORM>
__global__ void __launch_bounds__(NORM ? NORM : rp_block_threads(1))
rope_pool_decode(const __grid_constant__ rp_kernel_args<FREQ_CAP> a)
{
    typedef rp_elem<DT> E;
    constexpr int V = E::ELEMS;
    constexpr bool RESIDENT = NORM == RP_NORM_DECODE_RESIDENT;
    constexpr size_t ELEM = sizeof(typename E::storage);
    /* [tokens][V/2][groups of the block] float4: (cos, sin) of pairs 2c and 2c + 1 of a group,
     * laid out so that a warp's consecutive groups read consecutive 16 bytes. */
    extern __shared__ float4 table[];

    rp_let_next_kernel_launch();
    const int GB = blockDim.x, HY = blockDim.y, Y = blockDim.z;
    /* this thread's first head, and the step to its next (gridDim.z is 1 without QK-norm) */
    const int my_head = (NORM ? (int)blockIdx.z * HY : 0) + (int)threadIdx.y;
    const int head_step = NORM ? HY * (int)gridDim.z : HY;
    const int group = blockIdx.y * GB + threadIdx.x;
    const rp_group gr = group_of<HALF, ELEM>(a, group);
    const long long first = gr.first, half_bytes = gr.hi_bytes;
    const long long T = a.num_tokens, num_tiles = a.num_tiles;
    const bool rotates = a.parts != RP_PARTS_SCATTER, uses_slot = a.parts != RP_PARTS_ROTATE;
    float4 *cs = table + threadIdx.z * (GB * V / 2) + threadIdx.x;
    /* Threads y < V of a rotated group build the table: pair y (y + HY, ...) of their group. */
    const bool builds_table = rotates && (int)threadIdx.y < V && gr.rotated;
    const double freq = builds_table ? a.inv_freq[pair_of<STYLE, HALF, V>(a, group, threadIdx.y)] : 0.0;
    /* This thread's item (junk, and unused, when my_head >= heads), before the wait. */
    const rp_item item = make_item<ELEM, FP8>(a, my_head, first);
    const rp_item_rows rows = item_rows<ELEM, FP8>(a, item.kind);
    unsigned long long ready = (unsigned long long)__double_as_longlong(freq);
    ready ^= (unsigned long long)item.src ^ (unsigned long long)item.out ^ (unsigned long long)item.pool ^
             (unsigned long long)(rows.src ^ rows.out ^ rows.pool ^ rows.pool_row ^ half_bytes);
    /* Every 64-byte line of the scalar parameters, so that the reads after the wait hit. */
    const unsigned *words = (const unsigned *)&a;
#pragma unroll
    for (int i = 0; i < (int)(offsetof(rp_kernel_args<FREQ_CAP>, inv_freq) / 4); i += 16)
        ready ^= words[i];
    rp_compute_before_here(ready);
    rp_wait_for_prior_kernel();
    /* fp8 pools: the scales may come from memory the previous kernel wrote */
    const float k_inv = FP8 ? rp_inv_scale(a.k_scale_ptr, a.k_inv_scale) : 1.0f;
    const float v_inv = FP8 ? rp_inv_scale(a.v_scale_ptr, a.v_inv_scale) : 1.0f;

    for (long long tile = blockIdx.x; tile < num_tiles; tile += gridDim.x) {
        const long long t = tile * Y + threadIdx.z;
        const bool token_ok = t < T;

        /* 0. The position, first: it heads the longest chain. */
        rp_index_words pos = {0, 0};
        if (builds_table && token_ok)
            pos = rp_index_issue(rp_position_row_of<HALF>(a, pair_of<STYLE, HALF, V>(a, group, threadIdx.y)), a.pos64,
                                 a.pos_stride, t); /* mRoPE: the row of this thread's pair; formed at use,
                                                      as a value held across the wait cost spills */

        /* 1. The token's slot and this thread's item. */
        rp_index_words slot_words = {-1, -1};
        if (uses_slot && token_ok)
            slot_words = rp_index_issue(a.slots, a.slot64, a.slot_stride, t);
        const bool has_item = token_ok && my_head < a.heads;
        uint4 lo, hi;
        if (has_item) {
            const char *p = item.src + t * rows.src;
            lo = *(const uint4 *)p;
            hi = *(const uint4 *)(p + half_bytes);
        }
        /* QK-norm: the item's weights, loaded beside it so that their latency is not added after
         * the reduction (they are not staged in shared memory as in the prefill kernel: staging put
         * their load before the barrier of this one chain of latencies, and cost 0.6 us a call at
         * T = 1, bench/results/qwen3-8b-qk-norm.md) */
        rp_weight_bits w_lo, w_hi;
        int w_f32 = 0;
        const void *w = NORM ? rp_norm_weights_of(a, item.kind, &w_f32) : NULL;
        const bool w_ahead = NORM && w && (!RESIDENT || rp_weights_are_16_bytes<DT>(w_f32));
        if (w_ahead && has_item) {
            w_lo = rp_load_weight_bits<DT>(w, w_f32, (int)first);
            w_hi = rp_load_weight_bits<DT>(w, w_f32, (int)(first + half_bytes / (long long)ELEM));
        }

        /* 2. The (token, frequency) table of this block, while the loads are in flight, once for
         * all heads. */
        if (rotates) {
            if (builds_table && token_ok)
                for (int j = threadIdx.y; j < V; j += HY) { /* more than once only when HY < V */
                    float s, c;
                    const bool own = j == (int)threadIdx.y;
                    const long long pj = pair_of<STYLE, HALF, V>(a, group, j);
                    const double f = own ? freq : a.inv_freq[pj];
                    /* another pair's row may differ (mRoPE): its position is read again */
                    const long long position = own || !rp_rows_differ<HALF>(a) ? rp_index_value(pos, a.pos64)
                                                   : rp_load_index_dev(rp_position_row(a, pj), a.pos64, a.pos_stride, t);
                    rp_angle_sincos((double)position * f, a.scale, &s, &c);
                    float *entry = (float *)&cs[(j / 2) * GB] + (j % 2) * 2;
                    entry[0] = c;
                    entry[1] = s;
                }
            __syncthreads();
        }

        /* 3. Rotate and store: this thread's item, then heads past blockDim.y. */
        const long long slot = uses_slot ? rp_index_value(slot_words, a.slot64) : -1;
        const bool to_pool = slot >= 0 && slot < a.pool_size;
        long long row = 0;
        const long long block = to_pool ? rp_slot_block(a, slot, &row) : 0;
        /* QK-norm: every lane joins its head's reduction, here and in the loop below, whose trip
         * count is then the block's. Heads past blockDim.y read their weights from memory. */
        rp_norm_item norm = {}; /* w NULL: not normalised */
        if (NORM) {
            rp_norm_factor f;
            rp_norm_rstd<DT, 1, rp_head_lanes<HALF, V>()>(a, &has_item, &lo, &hi, &f);
            norm = rp_norm_of(a, item.kind, (int)first, (int)(first + half_bytes / (long long)ELEM), f, NULL);
            /* the short build's pointers are constant: where they were not, its weights' loads
             * moved to their use, after the reduction (Qwen3-8B 2.58 us at T = 1 against 2.23) */
            norm.w_lo = RESIDENT && !w_ahead ? NULL : &w_lo;
            norm.w_hi = RESIDENT && !w_ahead ? NULL : &w_hi;
        }
        if (has_item)
            finish_item<DT, STYLE, FP8>(a, item, rows, lo, hi, t, to_pool, block, row, half_bytes, gr.rotated, cs, GB,
                                   item.kind == RP_ITEM_V ? v_inv : k_inv, norm);
        for (int h = my_head + head_step;
             NORM ? !RESIDENT && h - (int)threadIdx.y < a.heads : token_ok && h < a.heads; h += head_step) {
            const bool valid = token_ok && h < a.heads;
            const rp_item it = make_item<ELEM, FP8>(a, h, first);
            const rp_item_rows r = item_rows<ELEM, FP8>(a, it.kind);
            const char *p = it.src + t * r.src;
            uint4 l = make_uint4(0, 0, 0, 0), u = l;
            if (valid) {
                l = *(const uint4 *)p;
                u = *(const uint4 *)(p + half_bytes);
            }
            if (NORM) {
                rp_norm_factor f;
                rp_norm_rstd<DT, 1, rp_head_lanes<HALF, V>()>(a, &valid, &l, &u, &f);
                norm = rp_norm_of(a, it.kind, (int)first, (int)(first + half_bytes / (long long)ELEM), f, NULL);
            }
            if (valid)
                finish_item<DT, STYLE, FP8>(a, it, r, l, u, t, to_pool, block, row, half_bytes, gr.rotated, cs, GB,
                                       it.kind == RP_ITEM_V ? v_inv : k_inv, norm);
        }
        if (threadIdx.x == 0 && threadIdx.y == 0 && blockIdx.y == 0 && blockIdx.z == 0 && slot >= a.pool_size)
            rp_record_bad_slot(a.status, a.host_status, t, slot, a.pool_size);
        if (rotates && tile + gridDim.x < num_tiles)
            __syncthreads(); /* the next tile rewrites the table */
    }
}

template <rp_dtype DT, int STYLE, int HALF, int FREQ_CAP, bool FP8, int NORM>
rp_kernel_fn<FREQ_CAP> rp_decode_kernel(void)
{
    return rope_pool_decode<DT, STYLE, HALF, FREQ_CAP, FP8, NORM>;
}

#define RP_INSTANTIATE_DECODE(DT, STYLE, HALF, FREQ_CAP, FP8)                                                  \
    template rp_kernel_fn<FREQ_CAP> rp_decode_kernel<DT, STYLE, HALF, FREQ_CAP, FP8, 0>(void);
#define RP_INSTANTIATE_DECODE_NORM(DT, STYLE, HALF, FREQ_CAP, FP8)                                             \
    template rp_kernel_fn<FREQ_CAP> rp_decode_kernel<DT, STYLE, HALF, FREQ_CAP, FP8, RP_NORM_DECODE_SHORT>(void);    \
    template rp_kernel_fn<FREQ_CAP> rp_decode_kernel<DT, STYLE, HALF, FREQ_CAP, FP8, RP_NORM_DECODE_RESIDENT>(void);
RP_VECTOR_VARIANTS(RP_INSTANTIATE_DECODE)
RP_NORM_VARIANTS(RP_INSTANTIATE_DECODE_NORM)
