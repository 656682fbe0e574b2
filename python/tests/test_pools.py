"""The pool keywords end to end: kv_layout (flat, NHD, HND paged pools), v_head_dim, fp8 pools
(typed float8 arrays, or uint8 with kv_cache_dtype), k_scale / v_scale (numbers, one-element
arrays); checked against the float64 formula and fp8 rounding in helpers.py, and bad values
refused naming the argument and the value, with nothing written."""

import numpy as np
import pytest

from helpers import (Problem, assert_unchanged, assert_within_bound, call_or_skip_on_cuda, cos_sin, expect_refusal, fp8_neighbours_ok,
                     ml_dtypes, pool_rows, readme_blocks, representable, rotate64, rotate_general)


@pytest.fixture
def kvpool(ropepool, np_fw):
    """Skips the test when this libropepool predates paged and fp8 pools (it answers
    RP_ERR_UNSUPPORTED for any kv_layout but flat, where a library that has them checks the pools'
    rank)."""
    p = Problem(np_fw, T=1, P=4)
    try:
        p.call(ropepool, kv_layout="NHD")
    except ropepool.RopePoolError as e:
        if e.status == "RP_ERR_UNSUPPORTED":
            pytest.skip(f"this libropepool has no paged or fp8 pools yet: {e}")


def paged(fw, P, Hk, D, layout, block_size, dtype, fill, seed=5):
    rng = np.random.default_rng(seed)
    blocks = P // block_size
    shape = (blocks, block_size, Hk, D) if layout == "NHD" else (blocks, Hk, block_size, D)
    return fw.array(representable(rng.uniform(-fill, fill, shape), dtype), dtype)


def to_np(fw, x):
    return x if fw.name == "numpy" else x.detach().cpu()


@pytest.mark.parametrize("layout", ["NHD", "HND"])
def test_paged_pools_receive_rows_at_block_and_offset(ropepool, kvpool, fw, layout):
    p = Problem(fw, T=6, Hq=4, Hk=2, D=32, P=32, max_pos=2**31 - 1)
    block = 8
    p.k_pool, p.v_pool = (paged(fw, p.P, p.Hk, p.D, layout, block, p.dtype, 9, seed=s) for s in (5, 6))
    before = p.snapshot()
    q_rot, k_rot, k_pool, v_pool = call_or_skip_on_cuda(ropepool, p, kv_layout=layout)
    assert k_pool is p.k_pool and v_pool is p.v_pool
    getattr(fw, "sync", lambda: None)()
    positions, slots = fw.f64(p.positions).astype(np.int64), fw.f64(p.slots).astype(np.int64)
    c, s = cos_sin(positions, 500000.0, p.D)
    for name, out, x in (("q_rot", q_rot, p.q), ("k_rot", k_rot, p.k)):
        want, mag = rotate64(fw.f64(x), c, s)
        assert_within_bound(name, fw.f64(out), want, mag, p.dtype)
    for pool, old, rows in ((p.k_pool, before[5], fw.bits(k_rot)), (p.v_pool, before[6], fw.bits(p.v))):
        want = old.copy()
        for t, view in enumerate(pool_rows(want, slots, layout, block)):
            view[...] = rows[t]
        assert np.array_equal(fw.bits(pool), want), f"{layout} pool rows"


def test_paged_layout_with_flat_pools_is_refused_by_the_library(ropepool, kvpool, fw):
    p = Problem(fw)
    with pytest.raises(ropepool.RopePoolError, match="kv_layout NHD expects 4-D pools"):
        p.call(ropepool, kv_layout="NHD")


def test_v_head_dim_sets_the_width_of_v_and_v_pool(ropepool, kvpool, fw):
    p = Problem(fw, T=4, Hq=4, Hk=2, D=32, P=8)
    wide = Problem(fw, T=4, Hq=4, Hk=2, D=48, P=8, seed=7)
    p.v, p.v_pool = wide.v, wide.v_pool
    before = p.snapshot()
    _, k_rot, _, _ = call_or_skip_on_cuda(ropepool, p, v_head_dim=48)
    slots = fw.f64(p.slots).astype(np.int64)
    want = before[6].copy()
    want[slots] = fw.bits(p.v)
    assert np.array_equal(fw.bits(p.v_pool), want)


FP8 = ["float8_e4m3fn", "float8_e5m2"]


def fp8_pools(fw, P, Hk, D, fp8_name, typed):
    """Zeroed fp8 pools: float8 arrays of the framework, or their uint8 storage."""
    if fw.name == "numpy":
        if ml_dtypes is None:
            pytest.skip("NumPy fp8 pools need ml_dtypes")
        dt = np.uint8 if not typed else getattr(ml_dtypes, fp8_name)
        return np.zeros((P, Hk, D), dt), np.zeros((P, Hk, D), dt)
    torch = fw.torch
    dt = torch.uint8 if not typed else getattr(torch, fp8_name)
    return (torch.zeros((P, Hk, D), dtype=dt, device=fw.device), torch.zeros((P, Hk, D), dtype=dt, device=fw.device))


def pool_codes(fw, pool):
    x = to_np(fw, pool)
    if fw.name == "numpy":
        return np.ascontiguousarray(x).view(np.uint8)
    return x.contiguous().view(fw.torch.uint8).numpy()


@pytest.mark.parametrize("fp8_name", FP8)
@pytest.mark.parametrize("typed", [True, False])
@pytest.mark.parametrize("scales", ["numbers", "arrays"])
def test_fp8_pools_hold_the_rounded_scaled_values(ropepool, kvpool, fw, fp8_name, typed, scales):
    if ml_dtypes is None:
        pytest.skip("the fp8 reference needs ml_dtypes")
    p = Problem(fw, T=5, Hq=4, Hk=2, D=32, P=8, max_pos=2**20)
    p.k_pool, p.v_pool = fp8_pools(fw, p.P, p.Hk, p.D, fp8_name, typed)
    kv_cache_dtype = "auto" if typed else ("fp8_e4m3" if fp8_name == "float8_e4m3fn" else "fp8_e5m2")
    k_scale, v_scale = 0.0625, 0.25  # powers of two: v / v_scale is exact, so V is exact
    if scales == "arrays":
        k_scale = np.array([k_scale], np.float32) if fw.name == "numpy" else fw.torch.tensor([k_scale], device=fw.device)
        v_scale = np.array(v_scale) if fw.name == "numpy" else fw.torch.tensor(v_scale, dtype=fw.torch.float64)
    q_rot, k_rot, _, _ = call_or_skip_on_cuda(ropepool, p, kv_cache_dtype=kv_cache_dtype, k_scale=k_scale,
                                              v_scale=v_scale)
    getattr(fw, "sync", lambda: None)()
    positions, slots = fw.f64(p.positions).astype(np.int64), fw.f64(p.slots).astype(np.int64)
    c, s = cos_sin(positions, 500000.0, p.D)
    k_want, k_mag = rotate64(fw.f64(p.k), c, s)
    assert_within_bound("k_rot", fw.f64(k_rot), k_want, k_mag, p.dtype)
    k_codes, v_codes = pool_codes(fw, p.k_pool), pool_codes(fw, p.v_pool)
    err = 2.0**-21 * k_mag + 2.0**-20 * np.abs(k_want)  # the kernel's float32 arithmetic, then the scaling
    ok = fp8_neighbours_ok(k_codes[slots], k_want / 0.0625, err / 0.0625, fp8_name)
    assert ok.all(), f"k_pool fp8 codes off at {np.argwhere(~ok)[:3].tolist()}"
    v_want = fw.f64(p.v) / 0.25
    ok = fp8_neighbours_ok(v_codes[slots], v_want, np.zeros_like(v_want), fp8_name)
    assert ok.all(), "v_pool must hold fp8(v / v_scale) exactly"
    untouched = np.setdiff1d(np.arange(p.P), slots)
    assert not k_codes[untouched].any() and not v_codes[untouched].any(), "rows without a slot were written"


@pytest.mark.parametrize("kwargs, message", [
    (dict(kv_layout="nhd"), "kv_layout must be one of 'flat' ([P, Hk, D]), 'NHD' ([blocks, block_size, Hk, D]) "
     "or 'HND' ([blocks, Hk, block_size, D]), got 'nhd'"),
    (dict(kv_layout=1), "kv_layout must be one of 'flat' ([P, Hk, D]), 'NHD' ([blocks, block_size, Hk, D]) "
     "or 'HND' ([blocks, Hk, block_size, D]), got 1"),
    (dict(kv_cache_dtype="fp4"), "kv_cache_dtype must be one of 'auto', 'fp8_e4m3' (or vLLM's 'fp8') or "
     "'fp8_e5m2', got 'fp4'"),
    (dict(kv_cache_dtype="fp8"), "kv_cache_dtype='fp8' needs fp8 pools (uint8, float8_e4m3fn or float8_e5m2), "
     "got k_pool float32"),
    (dict(k_scale="one"), None),
    (dict(k_scale=np.ones(2, np.float32)), "k_scale must be a number or a one-element float32 array (float64 on "
     "the host), got 2 elements of float32"),
    (dict(v_scale=np.ones(1, np.int32)), "v_scale must be a number or a one-element float32 array (float64 on "
     "the host), got 1 element of int32"),
])
def test_bad_pool_values_are_named(ropepool, np_fw, kwargs, message):
    p = Problem(np_fw)
    if message is None:
        with pytest.raises(TypeError, match="k_scale must be a number, got str"):
            p.call(ropepool, **kwargs)
        return
    expect_refusal(ropepool, np_fw, p.arrays(), p.kwargs(**kwargs), message)


def test_uint8_pools_need_kv_cache_dtype(ropepool, fw):
    p = Problem(fw)
    p.k_pool, p.v_pool = fp8_pools(fw, p.P, p.Hk, p.D, "float8_e4m3fn", typed=False)
    expect_refusal(ropepool, fw, p.arrays(), p.kwargs(), "k_pool is uint8: say which fp8 format it stores with "
                   "kv_cache_dtype='fp8_e4m3' (or 'fp8') or 'fp8_e5m2'")
    # the seed's checks come first, as for every other pool dtype
    arrays = p.arrays()
    arrays[0] = p.q.reshape(p.T, p.Hq * p.D)
    expect_refusal(ropepool, fw, arrays, p.kwargs(), "rope_pool_fused expects q/k/v to be 3-D")


def test_typed_fp8_pools_must_match_kv_cache_dtype(ropepool, fw):
    p = Problem(fw)
    p.k_pool, p.v_pool = fp8_pools(fw, p.P, p.Hk, p.D, "float8_e4m3fn", typed=True)
    expect_refusal(ropepool, fw, p.arrays(), p.kwargs(kv_cache_dtype="fp8_e5m2"),
                   "kv_cache_dtype='fp8_e5m2' does not match k_pool's dtype float8_e4m3fn")


@pytest.mark.parametrize("name", ["k_scale", "v_scale"])
@pytest.mark.parametrize("scalar", ["complex64", "complex128", "clongdouble"])
@pytest.mark.parametrize("via", ["direct", "operator"])
def test_complex_scale_is_refused_not_truncated_to_its_real_part(ropepool, fw, name, scalar, via):
    """NumPy's complex scalars convert to float by dropping the imaginary part (a ComplexWarning
    only): k_scale=np.complex128(0.5 + 1j) ran with 0.5. A complex scale is refused, as Python's
    complex is, by the direct call and the torch operator's, and nothing is written."""
    if via == "operator" and fw.name != "torch":
        pytest.skip("the operator takes torch tensors")
    p = Problem(fw, T=2, Hq=2, Hk=1, D=16, P=4)
    p.k_pool, p.v_pool = fp8_pools(fw, p.P, p.Hk, p.D, "float8_e4m3fn", typed=False)
    before = p.snapshot()
    if via == "direct":
        call = ropepool.rope_pool_fused
    else:
        from ropepool import torch_op
        call = torch_op.call_op
    with pytest.raises(TypeError, match=f"^{name} must be a number, got (numpy\\.)?{scalar}$"):
        call(*p.arrays(), **p.kwargs(kv_cache_dtype="fp8", **{name: getattr(np, scalar)(0.5 + 1j)}))
    assert_unchanged(p, before)


def test_operator_reads_a_reversed_numpy_scale_as_the_direct_call_does(ropepool, torch_fw):
    """A one-element NumPy scale viewed reversed has a negative stride: the direct call reads its
    value, and call_op (what Dynamo traces) raised torch.as_tensor's ValueError."""
    from ropepool import torch_op

    p = Problem(torch_fw, T=2, Hq=2, Hk=1, D=16, P=4)
    p.k_pool, p.v_pool = fp8_pools(torch_fw, p.P, p.Hk, p.D, "float8_e4m3fn", typed=False)
    results = []
    for call in (ropepool.rope_pool_fused, torch_op.call_op):
        pools = [x.clone() for x in (p.k_pool, p.v_pool)]
        scale = np.array([0.25, 0.5], np.float32)[:0:-1]
        q_rot, k_rot = call(*p.arrays()[:5], *pools, **p.kwargs(kv_cache_dtype="fp8", k_scale=scale))[:2]
        results.append([torch_fw.bits(x) for x in (q_rot, k_rot, *pools)])
    for direct, traced in zip(*results):
        assert np.array_equal(direct, traced)


@pytest.mark.parametrize("value", ["two elements", "complex", "meta"])
def test_number_given_as_a_tensor_that_has_no_float_is_named(ropepool, torch_fw, value):
    """torch's own ValueError or RuntimeError ('only one element tensors can be converted to Python
    scalars') reached the caller naming neither the argument nor what it must be."""
    torch = torch_fw.torch
    p = Problem(torch_fw)
    given = {"two elements": torch.tensor([1e4, 2e4]), "complex": torch.tensor(1e4 + 1j),
             "meta": torch.tensor(1e4, device="meta")}[value]
    before = p.snapshot()
    with pytest.raises(TypeError, match=r"^rope_base must be a number, got torch\.Tensor \(.+\)$"):
        p.call(ropepool, rope_base=given)
    assert_unchanged(p, before)


def test_scale_array_of_a_dtype_ropepool_cannot_name_is_named(ropepool, fw):
    """A one-element complex scale array was refused as "1 element of an unsupported type": the
    message names its dtype, as the arrays' own refusal does."""
    p = Problem(fw, T=2, Hq=2, Hk=1, D=16, P=4)
    p.k_pool, p.v_pool = fp8_pools(fw, p.P, p.Hk, p.D, "float8_e4m3fn", typed=True)
    if fw.name == "numpy":
        scale, dtype = np.array([0.5 + 1j]), "complex128"
    else:
        scale, dtype = fw.torch.tensor([0.5 + 1j], device=fw.device), "torch.complex64"
    expect_refusal(ropepool, fw, p.arrays(), p.kwargs(v_scale=scale), "v_scale must be a number or a one-element "
                   f"float32 array (float64 on the host), got 1 element of {dtype}")


def test_operator_scale_too_large_for_a_double_is_named(ropepool, torch_fw):
    """The torch operator turned k_scale=10**400 into a bare OverflowError; the direct call's
    RopePoolError names the argument and the value, and so does the operator's now."""
    from ropepool import torch_op
    p = Problem(torch_fw, T=2, Hq=2, Hk=1, D=16, P=4)
    p.k_pool, p.v_pool = fp8_pools(torch_fw, p.P, p.Hk, p.D, "float8_e4m3fn", typed=True)
    message = ("k_scale must be a finite number, got 1000000000000000... (401 characters), too large "
               "for a float64")
    for call in (ropepool.rope_pool_fused, torch_op.call_op):
        before = p.snapshot()
        with pytest.raises(ropepool.RopePoolError) as info:
            call(*p.arrays(), **p.kwargs(k_scale=10**400))
        assert str(info.value) == message
        assert_unchanged(p, before)


def test_cuda_scale_tensor_on_a_cpu_call_is_refused(ropepool, torch_fw):
    torch = torch_fw.torch
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    p = Problem(torch_fw)
    expect_refusal(ropepool, torch_fw, p.arrays(), p.kwargs(k_scale=torch.ones(1, device="cuda")),
                   "k_scale is on cuda:0 but the call runs on the CPU: pass a number or a CPU array")


def test_readme_fp8_cache_example_runs_as_written(ropepool):
    """The README's fp8 lines after its paged example: each row its slots name holds fp8(k_rot /
    0.05) and fp8(v / 0.05), rounded once from the value (or its neighbour across a midpoint within
    k_rot's own rounding), every other byte zero."""
    torch = pytest.importorskip("torch")
    paged_code, fp8_code = readme_blocks("### A vLLM-style paged cache, and FlashInfer's")
    namespace = {}
    exec(compile(paged_code, "README.md (paged cache)", "exec"), namespace)
    exec(compile(fp8_code, "README.md (fp8 cache)", "exec"), namespace)
    ns = type("ns", (), namespace)
    blocks, rows = ns.slot_mapping // ns.block_size, ns.slot_mapping % ns.block_size
    codes = ns.fp8_cache.view(torch.uint8).numpy()
    k_rot = ns.k_rot.double().numpy()
    err = np.abs(k_rot) * 2.0**-23 / 0.05  # the float32 k_rot's own rounding, scaled
    assert fp8_neighbours_ok(codes[blocks, 0, rows], k_rot / 0.05, err, "float8_e4m3fn").all()
    v = ns.v.double().numpy()
    assert fp8_neighbours_ok(codes[blocks, 1, rows], v / 0.05, 0 * v, "float8_e4m3fn").all()
    written = np.zeros((ns.num_blocks, ns.block_size), bool)
    written[blocks, rows] = True
    assert not codes.transpose(0, 2, 1, 3, 4)[~written].any()


def test_readme_mla_example_runs_as_written(ropepool):
    """The README's DeepSeek MLA call: each slot's latent row holds c_kv bit for bit and the
    rotated k_pe, q_pe is rotated in place inside q (GPT-J pairs with hf_rope_kwargs' table, within
    the float64 formula's bound) and q_nope is untouched; other rows stay zero."""
    (code,) = readme_blocks("### DeepSeek MLA: the latent cache row")
    namespace = {}
    exec(compile(code, "README.md (DeepSeek MLA)", "exec"), namespace)
    ns = type("ns", (), namespace)
    kw = ns.ropepool.hf_rope_kwargs(ns.deepseek_v3)
    assert not kw["is_neox"] and kw["rotary_dim"] == 64
    rng = np.random.default_rng(0)  # the example's draws, before the call rotated them in place
    q0, k_pe0 = rng.standard_normal((ns.T, 128, 192), dtype=np.float32), rng.standard_normal((ns.T, 1, 64), dtype=np.float32)
    rotate = lambda x: rotate_general(x, ns.positions, kw["inv_freq"], False, kw["attention_scaling"])  # noqa: E731
    assert_within_bound("q_pe", ns.q_full[..., 128:].astype(np.float64), *rotate(q0[..., 128:]), "float32")
    assert np.array_equal(ns.q_full[..., :128], q0[..., :128])
    assert_within_bound("k_pe", ns.k_pe.astype(np.float64), *rotate(k_pe0), "float32")
    assert np.array_equal(ns.cache[ns.slots, :, 512:], ns.k_pe) and np.array_equal(ns.cache[ns.slots, :, :512], ns.c_kv)
    others = np.ones(ns.P, bool)
    others[ns.slots] = False
    assert not ns.cache[others].any()


def test_readme_paged_cache_example_runs_as_written(ropepool):
    """The README's vLLM / FlashInfer example: the rows its slots name hold the rotated keys and
    the values, every other byte of both caches stays zero."""
    torch = pytest.importorskip("torch")
    code = readme_blocks("### A vLLM-style paged cache, and FlashInfer's")[0]
    namespace = {}
    exec(compile(code, "README.md (paged cache)", "exec"), namespace)
    ns = type("ns", (), namespace)
    blocks, rows = ns.slot_mapping // ns.block_size, ns.slot_mapping % ns.block_size
    assert torch.equal(ns.key_cache[blocks, rows], ns.k) and torch.equal(ns.value_cache[blocks, rows], ns.v)
    assert torch.equal(ns.k_pages[blocks, :, rows], ns.k_rot) and torch.equal(ns.v_pages[blocks, :, rows], ns.v)
    written = torch.zeros(ns.num_blocks, ns.block_size, dtype=torch.bool)
    written[blocks, rows] = True
    assert not ns.kv_cache.permute(0, 2, 1, 3, 4)[~written].any()
    assert not ns.k_pages.permute(0, 2, 1, 3)[~written].any() and not ns.v_pages.permute(0, 2, 1, 3)[~written].any()
    # k was rotated in place by the first call (vLLM's rotary_embedding is in place): the second
    # call rotated the rotated keys again, so its k_rot differs from the cached k.
    assert not torch.equal(ns.k_rot, ns.k)
