"""ropepool.mlx: the seed's call on mx.arrays, lazy, pools shared, against the float64 formula.

Each result is checked as the contract states it: q_rot and k_rot within ulp(dtype) + 8 * 2^-24 *
s * (|x_a| + |x_b|) of the formula in float64, pool rows slots[t] bit-equal to k_rot[t] and v[t],
every other row and every input unchanged. The variant keywords run when this build's library
implements them (the lead's merge of the variants work); until then those tests skip saying so.
"""

import inspect
import math
import re
import types

import numpy as np
import pytest

import helpers
from helpers import Problem, assert_within_bound

mx = pytest.importorskip("mlx.core", reason="mlx is not installed (pip install -r python/requirements-test.txt)")
import ropepool  # noqa: E402
import ropepool.mlx  # noqa: E402  (mlx is installed: the extension must be there too)

import test_seed_errors  # noqa: E402

DTYPES = ["float32", "float16", "bfloat16"]
BASE = helpers.SEED_CALL["rope_base"]


@pytest.fixture
def mlx_fw():
    return helpers.make_framework("mlx")


def rope64(x, positions, freqs=None, is_neox=True, scaling=1.0):
    """helpers.rotate_general, with the seed's frequencies over the whole head by default."""
    freqs = helpers.default_inv_freq(BASE, x.shape[-1]) if freqs is None else freqs
    return helpers.rotate_general(x, positions, freqs, is_neox, scaling)


def check(p, before, result, freqs=None, is_neox=True, scaling=1.0):
    """Everything a successful call promises (see the module docstring); `before` is p.snapshot()."""
    fw = p.fw
    freqs = helpers.default_inv_freq(BASE, p.D) if freqs is None else freqs
    R = 2 * len(freqs)
    q_rot, k_rot, k_pool, v_pool = result
    for out, like in ((q_rot, p.q), (k_rot, p.k), (k_pool, p.k_pool), (v_pool, p.v_pool)):
        assert fw.is_array(out) and out.shape == like.shape and out.dtype == like.dtype
    for name, old, x in zip(helpers.ARG_NAMES[:5], before[:5], p.arrays()[:5]):
        assert np.array_equal(old, fw.bits(x)), f"the call changed its input {name}"
    positions = fw.f64(p.positions).astype(np.int64)
    for name, out, x in (("q_rot", q_rot, p.q), ("k_rot", k_rot, p.k)):
        x64 = fw.f64(x)
        want, mag = rope64(x64, positions, freqs, is_neox, scaling)
        assert_within_bound(name, fw.f64(out), want, mag, p.dtype)
        assert np.array_equal(fw.bits(out)[..., R:], fw.bits(x)[..., R:]), f"{name} pass-through dims changed"
    slots = fw.f64(p.slots).astype(np.int64)
    for name, pool, old, rows in (("k_pool", k_pool, before[5], fw.bits(k_rot)), ("v_pool", v_pool, before[6], fw.bits(p.v))):
        expected = old.copy()
        for t, slot in enumerate(slots):
            if slot >= 0:
                expected[slot] = rows[t]
        assert np.array_equal(fw.bits(pool), expected), f"{name} rows differ from the contract"


def call(p, *arrays, **overrides):
    return p.call(ropepool.mlx, *arrays, **overrides)


# ---- the seed's call ---------------------------------------------------------------------------


def test_readme_mlx_example_runs_as_written():
    """The README's MLX lines, on the arrays of its Python example: the same bits as that NumPy
    call, and the pools returned hold its rows."""
    namespace = {}
    exec(compile(helpers.readme_blocks("## Python")[0], "README.md (## Python)", "exec"), namespace)
    numpy_q_rot, numpy_k_pool = namespace["q_rot"], namespace["k_pool"].copy()
    exec(compile(helpers.readme_blocks("## MLX")[0], "README.md (## MLX)", "exec"), namespace)
    assert isinstance(namespace["q_rot"], mx.array)
    assert np.array_equal(np.array(namespace["q_rot"]), numpy_q_rot)
    slots = np.array(namespace["slots"])
    assert np.array_equal(np.array(namespace["k_pool"])[slots], numpy_k_pool[slots])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("T, Hq, Hk, D, P", [(1, 32, 8, 128, 64), (6, 8, 2, 64, 16), (33, 4, 4, 256, 40)])
def test_results_match_the_float64_formula(mlx_fw, dtype, T, Hq, Hk, D, P):
    p = Problem(mlx_fw, T=T, Hq=Hq, Hk=Hk, D=D, P=P, dtype=dtype)
    before = p.snapshot()
    result = call(p)
    mx.eval(*result)
    check(p, before, result)


@pytest.mark.parametrize("index_dtype", ["int32", "int64"])
def test_negative_slots_skip_their_write_and_int64_indices_work(mlx_fw, index_dtype):
    p = Problem(mlx_fw, T=5, P=8, index_dtype=index_dtype, slots=[3, -1, 0, -7, 5],
                positions=[0, 1, 2**31 - 1, 9, 70000])
    before = p.snapshot()
    result = call(p)
    check(p, before, result)


def test_strided_views_of_a_fused_qkv_projection_are_read_in_place(mlx_fw):
    p = Problem(mlx_fw, T=7, dtype="float16")
    p.q, p.k, p.v = helpers.split_qkv(p, helpers.fused_qkv(p))
    before = p.snapshot()
    check(p, before, call(p))


def test_sglang_decode_loop_rebinding_the_pools(mlx_fw):
    """Two sequences decode 12 steps, one token each per step: call, rebind the returned pools,
    and at the end read every step's rows back from the last pools."""
    fw, Hq, Hk, D, P, steps = mlx_fw, 8, 2, 64, 64, 12
    start = Problem(fw, T=0, Hq=Hq, Hk=Hk, D=D, P=P, dtype="bfloat16", seed=5)
    k_pool, v_pool = start.k_pool, start.v_pool
    initial_k, initial_v = fw.bits(k_pool), fw.bits(v_pool)
    written = {}
    for step in range(steps):
        positions, slots = [100 + step, step], [step, 32 + step]
        p = Problem(fw, T=2, Hq=Hq, Hk=Hk, D=D, P=P, dtype="bfloat16", positions=positions, slots=slots, seed=step)
        q_rot, k_rot, k_pool, v_pool = p.call(ropepool.mlx, p.q, p.k, p.v, p.positions, p.slots, k_pool, v_pool)
        want_q, mag = rope64(fw.f64(p.q), np.array(positions))
        assert_within_bound(f"q_rot of step {step}", fw.f64(q_rot), want_q, mag, "bfloat16")
        for t, slot in enumerate(slots):
            written[slot] = (fw.f64(p.k)[t], positions[t], fw.bits(p.v)[t])
    k_rows, v_rows = fw.bits(k_pool), fw.bits(v_pool)
    k64 = fw.f64(k_pool)
    for slot in range(P):
        if slot not in written:
            assert np.array_equal(k_rows[slot], initial_k[slot]) and np.array_equal(v_rows[slot], initial_v[slot])
            continue
        k, position, v_bits = written[slot]
        want, mag = rope64(k[None], np.array([position]))
        assert_within_bound(f"k_pool[{slot}]", k64[slot][None], want, mag, "bfloat16")
        assert np.array_equal(v_rows[slot], v_bits), f"v_pool[{slot}]"


def test_results_are_lazy_and_compose_with_a_larger_graph(mlx_fw):
    p = Problem(mlx_fw, T=4, P=12, slots=[2, 7, -1, 11])
    before = p.snapshot()
    q_in = p.q * 1.0  # an unevaluated input: computed in the same evaluation
    q_rot, k_rot, k_pool, v_pool = call(p, q_in)
    # Nothing ran yet: the pools the call was given are as they were.
    assert np.array_equal(mlx_fw.bits(p.k_pool), before[5])
    slots = mx.array([2, 7, 11])
    scores = (q_rot[:, :2] * 0.5).sum() + (k_pool[slots] * v_pool[slots]).sum()
    mx.eval(scores)
    want_q, _ = rope64(mlx_fw.f64(p.q), mlx_fw.f64(p.positions))
    want_k, _ = rope64(mlx_fw.f64(p.k), mlx_fw.f64(p.positions))
    v64 = mlx_fw.f64(p.v)
    want = (want_q[:, :2] * 0.5).sum() + sum((want_k[t] * v64[t]).sum() for t in (0, 1, 3))
    assert math.isclose(scores.item(), want, rel_tol=1e-5, abs_tol=1e-3)
    check(p, before, (q_rot, k_rot, k_pool, v_pool))


def test_a_read_of_the_pool_queued_before_the_call_is_not_overtaken(mlx_fw):
    """mlx-lm's pattern: attention over the cache queued with mx.async_eval, then the call. Pools
    that are already available (made from NumPy here) gave the write nothing to wait for, so it
    overtook the queued read, which then saw the new rows; the write now waits for the stream."""
    p = Problem(mlx_fw, T=4, Hq=4, Hk=2, D=16, P=8, slots=[0, 1, 2, 3])
    mx.eval(p.k_pool, p.v_pool)
    np.array(p.k_pool), np.array(p.v_pool)  # read back: MLX now holds them as available
    old = float(np.abs(mlx_fw.f64(p.k_pool)).sum())
    x = mx.random.normal((600, 600), key=mx.random.key(0))
    slow = x
    for _ in range(6):  # a read that is still queued when the call is evaluated
        slow = slow @ x / 600
    read = mx.abs(p.k_pool).sum() + slow.sum() * 0
    mx.async_eval(read)
    mx.eval(call(p))
    assert math.isclose(read.item(), old, rel_tol=1e-6), "the queued read saw the call's rows"


def test_an_explicit_cpu_stream_or_device_is_used(mlx_fw):
    for stream in (mx.cpu, mx.new_stream(mx.cpu)):
        p = Problem(mlx_fw)
        before = p.snapshot()
        check(p, before, call(p, stream=stream))


def test_a_gpu_stream_or_device_is_replaced_by_the_cpu_stream_even_without_a_gpu(mlx_fw):
    """The docstring's promise: a GPU stream or device runs on the CPU stream. Without a GPU (an
    Apple-written call on Linux) stream=mx.gpu raised MLX's '[default_stream] Cannot get gpu stream
    without gpu backend' although the primitive never runs on the GPU."""
    for stream in (mx.gpu, mx.Device(mx.gpu, 0)):
        p = Problem(mlx_fw)
        before = p.snapshot()
        check(p, before, call(p, stream=stream))


@pytest.mark.skipif(not mx.is_available(mx.gpu), reason="no MLX GPU on this machine (Apple silicon or mlx-cuda)")
def test_a_gpu_default_stream_runs_on_the_cpu_stream(mlx_fw):
    with mx.stream(mx.gpu):
        p = Problem(mlx_fw)
        before = p.snapshot()
        check(p, before, call(p, p.q * 1.0))


# ---- no pool copy, ever ------------------------------------------------------------------------


def test_the_pools_are_shared_never_copied(mlx_fw):
    """New pools are the old pools' buffers (NumPy views of both start at one address), and a call
    on 2 x 32 MiB pools raises MLX's peak memory by far less than one pool."""
    p = Problem(mlx_fw, T=4, Hq=32, Hk=8, D=128, P=16, dtype="float16")
    P = 16384
    p.k_pool = mx.zeros((P, 8, 128), dtype=mx.float16)
    p.v_pool = mx.ones((P, 8, 128), dtype=mx.float16)
    mx.eval(*p.arrays())
    mx.reset_peak_memory()
    active = mx.get_active_memory()
    result = call(p)
    mx.eval(*result)
    pool_bytes = P * 8 * 128 * 2
    assert mx.get_peak_memory() - active < pool_bytes // 16, "the call allocated pool-sized memory"
    for new, old in ((result[2], p.k_pool), (result[3], p.v_pool)):
        assert np.asarray(new).__array_interface__["data"][0] == np.asarray(old).__array_interface__["data"][0]
    # The rows went into the buffers the caller passed, as the seed's kernel writes them.
    slots = np.asarray(p.slots)
    assert np.array_equal(mlx_fw.bits(p.k_pool)[slots], mlx_fw.bits(result[1]))
    assert np.array_equal(mlx_fw.bits(p.v_pool)[slots], mlx_fw.bits(p.v))


# ---- refusals ------------------------------------------------------------------------------------

MLX_ROPEPOOL = types.SimpleNamespace(rope_pool_fused=ropepool.mlx.rope_pool_fused, RopePoolError=ropepool.RopePoolError)
SEED_TESTS = sorted(name for name in dir(test_seed_errors) if name.startswith("test_"))


@pytest.mark.parametrize("name", SEED_TESTS)
def test_every_seed_error_is_raised_at_the_call_with_its_text(mlx_fw, name):
    """test_seed_errors.py, each case on mx.arrays: the same exact texts, in the same order."""
    test = getattr(test_seed_errors, name)
    extra = [param for param in inspect.signature(test).parameters if param not in ("ropepool", "fw")]
    for T in ([0, 1] if extra == ["T"] else [None]):
        test(MLX_ROPEPOOL, mlx_fw, *([] if T is None else [T]))


@pytest.mark.parametrize("slots, message, status", [
    ([0, 3, 16, 1, 2, 4], "slot 16 of token 2 is out of range for a pool of 16 slots (valid: 0 <= slot < 16; "
                          "negative skips the write)", "RP_ERR_SLOT_OUT_OF_RANGE"),
    ([5, 9, 1, 9, 2, 3], "slot 9 is used by tokens 1 and 3: each slot may be written once per call",
     "RP_ERR_DUPLICATE_SLOT"),
])
def test_a_bad_slot_is_refused_when_the_result_is_evaluated(mlx_fw, slots, message, status):
    p = Problem(mlx_fw, slots=slots)
    before = p.snapshot()
    lazy_slots = p.slots + 0  # computed in the evaluation that meets it
    result = call(p, *p.arrays()[:4], lazy_slots)  # no error yet: slot values are data
    with pytest.raises(ropepool.RopePoolError) as info:
        mx.eval(result[0].sum() + result[2].sum())
    assert isinstance(info.value, ValueError) and str(info.value) == message and info.value.status == status
    helpers.assert_unchanged(p, before, what="an evaluation that failed")
    # The stream is not poisoned: the next call evaluates.
    p.slots = mlx_fw.index([0, 1, 2, 3, 4, 5])
    before = p.snapshot()
    check(p, before, call(p))


def test_mlx_only_refusals_name_the_keyword(mlx_fw):
    """Each in the NumPy call's words (the keywords are converted by its code), except what MLX
    alone refuses (a paged layout, q_out); every refusal carries a status."""
    p = Problem(mlx_fw)
    before = p.snapshot()
    cases = [
        (dict(kv_layout="NHD"), "kv_layout must be 'flat' on MLX arrays (ropepool.mlx serves the seed's "
                                "[pool_size, num_kv_heads, head_dim] pools only), got 'NHD'"),
        (dict(kv_layout="nhd"), "kv_layout must be one of 'flat' ([P, Hk, D]), 'NHD' ([blocks, block_size, Hk, D]) "
                                "or 'HND' ([blocks, Hk, block_size, D]), got 'nhd'"),
        (dict(q_out=p.q), "q_out/k_out are not supported on MLX arrays, which are immutable: use the "
                          "returned q_rot and k_rot"),
        (dict(kv_cache_dtype="int4"), "kv_cache_dtype must be one of 'auto', 'fp8_e4m3' (or vLLM's 'fp8') or "
                                      "'fp8_e5m2', got 'int4'"),
        (dict(kv_cache_dtype="fp8"), "kv_cache_dtype='fp8' needs fp8 pools (uint8, float8_e4m3fn or float8_e5m2), "
                                      "got k_pool float32"),
        (dict(is_neox="yes"), "is_neox must be True (NeoX rotate-half) or False (GPT-J interleaved), got 'yes'"),
        (dict(inv_freq=np.ones(31)), "inv_freq must be 1-D with rotary_dim/2 = 32 entries, got shape (31,)"),
        (dict(inv_freq=mx.arange(32)), "inv_freq must hold float32 or float64 values, got dtype int32"),
        (dict(rotary_dim=33), "rotary_dim must be even, got 33"),
        (dict(rotary_dim=66, inv_freq=np.ones(3)), "rotary_dim 66 is larger than head_dim 64"),
        (dict(rotary_dim=0), "rotary_dim must be >= 2 (None = head_dim), got 0"),
        (dict(rotary_dim=1), "rotary_dim must be >= 2 (None = head_dim), got 1"),
        (dict(v_head_dim=0), "v_head_dim must be positive (None = head_dim), got 0"),
        (dict(attention_scaling=0), "attention_scaling must be positive and finite (default 1.0), got 0"),
        (dict(threads=0), "threads must be >= 1 (None = the module's setting), got 0"),
        (dict(k_scale=0), "k_scale must be a positive finite number (default 1.0), got 0"),
        (dict(v_scale=-0.0), "v_scale must be a positive finite number (default 1.0), got -0"),
        (dict(k_scale=float("inf")), "k_scale must be a positive finite number (default 1.0), got inf"),
        # a scale array as the NumPy call takes it: one float32 (or float64) element
        (dict(k_scale=np.array([2], np.int64)), "k_scale must be a number or a one-element float32 array "
                                                "(float64 on the host), got 1 element of int64"),
        (dict(v_scale=mx.array([0.5, 0.5])), "v_scale must be a number or a one-element float32 array "
                                             "(float64 on the host), got 2 elements of float32"),
        # the table is read whatever integer type head_dim has (it was dropped for NumPy's)
        (dict(head_dim=np.int64(64), inv_freq=np.full(32, np.nan)), "inv_freq[0] must be finite and >= 0, got nan"),
    ]
    for kwargs, message in cases:
        with pytest.raises(ropepool.RopePoolError, match=None) as info:
            call(p, **kwargs)
        assert str(info.value) == message
        assert info.value.status in ("RP_ERR_INVALID_ARGUMENT", "RP_ERR_UNSUPPORTED")
    helpers.assert_unchanged(p, before)


def test_every_keyword_of_the_numpy_call_is_taken(mlx_fw):
    """Issue 11: ropepool.mlx takes "the same keyword extras as ropepool.rope_pool_fused", so one
    set of keywords serves both calls. `checked` was missing (a TypeError for an unexpected
    keyword): on the CPU it changes nothing, as in the NumPy call, and a non-bool is refused in
    that call's words, nothing written."""
    numpy_call = set(inspect.signature(ropepool.rope_pool_fused).parameters)
    mlx_call = set(inspect.signature(ropepool.mlx.rope_pool_fused).parameters)
    assert numpy_call - mlx_call == set()
    for checked in (True, False, np.True_):
        p = Problem(mlx_fw)
        before = p.snapshot()
        result = call(p, checked=checked)
        mx.eval(*result)
        check(p, before, result)
    p = Problem(mlx_fw)
    before = p.snapshot()
    with pytest.raises(ropepool.RopePoolError) as info:
        call(p, checked="no")
    assert str(info.value) == ("checked must be True (CUDA: validate the slot values on the host first) or "
                               "False, got 'no'")
    with pytest.raises(ropepool.RopePoolError) as numpy_info:
        Problem(helpers.make_framework("numpy")).call(ropepool, checked="no")
    assert str(numpy_info.value) == str(info.value)
    helpers.assert_unchanged(p, before)


def test_uint8_pools_need_kv_cache_dtype_after_the_seeds_checks(mlx_fw):
    p = Problem(mlx_fw)
    pools = [mx.zeros(tuple(x.shape), dtype=mx.uint8) for x in (p.k_pool, p.v_pool)]
    with pytest.raises(ropepool.RopePoolError) as info:
        call(p, *p.arrays()[:5], *pools)
    assert str(info.value) == ("k_pool is uint8: say which fp8 format it stores with kv_cache_dtype='fp8_e4m3' "
                               "(or 'fp8') or 'fp8_e5m2'")
    with pytest.raises(ropepool.RopePoolError) as info:
        call(p, p.q.reshape(p.T, p.Hq * p.D), *p.arrays()[1:5], *pools)
    assert str(info.value) == "rope_pool_fused expects q/k/v to be 3-D"


@pytest.mark.parametrize("kwargs, message", [
    (dict(head_dim=64.0), "head_dim must be an int, got float"),
    (dict(num_qo_heads="8"), "num_qo_heads must be an int, got str"),
    (dict(num_kv_heads=None), "num_kv_heads must be an int, got NoneType"),
    (dict(rope_base="1e4"), "rope_base must be a number, got str"),
    (dict(attention_scaling=None), "attention_scaling must be a number, got NoneType"),
    (dict(rope_base=True), "rope_base must be a number, got bool"),
    (dict(head_dim=True), "head_dim must be an int, got bool"),
    (dict(attention_scaling=np.True_), f"attention_scaling must be a number, got numpy.{type(np.True_).__name__}"),
    (dict(k_scale=True), "k_scale must be a number, got bool"),
    (dict(threads=True), "threads must be an int, got bool"),
    (dict(mrope_section=[True, 16, 15]), "mrope_section entry must be an int, got bool"),
    (dict(mrope_section=[16, 15, np.False_]), f"mrope_section entry must be an int, got numpy.{type(np.False_).__name__}"),
    (dict(mrope_section=[16, 8.0, 8]), "mrope_section entry must be an int, got float"),
    (dict(attention_scaling=np.array([2.0])), "attention_scaling must be a number, got numpy.ndarray"),
    (dict(norm_weight_offset=np.array([0.0, 1.0])), "norm_weight_offset must be a number, got numpy.ndarray"),
    (dict(norm_weight_offset="1"), "norm_weight_offset must be a number, got str"),
])
def test_configuration_of_the_wrong_type_is_named_as_numpys_call_names_it(mlx_fw, kwargs, message):
    """The NumPy call's TypeError and text, not the extension's list of its overloads."""
    p = Problem(mlx_fw)
    before = p.snapshot()
    with pytest.raises(TypeError) as info:
        call(p, **kwargs)
    assert str(info.value) == message
    with pytest.raises(TypeError) as numpy_info:
        Problem(helpers.make_framework("numpy")).call(ropepool, **kwargs)
    assert str(numpy_info.value) == message
    helpers.assert_unchanged(p, before)


@pytest.mark.parametrize("section", [[True, 16, 8, 8], [16, 8, 8, False], [True, 16]])
def test_a_section_of_the_wrong_length_is_refused_whatever_its_entries(mlx_fw, section):
    """Not read as three ints once its bools are dropped: the NumPy call's refusal, verbatim."""
    p = Problem(mlx_fw)
    before = p.snapshot()
    with pytest.raises(ropepool.RopePoolError) as info:
        call(p, mrope_section=section)
    with pytest.raises(ropepool.RopePoolError) as numpy_info:
        Problem(helpers.make_framework("numpy")).call(ropepool, mrope_section=section)
    assert str(info.value) == str(numpy_info.value)
    helpers.assert_unchanged(p, before)


@pytest.mark.parametrize("kwargs", [dict(head_dim=2**63), dict(num_qo_heads=-2**63 - 1), dict(rotary_dim=2**64),
                                    dict(threads=2**31), dict(rope_base=10**400), dict(k_scale=-10**400)])
def test_a_value_past_the_c_types_range_is_refused_as_by_numpys_call(mlx_fw, kwargs):
    """Not nanobind's list of the extension's overloads: a RopePoolError naming the argument and
    value, the NumPy call's words."""
    p = Problem(mlx_fw)
    before = p.snapshot()
    (name, value), = kwargs.items()
    text = repr(value) if len(repr(value)) <= 40 else repr(value)[:16]
    with pytest.raises(ropepool.RopePoolError, match=re.escape(f"{name}") + r".*" + re.escape(text)):
        call(p, **kwargs)
    with pytest.raises(ropepool.RopePoolError, match=re.escape(f"{name}") + r".*" + re.escape(text)):
        Problem(helpers.make_framework("numpy")).call(ropepool, **kwargs)
    helpers.assert_unchanged(p, before)


def test_a_scale_of_several_elements_is_refused_as_by_numpys_call(mlx_fw):
    p = Problem(mlx_fw)
    with pytest.raises(ropepool.RopePoolError, match="k_scale must be a number or a one-element"):
        call(p, k_scale=mx.array([1.0, 2.0]))


def test_numpy_arrays_are_refused_with_their_type(mlx_fw):
    p = Problem(mlx_fw)
    with pytest.raises(TypeError, match=r"^ropepool.mlx takes mx.arrays: q is a ndarray \(convert it with mx.array"):
        call(p, np.asarray(p.q))
    arrays = [p.q, p.k, p.v, p.positions, p.slots, p.k_pool, p.v_pool]
    arrays[3] = [0] * p.T
    with pytest.raises(TypeError, match=r"^ropepool.mlx takes mx.arrays: positions is a list "):
        call(p, *arrays)


def test_a_one_element_numpy_scale_is_read_as_numpys_call_reads_it(mlx_fw):
    """NumPy 2 refuses float() of a 1-D array: the value is read with .item(), as the NumPy call
    takes "a number, or a one-element array"."""
    p, q = Problem(mlx_fw), Problem(mlx_fw)
    want = call(q)
    got = call(p, k_scale=np.array([1.0], np.float32), v_scale=mx.array([1.0]))
    for g, w in zip(got, want):
        assert np.array_equal(np.asarray(g), np.asarray(w))


def test_an_inv_freq_numpy_cannot_read_is_named(mlx_fw):
    p = Problem(mlx_fw)
    table = mx.array(helpers.inv_freq(10000.0, p.D).astype(np.float32)).astype(mx.bfloat16)
    with pytest.raises(ropepool.RopePoolError, match="inv_freq must hold float32 or float64 values, got dtype"):
        call(p, inv_freq=table)


def test_a_dtype_the_library_cannot_name_is_named_as_numpys_call_names_it(mlx_fw):
    """complex64 (the one MLX dtype ropepool has no code for) was 'q/k/v dtype 255 (not a dtype
    ropepool knows)', and 'positions dtype must be int32 or int64, got 255 (...)': not the value.
    The NumPy call's words, the argument and its dtype."""
    numpy_fw = helpers.make_framework("numpy")
    for index, name in enumerate(helpers.ARG_NAMES[:7]):
        p, pn = Problem(mlx_fw), Problem(numpy_fw)
        before = p.snapshot()
        arrays, numpy_arrays = p.arrays(), pn.arrays()
        arrays[index] = arrays[index].astype(mx.complex64)
        numpy_arrays[index] = numpy_arrays[index].astype(np.complex64)
        with pytest.raises(ropepool.RopePoolError) as info:
            call(p, *arrays)
        with pytest.raises(ropepool.RopePoolError) as numpy_info:
            pn.call(ropepool, *numpy_arrays)
        assert str(info.value) == str(numpy_info.value), name
        assert str(info.value).startswith(f"{name} has dtype complex64, which ropepool does not take")
        helpers.assert_unchanged(p, before)


def test_one_array_as_both_pools_is_refused_at_the_call(mlx_fw):
    p = Problem(mlx_fw)
    before = p.snapshot()
    with pytest.raises(ropepool.RopePoolError, match="^v_pool overlaps k_pool: outputs must not share memory$"):
        call(p, p.q, p.k, p.v, p.positions, p.slots, p.k_pool, p.k_pool)
    helpers.assert_unchanged(p, before)


# ---- the variant keywords (GPT-J, partial, caller frequencies, attention scaling) -----------------

VARIANTS = {
    "gptj": dict(is_neox=False),
    "partial": dict(rotary_dim=32),
    "gptj-partial": dict(is_neox=False, rotary_dim=16),
    "inv_freq": dict(inv_freq=np.concatenate([helpers.inv_freq(10000.0, 64)[:28], np.zeros(4)]).astype(np.float32)),
    "attention_scaling": dict(attention_scaling=1.25),
    "everything": dict(is_neox=False, rotary_dim=48, attention_scaling=0.75,
                       inv_freq=mx.array(helpers.inv_freq(1e6, 48).astype(np.float32))),
}


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_variant_keywords_match_the_float64_formula(mlx_fw, variant, dtype):
    kwargs = VARIANTS[variant]
    p = Problem(mlx_fw, T=5, dtype=dtype)
    before = p.snapshot()
    try:
        result = call(p, **kwargs)
    except ropepool.RopePoolError as error:
        if error.status != "RP_ERR_UNSUPPORTED":
            raise
        pytest.skip(f"this build's libropepool does not implement the variant yet: {error}")
    R = kwargs.get("rotary_dim", p.D)
    freqs = kwargs.get("inv_freq")
    freqs = helpers.default_inv_freq(BASE, R) if freqs is None else np.asarray(freqs).astype(np.float64)
    check(p, before, result, freqs=freqs, is_neox=kwargs.get("is_neox", True),
          scaling=kwargs.get("attention_scaling", 1.0))


def test_the_call_traces_under_mx_compile(mlx_fw):
    p = Problem(mlx_fw, T=3)
    before = p.snapshot()
    step = mx.compile(lambda *arrays: ropepool.mlx.rope_pool_fused(*arrays, **p.kwargs()))
    check(p, before, step(*p.arrays()))


def test_pools_made_inside_a_compiled_function_are_refused_at_the_call(mlx_fw):
    """mx.compile merges equal computations: a pool made inside the compiled function (mx.zeros)
    became one array with another mx.zeros of its shape, so the call's rows appeared in an array
    the caller never passed (its sum read 5.2 instead of 0), and two mx.zeros pools were refused
    at evaluation as 'v_pool overlaps k_pool'; a captured unevaluated pool was computed afresh at
    each call, so the second call's pool had lost the first call's row. Refused at the trace,
    naming the pool; pools passed in as arguments, views of them, an evaluated array the function
    captures, and the pools a previous call returned inside the same function are written as
    without mx.compile."""
    p = Problem(mlx_fw, T=4, P=16, slots=[0, 1, 2, 3])
    mx.eval(*p.arrays())
    shape = tuple(p.k_pool.shape)

    def made_inside(q, k, v, positions, slots):
        result = ropepool.mlx.rope_pool_fused(q, k, v, positions, slots, mx.zeros(shape), mx.ones(shape),
                                              **p.kwargs())
        other = mx.zeros(shape)  # an unrelated array, equal to k_pool before the call
        return result[0], (other + result[0].sum() * 0).sum()

    unevaluated = mx.ones(shape)
    for pools, name in ((lambda: (mx.zeros(shape), mx.ones(shape)), "k_pool"),
                        (lambda: (p.k_pool, p.v_pool * 1), "v_pool"),
                        (lambda: (p.k_pool, unevaluated), "v_pool")):
        def step(q, k, v, positions, slots):
            return ropepool.mlx.rope_pool_fused(q, k, v, positions, slots, *pools(), **p.kwargs())
        with pytest.raises(ropepool.RopePoolError) as info:
            mx.compile(step)(*p.arrays()[:5])
        assert str(info.value).startswith(f"{name} is computed in a traced function (mx.compile, mx.vmap, mx.grad), "
                                          "made inside it or captured unevaluated, by an MLX operation that makes a "
                                          "new array ("), str(info.value)
    with pytest.raises(ropepool.RopePoolError, match="^k_pool is computed in a traced function"):
        mx.compile(made_inside)(*p.arrays()[:5])
    _, other = made_inside(*p.arrays()[:5])  # the same function, not compiled: other is zeros
    assert other.item() == 0.0

    # What is served: arguments, views of them, a captured evaluated pool, a chain of calls.
    cache = mx.array(np.stack([np.asarray(p.k_pool), np.asarray(p.v_pool)]))
    mx.eval(cache)
    before = p.snapshot()

    def from_cache(q, k, v, positions, slots, cache):
        first = ropepool.mlx.rope_pool_fused(q, k, v, positions, slots, cache[0, ...],
                                             cache[1:2].transpose(0, 1, 2, 3).squeeze(0), **p.kwargs())
        return ropepool.mlx.rope_pool_fused(q, k, v, positions, slots, first[2], first[3], **p.kwargs())

    check(p, before, mx.compile(from_cache)(*p.arrays()[:5], cache))
    with pytest.raises(ropepool.RopePoolError, match=r"^k_pool is computed .* \(Gather\).* not cache\[i\], which MLX "):
        mx.compile(lambda *a: ropepool.mlx.rope_pool_fused(*a[:5], a[5][0], a[5][1, ...], **p.kwargs()))(
            *p.arrays()[:5], cache)
    captured = p.v_pool
    p2 = Problem(mlx_fw, T=4, P=16, slots=[4, 5, 6, 7], seed=3)
    p2.v_pool = captured
    before = p2.snapshot()
    check(p2, before, mx.compile(lambda *a: ropepool.mlx.rope_pool_fused(*a, p2.k_pool, captured, **p2.kwargs()))(
        *p2.arrays()[:5]))


def test_differentiating_or_vectorising_the_call_is_refused(mlx_fw):
    """mx.grad, mx.vjp, mx.jvp and mx.vmap through the call raise MLX's refusal naming the
    primitive, never a result; the pools are not written."""
    p = Problem(mlx_fw)
    mx.eval(*p.arrays())
    before = p.snapshot()
    rest = p.arrays()[1:]

    def q_rot(q):
        return ropepool.mlx.rope_pool_fused(q, *rest, **p.kwargs())[0]

    transforms = [lambda: mx.grad(lambda q: q_rot(q).sum())(p.q),
                  lambda: mx.vjp(q_rot, [p.q], [mx.ones_like(p.q)]),
                  lambda: mx.jvp(q_rot, [p.q], [mx.ones_like(p.q)]),
                  lambda: mx.vmap(q_rot)(mx.stack([p.q, p.q]))]
    for transform in transforms:
        with pytest.raises(ValueError, match=r"^\[Primitive::(vjp|jvp|vmap)\] Not implemented for RopePoolFused"):
            mx.eval(transform())
    helpers.assert_unchanged(p, before)


FIRST_CALLS_FROM_THREADS = r"""
import sys, threading, time
import mlx.core as mx
import ropepool.mlx as rm
made = []
create = rm._ext.set_threads
def counting(n):
    made.append(n)
    time.sleep(0.01)  # hands the GIL to the other first calls, as a thread switch there would
    create(n)
rm._ext.set_threads = counting
sys.setswitchinterval(1e-6)
start = threading.Barrier(8)
def first_call():
    start.wait()
    z = mx.zeros((4, 1, 8))
    mx.eval(*rm.rope_pool_fused(z, z, z, mx.arange(4), mx.arange(4), mx.zeros((8, 1, 8)), mx.zeros((8, 1, 8)),
                                head_dim=8, num_qo_heads=1, num_kv_heads=1, rope_base=1e4))
threads = [threading.Thread(target=first_call) for _ in range(8)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(len(made))
"""


def test_first_calls_from_several_threads_create_one_context():
    """The first call creates the CPU context the evaluations use; first calls racing from several
    threads each created one, and all but the last were leaked with their worker threads."""
    import subprocess
    import sys

    for _ in range(2):
        done = subprocess.run([sys.executable, "-c", FIRST_CALLS_FROM_THREADS], capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "1", f"{done.stdout.strip()} contexts were created"
