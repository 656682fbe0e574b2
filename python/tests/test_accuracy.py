"""What a successful call computes and writes, against the float64 reference (helpers.check_call):
every dtype, extreme positions, negative slots, no tokens, strided views, pools that are part of a
larger buffer; and the slot values the library refuses."""

import json
import math
import os
import subprocess
import sys

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


def test_float16_outputs_at_the_overflow_threshold_follow_the_header(ropepool):
    """float16's largest finite value is 65504 and values from 65520 round to infinity. The header:
    a float64 result within the error bound of 65520 may come out 65504 or inf (the fast levels
    round through float32, where 65519.9988 lands on 65520); below that band 65504, past it inf,
    on every CPU level. One rotated pair, angle theta at position 1, chosen for each target."""
    xa, xb = 26096.0, 60160.0  # both float16; the pair's largest value, sqrt(xa^2 + xb^2), is 65576.6
    peak = math.atan2(xa, xb)

    def theta_for(target):  # past the peak the value falls: bisect for xb cos + xa sin = target
        lo, hi = peak, peak + 0.5
        for _ in range(200):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if xb * math.cos(mid) + xa * math.sin(mid) > target else (lo, mid)
        return lo

    cases = {"below": (65519.5, {65504.0}), "band": (65519.9988, {65504.0, math.inf}), "past": (65520.5, {math.inf})}
    code = ("import json, sys, numpy as np, ropepool\n"
            "D, j = 128, 5\n"
            "q = np.ones((1, 1, D), np.float16); q[0, 0, j], q[0, 0, j + D // 2] = %r, %r\n"
            "out = {}\n"
            "for name, theta in json.loads(sys.argv[1]).items():\n"
            "    f = np.zeros(D // 2); f[j] = theta\n"
            "    kp = np.zeros((2, 1, D), np.float16)\n"
            "    r = ropepool.rope_pool_fused(q, q, q, np.array([1]), np.array([0]), kp, kp.copy(), head_dim=D,\n"
            "        num_qo_heads=1, num_kv_heads=1, rope_base=1e4, inv_freq=f)\n"
            "    out[name] = [float(r[0][0, 0, j + D // 2]), float(r[1][0, 0, j + D // 2]), float(r[2][0, 0, j + D // 2])]\n"
            "print(json.dumps(out))\n" % (xa, xb))
    thetas = json.dumps({name: theta_for(target) for name, (target, _) in cases.items()})
    ran = []
    for level in ("reference", "portable", "avx2", "avx512", "neon"):
        done = subprocess.run([sys.executable, "-c", code, thetas], env=dict(os.environ, ROPEPOOL_CPU=level),
                              capture_output=True, text=True, timeout=120)
        if done.returncode != 0 and f"ROPEPOOL_CPU={level} is" in done.stderr:
            continue  # a level this build or CPU lacks
        assert done.returncode == 0, done.stderr
        for name, got in json.loads(done.stdout.replace("Infinity", "1e999")).items():
            assert set(got) <= cases[name][1], f"{level}, {name} ({cases[name][0]}): q_rot, k_rot, k_pool = {got}"
        ran.append(level)
    assert ran[:2] == ["reference", "portable"], ran
