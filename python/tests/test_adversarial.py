"""What a new user's adversarial run found (issue 13): torch's lazy negative bit, autograd
(pools that require grad, version counters, q that requires grad), dtypes the library has no name
for, numbers too large for a double, and the README's Python example and version requirement."""

import os
import re

import numpy as np
import pytest

from helpers import Problem, check_call, expect_refusal, readme_blocks

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def torch(torch_fw):
    return torch_fw.torch


def negative_view(torch, x):
    """x's values through a tensor with the negative bit: the memory holds -x."""
    z = torch.complex(torch.zeros_like(x), -x)  # imag = -x
    view = z.conj().imag                        # = x, lazily negated
    assert view.is_neg()
    return view


@pytest.mark.parametrize("which", ["q", "v", "k_pool"])
def test_tensor_with_the_negative_bit_is_refused(ropepool, torch_fw, torch, which):
    p = Problem(torch_fw)
    setattr(p, which, negative_view(torch, getattr(p, which)))
    expect_refusal(ropepool, torch_fw, p.arrays(), p.kwargs(),
                   f"{which} has its negative bit set (a lazy view such as x.conj().imag), which ropepool "
                   f"cannot read or write as memory: pass {which}.resolve_neg()")


def test_resolved_negative_view_gives_the_right_values(ropepool, torch_fw, torch):
    p = Problem(torch_fw)
    p.q = negative_view(torch, p.q).resolve_neg()
    before = p.snapshot()
    check_call(p, before, p.call(ropepool))


def test_leaf_pool_that_requires_grad_is_refused_like_an_in_place_op(ropepool, torch_fw, torch):
    p = Problem(torch_fw)
    p.k_pool = torch.nn.Parameter(p.k_pool)  # requires grad
    expect_refusal(ropepool, torch_fw, p.arrays(), p.kwargs(),
                   "a leaf Variable that requires grad is being used in an in-place operation: rope_pool_fused "
                   "writes k_pool in place; call it under torch.no_grad() or torch.inference_mode()")


def test_non_leaf_pool_that_requires_grad_is_refused(ropepool, torch_fw, torch):
    p = Problem(torch_fw)
    p.v_pool = p.v_pool.requires_grad_() * 1.0
    expect_refusal(ropepool, torch_fw, p.arrays(), p.kwargs(),
                   "v_pool requires grad, but rope_pool_fused writes it in place and has no backward: call it "
                   "under torch.no_grad() or torch.inference_mode()")


def test_pool_that_requires_grad_is_written_under_no_grad(ropepool, torch_fw, torch):
    p = Problem(torch_fw)
    p.k_pool = torch.nn.Parameter(p.k_pool)
    before = p.snapshot()
    with torch.no_grad():
        check_call(p, before, p.call(ropepool))


def test_q_that_requires_grad_is_refused_with_grad_mode_on(ropepool, torch_fw, torch):
    p = Problem(torch_fw)
    p.q = p.q.requires_grad_()
    expect_refusal(ropepool, torch_fw, p.arrays(), p.kwargs(),
                   "q requires grad, but rope_pool_fused has no backward (its outputs would not be connected to "
                   "q's graph): call it under torch.no_grad() or torch.inference_mode(), or pass q.detach()")
    with torch.inference_mode():
        q_rot = p.call(ropepool)[0]
    assert not q_rot.requires_grad


@pytest.mark.parametrize("index, name", [(0, "q"), (2, "v"), (5, "k_pool")])
def test_a_forward_mode_tangent_is_refused_under_no_grad_too(ropepool, torch_fw, torch, index, name):
    """A dual tensor (torch.autograd.forward_ad) ran and its tangent was dropped: q_rot came back
    with none, so a jvp through the call read zero. Forward AD ignores grad mode, so the refusal
    holds under torch.no_grad() too; inference mode turns forward AD off, and the call runs."""
    import torch.autograd.forward_ad as fwAD

    p = Problem(torch_fw)
    message = (f"{name} carries a forward-mode AD tangent (torch.autograd.forward_ad), but rope_pool_fused has no "
               f"forward derivative: its outputs would hold no tangent; pass the primal "
               f"(torch.autograd.forward_ad.unpack_dual({name}).primal)")
    with fwAD.dual_level():
        args = p.arrays()
        args[index] = fwAD.make_dual(args[index], torch.ones_like(args[index]))
        before = [torch_fw.bits(fwAD.unpack_dual(a).primal) for a in args]
        for grad_mode in (True, False):
            with torch.set_grad_enabled(grad_mode):
                for call in (ropepool.rope_pool_fused, torch.ops.ropepool.rope_pool_fused):
                    with pytest.raises(ropepool.RopePoolError) as info:
                        call(*args, **p.kwargs())
                    assert str(info.value) == message
        for old, a in zip(before, args):
            assert np.array_equal(old, torch_fw.bits(fwAD.unpack_dual(a).primal)), "a refused call wrote"
        with torch.inference_mode():
            ropepool.rope_pool_fused(*[a.clone() if i < 5 else a for i, a in enumerate(args)], **p.kwargs())


@pytest.mark.parametrize("transform", ["grad", "vmap", "jvp", "functionalize"])
def test_a_torch_func_transforms_tensor_is_named(ropepool, torch_fw, torch, transform):
    """Inside torch.func transforms q is a wrapper without memory of its own: the call said 'q cannot
    be passed to ropepool: Cannot access data pointer of Tensor that doesn't have storage', or
    (functionalize) 'q data is NULL but it has 48 elements'."""
    p = Problem(torch_fw, T=3)
    args, kwargs = p.arrays(), p.kwargs()
    before = p.snapshot()
    seen = []

    def step(q):
        with pytest.raises(ropepool.RopePoolError) as info:
            ropepool.rope_pool_fused(q, *args[1:], **kwargs)
        seen.append(str(info.value))
        return q.sum()

    run = {"grad": lambda: torch.func.grad(step)(p.q), "vmap": lambda: torch.func.vmap(step)(p.q[None]),
           "jvp": lambda: torch.func.jvp(step, (p.q,), (p.q,)),
           "functionalize": lambda: torch.func.functionalize(step)(p.q)}
    run[transform]()
    assert seen == ["q is a tensor of a torch.func transform (grad, vjp, jvp, vmap, functionalize), which "
                    "rope_pool_fused does not run under: it has no derivative and no batching rule, and writes the "
                    "pools in place; call it outside the transform"]
    assert all(np.array_equal(old, torch_fw.bits(x)) for old, x in zip(before, p.arrays()))


def test_pools_version_counters_are_bumped(ropepool, torch_fw, torch):
    p = Problem(torch_fw)
    versions = (p.k_pool._version, p.v_pool._version)
    p.call(ropepool)
    assert (p.k_pool._version, p.v_pool._version) == (versions[0] + 1, versions[1] + 1)


def test_autograd_sees_the_write_to_a_pool_saved_for_backward(ropepool, torch_fw, torch):
    p = Problem(torch_fw)
    w = torch.ones_like(p.k_pool, requires_grad=True)
    loss = (w * p.k_pool).sum()  # saves k_pool for backward
    with torch.no_grad():
        p.call(ropepool)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


@pytest.mark.parametrize("dtype", ["complex64", "object", "U3"])
def test_unsupported_numpy_dtype_is_named(ropepool, np_fw, dtype):
    p = Problem(np_fw)
    p.k = np.zeros(p.k.shape, dtype=dtype)
    pools = [p.k_pool.copy(), p.v_pool.copy()]
    with pytest.raises(ropepool.RopePoolError) as info:
        p.call(ropepool)
    assert str(info.value) == (f"k has dtype {np.dtype(dtype)}, which ropepool does not take (data and pools: "
                               "float32, float16, bfloat16, fp8 pools; positions and slots: int32, int64)")
    assert np.array_equal(pools[0], p.k_pool) and np.array_equal(pools[1], p.v_pool)


def test_unsupported_torch_dtype_is_named(ropepool, torch_fw, torch):
    p = Problem(torch_fw)
    p.q = torch.zeros(p.q.shape, dtype=torch.complex64)
    expect_refusal(ropepool, torch_fw, p.arrays(), p.kwargs(),
                   "q has dtype torch.complex64, which ropepool does not take (data and pools: float32, "
                   "float16, bfloat16, fp8 pools; positions and slots: int32, int64)")


def test_rope_base_too_large_for_a_double_is_named(ropepool, fw):
    p = Problem(fw)
    e = expect_refusal(ropepool, fw, p.arrays(), p.kwargs(rope_base=10**400),
                       "rope_base must be a finite number, got 1000000000000000... (401 characters), "
                       "too large for a float64")
    assert e.status == "RP_ERR_INVALID_ARGUMENT"


def test_readme_python_example_runs_as_written(ropepool):
    namespace = {}
    exec(compile(readme_blocks("## Python")[0], "README.md (## Python)", "exec"), namespace)
    q_rot, k_pool = namespace["q_rot"], namespace["k_pool"]
    assert q_rot.shape == namespace["q"].shape and np.isfinite(q_rot).all()
    assert np.array_equal(k_pool[namespace["slots"]], namespace["k_rot"])


def test_readme_python_version_matches_the_package():
    with open(os.path.join(REPO, "pyproject.toml"), encoding="utf-8") as f:
        required = re.search(r'requires-python = ">=([0-9.]+)"', f.read()).group(1)
    with open(os.path.join(REPO, "README.md"), encoding="utf-8") as f:
        stated = re.findall(r"Python ≥ ([0-9.]+)", f.read())
    assert stated and all(v == required for v in stated), (stated, required)


# ---- stop 35's adversarial audit -------------------------------------------------------------


@pytest.mark.parametrize("name", ["inv_freq", "k_scale"])
def test_a_host_tensor_without_data_is_refused_naming_it(ropepool, torch_fw, torch, name):
    """torch's efficient zero tensors have elements but no memory: read as memory they crashed."""
    if torch_fw.device != "cpu":
        pytest.skip("efficient zero tensors on the host")
    p = Problem(torch_fw)
    count = p.D // 2 if name == "inv_freq" else 1
    value = torch._efficientzerotensor((count,), dtype=torch.float64 if name == "inv_freq" else torch.float32)
    expect_refusal(ropepool, torch_fw, p.arrays(), p.kwargs(**{name: value}),
                   f"{name} data is NULL but it has {count} elements")


@pytest.mark.parametrize("which", ["k_pool", "v_pool", "q_out"])
def test_inference_tensors_are_written_only_in_inference_mode(ropepool, torch_fw, torch, which):
    """As torch's in-place ops: an inference tensor has no version counter to bump, so outside
    inference mode it is refused before anything is written; inside, it is written."""
    p = Problem(torch_fw)
    extra = {}
    with torch.inference_mode():
        made = getattr(p, which if which != "q_out" else "q").clone()
    if which == "q_out":
        extra["q_out"] = made
    else:
        setattr(p, which, made)
    before = torch_fw.bits(made)
    with pytest.raises(ropepool.RopePoolError) as info:
        ropepool.rope_pool_fused(*p.arrays(), **p.kwargs(**extra))
    assert str(info.value) == (
        f"{which} is an inference tensor (made under torch.inference_mode()), which torch does not let an "
        f"in-place operation update outside inference mode: call rope_pool_fused under torch.inference_mode() "
        f"as well")
    assert np.array_equal(before, torch_fw.bits(made))
    snapshot = p.snapshot()
    with torch.inference_mode():
        result = ropepool.rope_pool_fused(*p.arrays(), **p.kwargs(**extra))
    if which != "q_out":
        check_call(p, snapshot, result)
    else:
        assert result[0] is made


@pytest.mark.parametrize("name", ["inv_freq", "k_scale", "v_scale"])
def test_a_frequency_or_scale_that_requires_grad_is_refused_with_grad_mode_on(ropepool, torch_fw, torch, name):
    p = Problem(torch_fw)
    value = (torch.full((p.D // 2,), 0.01, dtype=torch.float64) if name == "inv_freq"
             else torch.ones(1, dtype=torch.float32)).requires_grad_()
    expect_refusal(ropepool, torch_fw, p.arrays(), p.kwargs(**{name: value}),
                   f"{name} requires grad, but rope_pool_fused has no backward (its outputs would not be connected "
                   f"to {name}'s graph): call it under torch.no_grad() or torch.inference_mode(), or pass "
                   f"{name}.detach()")
    with torch.no_grad():
        p.call(ropepool, **{name: value})


@pytest.mark.parametrize("name", ["rope_base", "attention_scaling", "norm_eps", "norm_weight_offset"])
def test_a_number_given_as_a_tensor_that_requires_grad_is_refused_with_grad_mode_on(ropepool, torch_fw, torch,
                                                                                   name):
    """The call reads such a tensor as its value: autograd's gradient through it would be lost."""
    p = Problem(torch_fw)
    value = torch.tensor(10000.0 if name == "rope_base" else 1e-6 if name == "norm_eps" else 1.0,
                         dtype=torch.float64, requires_grad=True)
    norm = {} if name in ("rope_base", "attention_scaling") else {"q_norm_weight": torch.ones(p.D)}
    expect_refusal(ropepool, torch_fw, p.arrays(), p.kwargs(**norm, **{name: value}),
                   f"{name} requires grad, but rope_pool_fused has no backward (its outputs would not be connected "
                   f"to {name}'s graph): call it under torch.no_grad() or torch.inference_mode(), or pass "
                   f"{name}.detach()")
    expected = p.call(ropepool, **norm, **{name: value.item()})
    with torch.no_grad():
        got = p.call(ropepool, **norm, **{name: value})
    for want, out in zip(expected, got):
        assert np.array_equal(torch_fw.bits(want), torch_fw.bits(out))
    got = p.call(ropepool, **norm, **{name: value.detach()})
    assert np.array_equal(torch_fw.bits(expected[0]), torch_fw.bits(got[0]))


@pytest.mark.parametrize("head_dim", [2**40, 32])
@pytest.mark.parametrize("keyword", ["inv_freq", "q_norm_weight"])
def test_a_head_dim_that_is_not_qs_is_reported_as_q_shape(ropepool, np_fw, head_dim, keyword):
    """Arrays sized by head_dim are read only once head_dim agrees with q: checked against a wrong
    one they blamed themselves, or asked for 2^39 doubles (a bare MemoryError)."""
    p = Problem(np_fw)
    value = np.ones(p.D // 2) if keyword == "inv_freq" else np.ones(p.D, np.float32)
    expect_refusal(ropepool, np_fw, p.arrays(), p.kwargs(head_dim=head_dim, **{keyword: value}),
                   f"q shape must be [num_tokens, num_qo_heads, head_dim], got ({p.T}, {p.Hq}, {p.D})")


@pytest.mark.parametrize("name", ["head_dim", "rotary_dim", "threads"])
def test_an_integer_keyword_given_as_an_array_is_named(ropepool, np_fw, name):
    p = Problem(np_fw)
    with pytest.raises(TypeError, match=f"^{name} must be an int, got numpy.ndarray$"):
        p.call(ropepool, **{name: np.array([p.D])})


def test_an_explicit_zero_norm_eps_is_refused(ropepool, np_fw):
    """0 is C's "not set": from Python it would have been ignored without a weight."""
    p = Problem(np_fw)
    expect_refusal(ropepool, np_fw, p.arrays(), p.kwargs(norm_eps=0.0),
                   "norm_eps must be a positive finite number with a QK-norm weight (the model's rms_norm_eps, "
                   "e.g. 1e-06; None = 1e-6), got 0.0")


def test_a_callers_flush_to_zero_mode_changes_no_result(ropepool, torch_fw, torch):
    """torch.set_flush_denormal(True) flushes subnormals on the calling thread only: the caller's
    slice came out 0 where the workers' kept 5e-39. Every slice now runs in the default mode."""
    T, H, D = 64, 8, 128  # 256 KiB a tensor: the call runs on every thread
    x = np.full((T, H, D), 5e-39, np.float32)  # subnormal (made before flushing starts); at position 0
    assert x.view(np.uint32)[0, 0, 0] != 0     # every output is x exactly
    if torch_fw.device != "cpu" or not torch.set_flush_denormal(True):
        pytest.skip("flush-to-zero is set through torch on x86 CPUs")
    try:
        for threads in (1, 2):
            q_rot, k_rot, k_pool, _ = ropepool.rope_pool_fused(
                x, x, x, np.zeros(T, np.int64), np.arange(T), np.zeros_like(x), np.zeros_like(x),
                head_dim=D, num_qo_heads=H, num_kv_heads=H, rope_base=1e4, threads=threads)
            for out in (q_rot, k_rot, k_pool):
                assert np.array_equal(out.view(np.uint32), x.view(np.uint32)), f"threads={threads}"
        assert torch.set_flush_denormal(True)  # the caller's mode is put back
        assert torch.tensor([5e-39]).item() == 0.0
    finally:
        torch.set_flush_denormal(False)
