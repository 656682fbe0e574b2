/*
 * strided.cu — the kernel for every layout the vectorized kernels do not take (kernels.cuh): one
 * thread per (token, frequency), which computes that angle once and walks all heads.
 */
#include "kernels.cuh"

/* Element i of a pool: the dtype's bits, or the fp8 code of value / scale (value: the float32 the
 * bits were rounded from, or their value). */
template <rp_dtype DT>
__device__ __forceinline__ void put_pool(void *pool, long long i, typename rp_elem<DT>::storage bits, float value,
                                         int fp8, float inv_scale)
{
    if (fp8)
        ((unsigned char *)pool)[i] = rp_fp8(value * inv_scale, fp8 == RP_POOL_E5M2);
    else
        ((typename rp_elem<DT>::storage *)pool)[i] = bits;
}

/* Rotates the pair (e0, e1) of every head of one token (or, when !rotated, copies it bit for bit):
 * in[t] -> out[t] and, when pool is not NULL, the pool row at element offset prow (its block and
 * row; heads ps[1] apart, dims ps[2]). Each pair is read before it is written, so in == out (in
 * place) is safe. Offsets e0, e1 are in elements along the head. */
template <rp_dtype DT>
__device__ __forceinline__ void rotate_heads(const void *in, const long long *is, void *out, const long long *os,
                                             void *pool, const long long *ps, long long prow, int fp8,
                                             float inv_scale, int heads, int e0, int e1, long long t,
                                             bool rotated, float c, float s)
{
    typedef rp_elem<DT> E;
    typedef typename E::storage S;
    for (int h = 0; h < heads; h++) {
        const long long xi = t * is[0] + h * is[1];
        S sx = ((const S *)in)[xi + e0 * is[2]], sy = ((const S *)in)[xi + e1 * is[2]];
        float ox = E::to_float(sx), oy = E::to_float(sy);
        if (rotated) {
            rp_rotate(ox, oy, c, s, &ox, &oy);
            sx = E::from_float(ox);
            sy = E::from_float(oy);
        }
        const long long oi = t * os[0] + h * os[1];
        ((S *)out)[oi + e0 * os[2]] = sx;
        ((S *)out)[oi + e1 * os[2]] = sy;
        if (pool) {
            const long long pi = prow + h * ps[1];
            put_pool<DT>(pool, pi + e0 * ps[2], sx, ox, fp8, inv_scale);
            put_pool<DT>(pool, pi + e1 * ps[2], sy, oy, fp8, inv_scale);
        }
    }
}

/* Copies elements e0 and e1 (when < n) of every head, bit for bit or to fp8: in[t] -> the pool row
 * at element offset prow. */
template <rp_dtype DT>
__device__ __forceinline__ void copy_heads(const void *in, const long long *is, void *pool, const long long *ps,
                                           long long prow, int fp8, float inv_scale, int heads, long long t,
                                           int e0, int e1, int n)
{
    typedef rp_elem<DT> E;
    typedef typename E::storage S;
    for (int h = 0; h < heads; h++) {
        const long long si = t * is[0] + h * is[1], di = prow + h * ps[1];
        const S x = ((const S *)in)[si + e0 * is[2]];
        put_pool<DT>(pool, di + e0 * ps[2], x, E::to_float(x), fp8, inv_scale);
        if (e1 < n) {
            const S y = ((const S *)in)[si + e1 * is[2]];
            put_pool<DT>(pool, di + e1 * ps[2], y, E::to_float(y), fp8, inv_scale);
        }
    }
}

/* Work item w = (token t, i in [0, max(D/2, ceil(Dv/2)))). For q and k (i < D/2), i < R/2 is pair
 * i of the style, and i >= R/2 the pass-through dims R + 2 (i - R/2) and the one after; k_rot, when
 * only scattering, is copied as elements i and i + D/2, and v as elements 2i and 2i + 1. */
template <rp_dtype DT, int FREQ_CAP>
__global__ void __launch_bounds__(256) rope_pool_strided(const __grid_constant__ rp_kernel_args<FREQ_CAP> a)
{
    const int width = a.half_dim > (a.v_head_dim + 1) / 2 ? a.half_dim : (a.v_head_dim + 1) / 2;
    const long long n = a.num_tokens * width;
    rp_let_next_kernel_launch();
    rp_wait_for_prior_kernel();
    const float k_inv = a.pool_fp8 ? rp_inv_scale(a.k_scale_ptr, a.k_inv_scale) : 1.0f;
    const float v_inv = a.pool_fp8 ? rp_inv_scale(a.v_scale_ptr, a.v_inv_scale) : 1.0f;
    for (long long w = blockIdx.x * (long long)blockDim.x + threadIdx.x; w < n;
         w += (long long)gridDim.x * blockDim.x) {
        const long long t = w / width;
        const int i = (int)(w % width);
        long long slot = -1;
        if (a.parts != RP_PARTS_ROTATE)
            slot = rp_load_index_dev(a.slots, a.slot64, a.slot_stride, t);
        const bool to_pool = slot >= 0 && slot < a.pool_size;
        long long row = 0;
        const long long block = to_pool ? rp_slot_block(a, slot, &row) : 0;
        const long long k_row = block * a.stride[T_K_POOL][0] + row * a.pool_row_stride[0];
        const long long v_row = block * a.stride[T_V_POOL][0] + row * a.pool_row_stride[1];
        if (a.parts != RP_PARTS_SCATTER && i < a.half_dim) {
            const bool rotated = i < a.rot_half, gptj = a.style == RP_ROPE_GPTJ;
            const int e0 = !rotated ? a.rotary_dim + 2 * (i - a.rot_half) : gptj ? 2 * i : i;
            const int e1 = !rotated || gptj ? e0 + 1 : i + a.rot_half;
            float s = 0.0f, c = 1.0f;
            if (rotated) {
                const long long pos = rp_load_index_dev(rp_position_row(a, i), a.pos64, a.pos_stride, t);
                rp_angle_sincos((double)pos * a.inv_freq[i], a.scale, &s, &c);
            }
            rotate_heads<DT>(a.q, a.stride[T_Q], a.q_rot, a.stride[T_Q_ROT], NULL, NULL, 0, 0, 1.0f,
                             a.num_qo_heads, e0, e1, t, rotated, c, s);
            rotate_heads<DT>(a.k, a.stride[T_K], a.k_rot, a.stride[T_K_ROT],
                             a.parts == RP_PARTS_ALL && to_pool ? a.k_pool : NULL, a.stride[T_K_POOL], k_row,
                             a.pool_fp8, k_inv, a.num_kv_heads, e0, e1, t, rotated, c, s);
        }
        if (to_pool) {
            if (a.parts == RP_PARTS_SCATTER && i < a.half_dim)
                copy_heads<DT>(a.k_rot, a.stride[T_K_ROT], a.k_pool, a.stride[T_K_POOL], k_row, a.pool_fp8, k_inv,
                               a.num_kv_heads, t, i, i + a.half_dim, 2 * a.half_dim);
            if (2 * i < a.v_head_dim)
                copy_heads<DT>(a.v, a.stride[T_V], a.v_pool, a.stride[T_V_POOL], v_row, a.pool_fp8, v_inv,
                               a.num_kv_heads, t, 2 * i, 2 * i + 1, a.v_head_dim);
        }
        if (i == 0 && slot >= a.pool_size)
            rp_record_bad_slot(a.status, a.host_status, t, slot, a.pool_size);
    }
}

template <rp_dtype DT, int FREQ_CAP> rp_kernel_fn<FREQ_CAP> rp_strided_kernel(void)
{
    return rope_pool_strided<DT, FREQ_CAP>;
}

#define RP_INSTANTIATE_STRIDED(DT, FREQ_CAP)                                                                   \
    template rp_kernel_fn<FREQ_CAP> rp_strided_kernel<DT, FREQ_CAP>(void);
RP_STRIDED_VARIANTS(RP_INSTANTIATE_STRIDED)
