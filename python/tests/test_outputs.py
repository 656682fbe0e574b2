"""Caller-provided outputs: q_out / k_out receive q_rot / k_rot and are returned; q_out=q and
k_out=k rotate in place; any strides; and every refusal (shape, dtype, device, read-only, overlap
with a pool, an input or each other) names q_out / k_out and writes nothing."""

import re

import numpy as np
import pytest

from helpers import Problem, assert_within_bound, cos_sin, fused_qkv, rotate64, split_qkv


def expected(p):
    """The float64 formula on p's current q and k, and the pool rows the call must write."""
    positions = p.fw.f64(p.positions).astype(np.int64)
    c, s = cos_sin(positions, 500000.0, p.D)
    return rotate64(p.fw.f64(p.q), c, s), rotate64(p.fw.f64(p.k), c, s)


def check_outputs(p, result, q_out, k_out, want, before_pools):
    (q_want, q_mag), (k_want, k_mag) = want
    q_rot, k_rot, k_pool, v_pool = result
    assert q_rot is q_out and k_rot is k_out, "the caller's outputs are returned as themselves"
    assert k_pool is p.k_pool and v_pool is p.v_pool
    getattr(p.fw, "sync", lambda: None)()
    assert_within_bound("q_out", p.fw.f64(q_out), q_want, q_mag, p.dtype)
    assert_within_bound("k_out", p.fw.f64(k_out), k_want, k_mag, p.dtype)
    slots = p.fw.f64(p.slots).astype(np.int64)
    k_bits = p.fw.bits(k_out)
    expected_k = before_pools[0].copy()
    expected_k[slots[slots >= 0]] = k_bits[slots >= 0]
    assert np.array_equal(p.fw.bits(p.k_pool), expected_k), "k_pool rows are not k_out's"


def empty(fw, like):
    return np.empty_like(like) if fw.name == "numpy" else fw.torch.empty_like(like)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_preallocated_outputs_receive_the_rotation_and_are_returned(ropepool, fw, dtype):
    p = Problem(fw, dtype=dtype, max_pos=2**31 - 1)
    want, pools = expected(p), [fw.bits(p.k_pool)]
    q_out, k_out = empty(fw, p.q), empty(fw, p.k)
    before = [fw.bits(x) for x in (p.q, p.k, p.v)]
    check_outputs(p, p.call(ropepool, q_out=q_out, k_out=k_out), q_out, k_out, want, pools)
    assert all(np.array_equal(b, fw.bits(x)) for b, x in zip(before, (p.q, p.k, p.v))), "inputs changed"


def test_q_out_alone_leaves_k_rot_fresh(ropepool, fw):
    p = Problem(fw)
    q_out = empty(fw, p.q)
    q_rot, k_rot, _, _ = p.call(ropepool, q_out=q_out)
    assert q_rot is q_out and k_rot is not p.k and not fw.shares_memory(k_rot, p.k)


def test_outputs_equal_to_q_and_k_rotate_in_place(ropepool, fw):
    p = Problem(fw, max_pos=2**31 - 1)
    want, pools = expected(p), [fw.bits(p.k_pool)]
    check_outputs(p, p.call(ropepool, q_out=p.q, k_out=p.k), p.q, p.k, want, pools)


def test_in_place_on_a_fused_qkv_buffer(ropepool, fw):
    p = Problem(fw, T=5)
    qkv = fused_qkv(p)
    p.q, p.k, p.v = split_qkv(p, qkv)
    want, pools = expected(p), [fw.bits(p.k_pool)]
    check_outputs(p, p.call(ropepool, q_out=p.q, k_out=p.k), p.q, p.k, want, pools)


def test_strided_outputs_are_written_through_their_strides(ropepool, fw):
    p = Problem(fw, T=6, Hq=4, Hk=2, D=32)
    want, pools = expected(p), [fw.bits(p.k_pool)]
    # q_out: every other token of a longer buffer, heads reversed in memory order; k_out: the
    # transpose of a [Hk, T, D] buffer
    big_q = fw.array(np.full((2 * p.T, p.Hq, p.D), 7.0), p.dtype)
    q_out = big_q[::2]
    k_buf = fw.array(np.full((p.Hk, p.T, p.D), 7.0), p.dtype)
    k_out = k_buf.transpose(1, 0, 2) if fw.name == "numpy" else k_buf.permute(1, 0, 2)
    check_outputs(p, p.call(ropepool, q_out=q_out, k_out=k_out), q_out, k_out, want, pools)
    assert np.all(fw.f64(big_q[1::2]) == 7.0), "q_out's gaps were written"


def refused(ropepool, p, message, status="RP_ERR_INVALID_ARGUMENT", **outputs):
    """The call with these outputs (and keywords) raises exactly `message` and writes none of the arrays."""
    fw = p.fw
    watched = p.arrays() + [x for x in outputs.values() if not isinstance(x, str)]
    before = [fw.bits(x) for x in watched]
    with pytest.raises(ropepool.RopePoolError) as info:
        p.call(ropepool, **outputs)
    assert str(info.value) == message
    assert info.value.status == status
    for old, x in zip(before, watched):
        assert np.array_equal(old, fw.bits(x)), "a refused call wrote something"


def test_wrong_output_shape_is_refused_naming_q_out(ropepool, fw):
    p = Problem(fw)
    refused(ropepool, p, f"q_out shape must match q shape, got ({p.T}, {p.Hq}, {p.D // 2}) vs ({p.T}, {p.Hq}, {p.D})",
            q_out=fw.array(np.zeros((p.T, p.Hq, p.D // 2)), p.dtype))


def test_wrong_output_dtype_is_refused_naming_k_out(ropepool, fw):
    p = Problem(fw)
    refused(ropepool, p, "k_out dtype must match k dtype, got float16 vs float32",
            k_out=fw.array(np.zeros((p.T, p.Hk, p.D)), "float16"))


def test_read_only_output_is_refused(ropepool, np_fw):
    p = Problem(np_fw)
    q_out = np.zeros_like(p.q)
    q_out.flags.writeable = False
    refused(ropepool, p, "q_out is read-only, but the call writes it", q_out=q_out)


def test_output_overlapping_a_pool_is_refused(ropepool, fw):
    p = Problem(fw, T=4, P=16)
    k_out = p.k_pool[4:8]  # k's shape [T, Hk, D], inside k_pool's memory
    refused(ropepool, p, "k_out overlaps k_pool: outputs must not share memory", status="RP_ERR_OVERLAP",
            k_out=k_out)


def test_output_overlapping_another_input_is_refused(ropepool, fw):
    p = Problem(fw)
    refused(ropepool, p, "k_out overlaps v: outputs may share memory with inputs only as q_out = q or "
            "k_out = k (same data, shape and strides)", status="RP_ERR_OVERLAP", k_out=p.v)


@pytest.mark.parametrize("input_name", ["inv_freq", "inv_freq float64", "k_scale", "v_scale"])
def test_output_overlapping_an_input_read_as_a_copy_is_refused(ropepool, cpu_fw, input_name):
    """The binding hands the library a float64 copy of inv_freq and a host scale's value, so the
    library's overlap check could not see the caller's array: q_out over inv_freq ran, and the
    rotation overwrote the caller's table. Refused as the library refuses q_norm_weight's overlap,
    nothing written (the caller's array included)."""
    fw = cpu_fw
    p = Problem(fw, T=3, Hq=4, Hk=2, D=16, P=8, dtype="float32")
    name = input_name.split()[0]
    out_name = "k_out" if name == "v_scale" else "q_out"
    like = p.k if out_name == "k_out" else p.q
    out = fw.array(np.full(like.shape, 0.5), "float32")  # the output, read as an input too
    flat = out.reshape(-1)
    if input_name == "inv_freq float64":  # the same bytes as float64 values
        wide = flat.view(np.float64) if fw.name == "numpy" else flat.view(fw.torch.float64)
        extra = {"inv_freq": wide[2:2 + p.D // 2]}
    elif name == "inv_freq":
        extra = {"inv_freq": flat[3:3 + p.D // 2]}
    else:
        extra = {name: flat[5:6], "kv_cache_dtype": "fp8"}
        p.k_pool, p.v_pool = (np.zeros(x.shape, np.uint8) if fw.name == "numpy" else
                              fw.torch.zeros(x.shape, dtype=fw.torch.uint8) for x in (p.k_pool, p.v_pool))
    before = fw.bits(out)
    refused(ropepool, p, f"{out_name} overlaps {name}: outputs must not share memory with inputs",
            status="RP_ERR_OVERLAP", **extra, **{out_name: out})
    assert np.array_equal(before, fw.bits(out))


def test_outputs_overlapping_each_other_are_refused(ropepool, fw):
    p = Problem(fw, Hq=2, Hk=2)
    out = empty(fw, p.k)
    refused(ropepool, p, "k_out overlaps q_out: outputs must not share memory", status="RP_ERR_OVERLAP",
            q_out=out, k_out=out)


def test_output_of_another_framework_is_a_type_error(ropepool, torch_fw):
    p = Problem(torch_fw)
    with pytest.raises(TypeError, match="q_out is a numpy.ndarray but q is a torch.Tensor"):
        p.call(ropepool, q_out=np.zeros((p.T, p.Hq, p.D), np.float32))


@pytest.mark.cuda
def test_output_on_another_device_is_refused(ropepool):
    import helpers

    fw = helpers.make_framework("torch-cuda")
    if not ropepool.has_cuda():
        pytest.skip("this ropepool was built without its CUDA backend")
    p = Problem(fw)
    refused(ropepool, p, "all tensors must be on one device: q_out is on cpu but q is on cuda:0",
            q_out=p.q.cpu())


def test_output_that_requires_grad_is_refused_like_an_in_place_op(ropepool, torch_fw):
    torch = torch_fw.torch
    p = Problem(torch_fw)
    q_out = torch.zeros(p.T, p.Hq, p.D, requires_grad=True)
    with pytest.raises(ropepool.RopePoolError, match="a leaf Variable that requires grad is being used in an "
                       "in-place operation: rope_pool_fused writes q_out in place"):
        p.call(ropepool, q_out=q_out)


def test_written_outputs_have_their_version_bumped(ropepool, torch_fw):
    p = Problem(torch_fw)
    q_out, k_out = torch_fw.torch.empty_like(p.q), torch_fw.torch.empty_like(p.k)
    versions = [x._version for x in (q_out, k_out, p.k_pool, p.v_pool)]
    p.call(ropepool, q_out=q_out, k_out=k_out)
    assert [x._version for x in (q_out, k_out, p.k_pool, p.v_pool)] == [v + 1 for v in versions]


def test_fresh_outputs_are_apart_and_outlive_each_other(ropepool, fw):
    """Fresh q_rot and k_rot (from torch: tensors made around the allocator's blocks in
    native.cpp, not by at::empty) have q's and k's shapes and dtypes, are contiguous, do not
    overlap, and each keeps its values while the other is written or freed and its memory handed
    out again."""
    p = Problem(fw, dtype="bfloat16" if fw.name != "numpy" else "float32")
    q_rot, k_rot, _, _ = p.call(ropepool)
    check_fresh(p, (q_rot, k_rot))
    assert [fw.dtype_name(x) for x in (q_rot, k_rot)] == [fw.dtype_name(p.q), fw.dtype_name(p.k)]
    assert tuple(q_rot.shape) == tuple(p.q.shape) and tuple(k_rot.shape) == tuple(p.k.shape)
    assert fw.is_contiguous(q_rot) and fw.is_contiguous(k_rot)
    assert not fw.shares_memory(q_rot, k_rot)
    k_bits = fw.bits(k_rot)
    q_rot[...] = 7
    fw.sync()
    assert np.array_equal(fw.bits(k_rot), k_bits), "writing q_rot changed k_rot"
    k_rot[...] = 5
    fw.sync()
    assert np.all(fw.f64(q_rot) == 7), "writing k_rot changed q_rot"
    del q_rot
    others = [empty(fw, p.q) for _ in range(8)]
    for other in others:
        other[...] = 1
    fw.sync()
    assert np.all(fw.f64(k_rot) == 5), "k_rot's memory was handed out when q_rot was freed"


def test_fresh_torch_outputs_are_what_torch_empty_makes(ropepool, fw):
    """native.cpp makes fresh tensors without at::empty: they must still be plain tensors of q's
    device with a version counter outside inference mode and inference tensors inside it, and on
    CUDA come from torch's caching allocator (counted by memory_allocated, freed with them)."""
    if fw.name == "numpy":
        pytest.skip("torch's tensors only")
    torch = fw.torch
    p = Problem(fw, dtype="bfloat16")
    p.call(ropepool)  # the context (and on CUDA its tables) made: what stays allocated is not counted
    before = torch.cuda.memory_allocated() if fw.is_cuda else 0
    q_rot, k_rot, _, _ = p.call(ropepool)
    for x, like in ((q_rot, p.q), (k_rot, p.k)):
        assert type(x) is torch.Tensor and x.device == like.device and x.layout == torch.strided
        assert not x.requires_grad and x.is_leaf and x._version == 0 and not x.is_inference()
        assert x.storage_offset() == 0 and x.untyped_storage().nbytes() == x.numel() * x.element_size()
    if fw.is_cuda:
        grown = torch.cuda.memory_allocated() - before
        assert grown >= q_rot.numel() * 2 + k_rot.numel() * 2, "the outputs are not torch's memory"
        del q_rot, k_rot, x  # x: k_rot still, after the loop
        assert torch.cuda.memory_allocated() == before, "the outputs' memory was not given back"
    with torch.inference_mode():
        q_inf, k_inf, _, _ = p.call(ropepool)
        assert q_inf.is_inference() and k_inf.is_inference()
    check_fresh(p, (q_inf, k_inf))


def large_problem(fw, seed):
    """Fresh q_rot and k_rot of 4 MiB and more: served by the binding's cache of freed outputs'
    blocks (python/src/fresh_memory.c)."""
    T = 520
    return Problem(fw, T=T, Hq=32, Hk=32, D=64, P=T, seed=seed)


def check_fresh(p, result):
    (q_want, q_mag), (k_want, k_mag) = expected(p)
    assert_within_bound("q_rot", p.fw.f64(result[0]), q_want, q_mag, p.dtype)
    assert_within_bound("k_rot", p.fw.f64(result[1]), k_want, k_mag, p.dtype)


def data_ptr(fw, x):
    return x.ctypes.data if fw.name == "numpy" else x.data_ptr()


def test_large_fresh_outputs_reuse_freed_blocks_and_are_all_rewritten(ropepool, cpu_fw):
    first = large_problem(cpu_fw, seed=1)
    result = first.call(ropepool)
    check_fresh(first, result)
    assert result[0].shape == first.q.shape and result[0].dtype == first.q.dtype
    addresses = {data_ptr(cpu_fw, result[0]), data_ptr(cpu_fw, result[1])}
    del result
    second = large_problem(cpu_fw, seed=2)  # other values: a stale row of the first call would show
    result = second.call(ropepool)
    assert {data_ptr(cpu_fw, result[0]), data_ptr(cpu_fw, result[1])} == addresses, \
        "a freed output's block was not reused"
    check_fresh(second, result)
    result[0][0, 0, 0] = 1.0  # writable, as any fresh output
    assert result[0].is_contiguous() if cpu_fw.name == "torch" else result[0].flags["C_CONTIGUOUS"]


def test_a_smaller_fresh_output_reuses_a_larger_freed_block(ropepool, cpu_fw):
    # An engine's T changes from call to call: the outputs of a shorter call take the blocks the
    # longer one freed (4 MiB against 6 MiB rounded up to huge pages) instead of new pages.
    first = large_problem(cpu_fw, seed=1)
    result = first.call(ropepool)
    addresses = {data_ptr(cpu_fw, result[0]), data_ptr(cpu_fw, result[1])}
    del result
    shorter = Problem(cpu_fw, T=512, Hq=32, Hk=32, D=64, P=512, seed=6)
    result = shorter.call(ropepool)
    assert {data_ptr(cpu_fw, result[0]), data_ptr(cpu_fw, result[1])} == addresses, \
        "a larger freed block was not reused"
    assert result[0].shape == shorter.q.shape and result[1].shape == shorter.k.shape
    check_fresh(shorter, result)


def test_a_view_of_a_fresh_output_keeps_its_block(ropepool, cpu_fw):
    first = large_problem(cpu_fw, seed=1)
    q_rot, k_rot, _, _ = first.call(ropepool)
    view, kept = q_rot[3:], cpu_fw.bits(q_rot[3:]).copy()
    del q_rot, k_rot
    second = large_problem(cpu_fw, seed=2)
    result = second.call(ropepool)
    assert not cpu_fw.shares_memory(result[0], view) and not cpu_fw.shares_memory(result[1], view)
    assert np.array_equal(cpu_fw.bits(view), kept), "a live view's memory was handed to another output"
    check_fresh(second, result)


def test_the_output_cache_turns_off_with_a_zero_budget(ropepool, np_fw, monkeypatch):
    monkeypatch.setenv("ROPEPOOL_OUTPUT_CACHE_MB", "0")
    p = large_problem(np_fw, seed=3)
    result = p.call(ropepool)
    assert result[0].base is None and result[0].flags["OWNDATA"], "the output came from the cache"
    check_fresh(p, result)


@pytest.mark.parametrize("setting", ["lots", "-1", "1.5", str(2**31)])
def test_an_unreadable_output_cache_budget_is_refused_naming_it(ropepool, cpu_fw, monkeypatch, setting):
    monkeypatch.setenv("ROPEPOOL_OUTPUT_CACHE_MB", setting)
    p = large_problem(cpu_fw, seed=4)
    before = [cpu_fw.bits(x).copy() for x in (p.k_pool, p.v_pool)]
    with pytest.raises(ropepool.RopePoolError, match=f"ROPEPOOL_OUTPUT_CACHE_MB .*got '{re.escape(setting)}'"):
        p.call(ropepool)
    assert all(np.array_equal(b, cpu_fw.bits(x)) for b, x in zip(before, (p.k_pool, p.v_pool))), \
        "a refused call wrote a pool"


@pytest.mark.parametrize("setting", ["bogus", "Cache", ""])
def test_an_unknown_fresh_output_strategy_is_refused_naming_it(ropepool, cpu_fw, monkeypatch, setting):
    monkeypatch.setenv("ROPEPOOL_FRESH_OUTPUTS", setting)
    p = large_problem(cpu_fw, seed=5)
    before = [cpu_fw.bits(x).copy() for x in (p.k_pool, p.v_pool)]
    with pytest.raises(ropepool.RopePoolError) as info:
        p.call(ropepool)
    assert str(info.value) == ("ROPEPOOL_FRESH_OUTPUTS must be cache, huge, populate, huge+populate or none, "
                               f"got '{setting}'")
    assert all(np.array_equal(b, cpu_fw.bits(x)) for b, x in zip(before, (p.k_pool, p.v_pool))), \
        "a refused call wrote a pool"
