"""The seed's errors, reproduced the way sglang's users hit them (the "When it happens" and
"Common situations" of each seed document): each call is refused with the seed's exact message,
as a ValueError, and writes nothing — neither pool changes.

The problem: T = 6 tokens, Hq = 8 query heads, Hk = 2 KV heads, head_dim D = 64, P = 16 slots.
"""

import pytest

from helpers import Problem, expect_refusal, fused_qkv, split_qkv

RANK_QKV = "rope_pool_fused expects q/k/v to be 3-D"
RANK_INDEX = "rope_pool_fused expects positions/slots to be 1-D"
RANK_POOL = "rope_pool_fused expects pool tensors to be 3-D"
Q_SHAPE = "q shape must be [num_tokens, num_qo_heads, head_dim], got "
K_SHAPE = "k shape must be [num_tokens, num_kv_heads, head_dim], got "
ONE_PER_TOKEN = "positions/slots must have one entry per token"
QKV_DTYPES = "q/k/v dtypes must match"
POOL_DTYPES = "pool dtypes must match q/k/v dtype"


def refuse(ropepool, p, message, replace=None, **overrides):
    """Calls with some arrays replaced ({name: array}) and some keywords overridden."""
    arrays = dict(zip(["q", "k", "v", "positions", "slots", "k_pool", "v_pool"], p.arrays()))
    arrays.update(replace or {})
    return expect_refusal(ropepool, p.fw, list(arrays.values()), p.kwargs(**overrides), message)


# ---- seed 1: "rope_pool_fused expects q/k/v to be 3-D" -------------------------------------------


def test_q_in_flash_attention_layout_batch_of_one_is_refused(ropepool, fw):
    # q is [batch=1, seq, heads, dim], copied from a CUDA flash-attention call site.
    p = Problem(fw)
    refuse(ropepool, p, RANK_QKV, {"q": p.q.reshape(1, p.T, p.Hq, p.D)})


def test_qkv_with_hidden_batch_dimension_are_refused(ropepool, fw):
    # A dummy batch=1 wrapper left a leading dimension on all three.
    p = Problem(fw)
    batched = {name: x.reshape((1,) + tuple(x.shape)) for name, x in (("q", p.q), ("k", p.k), ("v", p.v))}
    refuse(ropepool, p, RANK_QKV, batched)


def test_flattened_q_projection_is_refused(ropepool, fw):
    # The q projection output [T, Hq * D] passed without reshaping.
    p = Problem(fw)
    refuse(ropepool, p, RANK_QKV, {"q": p.q.reshape(p.T, p.Hq * p.D)})


def test_raw_fused_qkv_projection_is_refused(ropepool, fw):
    # The whole [T, (Hq + 2 Hk) * D] QKV output passed as q, without splitting.
    p = Problem(fw)
    refuse(ropepool, p, RANK_QKV, {"q": fused_qkv(p)})


def test_flattened_v_is_refused(ropepool, fw):
    p = Problem(fw)
    refuse(ropepool, p, RANK_QKV, {"v": p.v.reshape(p.T, p.Hk * p.D)})


# ---- related: positions/slots 1-D, pools 3-D -------------------------------------------------------


def test_batched_positions_are_refused(ropepool, fw):
    p = Problem(fw)
    refuse(ropepool, p, RANK_INDEX, {"positions": p.positions.reshape(1, p.T)})


def test_slots_as_column_are_refused(ropepool, fw):
    p = Problem(fw)
    refuse(ropepool, p, RANK_INDEX, {"slots": p.slots.reshape(p.T, 1)})


def test_pool_allocated_flat_is_refused(ropepool, fw):
    # A generic cache manager flattened the heads: [P, Hk * D].
    p = Problem(fw)
    refuse(ropepool, p, RANK_POOL, {"k_pool": p.k_pool.reshape(p.P, p.Hk * p.D),
                                    "v_pool": p.v_pool.reshape(p.P, p.Hk * p.D)})


def test_whole_multi_layer_cache_as_pool_is_refused(ropepool, fw):
    # [layers, P, Hk, D] passed instead of one layer of it.
    p = Problem(fw)
    refuse(ropepool, p, RANK_POOL, {"v_pool": p.v_pool.reshape(1, p.P, p.Hk, p.D)})


# ---- seed 2: "q shape must be [num_tokens, num_qo_heads, head_dim], got (...)" -----------------


def test_swapped_head_counts_are_refused(ropepool, fw):
    p = Problem(fw)
    refuse(ropepool, p, Q_SHAPE + "(6, 8, 64)", num_qo_heads=p.Hk, num_kv_heads=p.Hq)


def test_head_dim_from_another_config_is_refused(ropepool, fw):
    p = Problem(fw)
    refuse(ropepool, p, Q_SHAPE + "(6, 8, 64)", head_dim=128)


def test_gqa_kv_head_count_passed_for_query_heads_is_refused(ropepool, fw):
    p = Problem(fw)
    refuse(ropepool, p, Q_SHAPE + "(6, 8, 64)", num_qo_heads=p.Hk)


def test_q_projection_width_changed_but_call_site_not_is_refused(ropepool, fw):
    # A refactor halved the query heads; the call still says 8.
    p = Problem(fw)
    refuse(ropepool, p, Q_SHAPE + "(6, 4, 64)", {"q": p.q[:, :4]})


# ---- related: k shape ----------------------------------------------------------------------------


def test_k_with_another_layers_head_count_is_refused(ropepool, fw):
    p = Problem(fw, Hk=2)
    other = Problem(fw, Hk=4, seed=1)
    refuse(ropepool, p, K_SHAPE + "(6, 4, 64)", {"k": other.k})


def test_k_sliced_to_fewer_tokens_is_refused(ropepool, fw):
    p = Problem(fw)
    refuse(ropepool, p, K_SHAPE + "(5, 2, 64)", {"k": p.k[:5]})


# ---- seed 4: "v shape must match k shape, got (...) vs (...)" --------------------------------------


def test_off_by_one_head_v_slice_of_fused_qkv_is_refused(ropepool, fw):
    # v = qkv[:, q_size + kv_size - D:]: the slice starts one head early, so v has Hk + 1 heads.
    p = Problem(fw)
    qkv = fused_qkv(p)
    q, k, _ = split_qkv(p, qkv)
    start = (p.Hq + p.Hk) * p.D - p.D
    v = qkv[:, start:].reshape(p.T, p.Hk + 1, p.D)
    refuse(ropepool, p, "v shape must match k shape, got (6, 3, 64) vs (6, 2, 64)", {"q": q, "k": k, "v": v})


def test_v_sliced_in_chunked_prefill_but_k_not_is_refused(ropepool, fw):
    p = Problem(fw)
    refuse(ropepool, p, "v shape must match k shape, got (5, 2, 64) vs (6, 2, 64)", {"v": p.v[:5]})


def test_v_projection_of_another_width_is_refused(ropepool, fw):
    # A misconfigured projection gave V half the head_dim of K.
    p = Problem(fw)
    refuse(ropepool, p, "v shape must match k shape, got (6, 2, 32) vs (6, 2, 64)", {"v": p.v[:, :, :32]})


# ---- related: one entry per token ----------------------------------------------------------------


def test_positions_padded_to_another_batch_are_refused(ropepool, fw):
    p = Problem(fw)
    longer = Problem(fw, T=7, seed=2)
    refuse(ropepool, p, ONE_PER_TOKEN, {"positions": longer.positions})


def test_slots_of_a_shorter_batch_are_refused(ropepool, fw):
    p = Problem(fw)
    refuse(ropepool, p, ONE_PER_TOKEN, {"slots": p.slots[:5]})


# ---- seed 3: "k_pool has incompatible shape (...)" ---------------------------------------------------


def test_pool_allocated_with_query_heads_is_refused(ropepool, fw):
    # [P, Hq, D]: the MHA head count used for a GQA model's cache.
    p = Problem(fw)
    wide = Problem(fw, Hk=p.Hq, seed=3)
    refuse(ropepool, p, "k_pool has incompatible shape (16, 8, 64)",
           {"k_pool": wide.k_pool, "v_pool": wide.v_pool})


def test_pool_of_another_models_head_dim_is_refused(ropepool, fw):
    # A cache reused from a model with head_dim 128 (or a rope-scaling variant that changed it).
    p = Problem(fw)
    other = Problem(fw, D=128, seed=4)
    refuse(ropepool, p, "k_pool has incompatible shape (16, 2, 128)",
           {"k_pool": other.k_pool, "v_pool": other.v_pool})


def test_v_pool_of_another_size_is_refused(ropepool, fw):
    p = Problem(fw)
    refuse(ropepool, p, "v_pool shape must match k_pool shape, got (15, 2, 64) vs (16, 2, 64)",
           {"v_pool": p.v_pool[:15]})


# ---- dtypes ----------------------------------------------------------------------------------------


def test_k_in_half_precision_with_float32_q_is_refused(ropepool, fw):
    p = Problem(fw)
    half = Problem(fw, dtype="float16")
    refuse(ropepool, p, QKV_DTYPES, {"k": half.k})


def test_v_in_bfloat16_with_float32_q_is_refused(ropepool, fw):
    p = Problem(fw)
    bf16 = Problem(fw, dtype="bfloat16")  # skips where NumPy has no bfloat16 (no ml_dtypes)
    refuse(ropepool, p, QKV_DTYPES, {"v": bf16.v})


def test_half_precision_cache_with_float32_model_is_refused(ropepool, fw):
    p = Problem(fw)
    half = Problem(fw, dtype="float16")
    refuse(ropepool, p, POOL_DTYPES, {"k_pool": half.k_pool, "v_pool": half.v_pool})


def test_bfloat16_cache_with_float16_model_is_refused(ropepool, fw):
    p = Problem(fw, dtype="float16")
    bf16 = Problem(fw, dtype="bfloat16")
    refuse(ropepool, p, POOL_DTYPES, {"v_pool": bf16.v_pool})


# ---- several faults at once: the seed's order decides ------------------------------------------


def test_first_failing_check_in_seed_order_is_reported(ropepool, fw):
    p = Problem(fw)
    flat_pool = p.k_pool.reshape(p.P, p.Hk * p.D)
    refuse(ropepool, p, RANK_QKV, {"q": p.q.reshape(1, p.T, p.Hq, p.D), "k_pool": flat_pool})
    refuse(ropepool, p, RANK_INDEX, {"positions": p.positions.reshape(1, p.T)}, num_qo_heads=9)
    half = Problem(fw, dtype="float16")
    refuse(ropepool, p, Q_SHAPE + "(6, 8, 64)", {"k": half.k}, head_dim=32)
    refuse(ropepool, p, "k_pool has incompatible shape (16, 8, 64)",
           {"k_pool": Problem(fw, Hk=8).k_pool, "v_pool": half.v_pool})


@pytest.mark.parametrize("T", [0, 1])
def test_shapes_are_checked_for_any_token_count(ropepool, fw, T):
    p = Problem(fw, T=T)
    refuse(ropepool, p, Q_SHAPE + f"({T}, 8, 64)", num_qo_heads=p.Hk, num_kv_heads=p.Hq)
