/*
 * test_pool_errors.c — the checks on how pools are laid out and stored (kv_layout, fp8 formats
 * and scales, v_head_dim): each names the argument and the values, returns its status code, and
 * leaves every output byte as it was.
 */
#include "test_util.h"

static test_rng rng = {1717};
static float scale_cell; /* what a mutator's k_scale_ptr / v_scale_ptr points to */

/* The fixture (expect_call_error): 6 tokens, Hq 8, Hk 2, D 64, a pool of 16 slots, as 4 blocks
 * of 4 rows when a mutator makes it paged. */
#define EXPECT(mutate, status, msg) expect_call_error(&rng, #mutate, mutate, status, msg)

/* Both pools as 4-D views of the fixture's [16, 2, 64] buffers: NHD [4, 4, 2, 64] or HND
 * [4, 2, 4, 64] (HND's rows 4 apart: the same memory, another order). */
static rp_tensor paged_view(void *data, rp_dtype dt, int32_t layout)
{
    rp_tensor t = {0};
    t.data = data;
    t.dtype = dt;
    t.ndim = 4;
    const int64_t nhd[4] = {4, 4, 2, 64}, hnd[4] = {4, 2, 4, 64};
    const int64_t nhd_s[4] = {512, 128, 64, 1}, hnd_s[4] = {512, 256, 64, 1};
    for (int d = 0; d < 4; d++) {
        t.shape[d] = layout == RP_KV_NHD ? nhd[d] : hnd[d];
        t.strides[d] = layout == RP_KV_NHD ? nhd_s[d] : hnd_s[d];
    }
    return t;
}

static void make_paged(fixture *f, int32_t layout)
{
    f->args.kv_layout = layout;
    f->args.k_pool = paged_view(f->k_pool, f->dtype, layout);
    f->args.v_pool = paged_view(f->v_pool, f->dtype, layout);
}

static void layout_unknown(fixture *f) { f->args.kv_layout = 3; }
static void layout_negative(fixture *f) { f->args.kv_layout = -1; }
static void paged_with_3d_pools(fixture *f) { f->args.kv_layout = RP_KV_NHD; }
static void flat_with_4d_pools(fixture *f)
{
    make_paged(f, RP_KV_NHD);
    f->args.kv_layout = RP_KV_FLAT;
}
static void nhd_passed_as_hnd(fixture *f)
{
    make_paged(f, RP_KV_NHD);
    f->args.kv_layout = RP_KV_HND;
}
static void hnd_passed_as_nhd(fixture *f)
{
    make_paged(f, RP_KV_HND);
    f->args.kv_layout = RP_KV_NHD;
}
static void paged_head_dim_wrong(fixture *f)
{
    make_paged(f, RP_KV_NHD);
    f->args.k_pool.shape[3] = f->args.v_pool.shape[3] = 32;
}
static void paged_pool_shapes_differ(fixture *f)
{
    make_paged(f, RP_KV_NHD);
    f->args.v_pool.shape[0] = 3;
}
static void paged_block_sizes_differ(fixture *f)
{
    make_paged(f, RP_KV_HND);
    f->args.v_pool.shape[2] = 2;
}
static void paged_slot_past_capacity(fixture *f)
{
    make_paged(f, RP_KV_NHD);
    test_store(f->slots, RP_I32, 4, 16); /* 4 blocks x 4 rows: 0..15 */
}
static void paged_duplicate_slot(fixture *f)
{
    make_paged(f, RP_KV_HND);
    test_store(f->slots, RP_I32, 5, 3);
}
/* k and v in one NHD block interleaved the wrong way: v_pool's rows are k_pool's rows. */
static void paged_pools_overlap(fixture *f)
{
    make_paged(f, RP_KV_NHD);
    f->args.v_pool.data = (char *)f->k_pool + 128 * sizeof(float);
    f->args.v_pool.shape[0] = 3;
    f->args.k_pool.shape[0] = 3;
}

/* fp8: the pools as uint8 or typed fp8 views of the fixture's float buffers. */
static void pools_as(fixture *f, rp_dtype k, rp_dtype v)
{
    f->args.k_pool.dtype = k;
    f->args.v_pool.dtype = v;
}
static void fp8_u8_without_pool_dtype(fixture *f) { pools_as(f, RP_U8, RP_U8); }
static void fp8_formats_differ(fixture *f) { pools_as(f, RP_F8_E4M3, RP_F8_E5M2); }
static void fp8_u8_and_typed(fixture *f)
{
    pools_as(f, RP_U8, RP_F8_E4M3);
    f->args.pool_dtype = RP_F8_E4M3;
}
static void fp8_pool_dtype_unknown(fixture *f)
{
    pools_as(f, RP_U8, RP_U8);
    f->args.pool_dtype = RP_I8;
}
static void fp8_pool_dtype_uint8(fixture *f) /* uint8 is the storage, not a format to store in */
{
    pools_as(f, RP_U8, RP_U8);
    f->args.pool_dtype = RP_U8;
}
static void fp8_pool_dtype_on_float_pools(fixture *f) { f->args.pool_dtype = RP_F8_E4M3; }
static void fp8_pool_dtype_differs_from_typed(fixture *f)
{
    pools_as(f, RP_F8_E5M2, RP_F8_E5M2);
    f->args.pool_dtype = RP_F8_E4M3;
}
static void fp8_pool_dtype_equal_is_not_enough(fixture *f) /* bf16 pools for f32 inputs */
{
    pools_as(f, RP_BF16, RP_BF16);
    f->args.pool_dtype = RP_BF16;
}
static void int8_pools(fixture *f) { pools_as(f, RP_I8, RP_I8); }
static void scale_on_float_pools(fixture *f) { f->args.k_scale = 0.5; }
static void scale_tiny_on_float_pools(fixture *f) { f->args.v_scale = 1e-300; }
static void scale_ptr_on_float_pools(fixture *f)
{
    scale_cell = 1.0f;
    f->args.v_scale_ptr = &scale_cell;
}
static void fp8_typed(fixture *f) { pools_as(f, RP_F8_E4M3, RP_F8_E4M3); }
static void k_scale_negative(fixture *f) { fp8_typed(f); f->args.k_scale = -1.0; }
static void k_scale_nan(fixture *f) { fp8_typed(f); f->args.k_scale = NAN; }
static void v_scale_inf(fixture *f) { fp8_typed(f); f->args.v_scale = INFINITY; }
static void k_scale_tiny(fixture *f) { fp8_typed(f); f->args.k_scale = 1e-39; } /* 1 / scale: inf */
static void v_scale_huge(fixture *f) { fp8_typed(f); f->args.v_scale = 1e38; } /* 1 / scale: subnormal */
static void scale_ptr_tiny(fixture *f)
{
    fp8_typed(f);
    scale_cell = 1e-45f;
    f->args.k_scale_ptr = &scale_cell;
}
static void scale_and_ptr(fixture *f)
{
    fp8_typed(f);
    scale_cell = 2.0f;
    f->args.k_scale = 0.5;
    f->args.k_scale_ptr = &scale_cell;
}
static void scale_ptr_zero(fixture *f)
{
    fp8_typed(f);
    scale_cell = 0.0f;
    f->args.v_scale_ptr = &scale_cell;
}
static void scale_ptr_nan(fixture *f)
{
    fp8_typed(f);
    scale_cell = NAN;
    f->args.k_scale_ptr = &scale_cell;
}

/* v_head_dim: v and v_pool [., Hk, 32] views of the fixture's buffers. */
static void narrow_v(fixture *f, int64_t dv)
{
    f->args.v = rp_tensor_3d(f->v, f->dtype, f->T, f->Hk, dv);
    f->args.v_pool = rp_tensor_3d(f->v_pool, f->dtype, f->P, f->Hk, dv);
}
static void v_narrow_without_v_head_dim(fixture *f) { narrow_v(f, 32); }
static void v_head_dim_negative(fixture *f) { f->args.v_head_dim = -4; }
static void v_head_dim_not_v(fixture *f)
{
    narrow_v(f, 32);
    f->args.v_head_dim = 48;
}
static void v_head_dim_not_v_pool(fixture *f)
{
    narrow_v(f, 32);
    f->args.v_head_dim = 32;
    f->args.v_pool.shape[2] = 64;
}
static void v_head_dim_pool_rows_differ(fixture *f)
{
    narrow_v(f, 32);
    f->args.v_head_dim = 32;
    f->args.v_pool.shape[0] = 8;
}

static void test_paged_layout_errors(void)
{
    const rp_status bad = RP_ERR_INVALID_ARGUMENT;
    EXPECT(layout_unknown, bad, "kv_layout 3 is unknown: use RP_KV_FLAT (0), RP_KV_NHD (1) or RP_KV_HND (2)");
    EXPECT(layout_negative, bad, "kv_layout -1 is unknown*");
    EXPECT(paged_with_3d_pools, bad,
           "kv_layout NHD expects 4-D pools [num_blocks, block_size, num_kv_heads, head_dim], got k_pool "
           "(16, 2, 64) and v_pool (16, 2, 64)");
    EXPECT(flat_with_4d_pools, bad, "rope_pool_fused expects pool tensors to be 3-D");
    EXPECT(nhd_passed_as_hnd, bad,
           "k_pool has incompatible shape (4, 4, 2, 64) for kv_layout HND [num_blocks, num_kv_heads, "
           "block_size, head_dim]: num_kv_heads 2 and head_dim 64 must be dimensions 1 and 3");
    EXPECT(hnd_passed_as_nhd, bad, "k_pool has incompatible shape (4, 2, 4, 64) for kv_layout NHD*");
    EXPECT(paged_head_dim_wrong, bad, "k_pool has incompatible shape (4, 4, 2, 32)*");
    EXPECT(paged_pool_shapes_differ, bad,
           "v_pool shape must match k_pool shape, got (3, 4, 2, 64) vs (4, 4, 2, 64)");
    EXPECT(paged_block_sizes_differ, bad,
           "v_pool shape must match k_pool shape, got (4, 2, 2, 64) vs (4, 2, 4, 64)");
    EXPECT(paged_slot_past_capacity, RP_ERR_SLOT_OUT_OF_RANGE,
           "slot 16 of token 4 is out of range for a paged pool of 4 blocks x block_size 4 = 16 slots "
           "(valid: 0 <= slot < 16; negative skips the write)");
    EXPECT(paged_duplicate_slot, RP_ERR_DUPLICATE_SLOT,
           "slot 3 is used by tokens 1 and 5: each slot may be written once per call");
    EXPECT(paged_pools_overlap, RP_ERR_OVERLAP, "v_pool overlaps k_pool: outputs must not share memory");
}

static void test_fp8_format_and_scale_errors(void)
{
    const rp_status bad = RP_ERR_INVALID_ARGUMENT;
    EXPECT(fp8_u8_without_pool_dtype, bad,
           "k_pool and v_pool are uint8: set pool_dtype to RP_F8_E4M3 (14) or RP_F8_E5M2 (15) to name "
           "their fp8 format");
    EXPECT(fp8_formats_differ, bad, "k_pool and v_pool must have one format, got float8_e4m3fn vs float8_e5m2");
    EXPECT(fp8_u8_and_typed, bad, "k_pool and v_pool must have one format, got uint8 vs float8_e4m3fn");
    EXPECT(fp8_pool_dtype_unknown, bad,
           "pool_dtype int8 (7) is not a pool format: use RP_F8_E4M3 (14) or RP_F8_E5M2 (15) for uint8 "
           "pools, or 0");
    EXPECT(fp8_pool_dtype_uint8, bad,
           "pool_dtype uint8 (8) is not a pool format: use RP_F8_E4M3 (14) or RP_F8_E5M2 (15) for uint8 "
           "pools, or 0");
    EXPECT(fp8_pool_dtype_on_float_pools, bad,
           "pool_dtype float8_e4m3fn does not match the pools' dtype float32: pool_dtype names the format "
           "of uint8 pools only");
    EXPECT(fp8_pool_dtype_differs_from_typed, bad,
           "pool_dtype float8_e4m3fn does not match the pools' dtype float8_e5m2*");
    EXPECT(fp8_pool_dtype_equal_is_not_enough, bad, "pool dtypes must match q/k/v dtype");
    EXPECT(int8_pools, bad, "pool dtypes must match q/k/v dtype");
    EXPECT(scale_on_float_pools, bad,
           "k_scale 0.5 needs fp8 pools: k_pool and v_pool are float32, which take no scale");
    /* any scale but 1 is refused for what it is on float pools, not for a range only fp8 pools have */
    EXPECT(scale_tiny_on_float_pools, bad,
           "v_scale 1e-300 needs fp8 pools: k_pool and v_pool are float32, which take no scale");
    EXPECT(scale_ptr_on_float_pools, bad,
           "v_scale_ptr is set but k_pool and v_pool are float32, which take no scale: pass NULL");
    EXPECT(k_scale_negative, bad, "k_scale must be a positive finite number (0 = 1.0), got -1");
    EXPECT(k_scale_nan, bad, "k_scale must be a positive finite number (0 = 1.0), got nan");
    EXPECT(v_scale_inf, bad, "v_scale must be a positive finite number (0 = 1.0), got inf");
    EXPECT(k_scale_tiny, bad, "k_scale 1e-39 is outside [2.93873605e-39, 8.50705917e+37]: the kernels multiply by "
           "1 / k_scale in float32, which must be a normal float32");
    EXPECT(v_scale_huge, bad, "v_scale 1e+38 is outside [2.93873605e-39, 8.50705917e+37]: the kernels multiply by "
           "1 / v_scale in float32, which must be a normal float32");
    EXPECT(scale_ptr_tiny, bad, "k_scale_ptr points to 1.40129846e-45, outside [2.93873605e-39, 8.50705917e+37]: the "
           "kernels multiply by 1 / k_scale in float32, which must be a normal float32");
    EXPECT(scale_and_ptr, bad, "k_scale 0.5 and k_scale_ptr are both given: pass one (k_scale = 0 with a pointer)");
    EXPECT(scale_ptr_zero, bad, "v_scale_ptr points to 0: the scale must be a positive finite number");
    EXPECT(scale_ptr_nan, bad, "k_scale_ptr points to nan: the scale must be a positive finite number");
}

static void test_v_head_dim_errors(void)
{
    const rp_status bad = RP_ERR_INVALID_ARGUMENT;
    EXPECT(v_narrow_without_v_head_dim, bad, "v shape must match k shape, got (6, 2, 32) vs (6, 2, 64)");
    EXPECT(v_head_dim_negative, bad, "v_head_dim must be positive (0 = head_dim), got -4");
    EXPECT(v_head_dim_not_v, bad,
           "v shape must be [num_tokens, num_kv_heads, v_head_dim] = (6, 2, 48), got (6, 2, 32)");
    EXPECT(v_head_dim_not_v_pool, bad,
           "v_pool shape must be k_pool's with v_head_dim 32 as dimension 2, got (16, 2, 64) vs (16, 2, 64)");
    EXPECT(v_head_dim_pool_rows_differ, bad,
           "v_pool shape must be k_pool's with v_head_dim 32 as dimension 2, got (8, 2, 32) vs (16, 2, 64)");
}

int main(void)
{
    RUN(test_paged_layout_errors);
    RUN(test_fp8_format_and_scale_errors);
    RUN(test_v_head_dim_errors);
    return test_summary("pool_errors");
}
