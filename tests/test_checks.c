/*
 * test_checks.c — ropepool's own checks after the seed's: each names the argument and the value,
 * returns its status code, and leaves every output byte as it was.
 */
#include "test_util.h"

#include <float.h>
#include <stdint.h>

static test_rng rng = {7};

#define EXPECT(mutate, status, msg) expect_call_error(&rng, #mutate, mutate, status, msg)

static void all_dtype(fixture *f, rp_dtype dt)
{
    rp_tensor *ts[] = {&f->args.q, &f->args.k, &f->args.v, &f->args.k_pool, &f->args.v_pool,
                       &f->args.q_rot, &f->args.k_rot};
    for (int i = 0; i < 7; i++)
        ts[i]->dtype = dt;
}
static void all_f64(fixture *f) { all_dtype(f, RP_F64); }
static void all_unset(fixture *f) { all_dtype(f, RP_DTYPE_UNSET); }
static void positions_float(fixture *f) { f->args.positions.dtype = RP_F32; }
static void slots_uint32(fixture *f) { f->args.slots.dtype = RP_U32; }

static void set_head_dim(fixture *f, int64_t d)
{
    rp_tensor *ts[] = {&f->args.q, &f->args.k, &f->args.v, &f->args.k_pool, &f->args.v_pool,
                       &f->args.q_rot, &f->args.k_rot};
    for (int i = 0; i < 7; i++)
        ts[i]->shape[2] = d;
    f->args.head_dim = d;
}
static void odd_head_dim(fixture *f) { set_head_dim(f, 63); }
static void zero_head_dim(fixture *f) { set_head_dim(f, 0); }
static void zero_qo_heads(fixture *f)
{
    f->args.q.shape[1] = f->args.q_rot.shape[1] = 0;
    f->args.num_qo_heads = 0;
}
static void negative_kv_heads(fixture *f)
{
    rp_tensor *ts[] = {&f->args.k, &f->args.v, &f->args.k_pool, &f->args.v_pool, &f->args.k_rot};
    for (int i = 0; i < 5; i++)
        ts[i]->shape[1] = -2;
    f->args.num_kv_heads = -2;
}
static void base_zero(fixture *f) { f->args.rope_base = 0.0; }
static void base_negative(fixture *f) { f->args.rope_base = -10000.0; }
static void base_nan(fixture *f) { f->args.rope_base = NAN; }
static void base_inf(fixture *f) { f->args.rope_base = INFINITY; }
static void style_unknown(fixture *f) { f->args.style = 9; }
static void style_negative(fixture *f) { f->args.style = -1; }
static void rotary_dim_odd(fixture *f) { f->args.rotary_dim = 33; }
static void rotary_dim_one(fixture *f) { f->args.rotary_dim = 1; }
static void rotary_dim_negative(fixture *f) { f->args.rotary_dim = -2; }
static void rotary_dim_past_head_dim(fixture *f) { f->args.rotary_dim = 66; }
/* Tables of valid frequencies with one bad entry; rotary_dim 16 reads entries 0..7 only. */
static double freq_table[32];
static void set_freq(fixture *f, int64_t rotary_dim, int bad_index, double bad)
{
    for (int j = 0; j < 32; j++)
        freq_table[j] = j == bad_index ? bad : 1.0 / (j + 1);
    f->args.rotary_dim = rotary_dim;
    f->args.inv_freq = freq_table;
}
static void freq_negative(fixture *f) { set_freq(f, 0, 5, -1.0); }
static void freq_nan_last(fixture *f) { set_freq(f, 0, 31, NAN); }
static void freq_inf_first(fixture *f) { set_freq(f, 16, 0, INFINITY); }
static void freq_negative_partial(fixture *f) { set_freq(f, 16, 7, -0.25); }
static void freq_overflows_the_angle(fixture *f) { set_freq(f, 0, 3, 1e290); }
static void scaling_negative(fixture *f) { f->args.attention_scaling = -1.0; }
static void scaling_nan(fixture *f) { f->args.attention_scaling = NAN; }
static void scaling_inf(fixture *f) { f->args.attention_scaling = INFINITY; }
static void scaling_past_float32(fixture *f) { f->args.attention_scaling = 1e39; }
static void scaling_float32_subnormal(fixture *f) { f->args.attention_scaling = 1e-40; }
static void negative_threads(fixture *f) { f->args.num_threads = -1; }
static void unknown_flag(fixture *f) { f->args.flags = 0x10; }
static void reserved_set(fixture *f) { f->args.reserved[5] = 1; }
static void tensor_reserved_set(fixture *f) { f->args.v.reserved = 3; }
static void q_rot_narrow(fixture *f) { f->args.q_rot.shape[2] = 32; }
/* stop 35's audit of the C API */
static void v_bytes_overflow(fixture *f) /* a broadcast v of 2^63 bytes beside an empty pool */
{
    const int64_t Dv = (int64_t)1 << 59;
    f->args.v_head_dim = Dv;
    f->args.v.shape[2] = Dv;
    f->args.v.strides[0] = f->args.v.strides[1] = f->args.v.strides[2] = 0;
    f->args.k_pool.shape[0] = f->args.v_pool.shape[0] = 0;
    f->args.v_pool.shape[2] = Dv;
}
static void rope_base_subnormal(fixture *f) { f->args.rope_base = 4.9406564584124654e-324; }
static void rope_base_overflows_the_angle(fixture *f) { f->args.rope_base = 1e-300; }
static void positions_dtype_99(fixture *f) { f->args.positions.dtype = 99; }
static void data_dtype_minus_1(fixture *f)
{
    f->args.q.dtype = f->args.k.dtype = f->args.v.dtype = f->args.q_rot.dtype = f->args.k_rot.dtype = -1;
    f->args.k_pool.dtype = f->args.v_pool.dtype = -1;
}
static void cpu_tensor_index_7(fixture *f) { f->args.k.device.index = 7; }
static void read_only_q_rotated_in_place(fixture *f)
{
    f->args.q.flags = RP_TENSOR_READ_ONLY;
    f->args.q_rot = f->args.q;
    f->args.q_rot.flags = 0;
}
static void k_rot_f16(fixture *f) { f->args.k_rot.dtype = RP_F16; }
static void pool_negative_size(fixture *f) { f->args.k_pool.shape[0] = f->args.v_pool.shape[0] = -1; }
static void pool_on_gpu(fixture *f) { f->args.k_pool.device.type = RP_DEVICE_CUDA; }
static void slots_on_gpu1(fixture *f) { f->args.slots.device = (rp_device){RP_DEVICE_CUDA, 1}; }
static void unknown_device(fixture *f) { f->args.v_pool.device.type = 13; }
static void v_null(fixture *f) { f->args.v.data = NULL; }
static void q_misaligned(fixture *f) { f->args.q.data = (char *)f->q + 2; }
static void q_stride_overflow(fixture *f) { f->args.q.strides[0] = INT64_MAX / 4; }
static void q_stride_wraps(fixture *f) { f->args.q.strides[0] = -(INT64_MAX / 16); }
static void k_pool_read_only(fixture *f) { f->args.k_pool.flags = RP_TENSOR_READ_ONLY; }
static void q_rot_broadcast(fixture *f) { f->args.q_rot.strides[0] = 0; }
static void k_rot_heads_alias(fixture *f) { f->args.k_rot.strides[1] = 32; }
static void q_rot_is_k(fixture *f) { f->args.q_rot.data = f->k; }
static void q_rot_shifted_q(fixture *f) { f->args.q_rot.data = (float *)f->q + 1; }
static void q_rot_q_other_strides(fixture *f)
{
    f->args.q_rot = f->args.q; /* same memory, heads and tokens transposed: not the in-place call */
    f->args.q_rot.shape[0] = 6;
    f->args.q_rot.strides[0] = 64;
    f->args.q_rot.strides[1] = 6 * 64;
}
static void v_pool_is_k_pool(fixture *f) { f->args.v_pool.data = f->k_pool; }
static void k_pool_over_positions(fixture *f) { f->args.k_pool.data = f->positions; }
static void k_rot_into_v_pool(fixture *f) { f->args.k_rot.data = f->v_pool; }
static void inv_freq_in_q_rot(fixture *f) /* a valid table, but read while q_rot is written */
{
    double *table = (double *)f->q_rot + 8;
    for (int j = 0; j < 32; j++)
        table[j] = pow(10000.0, -j / 32.0);
    f->args.inv_freq = table;
}
static void pool_elements_overflow(fixture *f) /* no memory yet: RP_VALIDATE_ONLY stops before it */
{
    f->args.flags = RP_VALIDATE_ONLY;
    f->args.kv_layout = RP_KV_NHD;
    const int64_t shape[4] = {(int64_t)1 << 40, (int64_t)1 << 40, 2, 64};
    rp_tensor *pools[2] = {&f->args.k_pool, &f->args.v_pool};
    for (int i = 0; i < 2; i++) {
        pools[i]->ndim = 4;
        pools[i]->data = NULL;
        for (int d = 0; d < 4; d++)
            pools[i]->shape[d] = shape[d];
        pools[i]->strides[3] = 1;
        pools[i]->strides[2] = 64;
        pools[i]->strides[1] = 128;
        pools[i]->strides[0] = 0; /* never addressed */
    }
}

static void set_slot(fixture *f, int64_t t, int64_t slot)
{
    test_store(f->slots, f->index_dtype, t, (double)slot);
}
static void slot_at_pool_end(fixture *f) { set_slot(f, 3, 16); }
static void slot_huge_i64(fixture *f)
{
    int64_t *slots = test_alloc(6 * sizeof *slots);
    for (int t = 0; t < 6; t++)
        slots[t] = t;
    slots[5] = (int64_t)1 << 40;
    free(f->slots);
    f->slots = slots;
    f->args.slots = rp_tensor_1d(slots, RP_I64, 6);
}
static void slot_repeated(fixture *f)
{
    set_slot(f, 1, 9);
    set_slot(f, 4, 9);
}
static void repeat_before_range(fixture *f)
{
    set_slot(f, 0, 2);
    set_slot(f, 2, 2);
    set_slot(f, 5, 99);
}
static void range_before_repeat(fixture *f)
{
    set_slot(f, 1, 16);
    set_slot(f, 3, 4);
    set_slot(f, 4, 4);
}

static void test_dtypes_and_scalars_name_the_value(void)
{
    EXPECT(all_f64, RP_ERR_INVALID_ARGUMENT,
           "q/k/v dtype float64 is not supported: use float32, float16 or bfloat16");
    EXPECT(all_unset, RP_ERR_INVALID_ARGUMENT, "q dtype is not set (rp_tensor.dtype is 0)");
    EXPECT(positions_float, RP_ERR_INVALID_ARGUMENT, "positions dtype must be int32 or int64, got float32");
    EXPECT(slots_uint32, RP_ERR_INVALID_ARGUMENT, "slots dtype must be int32 or int64, got uint32");
    EXPECT(odd_head_dim, RP_ERR_INVALID_ARGUMENT, "head_dim must be a positive even number, got 63");
    EXPECT(zero_head_dim, RP_ERR_INVALID_ARGUMENT, "head_dim must be a positive even number, got 0");
    EXPECT(zero_qo_heads, RP_ERR_INVALID_ARGUMENT, "num_qo_heads must be positive, got 0");
    EXPECT(negative_kv_heads, RP_ERR_INVALID_ARGUMENT, "num_kv_heads must be positive, got -2");
    EXPECT(base_zero, RP_ERR_INVALID_ARGUMENT, "rope_base must be a positive finite number, got 0");
    EXPECT(base_negative, RP_ERR_INVALID_ARGUMENT, "rope_base must be a positive finite number, got -10000");
    EXPECT(base_nan, RP_ERR_INVALID_ARGUMENT, "rope_base must be a positive finite number, got nan");
    EXPECT(base_inf, RP_ERR_INVALID_ARGUMENT, "rope_base must be a positive finite number, got inf");
}

static void test_rope_variant_fields_name_the_value(void)
{
    EXPECT(style_unknown, RP_ERR_INVALID_ARGUMENT,
           "style 9 is not a rope style: use RP_ROPE_NEOX (0) or RP_ROPE_GPTJ (1)");
    EXPECT(style_negative, RP_ERR_INVALID_ARGUMENT,
           "style -1 is not a rope style: use RP_ROPE_NEOX (0) or RP_ROPE_GPTJ (1)");
    EXPECT(rotary_dim_odd, RP_ERR_INVALID_ARGUMENT, "rotary_dim must be even, got 33");
    EXPECT(rotary_dim_one, RP_ERR_INVALID_ARGUMENT, "rotary_dim must be >= 2 (0 = head_dim), got 1");
    EXPECT(rotary_dim_negative, RP_ERR_INVALID_ARGUMENT, "rotary_dim must be >= 2 (0 = head_dim), got -2");
    EXPECT(rotary_dim_past_head_dim, RP_ERR_INVALID_ARGUMENT, "rotary_dim 66 is larger than head_dim 64");
    EXPECT(freq_negative, RP_ERR_INVALID_ARGUMENT, "inv_freq[5] must be finite and >= 0, got -1");
    EXPECT(freq_nan_last, RP_ERR_INVALID_ARGUMENT, "inv_freq[31] must be finite and >= 0, got nan");
    EXPECT(freq_inf_first, RP_ERR_INVALID_ARGUMENT, "inv_freq[0] must be finite and >= 0, got inf");
    EXPECT(freq_negative_partial, RP_ERR_INVALID_ARGUMENT, "inv_freq[7] must be finite and >= 0, got -0.25");
    EXPECT(freq_overflows_the_angle, RP_ERR_INVALID_ARGUMENT,
           "inv_freq[3] = 1e+290 is too large: the angle position * inv_freq would overflow float64 for positions "
           "near 2^63 (at most 1.94906e+289)");
    EXPECT(scaling_negative, RP_ERR_INVALID_ARGUMENT,
           "attention_scaling must be positive and finite (0 = 1.0), got -1");
    EXPECT(scaling_nan, RP_ERR_INVALID_ARGUMENT,
           "attention_scaling must be positive and finite (0 = 1.0), got nan");
    EXPECT(scaling_inf, RP_ERR_INVALID_ARGUMENT,
           "attention_scaling must be positive and finite (0 = 1.0), got inf");
    /* s * cos and s * sin are float32 in every kernel: s must be a normal float32 */
    EXPECT(scaling_past_float32, RP_ERR_INVALID_ARGUMENT, "attention_scaling 1e+39 is outside float32's normal "
           "range [1.17549435e-38, 3.40282347e+38], in which the kernels scale cos and sin");
    EXPECT(scaling_float32_subnormal, RP_ERR_INVALID_ARGUMENT, "attention_scaling 1e-40 is outside float32's normal "
           "range [1.17549435e-38, 3.40282347e+38], in which the kernels scale cos and sin");
}

/* rotary_dim R reads inv_freq[0 .. R/2) only: what lies past it is not the call's business. */
static void test_inv_freq_is_read_up_to_rotary_dim_over_2(void)
{
    fixture f;
    fixture_init(&f, &rng, 6, 8, 2, 64, 16, RP_F32, RP_I32, 4096, 0);
    set_freq(&f, 16, 8, NAN);
    char msg[256];
    CHECK(rp_rope_pool_fused(NULL, &f.args, msg, sizeof msg) == RP_OK, "%s", msg);
    fixture_free(&f);
}

/* T = 0 with every variant field set is a no-op that still checks them. */
static void test_zero_tokens_with_a_variant_is_a_checked_no_op(void)
{
    for (int bad = 0; bad < 2; bad++) {
        fixture f;
        fixture_init(&f, &rng, 0, 4, 2, 64, 8, RP_BF16, RP_I64, 100, 0);
        set_freq(&f, 32, bad ? 3 : -1, NAN);
        f.args.style = RP_ROPE_GPTJ;
        f.args.attention_scaling = 1.5;
        snapshot s;
        snapshot_take(&s, &f);
        char msg[256];
        const rp_status st = rp_rope_pool_fused(NULL, &f.args, msg, sizeof msg);
        CHECK(st == (bad ? RP_ERR_INVALID_ARGUMENT : RP_OK), "T = 0%s: %s", bad ? " with a NaN frequency" : "", msg);
        CHECK(snapshot_unchanged(&s, &f), "T = 0 wrote a pool");
        fixture_free(&f);
    }
}

static void test_other_extensions_are_checked(void)
{
    EXPECT(negative_threads, RP_ERR_INVALID_ARGUMENT, "num_threads must be >= 0 (0 = the context's), got -1");
    EXPECT(unknown_flag, RP_ERR_INVALID_ARGUMENT,
           "flags 0x10 has unknown bits (known: RP_CHECK_SLOTS = 0x1, RP_VALIDATE_ONLY = 0x2)");
    EXPECT(reserved_set, RP_ERR_INVALID_ARGUMENT,
           "rp_rope_pool_args reserved fields must be 0 (zero-initialise the struct): reserved[5] is 1");
    EXPECT(tensor_reserved_set, RP_ERR_INVALID_ARGUMENT, "v: rp_tensor reserved bits must be 0 (flags 0x0, reserved 0x3)");
}

static void test_c_api_audit_findings(void)
{
    EXPECT(v_bytes_overflow, RP_ERR_INVALID_ARGUMENT, "v shape (6, 2, 576460752303423488) has 2^63 bytes or more");
    EXPECT(rope_base_subnormal, RP_ERR_INVALID_ARGUMENT, "rope_base 4.94066e-324 is below float64's normal range "
           "(2.22507e-308): its frequencies rope_base^(-2j/rotary_dim) would overflow");
    /* a table of rope_base's may not hold what inv_freq may not (1e-300^(-62/64) = 4.2e290) */
    EXPECT(rope_base_overflows_the_angle, RP_ERR_INVALID_ARGUMENT,
           "rope_base 1e-300 is too small for rotary_dim 64: its largest frequency rope_base^(-62/64) = "
           "4.21697e+290 would overflow the angle position * frequency in float64 for positions near 2^63 "
           "(at most 1.94906e+289, as for inv_freq)");
    EXPECT(positions_dtype_99, RP_ERR_INVALID_ARGUMENT,
           "positions dtype must be int32 or int64, got 99 (not a dtype ropepool knows)");
    EXPECT(data_dtype_minus_1, RP_ERR_INVALID_ARGUMENT,
           "q/k/v dtype -1 (not a dtype ropepool knows) is not supported: use float32, float16 or bfloat16");
    EXPECT(cpu_tensor_index_7, RP_ERR_INVALID_ARGUMENT, "k is on the CPU but has device index 7 (0 for the CPU)");
    EXPECT(read_only_q_rotated_in_place, RP_ERR_INVALID_ARGUMENT, "q is read-only, but q_rot = q writes it in place");
    /* a weight whose range would wrap the address space: an argument error, not an overlap */
    char msg[256];
    fixture f;
    fixture_init(&f, &rng, 2, 4, 2, 16, 8, RP_F32, RP_I32, 100, 0);
    f.args.k_norm_weight = (const void *)((uintptr_t)0 - 16);
    f.args.norm_eps = 1e-6;
    snapshot snap;
    snapshot_take(&snap, &f);
    CHECK(rp_rope_pool_fused(NULL, &f.args, msg, sizeof msg) == RP_ERR_INVALID_ARGUMENT, "%s", msg);
    CHECK(strstr(msg, "k_norm_weight") == msg && strstr(msg, "with 16 elements wraps the address space"), "got %s", msg);
    CHECK(snapshot_unchanged(&snap, &f), "a refused call wrote output memory");
    fixture_free(&f);
}

/* A second C-API review's findings (stop 48). Both calls describe memory they never touch: the
 * checks must stop them before any byte is read or written. */
static void test_second_c_api_review_findings(void)
{
    char msg[256];
    static uint16_t q[2], k[2], v[2], k_pool[2], v_pool[2];
    static int64_t positions[1] = {0}, slots[1] = {0};
    /* T = 2^58 + 1 tokens read from one element each (stride 0), all on slot 0: the duplicate-slot
     * set was sized from T, whose byte count wrapped to a 0-byte block and was written past. */
    const int64_t T = ((int64_t)1 << 58) + 1;
    rp_rope_pool_args a;
    memset(&a, 0, sizeof a);
    a.q = rp_tensor_3d(q, RP_F16, T, 1, 2);
    a.k = rp_tensor_3d(k, RP_F16, T, 1, 2);
    a.v = rp_tensor_3d(v, RP_F16, T, 1, 2);
    a.positions = rp_tensor_1d(positions, RP_I64, T);
    a.slots = rp_tensor_1d(slots, RP_I64, T);
    a.q.strides[0] = a.k.strides[0] = a.v.strides[0] = a.positions.strides[0] = a.slots.strides[0] = 0;
    a.k_pool = rp_tensor_3d(k_pool, RP_F16, 1, 1, 2);
    a.v_pool = rp_tensor_3d(v_pool, RP_F16, 1, 1, 2);
    /* outputs in the upper half of the address space, 2^60 bytes each: only their ranges are read */
    a.q_rot = rp_tensor_3d((void *)(uintptr_t)0x8000000000000000ull, RP_F16, T, 1, 2);
    a.k_rot = rp_tensor_3d((void *)(uintptr_t)0xA000000000000000ull, RP_F16, T, 1, 2);
    a.head_dim = 2;
    a.num_qo_heads = a.num_kv_heads = 1;
    a.rope_base = 10000;
    CHECK(rp_rope_pool_fused(NULL, &a, msg, sizeof msg) == RP_ERR_DUPLICATE_SLOT, "%s", msg);
    CHECK(strcmp(msg, "slot 0 is used by tokens 0 and 1: each slot may be written once per call") == 0, "got %s", msg);
    CHECK(k_pool[0] == 0 && k_pool[1] == 0 && v_pool[0] == 0 && v_pool[1] == 0, "a refused call wrote a pool");
    /* a pool stride of INT64_MIN 1-byte elements (fp8) from an upper-half address: its range fits,
     * but no address space has a step of 2^63, and the overlap search negated it (UB) */
    a = (rp_rope_pool_args){0};
    static uint16_t q1[2], k1[2], v1[2], q_rot[2], k_rot[2];
    a.q = rp_tensor_3d(q1, RP_BF16, 1, 1, 2);
    a.k = rp_tensor_3d(k1, RP_BF16, 1, 1, 2);
    a.v = rp_tensor_3d(v1, RP_BF16, 1, 1, 2);
    a.q_rot = rp_tensor_3d(q_rot, RP_BF16, 1, 1, 2);
    a.k_rot = rp_tensor_3d(k_rot, RP_BF16, 1, 1, 2);
    a.positions = rp_tensor_1d(positions, RP_I64, 1);
    a.slots = rp_tensor_1d(slots, RP_I64, 1);
    a.k_pool = rp_tensor_3d((void *)(uintptr_t)0x8000000000000100ull, RP_F8_E4M3, 2, 1, 2);
    a.k_pool.strides[0] = INT64_MIN;
    a.v_pool = rp_tensor_3d((void *)(uintptr_t)0x8000000000000200ull, RP_F8_E4M3, 2, 1, 2);
    a.head_dim = 2;
    a.num_qo_heads = a.num_kv_heads = 1;
    a.rope_base = 10000;
    CHECK(rp_rope_pool_fused(NULL, &a, msg, sizeof msg) == RP_ERR_INVALID_ARGUMENT, "%s", msg);
    CHECK(strcmp(msg, "k_pool strides overflow the address space for shape (2, 1, 2)") == 0, "got %s", msg);
    CHECK(q_rot[0] == 0 && k_rot[0] == 0, "a refused call wrote an output");
}

static void all_on_cuda_minus_1(fixture *f)
{
    rp_tensor *ts[] = {&f->args.q, &f->args.k, &f->args.v, &f->args.positions, &f->args.slots,
                       &f->args.k_pool, &f->args.v_pool, &f->args.q_rot, &f->args.k_rot};
    for (int i = 0; i < 9; i++)
        ts[i]->device = (rp_device){RP_DEVICE_CUDA, -1};
}

/* A third C-API review's findings (stop 50). A negative CUDA ordinal was taken to the context check,
 * whose message asked for a context with cuda_device = -1, which rp_context_create refuses; CUDA
 * tensors on a build without CUDA were told to pass a CUDA context, which that build cannot make. */
static void test_third_c_api_review_findings(void)
{
    EXPECT(all_on_cuda_minus_1, RP_ERR_INVALID_ARGUMENT, "q is on cuda:-1: a CUDA device index must be >= 0");
    /* needs no memory: refused by RP_VALIDATE_ONLY too */
    char msg[256];
    fixture f;
    fixture_init(&f, &rng, 2, 4, 2, 16, 8, RP_F32, RP_I32, 100, 0);
    all_on_cuda_minus_1(&f);
    rp_rope_pool_args a = f.args;
    a.flags = RP_VALIDATE_ONLY;
    CHECK(rp_rope_pool_fused(NULL, &a, msg, sizeof msg) == RP_ERR_INVALID_ARGUMENT, "validate-only: %s", msg);
    CHECK(strcmp(msg, "q is on cuda:-1: a CUDA device index must be >= 0") == 0, "got %s", msg);
    fixture_free(&f);
}

/* A value refused one ulp past its bound prints to the digits that tell it from the bound: parsed
 * back, the value in the message lies beyond the bound in the message. */
static void expect_printed_past(const char *what, const char *msg, const char *before_value, const char *before_bound,
                                int above)
{
    const char *v = strstr(msg, before_value), *b = v ? strstr(v + strlen(before_value), before_bound) : NULL;
    CHECK(v && b, "%s: unexpected message %s", what, msg);
    if (!v || !b)
        return;
    const double value = strtod(v + strlen(before_value), NULL), bound = strtod(b + strlen(before_bound), NULL);
    CHECK(above ? value > bound : value < bound, "%s: the message reads as within its bound: %s", what, msg);
}

static void test_values_one_ulp_past_a_bound_print_past_it(void)
{
    char msg[512];
    fixture f;
    fixture_init(&f, &rng, 2, 4, 2, 16, 8, RP_F32, RP_I32, 100, 0);
    rp_rope_pool_args a = f.args;
    a.flags = RP_VALIDATE_ONLY;
    a.attention_scaling = nextafter((double)FLT_MAX, INFINITY);
    CHECK(rp_rope_pool_fused(NULL, &a, msg, sizeof msg) == RP_ERR_INVALID_ARGUMENT, "%s", msg);
    expect_printed_past("attention_scaling above", msg, "attention_scaling ", ", ", 1);
    a.attention_scaling = nextafter((double)FLT_MIN, 0.0);
    CHECK(rp_rope_pool_fused(NULL, &a, msg, sizeof msg) == RP_ERR_INVALID_ARGUMENT, "%s", msg);
    expect_printed_past("attention_scaling below", msg, "attention_scaling ", "range [", 0);
    a.attention_scaling = 0.0;
    double table[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    table[5] = nextafter(DBL_MAX / 0x1p63, INFINITY);
    a.inv_freq = table;
    CHECK(rp_rope_pool_fused(NULL, &a, msg, sizeof msg) == RP_ERR_INVALID_ARGUMENT, "%s", msg);
    expect_printed_past("inv_freq", msg, "inv_freq[5] = ", "(at most ", 1);
    fixture_free(&f);
}

static void test_outputs_devices_and_memory(void)
{
    EXPECT(q_rot_narrow, RP_ERR_INVALID_ARGUMENT, "q_rot shape must match q shape, got (6, 8, 32) vs (6, 8, 64)");
    EXPECT(k_rot_f16, RP_ERR_INVALID_ARGUMENT, "k_rot dtype must match k dtype, got float16 vs float32");
    EXPECT(pool_negative_size, RP_ERR_INVALID_ARGUMENT, "k_pool shape (-1, 2, 64) has a negative dimension");
    EXPECT(pool_on_gpu, RP_ERR_INVALID_ARGUMENT,
           "all tensors must be on one device: k_pool is on cuda:0 but q is on cpu");
    EXPECT(slots_on_gpu1, RP_ERR_INVALID_ARGUMENT,
           "all tensors must be on one device: slots is on cuda:1 but q is on cpu");
    EXPECT(unknown_device, RP_ERR_INVALID_ARGUMENT, "v_pool has unknown device type 13");
    EXPECT(v_null, RP_ERR_INVALID_ARGUMENT, "v data is NULL but it has 768 elements");
    EXPECT(q_misaligned, RP_ERR_INVALID_ARGUMENT, "q data 0x*");
    EXPECT(q_stride_overflow, RP_ERR_INVALID_ARGUMENT, "q strides overflow the address space for shape (6, 8, 64)");
    EXPECT(q_stride_wraps, RP_ERR_INVALID_ARGUMENT, "q strides overflow the address space for shape (6, 8, 64)");
    EXPECT(k_pool_read_only, RP_ERR_INVALID_ARGUMENT, "k_pool is read-only, but the call writes it");
}

static void test_aliasing_outputs_are_rejected(void)
{
    EXPECT(q_rot_broadcast, RP_ERR_OVERLAP, "q_rot has overlapping elements (strides (0, 64, 1) for shape (6, 8, 64))");
    EXPECT(k_rot_heads_alias, RP_ERR_OVERLAP, "k_rot has overlapping elements (strides (128, 32, 1) for shape (6, 2, 64))");
    EXPECT(q_rot_is_k, RP_ERR_OVERLAP,
           "q_rot overlaps k: outputs may share memory with inputs only as q_rot = q or k_rot = k "
           "(same data, shape and strides)");
    EXPECT(q_rot_shifted_q, RP_ERR_OVERLAP, "q_rot overlaps q: *");
    EXPECT(q_rot_q_other_strides, RP_ERR_OVERLAP, "q_rot overlaps q: *");
    EXPECT(v_pool_is_k_pool, RP_ERR_OVERLAP, "v_pool overlaps k_pool: outputs must not share memory");
    EXPECT(k_pool_over_positions, RP_ERR_OVERLAP, "k_pool overlaps positions: *");
    EXPECT(k_rot_into_v_pool, RP_ERR_OVERLAP, "k_rot overlaps v_pool: outputs must not share memory");
    EXPECT(inv_freq_in_q_rot, RP_ERR_OVERLAP, "q_rot overlaps inv_freq: outputs must not share memory with inputs");
    EXPECT(pool_elements_overflow, RP_ERR_INVALID_ARGUMENT,
           "k_pool shape (1099511627776, 1099511627776, 2, 64) has 2^63 elements or more");
}

static void test_slot_values_are_checked_in_token_order(void)
{
    EXPECT(slot_at_pool_end, RP_ERR_SLOT_OUT_OF_RANGE,
           "slot 16 of token 3 is out of range for a pool of 16 slots (valid: 0 <= slot < 16; "
           "negative skips the write)");
    EXPECT(slot_huge_i64, RP_ERR_SLOT_OUT_OF_RANGE,
           "slot 1099511627776 of token 5 is out of range for a pool of 16 slots*");
    EXPECT(slot_repeated, RP_ERR_DUPLICATE_SLOT,
           "slot 9 is used by tokens 1 and 4: each slot may be written once per call");
    EXPECT(repeat_before_range, RP_ERR_DUPLICATE_SLOT, "slot 2 is used by tokens 0 and 2*");
    EXPECT(range_before_repeat, RP_ERR_SLOT_OUT_OF_RANGE, "slot 16 of token 1 is out of range*");
}

/* RP_VALIDATE_ONLY (lazy bindings): the checks that need no memory, with NULL data everywhere and
 * an out-of-range slot that it must not read; a real call on the same arrays still refuses it. */
static void test_validate_only_needs_no_memory(void)
{
    char msg[512];
    fixture f;
    fixture_init(&f, &rng, 3, 4, 2, 16, 8, RP_F16, RP_I64, 100, 0);
    test_store(f.slots, RP_I64, 1, 8); /* == pool_size */
    rp_rope_pool_args a = f.args;
    a.flags = RP_VALIDATE_ONLY;
    rp_tensor *ts[] = {&a.q, &a.k, &a.v, &a.positions, &a.slots, &a.k_pool, &a.v_pool, &a.q_rot, &a.k_rot};
    for (int i = 0; i < 9; i++)
        ts[i]->data = NULL;
    CHECK(rp_rope_pool_fused(NULL, &a, msg, sizeof msg) == RP_OK, "validate-only: %s", msg);
    a.v.shape[1] = 3;
    CHECK(rp_rope_pool_fused(NULL, &a, msg, sizeof msg) == RP_ERR_INVALID_ARGUMENT, "seed check skipped");
    CHECK(strcmp(msg, "v shape must match k shape, got (3, 3, 16) vs (3, 2, 16)") == 0, "got %s", msg);
    a.v.shape[1] = 2;
    a.k_rot.dtype = RP_F32;
    CHECK(rp_rope_pool_fused(NULL, &a, msg, sizeof msg) == RP_ERR_INVALID_ARGUMENT, "output check skipped");
    CHECK(strcmp(msg, "k_rot dtype must match k dtype, got float32 vs float16") == 0, "got %s", msg);
    a.k_rot.dtype = RP_F16;
    a.k_pool.flags = RP_TENSOR_READ_ONLY; /* needs no memory: checked before validate-only returns */
    CHECK(rp_rope_pool_fused(NULL, &a, msg, sizeof msg) == RP_ERR_INVALID_ARGUMENT, "read-only check skipped");
    CHECK(strcmp(msg, "k_pool is read-only, but the call writes it") == 0, "got %s", msg);
    snapshot s;
    snapshot_take(&s, &f);
    CHECK(rp_rope_pool_fused(NULL, &f.args, msg, sizeof msg) == RP_ERR_SLOT_OUT_OF_RANGE, "%s", msg);
    CHECK(snapshot_unchanged(&s, &f), "a refused call wrote output memory");
    fixture_free(&f);
}

static void test_null_args_and_cuda_without_context(void)
{
    char msg[256];
    CHECK(rp_rope_pool_fused(NULL, NULL, msg, sizeof msg) == RP_ERR_INVALID_ARGUMENT, "NULL args");
    CHECK(strcmp(msg, "args is NULL") == 0, "got %s", msg);

    fixture f;
    fixture_init(&f, &rng, 2, 4, 2, 16, 8, RP_F32, RP_I32, 100, 0);
    rp_tensor *ts[] = {&f.args.q, &f.args.k, &f.args.v, &f.args.positions, &f.args.slots,
                       &f.args.k_pool, &f.args.v_pool, &f.args.q_rot, &f.args.k_rot};
    for (int i = 0; i < 9; i++)
        ts[i]->device = (rp_device){RP_DEVICE_CUDA, 0};
    snapshot s;
    snapshot_take(&s, &f);
    const rp_status st = rp_rope_pool_fused(NULL, &f.args, msg, sizeof msg);
    if (rp_has_cuda()) {
        CHECK(st == RP_ERR_INVALID_ARGUMENT, "%s", msg);
        CHECK(strcmp(msg, "tensors are on cuda:0: pass a context created with RP_CONTEXT_CUDA and "
                          "cuda_device = 0") == 0, "got %s", msg);
    } else { /* no context can help: this build cannot make a CUDA one */
        CHECK(st == RP_ERR_UNSUPPORTED, "%s: %s", rp_status_name(st), msg);
        CHECK(strcmp(msg, "tensors are on cuda:0, but this ropepool was built without its CUDA backend "
                          "(nvcc was not found at build time)") == 0, "got %s", msg);
    }
    CHECK(snapshot_unchanged(&s, &f), "a refused CUDA call touched memory");
    fixture_free(&f);
}

static void test_context_options_are_checked(void)
{
    char msg[256];
    rp_context *ctx = (rp_context *)&msg; /* must be reset to NULL on failure */
    rp_context_options o = {0};
    o.num_threads = -3;
    CHECK(rp_context_create(&o, &ctx, msg, sizeof msg) == RP_ERR_INVALID_ARGUMENT, "%s", msg);
    CHECK(ctx == NULL, "*out not cleared on failure");
    CHECK(strcmp(msg, "num_threads must be >= 0 (0 = one per online CPU), got -3") == 0, "got %s", msg);
    o.num_threads = 1;
    o.reserved[3] = 42;
    CHECK(rp_context_create(&o, &ctx, msg, sizeof msg) == RP_ERR_INVALID_ARGUMENT, "%s", msg);
    CHECK(strcmp(msg, "rp_context_options reserved fields must be 0: reserved[3] is 42") == 0, "got %s", msg);
    o.reserved[3] = 0;
    o.flags = 0x80;
    CHECK(rp_context_create(&o, &ctx, msg, sizeof msg) == RP_ERR_INVALID_ARGUMENT, "%s", msg);
    /* A device without RP_CONTEXT_CUDA made a CPU-only context, silently: the caller who forgot
     * the flag learnt it only from the first CUDA call's error. */
    o.flags = 0;
    o.cuda_device = 1;
    CHECK(rp_context_create(&o, &ctx, msg, sizeof msg) == RP_ERR_INVALID_ARGUMENT, "%s", msg);
    CHECK(ctx == NULL, "*out not cleared on failure");
    CHECK(strcmp(msg, "cuda_device 1 needs flags RP_CONTEXT_CUDA: without it the context serves the "
                      "CPU alone (cuda_device must then be 0)") == 0, "got %s", msg);
    o.flags = RP_CONTEXT_CUDA;
    o.cuda_device = -1;
    CHECK(rp_context_create(&o, &ctx, msg, sizeof msg) == RP_ERR_INVALID_ARGUMENT, "%s", msg);
    CHECK(strcmp(msg, "cuda_device must be >= 0, got -1") == 0, "got %s", msg);
    if (!rp_has_cuda()) {
        o.cuda_device = 0;
        CHECK(rp_context_create(&o, &ctx, msg, sizeof msg) == RP_ERR_UNSUPPORTED, "%s", msg);
        CHECK(strstr(msg, "built without its CUDA backend") != NULL, "got %s", msg);
    }
    CHECK(rp_context_create(NULL, &ctx, msg, sizeof msg) == RP_OK, "%s", msg);
    CHECK(rp_context_num_threads(ctx) >= 1, "threads %d", rp_context_num_threads(ctx));
    CHECK(rp_context_check(ctx, NULL, msg, sizeof msg) == RP_ERR_UNSUPPORTED, "check on a CPU context");
    rp_context_destroy(ctx);
}

static void test_names_and_version(void)
{
    CHECK(rp_version_number() == RP_VERSION_NUMBER, "library %u vs header %u", rp_version_number(),
          (unsigned)RP_VERSION_NUMBER);
    char want[32];
    snprintf(want, sizeof want, "%d.%d.%d", RP_VERSION_MAJOR, RP_VERSION_MINOR, RP_VERSION_PATCH);
    CHECK(strcmp(rp_version_string(), want) == 0, "%s", rp_version_string());
    CHECK(strcmp(rp_status_name(RP_ERR_DUPLICATE_SLOT), "RP_ERR_DUPLICATE_SLOT") == 0, "name");
    CHECK(strcmp(rp_status_name((rp_status)99), "RP_ERR_UNKNOWN") == 0, "unknown name");
    CHECK(strcmp(rp_status_string(RP_OK), "success") == 0, "string");
    CHECK(strcmp(rp_dtype_name(RP_BF16), "bfloat16") == 0 && rp_dtype_size(RP_BF16) == 2, "bf16");
    CHECK(strcmp(rp_dtype_name(RP_DTYPE_OTHER), "an unsupported type") == 0, "other");
}

/* Run as `test_checks bad-setting` with ROPEPOOL_CPU naming no level, or ROPEPOOL_VERBOSE neither 0
 * nor 1 (tests/CMakeLists.txt): every CPU call is refused naming it, RP_VALIDATE_ONLY's and T = 0's
 * included (validate-only calls accepted what their evaluation then refused), and nothing is
 * written. */
static void test_a_bad_setting_refuses_every_call(void)
{
    const char *forced = getenv("ROPEPOOL_CPU"), *verbose = getenv("ROPEPOOL_VERBOSE");
    const int cpu = forced && strcmp(forced, "no-such-level") == 0;
    CHECK(cpu || (verbose && strcmp(verbose, "false") == 0),
          "run with ROPEPOOL_CPU=no-such-level or ROPEPOOL_VERBOSE=false, got %s and %s", forced ? forced : "(unset)",
          verbose ? verbose : "(unset)");
    const char *want = cpu ? "ROPEPOOL_CPU=no-such-level is not a CPU kernel level of this build ("
                           : "ROPEPOOL_VERBOSE=false is neither 0 nor 1 (1 prints the CPU kernel choice to stderr)";
    for (int kind = 0; kind < 3; kind++) { /* a call, a validate-only call, T = 0 */
        fixture f;
        fixture_init(&f, &rng, kind == 2 ? 0 : 3, 4, 2, 16, 8, RP_BF16, RP_I64, 100, 0);
        f.args.flags = kind == 1 ? RP_VALIDATE_ONLY : 0;
        snapshot s;
        snapshot_take(&s, &f);
        char msg[256] = "";
        const rp_status st = rp_rope_pool_fused(NULL, &f.args, msg, sizeof msg);
        CHECK(st == RP_ERR_INVALID_ARGUMENT, "call kind %d: %s: %s", kind, rp_status_name(st), msg);
        CHECK(strncmp(msg, want, strlen(want)) == 0, "call kind %d: got %s", kind, msg);
        CHECK(snapshot_unchanged(&s, &f), "call kind %d: a refused call wrote output memory", kind);
        fixture_free(&f);
    }
    CHECK(strcmp(rp_cpu_kernel_name(), "none") == 0, "kernel name %s", rp_cpu_kernel_name());
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "bad-setting") == 0) {
        RUN(test_a_bad_setting_refuses_every_call);
        return test_summary("test_checks bad-setting");
    }
    RUN(test_dtypes_and_scalars_name_the_value);
    RUN(test_rope_variant_fields_name_the_value);
    RUN(test_inv_freq_is_read_up_to_rotary_dim_over_2);
    RUN(test_other_extensions_are_checked);
    RUN(test_c_api_audit_findings);
    RUN(test_second_c_api_review_findings);
    RUN(test_third_c_api_review_findings);
    RUN(test_values_one_ulp_past_a_bound_print_past_it);
    RUN(test_outputs_devices_and_memory);
    RUN(test_aliasing_outputs_are_rejected);
    RUN(test_slot_values_are_checked_in_token_order);
    RUN(test_validate_only_needs_no_memory);
    RUN(test_null_args_and_cuda_without_context);
    RUN(test_context_options_are_checked);
    RUN(test_names_and_version);
    RUN(test_zero_tokens_with_a_variant_is_a_checked_no_op); /* last: q_rot_is_k depends on the heap's layout */
    return test_summary("test_checks");
}
