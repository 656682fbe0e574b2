/*
 * strided.cu — the kernel for every layout the vectorized kernels do not take (kernels.cuh): one
 * thread per (token, frequency), which computes that angle once and walks all heads.
 */
#include "kernels.cuh"

/* Rotates the pair (e0, e1) of every head of one token (or, when !rotated, copies it bit for bit):
 * in[t] -> out[t] and, when pool is not NULL, pool[slot]. Each pair is read before it is written,
 * so in == out (in place) is safe. Offsets e0, e1 are in elements along the head. */
template <rp_dtype DT>
__device__ __forceinline__ void rotate_heads(const void *in, const long long *is, void *out,
                                             const long long *os, void *pool, const long long *ps,
                                             int heads, int e0, int e1, long long t, long long slot,
                                             bool rotated, float c, float s)
{
    typedef rp_elem<DT> E;
    typedef typename E::storage S;
    for (int h = 0; h < heads; h++) {
        const long long xi = t * is[0] + h * is[1];
        S sx = ((const S *)in)[xi + e0 * is[2]], sy = ((const S *)in)[xi + e1 * is[2]];
        if (rotated) {
            float ox, oy;
            rp_rotate(E::to_float(sx), E::to_float(sy), c, s, &ox, &oy);
            sx = E::from_float(ox);
            sy = E::from_float(oy);
        }
        const long long oi = t * os[0] + h * os[1];
        ((S *)out)[oi + e0 * os[2]] = sx;
        ((S *)out)[oi + e1 * os[2]] = sy;
        if (pool) {
            const long long pi = slot * ps[0] + h * ps[1];
            ((S *)pool)[pi + e0 * ps[2]] = sx;
            ((S *)pool)[pi + e1 * ps[2]] = sy;
        }
    }
}

/* Copies elements i and i + D/2 of every head, bit for bit: in[t] -> out[slot]. */
template <rp_dtype DT>
__device__ __forceinline__ void copy_heads(const void *in, const long long *is, void *out,
                                           const long long *os, int heads, int half_dim, long long t,
                                           long long slot, int i)
{
    typedef typename rp_elem<DT>::storage S;
    for (int h = 0; h < heads; h++) {
        const long long si = t * is[0] + h * is[1] + i * is[2], di = slot * os[0] + h * os[1] + i * os[2];
        ((S *)out)[di] = ((const S *)in)[si];
        ((S *)out)[di + half_dim * os[2]] = ((const S *)in)[si + half_dim * is[2]];
    }
}

/* Work item w = (token t, i in [0, D/2)). For q and k, i < R/2 is pair i of the style, and i >= R/2
 * the pass-through dims R + 2 (i - R/2) and the one after; v (and k_rot when only scattering) is
 * copied as elements i and i + D/2. */
template <rp_dtype DT, int FREQ_CAP>
__global__ void __launch_bounds__(256) rope_pool_strided(const __grid_constant__ rp_kernel_args<FREQ_CAP> a)
{
    const long long n = a.num_tokens * a.half_dim;
    rp_let_next_kernel_launch();
    rp_wait_for_prior_kernel();
    for (long long w = blockIdx.x * (long long)blockDim.x + threadIdx.x; w < n;
         w += (long long)gridDim.x * blockDim.x) {
        const long long t = w / a.half_dim;
        const int i = (int)(w % a.half_dim);
        long long slot = -1;
        if (a.parts != RP_PARTS_ROTATE)
            slot = rp_load_index_dev(a.slots, a.slot64, a.slot_stride, t);
        const bool to_pool = slot >= 0 && slot < a.pool_size;
        if (a.parts != RP_PARTS_SCATTER) {
            const bool rotated = i < a.rot_half, gptj = a.style == RP_ROPE_GPTJ;
            const int e0 = !rotated ? a.rotary_dim + 2 * (i - a.rot_half) : gptj ? 2 * i : i;
            const int e1 = !rotated || gptj ? e0 + 1 : i + a.rot_half;
            float s = 0.0f, c = 1.0f;
            if (rotated) {
                const long long pos = rp_load_index_dev(a.positions, a.pos64, a.pos_stride, t);
                rp_angle_sincos((double)pos * a.inv_freq[i], a.scale, &s, &c);
            }
            rotate_heads<DT>(a.q, a.stride[T_Q], a.q_rot, a.stride[T_Q_ROT], NULL, NULL,
                             a.num_qo_heads, e0, e1, t, slot, rotated, c, s);
            rotate_heads<DT>(a.k, a.stride[T_K], a.k_rot, a.stride[T_K_ROT],
                             a.parts == RP_PARTS_ALL && to_pool ? a.k_pool : NULL, a.stride[T_K_POOL],
                             a.num_kv_heads, e0, e1, t, slot, rotated, c, s);
        }
        if (to_pool) {
            if (a.parts == RP_PARTS_SCATTER)
                copy_heads<DT>(a.k_rot, a.stride[T_K_ROT], a.k_pool, a.stride[T_K_POOL], a.num_kv_heads,
                               a.half_dim, t, slot, i);
            copy_heads<DT>(a.v, a.stride[T_V], a.v_pool, a.stride[T_V_POOL], a.num_kv_heads, a.half_dim, t,
                           slot, i);
        }
        if (i == 0 && slot >= a.pool_size)
            rp_record_bad_slot(a.status, t, slot, a.pool_size);
    }
}

template <rp_dtype DT, int FREQ_CAP> rp_kernel_fn<FREQ_CAP> rp_strided_kernel(void)
{
    return rope_pool_strided<DT, FREQ_CAP>;
}

#define RP_INSTANTIATE_STRIDED(DT, FREQ_CAP)                                                                   \
    template rp_kernel_fn<FREQ_CAP> rp_strided_kernel<DT, FREQ_CAP>(void);
RP_STRIDED_VARIANTS(RP_INSTANTIATE_STRIDED)
