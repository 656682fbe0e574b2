"""What a successful call computes and writes, against the float64 reference (helpers.check_call):
every dtype, extreme positions, negative slots, no tokens, strided views, pools that are part of a
larger buffer; and the slot values the library refuses."""

import numpy as np
import pytest

from helpers import Problem, check_call, expect_refusal, fused_qkv, split_qkv

DTYPES = ["float32", "float16", "bfloat16"]
INT32_MAX = 2**31 - 1


def extreme_positions(T, rng):
    """The ends of the int32 range, powers of two around it, and random large positions."""
    fixed = [0, 1, INT32_MAX, INT32_MAX - 1, 2**30, 2**24 + 1, 65535, 500000]
    return np.array((fixed + list(rng.integers(0, INT32_MAX, T)))[:T], dtype=np.int64)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("index_dtype", ["int32", "int64"])
def test_matches_float64_reference_at_positions_up_to_int32_max(ropepool, fw, dtype, index_dtype):
    rng = np.random.default_rng(7)
    T = 37
    p = Problem(fw, T=T, Hq=8, Hk=2, D=128, P=64, dtype=dtype, index_dtype=index_dtype,
                positions=extreme_positions(T, rng), seed=11)
    before = p.snapshot()
    check_call(p, before, p.call(ropepool))


@pytest.mark.parametrize("D", [2, 64, 80, 256])
def test_matches_float64_reference_for_any_even_head_dim(ropepool, fw, D):
    p = Problem(fw, T=9, Hq=4, Hk=1, D=D, P=12, max_pos=INT32_MAX, seed=D)
    before = p.snapshot()
    check_call(p, before, p.call(ropepool))


@pytest.mark.parametrize("rope_base", [10000.0, 500000.0, 1e6])
def test_rope_base_sets_the_frequencies(ropepool, fw, rope_base):
    p = Problem(fw, T=5, max_pos=1 << 20, seed=3)
    before = p.snapshot()
    check_call(p, before, p.call(ropepool, rope_base=rope_base), rope_base=rope_base)


def test_negative_slots_skip_the_pool_write(ropepool, fw):
    p = Problem(fw, T=6, P=8, slots=[3, -1, 0, -1000, 7, -(2**31)], seed=5)
    before = p.snapshot()
    result = p.call(ropepool)
    check_call(p, before, result)  # rows 3, 0 and 7 written; all others untouched


def test_all_slots_negative_writes_no_pool_row_but_still_rotates(ropepool, fw):
    p = Problem(fw, T=4, slots=[-1, -1, -1, -1], seed=6)
    before = p.snapshot()
    check_call(p, before, p.call(ropepool))


def test_zero_tokens_is_a_no_op_that_returns_empty_outputs(ropepool, fw):
    p = Problem(fw, T=0)
    before = p.snapshot()
    q_rot, k_rot, _, _ = result = p.call(ropepool)
    assert tuple(q_rot.shape) == (0, p.Hq, p.D) and tuple(k_rot.shape) == (0, p.Hk, p.D)
    check_call(p, before, result)


def test_decode_single_token(ropepool, fw):
    p = Problem(fw, T=1, Hq=32, Hk=8, D=128, P=4096, max_pos=INT32_MAX, seed=8)
    before = p.snapshot()
    check_call(p, before, p.call(ropepool))


@pytest.mark.parametrize("dtype", DTYPES)
def test_strided_views_of_a_fused_qkv_projection_are_used_in_place(ropepool, fw, dtype):
    p = Problem(fw, T=7, dtype=dtype, max_pos=INT32_MAX, seed=9)
    qkv = fused_qkv(p)
    p.q, p.k, p.v = split_qkv(p, qkv)
    for view in (p.q, p.k, p.v):
        assert fw.shares_memory(view, qkv) and not fw.is_contiguous(view)
    before = p.snapshot(qkv)
    check_call(p, before, p.call(ropepool))
    assert np.array_equal(before[-1], fw.bits(qkv)), "the call wrote into the QKV projection"


def test_head_dim_that_is_not_innermost_contiguous_is_computed_exactly(ropepool, fw):
    # Every other element of a wider buffer: the library's reference path handles it.
    p = Problem(fw, T=5, D=32, seed=10)
    wide = Problem(fw, T=5, D=64, seed=10)
    p.q, p.k, p.v = wide.q[:, :, ::2], wide.k[:, :, ::2], wide.v[:, :, ::2]
    before = p.snapshot()
    check_call(p, before, p.call(ropepool))


def test_reversed_token_order_view(ropepool, fw):
    if fw.name != "numpy":
        pytest.skip("torch has no negative strides")
    p = Problem(fw, T=6, seed=12)
    p.q, p.k, p.v, p.positions = p.q[::-1], p.k[::-1], p.v[::-1], p.positions[::-1]
    before = p.snapshot()
    check_call(p, before, p.call(ropepool))


def test_pool_that_is_one_layer_of_a_larger_buffer(ropepool, fw):
    layers = 3
    p = Problem(fw, T=6, P=16, max_pos=INT32_MAX, seed=13)
    cache = Problem(fw, T=0, Hk=layers * 2 * p.Hk, P=p.P, seed=14)  # garbage of the right dtype
    kv = cache.k_pool.reshape(p.P, layers, 2, p.Hk, p.D)  # [P, layers, k|v, Hk, D] interleaved
    p.k_pool, p.v_pool = kv[:, 1, 0], kv[:, 1, 1]
    before = p.snapshot(kv)
    check_call(p, before, p.call(ropepool))
    old, now = before[-1], fw.bits(kv)
    for layer in (0, 2):
        assert np.array_equal(old[:, layer], now[:, layer]), f"layer {layer} was written"


def test_pool_that_is_one_layer_of_a_layer_major_buffer(ropepool, fw):
    p = Problem(fw, T=6, P=16, seed=15)
    garbage = Problem(fw, T=0, Hk=4 * p.Hk, P=p.P, seed=16).k_pool
    k_cache = garbage.reshape(4, p.P, p.Hk, p.D)  # [layers, P, Hk, D]
    p.k_pool = k_cache[2]
    before = p.snapshot(k_cache)
    check_call(p, before, p.call(ropepool))
    old, now = before[-1], fw.bits(k_cache)
    for layer in (0, 1, 3):
        assert np.array_equal(old[layer], now[layer]), f"layer {layer} was written"


def test_slot_past_the_pool_end_is_refused(ropepool, fw):
    p = Problem(fw, T=6, P=16, slots=[4, 5, 16, 7, 8, 9])
    buffers = p.guard_pools()  # the rows just past the pool end must stay as they are too
    before = [fw.bits(b) for b in buffers]
    kw = p.kwargs(checked=True)  # CUDA checks slot values on the host only when asked
    expect_refusal(ropepool, fw, p.arrays(), kw,
                   "slot 16 of token 2 is out of range for a pool of 16 slots "
                   "(valid: 0 <= slot < 16; negative skips the write)",
                   status="RP_ERR_SLOT_OUT_OF_RANGE")
    assert all(np.array_equal(b, fw.bits(x)) for b, x in zip(before, buffers))


def test_slot_far_past_the_pool_end_is_refused_with_int64_slots(ropepool, fw):
    p = Problem(fw, T=3, P=16, slots=[0, 2**40, 1], index_dtype="int64")
    expect_refusal(ropepool, fw, p.arrays(), p.kwargs(checked=True),
                   "slot 1099511627776 of token 1 is out of range for a pool of 16 slots "
                   "(valid: 0 <= slot < 16; negative skips the write)",
                   status="RP_ERR_SLOT_OUT_OF_RANGE")


def test_duplicate_slots_are_refused(ropepool, fw):
    p = Problem(fw, T=6, P=16, slots=[1, 5, 2, 5, -1, -1])
    expect_refusal(ropepool, fw, p.arrays(), p.kwargs(checked=True),
                   "slot 5 is used by tokens 1 and 3: each slot may be written once per call",
                   status="RP_ERR_DUPLICATE_SLOT")


def test_repeated_negative_slots_are_not_duplicates(ropepool, fw):
    p = Problem(fw, T=5, P=8, slots=[-1, 2, -1, -1, 3])
    before = p.snapshot()
    check_call(p, before, p.call(ropepool, checked=True))
