/*
 * test_cuda_contract.c — the contract on CUDA tensors: the seed's messages and ours, checked on
 * the host before launch, identical to the CPU's; contexts and devices; RP_CHECK_SLOTS rejecting
 * out-of-range and repeated slots before anything is written. Every failed call must leave every
 * device byte as it was.
 */
#include "cuda_test_util.h"

#include <ctype.h>

static test_rng rng = {77};
static rp_context *ctx;

typedef void (*mutator)(rp_rope_pool_args *a);

/* Messages are equal, except that a pointer printed in them ("0x7f...") may differ: the CPU call
 * names a host address, the CUDA call a device address. */
static int same_message(const char *a, const char *b)
{
    while (*a && *b) {
        if (a[0] == '0' && a[1] == 'x' && b[0] == '0' && b[1] == 'x') {
            a += 2;
            b += 2;
            while (isxdigit((unsigned char)*a))
                a++;
            while (isxdigit((unsigned char)*b))
                b++;
            continue;
        }
        if (*a++ != *b++)
            return 0;
    }
    return *a == *b;
}

/* Runs `mutate`d args once on the CPU (the expected status and text) and once on the GPU: same
 * status, same text, and no device byte changed. */
static void expect_same_error_as_cpu(const char *name, mutator mutate, uint32_t flags)
{
    fixture f;
    fixture_init(&f, &rng, 6, 8, 2, 64, 16, RP_BF16, RP_I32, 4096, 0);
    for (int t = 0; t < 6; t++) /* known distinct slots 1, 3, 5, ... that mutators edit */
        test_store(f.slots, RP_I32, t, 2 * t + 1);
    mirror m = {0};
    mirror_fixture(&m, &f);
    rp_rope_pool_args host = f.args;
    host.flags = flags;
    mutate(&host);
    char want[512], got[512];
    const rp_status want_status = rp_rope_pool_fused(NULL, &host, want, sizeof want);
    CHECK(want_status != RP_OK, "%s: the CPU accepted the call", name);

    rp_rope_pool_args dev = mirror_args(&m, &f.args, 0);
    dev.flags = flags;
    mutate(&dev);
    snapshot s;
    snapshot_take(&s, &f); /* f's host buffers still hold what the device holds */
    const rp_status st = rp_rope_pool_fused(ctx, &dev, got, sizeof got);
    CHECK(st == want_status, "%s: status %s, CPU %s (%s)", name, rp_status_name(st),
          rp_status_name(want_status), got);
    CHECK(same_message(got, want), "%s: message\n  cuda: %s\n  cpu:  %s", name, got, want);
    mirror_download(&m);
    CHECK(snapshot_unchanged(&s, &f), "%s: a failed call wrote device memory", name);
    CHECK(rp_context_check(ctx, NULL, got, sizeof got) == RP_OK, "%s: a bad slot was recorded: %s", name, got);
    mirror_free(&m);
    fixture_free(&f);
}

#define EXPECT_SAME(mutate) expect_same_error_as_cpu(#mutate, mutate, 0)
#define EXPECT_SAME_CHECKED(mutate) expect_same_error_as_cpu(#mutate, mutate, RP_CHECK_SLOTS)

/* The seed's eleven checks, and orders of several faults. */
static void q_4d(rp_rope_pool_args *a) { a->q.ndim = 4; a->q.shape[3] = 1; a->q.strides[3] = 1; }
static void positions_2d(rp_rope_pool_args *a) { a->positions.ndim = 2; a->positions.shape[1] = 1; }
static void kpool_2d(rp_rope_pool_args *a) { a->k_pool.ndim = 2; a->k_pool.shape[1] = 2 * 64; }
static void swapped_heads(rp_rope_pool_args *a) { a->num_qo_heads = 2; a->num_kv_heads = 8; }
static void k_heads_wrong(rp_rope_pool_args *a) { a->k.shape[1] = 3; }
static void v_off_by_one(rp_rope_pool_args *a) { a->v.shape[2] = 63; }
static void positions_short(rp_rope_pool_args *a) { a->positions.shape[0] = 5; }
static void kpool_query_heads(rp_rope_pool_args *a) { a->k_pool.shape[1] = 8; }
static void vpool_smaller(rp_rope_pool_args *a) { a->v_pool.shape[0] = 15; }
static void v_f16(rp_rope_pool_args *a) { a->v.dtype = RP_F16; }
static void vpool_f32(rp_rope_pool_args *a) { a->v_pool.dtype = RP_F32; }
static void q_rank_and_pool_rank(rp_rope_pool_args *a) { q_4d(a); kpool_2d(a); }
static void q_shape_and_dtype(rp_rope_pool_args *a) { a->q.shape[2] = 32; v_f16(a); }

static void test_seed_messages_on_cuda_tensors(void)
{
    EXPECT_SAME(q_4d);
    EXPECT_SAME(positions_2d);
    EXPECT_SAME(kpool_2d);
    EXPECT_SAME(swapped_heads);
    EXPECT_SAME(k_heads_wrong);
    EXPECT_SAME(v_off_by_one);
    EXPECT_SAME(positions_short);
    EXPECT_SAME(kpool_query_heads);
    EXPECT_SAME(vpool_smaller);
    EXPECT_SAME(v_f16);
    EXPECT_SAME(vpool_f32);
    EXPECT_SAME(q_rank_and_pool_rank);
    EXPECT_SAME(q_shape_and_dtype);
}

/* Ours: dtypes, scalars, extensions, outputs, memory, aliasing. */
static void all_f64(rp_rope_pool_args *a)
{
    rp_tensor *ts[] = {&a->q, &a->k, &a->v, &a->k_pool, &a->v_pool, &a->q_rot, &a->k_rot};
    for (int i = 0; i < 7; i++)
        ts[i]->dtype = RP_F64;
}
static void slots_uint32(rp_rope_pool_args *a) { a->slots.dtype = RP_U32; }
static void base_nan(rp_rope_pool_args *a) { a->rope_base = NAN; }
static void style_unknown(rp_rope_pool_args *a) { a->style = 7; }
static void rotary_dim_odd(rp_rope_pool_args *a) { a->rotary_dim = 33; }
static void scaling_negative(rp_rope_pool_args *a) { a->attention_scaling = -1.5; }
static void reserved_set(rp_rope_pool_args *a) { a->reserved[2] = 1; }
static void k_rot_f16(rp_rope_pool_args *a) { a->k_rot.dtype = RP_F16; }
static void v_null(rp_rope_pool_args *a) { a->v.data = NULL; }
static void q_misaligned(rp_rope_pool_args *a) { a->q.data = (char *)a->q.data + 1; }
static void k_pool_read_only(rp_rope_pool_args *a) { a->k_pool.flags = RP_TENSOR_READ_ONLY; }
static void q_rot_broadcast(rp_rope_pool_args *a) { a->q_rot.strides[0] = 0; }
static void q_rot_is_k(rp_rope_pool_args *a) { a->q_rot.data = a->k.data; }
static void v_pool_is_k_pool(rp_rope_pool_args *a) { a->v_pool.data = a->k_pool.data; }
static void q_rot_shifted_q(rp_rope_pool_args *a) { a->q_rot.data = (uint16_t *)a->q.data + 1; }

static void test_our_checks_on_cuda_tensors(void)
{
    EXPECT_SAME(all_f64);
    EXPECT_SAME(slots_uint32);
    EXPECT_SAME(base_nan);
    EXPECT_SAME(style_unknown);
    EXPECT_SAME(rotary_dim_odd);
    EXPECT_SAME(scaling_negative);
    EXPECT_SAME(reserved_set);
    EXPECT_SAME(k_rot_f16);
    EXPECT_SAME(v_null);
    EXPECT_SAME(q_misaligned);
    EXPECT_SAME(k_pool_read_only);
    EXPECT_SAME(q_rot_broadcast);
    EXPECT_SAME(q_rot_is_k);
    EXPECT_SAME(v_pool_is_k_pool);
    EXPECT_SAME(q_rot_shifted_q);
}

/* RP_CHECK_SLOTS: the CPU's slot messages, before anything is written, for slots read with
 * strides +1, +3 and -1. */
typedef struct slot_case {
    const char *name;
    int32_t slots[6];
    rp_status want;
} slot_case;

static void test_checked_mode_rejects_range_and_repeats_before_writing(void)
{
    static const slot_case cases[] = {
        {"slot at pool end", {1, 3, 5, 16, 9, 11}, RP_ERR_SLOT_OUT_OF_RANGE},
        {"slot repeated", {1, 9, 5, 7, 9, 11}, RP_ERR_DUPLICATE_SLOT},
        {"repeat before range", {2, 3, 2, 7, 9, 99}, RP_ERR_DUPLICATE_SLOT},
        {"range before repeat", {1, 16, 5, 4, 4, 11}, RP_ERR_SLOT_OUT_OF_RANGE},
        {"huge slot", {1, 3, 5, 7, 9, 2147483647}, RP_ERR_SLOT_OUT_OF_RANGE},
        {"all fine, some skipped", {1, -3, 5, -1, 9, 0}, RP_OK},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        for (int stride_kind = 0; stride_kind < 3; stride_kind++) {
            fixture f;
            fixture_init(&f, &rng, 6, 8, 2, 64, 16, RP_F16, RP_I32, 4096, 0);
            int32_t *slot_buf = test_alloc(18 * sizeof *slot_buf);
            for (int i = 0; i < 18; i++)
                slot_buf[i] = 1000 + i; /* entries between the strided ones: never read */
            for (int t = 0; t < 6; t++)
                slot_buf[stride_kind == 0 ? t : stride_kind == 1 ? 3 * t : 17 - t] = cases[c].slots[t];
            f.args.slots = rp_tensor_1d(stride_kind == 2 ? slot_buf + 17 : slot_buf, RP_I32, 6);
            f.args.slots.strides[0] = stride_kind == 0 ? 1 : stride_kind == 1 ? 3 : -1;
            f.args.flags = RP_CHECK_SLOTS;
            mirror m = {0};
            mirror_fixture(&m, &f);
            mirror_add(&m, slot_buf, 18 * sizeof *slot_buf);
            rp_rope_pool_args dev = mirror_args(&m, &f.args, 0);
            snapshot s;
            snapshot_take(&s, &f); /* the device's outputs before the call */
            char want[512] = "", got[512] = "";
            const rp_status want_status = rp_rope_pool_fused(NULL, &f.args, want, sizeof want);
            const rp_status st = rp_rope_pool_fused(ctx, &dev, got, sizeof got);
            CHECK(st == cases[c].want && want_status == cases[c].want, "%s (stride %lld): cuda %s, cpu %s: %s",
                  cases[c].name, (long long)f.args.slots.strides[0], rp_status_name(st),
                  rp_status_name(want_status), got);
            CHECK(strcmp(got, want) == 0, "%s: message\n  cuda: %s\n  cpu:  %s", cases[c].name, got, want);
            mirror_download(&m);
            const int unchanged = snapshot_unchanged(&s, &f);
            if (st != RP_OK)
                CHECK(unchanged, "%s: a rejected call wrote device memory", cases[c].name);
            else
                verify_outputs(&f.args, &f.args, cases[c].name);
            CHECK(rp_context_check(ctx, NULL, got, sizeof got) == RP_OK, "%s: recorded %s", cases[c].name, got);
            mirror_free(&m);
            free(slot_buf);
            fixture_free(&f);
        }
    }
}

static void test_contexts_and_devices(void)
{
    char msg[512];
    CHECK(rp_has_cuda() == 1, "a CUDA build must say so");
    int count = 0;
    CUDA_OK(cudaGetDeviceCount(&count));

    rp_context_options o = {0};
    o.flags = RP_CONTEXT_CUDA;
    o.cuda_device = count;
    rp_context *bad = (rp_context *)&o;
    CHECK(rp_context_create(&o, &bad, msg, sizeof msg) == RP_ERR_INVALID_ARGUMENT && bad == NULL, "%s", msg);
    char want[256];
    snprintf(want, sizeof want, "cuda_device %d does not exist: this machine has %d CUDA device(s)", count, count);
    CHECK(strcmp(msg, want) == 0, "got %s", msg);

    fixture f;
    fixture_init(&f, &rng, 3, 4, 2, 32, 8, RP_F32, RP_I64, 100, 0);
    mirror m = {0};
    mirror_fixture(&m, &f);
    rp_rope_pool_args dev = mirror_args(&m, &f.args, 0);
    CHECK(rp_rope_pool_fused(NULL, &dev, msg, sizeof msg) == RP_ERR_INVALID_ARGUMENT &&
              strcmp(msg, "tensors are on cuda:0: pass a context created with RP_CONTEXT_CUDA and cuda_device = 0") == 0,
          "no context: %s", msg);
    rp_context *cpu_ctx = NULL;
    CHECK(rp_context_create(NULL, &cpu_ctx, msg, sizeof msg) == RP_OK, "%s", msg);
    CHECK(rp_rope_pool_fused(cpu_ctx, &dev, msg, sizeof msg) == RP_ERR_INVALID_ARGUMENT, "CPU context: %s", msg);
    CHECK(rp_context_check(cpu_ctx, NULL, msg, sizeof msg) == RP_ERR_UNSUPPORTED, "check on a CPU context: %s", msg);
    rp_context_destroy(cpu_ctx);

    /* Tensors tagged cuda:1 on a context serving cuda:0. */
    rp_rope_pool_args other = mirror_args(&m, &f.args, 1);
    CHECK(rp_rope_pool_fused(ctx, &other, msg, sizeof msg) == RP_ERR_INVALID_ARGUMENT &&
              strcmp(msg, "tensors are on cuda:1 but the context serves cuda:0") == 0, "got %s", msg);
    /* One tensor left on the host. */
    dev.v_pool = f.args.v_pool;
    CHECK(rp_rope_pool_fused(ctx, &dev, msg, sizeof msg) == RP_ERR_INVALID_ARGUMENT &&
              strcmp(msg, "all tensors must be on one device: v_pool is on cpu but q is on cuda:0") == 0,
          "got %s", msg);

    /* The caller's current device is left as it was. */
    int before = -1, after = -1;
    CUDA_OK(cudaGetDevice(&before));
    dev = mirror_args(&m, &f.args, 0);
    CHECK(rp_rope_pool_fused(ctx, &dev, msg, sizeof msg) == RP_OK, "%s", msg);
    CUDA_OK(cudaGetDevice(&after));
    CHECK(before == after, "current device changed from %d to %d", before, after);
    mirror_free(&m);
    fixture_free(&f);
}

/* head_dim beyond the CUDA backend's limit is refused with the reason, nothing written. */
static void test_head_dim_beyond_the_cuda_limit_is_refused(void)
{
    fixture f;
    fixture_init(&f, &rng, 1, 1, 1, 4098, 2, RP_F32, RP_I32, 100, 0);
    mirror m = {0};
    mirror_fixture(&m, &f);
    rp_rope_pool_args dev = mirror_args(&m, &f.args, 0);
    snapshot s;
    snapshot_take(&s, &f);
    char msg[256];
    CHECK(rp_rope_pool_fused(ctx, &dev, msg, sizeof msg) == RP_ERR_UNSUPPORTED &&
              strcmp(msg, "head_dim 4098 is not supported on CUDA: the CUDA backend takes head_dim up to 4096") == 0,
          "got %s", msg);
    mirror_download(&m);
    CHECK(snapshot_unchanged(&s, &f), "a refused call wrote memory");
    mirror_free(&m);
    fixture_free(&f);
}

int main(void)
{
    if (cuda_test_no_gpu())
        return CUDA_TEST_SKIP;
    ctx = cuda_test_context(0);
    RUN(test_seed_messages_on_cuda_tensors);
    RUN(test_our_checks_on_cuda_tensors);
    RUN(test_checked_mode_rejects_range_and_repeats_before_writing);
    RUN(test_contexts_and_devices);
    RUN(test_head_dim_beyond_the_cuda_limit_is_refused);
    rp_context_destroy(ctx);
    return test_summary("test_cuda_contract");
}
