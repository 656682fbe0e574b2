"""The RoPE variants' keywords end to end: is_neox, rotary_dim, inv_freq (any array-like, any
float dtype, any device), attention_scaling; checked against the float64 formula of helpers.py,
and every bad value refused naming the argument and the value, with nothing written."""

import numpy as np
import pytest

from helpers import (Problem, assert_within_bound, call_or_skip_on_cuda, default_inv_freq, expect_refusal,
                     rotate_general)


def check_variant(p, before, result, freqs, is_neox=True, attention_scaling=1.0):
    """q_rot / k_rot within the bound of the general formula; pools written with k_rot and v."""
    fw = p.fw
    q_rot, k_rot, k_pool, v_pool = result
    assert k_pool is p.k_pool and v_pool is p.v_pool
    getattr(fw, "sync", lambda: None)()
    positions = fw.f64(p.positions).astype(np.int64)
    for name, out, x in (("q_rot", q_rot, p.q), ("k_rot", k_rot, p.k)):
        want, mag = rotate_general(fw.f64(x), positions, freqs, is_neox, attention_scaling)
        assert_within_bound(name, fw.f64(out), want, mag, p.dtype)
        passed = slice(2 * len(freqs), None)
        assert np.array_equal(fw.bits(out)[..., passed], fw.bits(x)[..., passed]), f"{name}'s pass-through dims"
    slots = fw.f64(p.slots).astype(np.int64)
    for pool, old, rows in ((p.k_pool, before[5], fw.bits(k_rot)), (p.v_pool, before[6], fw.bits(p.v))):
        want = old.copy()
        want[slots[slots >= 0]] = rows[slots >= 0]
        assert np.array_equal(fw.bits(pool), want)


@pytest.mark.parametrize("is_neox", [True, False])
@pytest.mark.parametrize("rotary_dim", [None, 32, 2])
def test_style_and_rotary_dim_follow_the_formula(ropepool, fw, is_neox, rotary_dim):
    p = Problem(fw, D=64, max_pos=2**31 - 1)
    before = p.snapshot()
    R = rotary_dim or p.D
    result = call_or_skip_on_cuda(ropepool, p, is_neox=is_neox, rotary_dim=rotary_dim)
    check_variant(p, before, result, default_inv_freq(500000.0, R), is_neox)


def caller_frequencies(R, seed=3):
    rng = np.random.default_rng(seed)
    f = rng.uniform(0.0, 1.0, R // 2) ** 3
    f[-1] = 0.0  # a zero frequency leaves its pair unrotated
    return f


@pytest.mark.parametrize("form", ["float64", "float32", "list", "tuple", "torch", "torch-cuda"])
def test_inv_freq_is_used_exactly_in_any_form(ropepool, fw, form):
    p = Problem(fw, D=64, max_pos=100000)
    before = p.snapshot()
    R = 48
    f64 = caller_frequencies(R)
    if form == "float32":
        freqs, exact = f64.astype(np.float32), f64.astype(np.float32).astype(np.float64)
    elif form in ("list", "tuple"):
        freqs, exact = (list if form == "list" else tuple)(f64), f64
    elif form.startswith("torch"):
        torch = pytest.importorskip("torch")
        if form == "torch-cuda" and not torch.cuda.is_available():
            pytest.skip("no CUDA device")
        freqs, exact = torch.from_numpy(f64).to("cuda" if form == "torch-cuda" else "cpu"), f64
    else:
        freqs, exact = f64, f64
    result = call_or_skip_on_cuda(ropepool, p, rotary_dim=R, inv_freq=freqs, is_neox=False)
    check_variant(p, before, result, exact, is_neox=False)


def test_inv_freq_strided_view_is_read_through_its_stride(ropepool, np_fw):
    p = Problem(np_fw, D=32)
    before = p.snapshot()
    f = caller_frequencies(128)
    result = call_or_skip_on_cuda(ropepool, p, inv_freq=f[::4])
    check_variant(p, before, result, f[::4])


@pytest.mark.parametrize("scaling", [1.0, 1.2716, 0.5])
def test_attention_scaling_multiplies_cos_and_sin(ropepool, fw, scaling):
    p = Problem(fw, D=64, max_pos=2**20)
    before = p.snapshot()
    result = call_or_skip_on_cuda(ropepool, p, attention_scaling=scaling, rotary_dim=32)
    check_variant(p, before, result, default_inv_freq(500000.0, 32), attention_scaling=scaling)


@pytest.mark.parametrize("is_neox", [True, False])
def test_variants_in_place_and_into_caller_outputs(ropepool, fw, is_neox):
    p = Problem(fw, D=64, max_pos=2**31 - 1)
    positions = fw.f64(p.positions).astype(np.int64)
    freqs = caller_frequencies(32)
    want = [rotate_general(fw.f64(x), positions, freqs, is_neox, 1.25) for x in (p.q, p.k)]
    passed = [fw.bits(x)[..., 32:] for x in (p.q, p.k)]
    kw = dict(is_neox=is_neox, rotary_dim=32, inv_freq=freqs, attention_scaling=1.25)
    q_out = fw.array(np.zeros((p.T, p.Hq, p.D)), p.dtype)
    call_or_skip_on_cuda(ropepool, p, q_out=q_out, k_out=p.k, **kw)  # q into q_out, k in place
    getattr(fw, "sync", lambda: None)()
    for name, out, (y, mag), rest in (("q_out", q_out, want[0], passed[0]), ("k_out=k", p.k, want[1], passed[1])):
        assert_within_bound(name, fw.f64(out), y, mag, p.dtype)
        assert np.array_equal(fw.bits(out)[..., 32:], rest), f"{name}'s pass-through dims"


@pytest.mark.parametrize("kwargs, message", [
    (dict(is_neox="yes"), "is_neox must be True (NeoX rotate-half) or False (GPT-J interleaved), got 'yes'"),
    (dict(is_neox=None), "is_neox must be True (NeoX rotate-half) or False (GPT-J interleaved), got None"),
    (dict(inv_freq=np.ones(31)), "inv_freq must be 1-D with rotary_dim/2 = 32 entries, got shape (31,)"),
    (dict(inv_freq=np.ones((2, 16))), "inv_freq must be 1-D with rotary_dim/2 = 32 entries, got shape (2, 16)"),
    (dict(inv_freq=np.arange(32)), "inv_freq must hold float32 or float64 values, got dtype int64"),
    (dict(inv_freq="fast"), "inv_freq must hold float32 or float64 values, got dtype <U4"),
    (dict(attention_scaling=10**400), "attention_scaling must be a finite number, got "
     "1000000000000000... (401 characters), too large for a float64"),
    (dict(rope_base=10**400), "rope_base must be a finite number, got 1000000000000000... "
     "(401 characters), too large for a float64"),
    # C's "0 = not set" is None here: an explicit zero is refused, never read as the default.
    (dict(rotary_dim=0), "rotary_dim must be >= 2 (None = head_dim), got 0"),
    (dict(v_head_dim=0), "v_head_dim must be positive (None = head_dim), got 0"),
    (dict(v_head_dim=-4), "v_head_dim must be positive (None = head_dim), got -4"),
    (dict(rotary_dim=-2), "rotary_dim must be >= 2 (None = head_dim), got -2"),
    (dict(rotary_dim=1), "rotary_dim must be >= 2 (None = head_dim), got 1"),
    (dict(attention_scaling=float("nan")), "attention_scaling must be positive and finite (default 1.0), got nan"),
    (dict(attention_scaling=-1.0), "attention_scaling must be positive and finite (default 1.0), got -1.0"),
    (dict(attention_scaling=0.0), "attention_scaling must be positive and finite (default 1.0), got 0.0"),
    (dict(attention_scaling=0), "attention_scaling must be positive and finite (default 1.0), got 0"),
    (dict(threads=0), "threads must be >= 1 (None = the module's setting), got 0"),
    (dict(k_scale=0.0), "k_scale must be a positive finite number (default 1.0), got 0"),
    (dict(k_scale=-0.0), "k_scale must be a positive finite number (default 1.0), got -0"),
    (dict(v_scale=np.zeros(1, np.float32)), "v_scale must be a positive finite number (default 1.0), got 0"),
    (dict(v_scale=np.array(0.0)), "v_scale must be a positive finite number (default 1.0), got 0"),
    (dict(k_scale=float("nan")), "k_scale must be a positive finite number (default 1.0), got nan"),
    (dict(checked="no"), "checked must be True (CUDA: validate the slot values on the host first) or False, "
     "got 'no'"),
    # s * cos and s * sin are float32 in the kernels: s must be a normal float32.
    (dict(attention_scaling=1e39), "attention_scaling 1e+39 is outside float32's normal range "
     "[1.17549435e-38, 3.40282347e+38], in which the kernels scale cos and sin"),
    (dict(attention_scaling=1e-40), "attention_scaling 1e-40 is outside float32's normal range "
     "[1.17549435e-38, 3.40282347e+38], in which the kernels scale cos and sin"),
])
def test_bad_variant_values_are_named(ropepool, fw, kwargs, message):
    p = Problem(fw, D=64)
    expect_refusal(ropepool, fw, p.arrays(), p.kwargs(**kwargs), message)


def test_a_tensors_shape_is_named_as_an_arrays(ropepool, torch_fw):
    """A torch tensor's shape in a message reads (31,), as an array's and as in the compiled path."""
    torch = pytest.importorskip("torch")
    p = Problem(torch_fw, D=64)
    expect_refusal(ropepool, torch_fw, p.arrays(), p.kwargs(inv_freq=torch.ones(31, dtype=torch.float64)),
                   "inv_freq must be 1-D with rotary_dim/2 = 32 entries, got shape (31,)")
    expect_refusal(ropepool, torch_fw, p.arrays(), p.kwargs(q_norm_weight=torch.ones(2, 32)),
                   "q_norm_weight must be a contiguous 1-D array of head_dim = 64 weights, got shape (2, 32)")


def test_library_checks_of_the_variants_reach_python(ropepool, fw):
    p = Problem(fw, D=64)
    e = expect_refusal(ropepool, fw, p.arrays(), p.kwargs(rotary_dim=33), "rotary_dim must be even, got 33")
    assert isinstance(e, ValueError)
    with pytest.raises(ropepool.RopePoolError) as info:
        p.call(ropepool, attention_scaling=-1.0)
    assert "attention_scaling" in str(info.value) and "-1" in str(info.value)
    freqs = np.full(32, np.nan)
    with pytest.raises(ropepool.RopePoolError) as info:
        p.call(ropepool, inv_freq=freqs)
    assert "inv_freq" in str(info.value)
