/*
 * test_seed_errors.c — the seed's eleven checks: exact texts, the seed's order, and nothing
 * written when they fire.
 */
#include "test_util.h"

static test_rng rng = {42};

/* Runs the call on a fresh fixture after `mutate`, and expects status + exact message, and all
 * outputs untouched. */
typedef void (*mutator)(rp_rope_pool_args *a);

static void expect_error(mutator mutate, rp_status want_status, const char *want_msg)
{
    fixture f;
    fixture_init(&f, &rng, 6, 8, 2, 64, 16, RP_F32, RP_I32, 4096, 0);
    mutate(&f.args);
    snapshot s;
    snapshot_take(&s, &f);
    char msg[512];
    rp_status st = rp_rope_pool_fused(NULL, &f.args, msg, sizeof msg);
    CHECK(st == want_status, "status %s, want %s (msg: %s)", rp_status_name(st),
          rp_status_name(want_status), msg);
    CHECK(strcmp(msg, want_msg) == 0, "message\n  got:  %s\n  want: %s", msg, want_msg);
    CHECK(snapshot_unchanged(&s, &f), "a failed call wrote output memory (%s)", want_msg);
    fixture_free(&f);
}

static void q_4d(rp_rope_pool_args *a) { a->q.ndim = 4; a->q.shape[3] = 1; a->q.strides[3] = 1; }
static void k_2d(rp_rope_pool_args *a) { a->k.ndim = 2; a->k.shape[1] = 2 * 64; }
static void v_4d(rp_rope_pool_args *a) { a->v.ndim = 4; a->v.shape[3] = 1; }
static void positions_2d(rp_rope_pool_args *a) { a->positions.ndim = 2; a->positions.shape[1] = 1; }
static void slots_0d(rp_rope_pool_args *a) { a->slots.ndim = 0; }
static void kpool_2d(rp_rope_pool_args *a) { a->k_pool.ndim = 2; a->k_pool.shape[1] = 2 * 64; }
static void vpool_4d(rp_rope_pool_args *a) { a->v_pool.ndim = 4; a->v_pool.shape[3] = 1; }
static void swapped_heads(rp_rope_pool_args *a) { a->num_qo_heads = 2; a->num_kv_heads = 8; }
static void other_head_dim(rp_rope_pool_args *a) { a->head_dim = 128; }
static void k_heads_wrong(rp_rope_pool_args *a) { a->k.shape[1] = 3; }
static void k_tokens_wrong(rp_rope_pool_args *a) { a->k.shape[0] = 5; }
static void v_off_by_one(rp_rope_pool_args *a) { a->v.shape[2] = 63; }
static void v_tokens(rp_rope_pool_args *a) { a->v.shape[0] = 7; }
static void positions_short(rp_rope_pool_args *a) { a->positions.shape[0] = 5; }
static void slots_long(rp_rope_pool_args *a) { a->slots.shape[0] = 7; }
static void kpool_query_heads(rp_rope_pool_args *a) { a->k_pool.shape[1] = 8; }
static void kpool_other_dim(rp_rope_pool_args *a) { a->k_pool.shape[2] = 128; }
static void vpool_smaller(rp_rope_pool_args *a) { a->v_pool.shape[0] = 15; }
static void k_f16(rp_rope_pool_args *a) { a->k.dtype = RP_F16; }
static void v_bf16(rp_rope_pool_args *a) { a->v.dtype = RP_BF16; }
static void vpool_f16(rp_rope_pool_args *a) { a->v_pool.dtype = RP_F16; }
static void kpool_f64(rp_rope_pool_args *a) { a->k_pool.dtype = RP_F64; }
/* Several faults at once: the seed's order decides which is reported. */
static void q_rank_and_pool_rank(rp_rope_pool_args *a) { q_4d(a); kpool_2d(a); }
static void positions_rank_and_q_shape(rp_rope_pool_args *a) { positions_2d(a); a->q.shape[1] = 9; }
static void q_shape_and_dtype(rp_rope_pool_args *a) { a->q.shape[2] = 32; k_f16(a); }
static void pool_shape_and_dtype(rp_rope_pool_args *a) { kpool_query_heads(a); vpool_f16(a); }

static void test_rank_messages(void)
{
    expect_error(q_4d, RP_ERR_INVALID_ARGUMENT, "rope_pool_fused expects q/k/v to be 3-D");
    expect_error(k_2d, RP_ERR_INVALID_ARGUMENT, "rope_pool_fused expects q/k/v to be 3-D");
    expect_error(v_4d, RP_ERR_INVALID_ARGUMENT, "rope_pool_fused expects q/k/v to be 3-D");
    expect_error(positions_2d, RP_ERR_INVALID_ARGUMENT, "rope_pool_fused expects positions/slots to be 1-D");
    expect_error(slots_0d, RP_ERR_INVALID_ARGUMENT, "rope_pool_fused expects positions/slots to be 1-D");
    expect_error(kpool_2d, RP_ERR_INVALID_ARGUMENT, "rope_pool_fused expects pool tensors to be 3-D");
    expect_error(vpool_4d, RP_ERR_INVALID_ARGUMENT, "rope_pool_fused expects pool tensors to be 3-D");
}

static void test_shape_messages_print_python_tuples(void)
{
    expect_error(swapped_heads, RP_ERR_INVALID_ARGUMENT,
                 "q shape must be [num_tokens, num_qo_heads, head_dim], got (6, 8, 64)");
    expect_error(other_head_dim, RP_ERR_INVALID_ARGUMENT,
                 "q shape must be [num_tokens, num_qo_heads, head_dim], got (6, 8, 64)");
    expect_error(k_heads_wrong, RP_ERR_INVALID_ARGUMENT,
                 "k shape must be [num_tokens, num_kv_heads, head_dim], got (6, 3, 64)");
    expect_error(k_tokens_wrong, RP_ERR_INVALID_ARGUMENT,
                 "k shape must be [num_tokens, num_kv_heads, head_dim], got (5, 2, 64)");
    expect_error(v_off_by_one, RP_ERR_INVALID_ARGUMENT,
                 "v shape must match k shape, got (6, 2, 63) vs (6, 2, 64)");
    expect_error(v_tokens, RP_ERR_INVALID_ARGUMENT,
                 "v shape must match k shape, got (7, 2, 64) vs (6, 2, 64)");
    expect_error(positions_short, RP_ERR_INVALID_ARGUMENT, "positions/slots must have one entry per token");
    expect_error(slots_long, RP_ERR_INVALID_ARGUMENT, "positions/slots must have one entry per token");
    expect_error(kpool_query_heads, RP_ERR_INVALID_ARGUMENT, "k_pool has incompatible shape (16, 8, 64)");
    expect_error(kpool_other_dim, RP_ERR_INVALID_ARGUMENT, "k_pool has incompatible shape (16, 2, 128)");
    expect_error(vpool_smaller, RP_ERR_INVALID_ARGUMENT,
                 "v_pool shape must match k_pool shape, got (15, 2, 64) vs (16, 2, 64)");
}

static void test_dtype_messages(void)
{
    expect_error(k_f16, RP_ERR_INVALID_ARGUMENT, "q/k/v dtypes must match");
    expect_error(v_bf16, RP_ERR_INVALID_ARGUMENT, "q/k/v dtypes must match");
    expect_error(vpool_f16, RP_ERR_INVALID_ARGUMENT, "pool dtypes must match q/k/v dtype");
    expect_error(kpool_f64, RP_ERR_INVALID_ARGUMENT, "pool dtypes must match q/k/v dtype");
}

static void test_first_failing_check_in_seed_order_is_reported(void)
{
    expect_error(q_rank_and_pool_rank, RP_ERR_INVALID_ARGUMENT, "rope_pool_fused expects q/k/v to be 3-D");
    expect_error(positions_rank_and_q_shape, RP_ERR_INVALID_ARGUMENT,
                 "rope_pool_fused expects positions/slots to be 1-D");
    expect_error(q_shape_and_dtype, RP_ERR_INVALID_ARGUMENT,
                 "q shape must be [num_tokens, num_qo_heads, head_dim], got (6, 8, 32)");
    expect_error(pool_shape_and_dtype, RP_ERR_INVALID_ARGUMENT, "k_pool has incompatible shape (16, 8, 64)");
}

static void test_error_buffer_is_optional_and_truncated_safely(void)
{
    fixture f;
    fixture_init(&f, &rng, 6, 8, 2, 64, 16, RP_F32, RP_I32, 4096, 0);
    swapped_heads(&f.args);
    CHECK(rp_rope_pool_fused(NULL, &f.args, NULL, 0) == RP_ERR_INVALID_ARGUMENT, "no buffer");
    char small[8];
    memset(small, 'x', sizeof small);
    CHECK(rp_rope_pool_fused(NULL, &f.args, small, sizeof small) == RP_ERR_INVALID_ARGUMENT, "small buffer");
    CHECK(memcmp(small, "q shape", 8) == 0 && small[7] == '\0', "truncated to \"%.8s\"", small);
    fixture_free(&f);
}

int main(void)
{
    RUN(test_rank_messages);
    RUN(test_shape_messages_print_python_tuples);
    RUN(test_dtype_messages);
    RUN(test_first_failing_check_in_seed_order_is_reported);
    RUN(test_error_buffer_is_optional_and_truncated_safely);
    return test_summary("test_seed_errors");
}
