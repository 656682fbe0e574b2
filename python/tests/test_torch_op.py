"""torch.ops.ropepool.rope_pool_fused: the operator torch.compile traces and CUDA graphs capture.

The operator forwards to the direct binding, so its results must be the binding's bit for bit (and
the binding's are checked against the float64 reference here too); what is specific to it is
checked here: opcheck (schema, fake kernel, autograd registration, AOT dispatch), tracing
ropepool.rope_pool_fused with fullgraph=True, no pool-sized copy in the compiled code, and CUDA
graph capture and replay (marked cuda, skipped without a GPU).
"""

import contextlib
import importlib.util
import inspect
import os
import subprocess
import sys

import numpy as np
import pytest

from helpers import Problem, check_call

torch = pytest.importorskip("torch", reason="torch is not installed")

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)]
VARIANT = dict(is_neox=False, rotary_dim=32, attention_scaling=1.25)


@pytest.fixture(params=DEVICES)
def device(request, ropepool):
    if request.param == "cuda" and not (torch.cuda.is_available() and ropepool.has_cuda()):
        pytest.skip("needs a GPU and ropepool's CUDA backend")
    return request.param


def problem(device, **kw):
    from helpers import make_framework

    return Problem(make_framework("torch-cuda" if device == "cuda" else "torch"), **kw)


def variant_kwargs(p):
    """A scaled, partial, GPT-J-style call with the caller's frequencies (float64 on the host)."""
    inv_freq = torch.linspace(1.0, 1e-4, VARIANT["rotary_dim"] // 2, dtype=torch.float64)
    return p.kwargs(**VARIANT, inv_freq=inv_freq)


def clone_all(arrays):
    return [x.clone() for x in arrays]


def assert_same(got, want):
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape and g.stride() == w.stride()
        assert torch.equal(g, w)


def test_operator_schema_has_the_seed_arguments_and_every_extension_keyword(ropepool):
    from ropepool import torch_op

    schema = torch.ops.ropepool.rope_pool_fused.default._schema
    names = [a.name for a in schema.arguments]
    assert names[:7] == ["q", "k", "v", "positions", "slots", "k_pool", "v_pool"]
    assert set(names[7:]) == {"head_dim", "num_qo_heads", "num_kv_heads", "rope_base", "threads", "checked",
                              "is_neox", "rotary_dim", "inv_freq", "attention_scaling", "kv_layout",
                              "kv_cache_dtype", "k_scale", "v_scale", "v_head_dim", "mrope_section",
                              "mrope_interleaved", "q_norm_weight", "k_norm_weight", "norm_eps",
                              "norm_weight_offset"}
    mutated = [a.name for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write]
    assert mutated == ["k_pool", "v_pool"]
    assert all(r.alias_info is None for r in schema.returns)  # fresh q_rot and k_rot
    out = torch.ops.ropepool.rope_pool_fused.out._schema
    assert [a.name for a in out.arguments if a.alias_info is not None and a.alias_info.is_write] == [
        "k_pool", "v_pool", "q_out", "k_out"]
    assert torch_op.rope_pool_fused is torch.ops.ropepool.rope_pool_fused


def test_eager_calls_stay_the_direct_binding(ropepool):
    from ropepool import _ropepool, torch_op

    torch_op.register_compile_path()  # even once Dynamo knows the substitution
    assert ropepool.rope_pool_fused is _ropepool.rope_pool_fused


@pytest.mark.parametrize("variant", [False, True])
def test_operator_results_are_the_direct_bindings_bit_for_bit(ropepool, device, variant):
    from ropepool import torch_op

    p = problem(device)
    kw = variant_kwargs(p) if variant else p.kwargs()
    want_pools = clone_all([p.k_pool, p.v_pool])
    want = ropepool.rope_pool_fused(*p.arrays()[:5], *want_pools, **kw)
    pools = clone_all([p.k_pool, p.v_pool])
    q_rot, k_rot = torch.ops.ropepool.rope_pool_fused(*p.arrays()[:5], *pools, **kw)
    assert_same([q_rot, k_rot, *pools], want)
    for q_out, k_out in [(torch.empty_like(p.q), None), (None, torch.empty_like(p.k)),
                         (torch.empty_like(p.q), torch.empty_like(p.k))]:
        pools = clone_all([p.k_pool, p.v_pool])
        got = torch_op.call_op(*p.arrays()[:5], *pools, **kw, q_out=q_out, k_out=k_out)
        assert (got[0] is q_out) == (q_out is not None) and (got[1] is k_out) == (k_out is not None)
        assert got[2] is pools[0] and got[3] is pools[1]
        assert_same(got, want)


def test_operator_matches_the_float64_reference(ropepool, device):
    from ropepool import torch_op

    p = problem(device, max_pos=2**31 - 1)
    before = p.snapshot()
    check_call(p, before, torch_op.call_op(*p.arrays(), **p.kwargs()))


def test_operator_refusal_is_the_librarys_and_writes_nothing(ropepool, device):
    p = problem(device)
    p.slots[0] = p.P  # one past the pool's end
    before = p.snapshot()
    with pytest.raises(ropepool.RopePoolError, match="slot"):
        torch.ops.ropepool.rope_pool_fused(*p.arrays(), **p.kwargs(checked=True))
    for old, x in zip(before, p.arrays()):
        assert (old == p.fw.bits(x)).all()


@pytest.mark.parametrize("given", [dict(is_neox=0), dict(is_neox=2), dict(mrope_interleaved=1), dict(checked=0),
                                   dict(rope_base=True), dict(num_qo_heads=True), dict(attention_scaling=True),
                                   dict(threads=True), dict(norm_weight_offset=False)])
def test_mixed_bools_are_refused_as_eager_does(ropepool, given):
    """The direct call refuses a number for a bool and a bool for a number; so does call_op (what
    Dynamo traces), and so does the operator called as it is for its bool and float keywords, which
    its schema declares as Scalars so that they reach the library as given (a bool schema argument
    would make is_neox=2 True, a float one rope_base=True 1.0). Its int keywords are ints (shape
    sizes, symbolic under dynamic shapes), which torch's parser fills from a bool: only call_op
    refuses num_qo_heads=True. Nothing written."""
    from ropepool import torch_op

    p = problem("cpu")
    before = p.snapshot()
    (name, value), = given.items()
    numbers = ("rope_base", "num_qo_heads", "attention_scaling", "threads", "norm_weight_offset")
    error = TypeError if name in numbers else ropepool.RopePoolError
    calls = [ropepool.rope_pool_fused, torch_op.call_op]
    if name != "num_qo_heads":
        calls.append(torch.ops.ropepool.rope_pool_fused)
    for call in calls:
        with pytest.raises(error, match=f"{name} must be"):
            call(*p.arrays(), **p.kwargs(**given))
    for old, x in zip(before, p.arrays()):
        assert (old == p.fw.bits(x)).all()


@pytest.mark.parametrize("given", [dict(is_neox=1), dict(checked="yes"), dict(mrope_interleaved=None),
                                   dict(num_qo_heads=True), dict(head_dim=64.0), dict(rope_base="1e4"),
                                   dict(attention_scaling=1 + 2j), dict(threads=2**40), dict(k_scale=-1)])
def test_compiled_path_refuses_in_the_direct_calls_words(ropepool, given):
    """call_op (what Dynamo traces, and what tracers and dispatch modes run) said 'is_neox must be True
    or False' where the direct call says what the flag means, 'num_qo_heads must be a number' where
    it says 'an int', passed a float head_dim or a text rope_base on to the schema (torch's
    RuntimeError), and raised RopePoolErrors without .status: now the same type, message and status."""
    from ropepool import torch_op

    p = problem("cpu")
    before = p.snapshot()
    raised = []
    for call in (ropepool.rope_pool_fused, torch_op.call_op):
        with pytest.raises((TypeError, ValueError)) as info:
            call(*p.arrays(), **p.kwargs(**given))
        raised.append((type(info.value), str(info.value), getattr(info.value, "status", None)))
    assert raised[1] == raised[0]
    for old, x in zip(before, p.arrays()):
        assert (old == p.fw.bits(x)).all()


@pytest.mark.parametrize("entry", [True, np.False_])
def test_compiled_path_refuses_a_bool_mrope_section_entry_as_eager_does(ropepool, entry):
    """The schema's int[] reads True as 1; the direct call refuses it, and so does call_op."""
    from ropepool import torch_op

    p = problem("cpu")
    before = p.snapshot()
    name = "bool" if entry is True else f"numpy.{type(entry).__name__}"
    for call in (ropepool.rope_pool_fused, torch_op.call_op):
        with pytest.raises(TypeError, match=f"mrope_section entry must be an int, got {name}$"):
            call(*p.arrays(), **p.kwargs(mrope_section=[entry, 15, 16]))
    for old, x in zip(before, p.arrays()):
        assert (old == p.fw.bits(x)).all()


@pytest.mark.parametrize("given, error, match", [
    (dict(k_scale="2"), TypeError, "k_scale must be a number, got str$"),
    (dict(v_scale=[2.0]), TypeError, "v_scale must be a number, got list$"),
    (dict(k_scale=np.array([2.0], np.float16)), "RopePoolError", "k_scale must be a number or a one-element float32"),
    (dict(k_scale=np.ma.masked_array([2.0], [True]).astype(np.float32)), "RopePoolError", "k_scale is a numpy.ma"),
    (dict(inv_freq=np.full(8, 0.5, np.float16)), "RopePoolError", "inv_freq must hold float32 or float64 values, got dtype float16$"),
    (dict(inv_freq=[1] * 8), "RopePoolError", "inv_freq must hold float32 or float64 values, got dtype int64$"),
    (dict(inv_freq="abcdefgh"), "RopePoolError", "inv_freq must"),
])
def test_compiled_path_refuses_a_scale_or_table_as_eager_does(ropepool, given, error, match):
    """call_op (what Dynamo traces) read k_scale='2' as 2.0 and a float16 or integer inv_freq
    widened to float64, where the direct call refuses them: both refuse now, nothing written."""
    from ropepool import torch_op

    p = problem("cpu")
    p.k_pool, p.v_pool = (torch.full_like(x, 0x55, dtype=torch.uint8) for x in (p.k_pool, p.v_pool))
    error = ropepool.RopePoolError if error == "RopePoolError" else error
    before = p.snapshot()
    for call in (ropepool.rope_pool_fused, torch_op.call_op):
        with pytest.raises(error, match=match):
            call(*p.arrays(), **p.kwargs(kv_cache_dtype="fp8", rotary_dim=16, **given))
    for old, x in zip(before, p.arrays()):
        assert (old == p.fw.bits(x)).all()


@pytest.mark.parametrize("given", [
    dict(rope_base=10**400), dict(attention_scaling=10**400), dict(norm_eps=10**400),
    dict(norm_weight_offset=-10**400), dict(head_dim=2**70), dict(num_kv_heads=-2**64), dict(rotary_dim=2**70),
    dict(v_head_dim=2**70), dict(threads=2**70), dict(mrope_section=[2**70, 15, 16]),
])
def test_compiled_path_refuses_a_number_its_schema_cannot_hold_as_eager_does(ropepool, given):
    """call_op (what Dynamo traces) handed ints past float64 or int64 to the schema, whose parser
    raised torch's own OverflowError ('int too big to convert') or RuntimeError ("Expected a value
    of type 'int' ... but instead found type 'int'"), naming neither the argument nor the value; the
    direct call's RopePoolError names both, and call_op's now says the same. Nothing written."""
    from ropepool import torch_op

    p = problem("cpu")
    extra = dict(q_norm_weight=torch.ones(p.D), norm_eps=1e-6) if "norm_weight_offset" in given else {}
    if "norm_eps" in given:
        extra = dict(q_norm_weight=torch.ones(p.D))
    before = p.snapshot()
    messages = []
    for call in (ropepool.rope_pool_fused, torch_op.call_op):
        with pytest.raises(ropepool.RopePoolError) as info:
            call(*p.arrays(), **p.kwargs(**given, **extra))
        messages.append(str(info.value))
    assert messages[1] == messages[0]
    assert messages[0].startswith(next(iter(given)))
    for old, x in zip(before, p.arrays()):
        assert (old == p.fw.bits(x)).all()


def test_compiled_path_reads_numpy_numbers_as_eager_does(ropepool):
    """The direct call takes NumPy scalars and arrays for its numbers, flags and tables; call_op
    handed them to the schema's Scalars as they were (a RuntimeError: 'Cannot cast 1.5 to
    number'). Same bits as the direct call now."""
    from ropepool import torch_op

    p = problem("cpu")
    p.k_pool, p.v_pool = (torch.full_like(x, 0x55, dtype=torch.uint8) for x in (p.k_pool, p.v_pool))
    given = dict(attention_scaling=np.float32(1.5), threads=np.int32(1), is_neox=np.False_, rotary_dim=np.int64(16),
                 inv_freq=np.linspace(1.0, 1e-3, 8, dtype=np.float32), k_scale=np.array([2.0], np.float32),
                 v_scale=np.float64(0.5), rope_base=np.array(10000.0), kv_cache_dtype="fp8")
    results = []
    for call in (ropepool.rope_pool_fused, torch_op.call_op):
        pools = clone_all([p.k_pool, p.v_pool])
        results.append([*call(*p.arrays()[:5], *pools, **p.kwargs(**given))[:2], *pools])
    assert_same(results[1], results[0])


@pytest.mark.parametrize("name", ["rope_base", "attention_scaling"])
def test_compiled_call_with_a_number_given_as_a_tensor_runs_as_eager_does(ropepool, name):
    """The direct call reads a 0-d tensor's value; traced, the schema's Scalar met a FakeTensor and
    torch.compile raised its cast error. call_op refuses it naming the fix, which Dynamo takes as a
    graph break: the compiled function then runs the direct call, with the same bits."""
    from ropepool import torch_op

    p = problem("cpu")
    value = torch.tensor(10000.0 if name == "rope_base" else 1.5, dtype=torch.float64)
    pools = clone_all([p.k_pool, p.v_pool])
    want = [*ropepool.rope_pool_fused(*p.arrays()[:5], *pools, **p.kwargs(**{name: value.item()}))[:2], *pools]

    def step(number, k_pool, v_pool):
        return ropepool.rope_pool_fused(*p.arrays()[:5], k_pool, v_pool, **p.kwargs(**{name: number}))

    pools = clone_all([p.k_pool, p.v_pool])
    torch._dynamo.reset()
    assert_same([*torch.compile(step)(value, *pools)[:2], *pools], want)
    before = p.snapshot()
    with pytest.raises(TypeError, match=rf"^{name} must be a number for the operator, got a torch.Tensor: pass a "
                                        rf"Python number \({name}.item\(\), outside compiled code\)$"):
        torch_op.call_op(*p.arrays(), **p.kwargs(**{name: value}))
    for old, x in zip(before, p.arrays()):
        assert (old == p.fw.bits(x)).all()


@pytest.mark.parametrize("name", ["attention_scaling", "norm_weight_offset"])
def test_compiled_call_takes_a_float32_numpy_number_passed_in_as_eager_does(ropepool, name):
    """Dynamo traces a numpy.float32 argument as a tensor whose value is an unbacked SymFloat;
    comparing it with the keyword's default raised torch's 'Could not guard on data-dependent
    expression' under fullgraph=True. Now it traces, with the direct call's bits."""
    p = problem("cpu")
    value = np.float32(1.5)
    norm = {} if name == "attention_scaling" else {"q_norm_weight": torch.linspace(-1.0, 1.0, p.D)}

    def step(number, k_pool, v_pool):
        return ropepool.rope_pool_fused(*p.arrays()[:5], k_pool, v_pool, **p.kwargs(**norm, **{name: number}))

    pools = clone_all([p.k_pool, p.v_pool])
    want = [*step(value, *pools)[:2], *pools]
    pools = clone_all([p.k_pool, p.v_pool])
    torch._dynamo.reset()
    assert_same([*torch.compile(step, fullgraph=True)(value, *pools)[:2], *pools], want)


NATIVE_BUILT = importlib.util.find_spec("ropepool._ropepool_torch") is not None


def test_the_operator_kernel_is_the_one_chosen(ropepool):
    """The C++ kernel where ropepool._ropepool_torch is built against this torch; the Python one
    with ROPEPOOL_TORCH_NATIVE=0 (test_torch.py runs this file under it as well)."""
    from ropepool import torch_op

    native = NATIVE_BUILT and os.environ.get("ROPEPOOL_TORCH_NATIVE") != "0"
    assert torch_op.KERNEL == ("native" if native else "python")


def test_keywords_at_their_defaults_and_refused_values_reach_the_binding(ropepool, device):
    """The kernel passes the binding every keyword that differs from the schema's default: every
    keyword spelled out at its default gives the plain call's results, and a value the binding
    refuses is refused with its message, nothing written."""
    from ropepool import torch_op

    p = problem(device)
    want_pools = clone_all([p.k_pool, p.v_pool])
    want = ropepool.rope_pool_fused(*p.arrays()[:5], *want_pools, **p.kwargs())
    defaults = {name: default for name, _, default in torch_op.EXTENSIONS}
    pools = clone_all([p.k_pool, p.v_pool])
    assert_same([*torch.ops.ropepool.rope_pool_fused(*p.arrays()[:5], *pools, **p.kwargs(**defaults)),
                 *pools], want)
    before = p.snapshot()
    for refused, match in [(dict(attention_scaling=float("nan")), "attention_scaling"),
                           (dict(kv_layout="NDH"), "kv_layout"), (dict(rotary_dim=-2), "rotary_dim"),
                           (dict(mrope_section=[1, 2]), "mrope_section"), (dict(threads=0), "threads")]:
        with pytest.raises(ropepool.RopePoolError, match=match):
            torch.ops.ropepool.rope_pool_fused(*p.arrays(), **p.kwargs(**refused))
    for old, x in zip(before, p.arrays()):
        assert (old == p.fw.bits(x)).all()


@pytest.mark.parametrize("view", ["negative bit", "zero tensor"])
@pytest.mark.parametrize("name", ["v", "k_pool", "v_pool", "q_out"])
def test_a_negative_view_or_zero_tensor_is_refused_as_the_direct_call_refuses_it(ropepool, name, view):
    """torch's fallbacks for these would hand the kernel a materialised copy: a pool's rows written
    into a discarded copy after the other pool was written, then torch's own internal assert.
    The operator's kernel takes them as they are: the binding's refusal, nothing written."""
    p = problem("cpu")
    outs = dict(q_out=torch.zeros_like(p.q), k_out=torch.zeros_like(p.k))
    arrays = dict(zip(["q", "k", "v", "positions", "slots", "k_pool", "v_pool"], p.arrays()), **outs)
    before = {n: x.clone() for n, x in arrays.items()}
    x = arrays[name]
    arrays[name] = torch._neg_view(x) if view == "negative bit" else torch._efficientzerotensor(x.shape, dtype=x.dtype)
    calls = {"direct": ropepool.rope_pool_fused, "operator": torch.ops.ropepool.rope_pool_fused}
    messages = {}
    for label, call in calls.items():
        with pytest.raises(ropepool.RopePoolError) as refused:
            call(*list(arrays.values())[:7], **p.kwargs(**{n: arrays[n] for n in outs}))
        messages[label] = str(refused.value)
        for n, old in before.items():
            if n != name:
                assert torch.equal(arrays[n], old), (label, n)
    assert messages["operator"] == messages["direct"]


@pytest.mark.parametrize("overload", ["default", "out"])
@pytest.mark.parametrize("variant", [False, True])
def test_opcheck(ropepool, device, overload, variant):
    p = problem(device, T=3, Hq=4, Hk=2, D=64, P=8)
    kw = variant_kwargs(p) if variant else p.kwargs()
    if overload == "out":
        kw.update(q_out=torch.empty_like(p.q), k_out=torch.empty_like(p.k))
    op = getattr(torch.ops.ropepool.rope_pool_fused, overload)
    torch.library.opcheck(op, tuple(p.arrays()), kw)


# ---- torch.compile ------------------------------------------------------------------------------


def compiled_code(fn, *args):
    """fn compiled with fullgraph=True (a graph break raises), its results and Inductor's code."""
    from torch._inductor.utils import run_and_get_code

    torch._dynamo.reset()
    result, code = run_and_get_code(torch.compile(fn, fullgraph=True), *args)
    return result, "\n".join(code)


def assert_no_pool_copy(code, pool_elements):
    """No clone, copy or allocation of a pool-sized buffer in the compiled code: the operator
    writes the caller's pools in place."""
    for line in code.splitlines():
        if "def get_args" in line:  # the benchmark harness after the compiled call
            break
        assert "clone" not in line and "copy_" not in line, line
        assert not ("empty_strided" in line and str(pool_elements) in line.replace(", ", "")), line


@pytest.mark.parametrize("pools", ["separate", "halves of one cache"])
def test_compiled_call_traces_without_a_graph_break_and_writes_the_pools_in_place(ropepool, device, pools):
    p = problem(device, T=5, Hq=4, Hk=2, D=64, P=64)
    kw = p.kwargs()

    if pools == "separate":
        def step(q, k, v, positions, slots, k_pool, v_pool):
            q_rot, k_rot, _, _ = ropepool.rope_pool_fused(q, k, v, positions, slots, k_pool, v_pool, **kw)
            return q_rot, k_rot

        cache = [p.k_pool, p.v_pool]
    else:
        def step(q, k, v, positions, slots, kv):  # K and V as the halves of one [2, P, Hk, D] cache
            q_rot, k_rot, _, _ = ropepool.rope_pool_fused(q, k, v, positions, slots, kv[0], kv[1], **kw)
            return q_rot, k_rot

        cache = [torch.stack([p.k_pool, p.v_pool])]
    eager_cache = clone_all(cache)
    want = step(*p.arrays()[:5], *eager_cache)
    got, code = compiled_code(step, *p.arrays()[:5], *cache)
    assert_same(got, want)
    assert_same(cache, eager_cache)
    assert "torch.ops.ropepool.rope_pool_fused.default(" in code
    assert_no_pool_copy(code, p.P * p.Hk * p.D)


def test_compiled_call_with_outputs_given_rotates_in_place(ropepool, device):
    p = problem(device, T=5, Hq=4, Hk=2, D=64, P=64)
    kw = p.kwargs()

    def step(q, k, v, positions, slots, k_pool, v_pool):
        ropepool.rope_pool_fused(q, k, v, positions, slots, k_pool, v_pool, **kw, q_out=q, k_out=k)

    eager = clone_all(p.arrays())
    step(*eager)
    got = clone_all(p.arrays())
    _, code = compiled_code(step, *got)
    assert_same(got, eager)
    assert "torch.ops.ropepool.rope_pool_fused.out(" in code
    assert_no_pool_copy(code, p.P * p.Hk * p.D)


@pytest.mark.parametrize("cache", ["views made inside", "views made inside, marked static", "views passed in"])
def test_compiled_call_with_dynamic_shapes_refuses_views_whose_offset_it_would_lose(ropepool, cache):
    """torch.compile(dynamic=True) passes a view made inside the compiled function at offset 0 when
    its offset depends on the shapes (pytorch/pytorch#198068): layer 1's rows would land in layer 0.
    The trace refuses it, nothing written; a static cache, or the views as inputs, compile and write
    layer 1."""
    p = problem("cpu", T=3, Hq=4, Hk=2, D=16, P=24)
    kw = p.kwargs()
    k_cache, v_cache = torch.zeros(2, *p.k_pool.shape), torch.zeros(2, *p.v_pool.shape)

    def step(q, k, v, positions, slots, k_pool, v_pool):
        if cache != "views passed in":
            k_pool, v_pool = k_pool[1], v_pool[1]
        ropepool.rope_pool_fused(q, k, v, positions, slots, k_pool, v_pool, **kw)

    torch._dynamo.reset()
    compiled = torch.compile(step, fullgraph=True, dynamic=True)
    pools = (k_cache[1], v_cache[1]) if cache == "views passed in" else (k_cache, v_cache)
    if cache == "views made inside":
        with pytest.raises(Exception, match=r"k_pool is a view at a storage offset that depends on .*#198068"):
            compiled(*p.arrays()[:5], *pools)
        assert not k_cache.any() and not v_cache.any()
        return
    if cache.endswith("marked static"):
        torch._dynamo.mark_static(k_cache)
        torch._dynamo.mark_static(v_cache)
    compiled(*p.arrays()[:5], *pools)
    want_k, want_v = clone_all([k_cache, v_cache])
    want_k.zero_(), want_v.zero_()
    step(*p.arrays()[:5], *((want_k[1], want_v[1]) if cache == "views passed in" else (want_k, want_v)))
    assert want_v[1].any()
    assert_same([k_cache, v_cache], [want_k, want_v])


@pytest.mark.parametrize("strict", [False, True])
def test_exported_module_calls_the_operator_and_writes_its_pool_buffers(ropepool, strict):
    """torch.export runs the model on FakeTensors (non-strict: without Dynamo), which have no memory
    to describe: the direct call traces the operator instead, and the exported program writes the
    module's pools as the eager call does."""
    p = problem("cpu", T=3, Hq=4, Hk=2, D=16, P=24)
    kw = p.kwargs()

    class Layer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("k_pool", torch.zeros_like(p.k_pool))
            self.register_buffer("v_pool", torch.zeros_like(p.v_pool))

        def forward(self, q, k, v, positions, slots):
            q_rot, k_rot, _, _ = ropepool.rope_pool_fused(q, k, v, positions, slots, self.k_pool, self.v_pool, **kw)
            return q_rot, k_rot

    inputs = tuple(p.arrays()[:5])
    # T dynamic: the call must not read (and so fix) a traced size before it hands over to the operator
    tokens = torch.export.Dim("T", min=2, max=64)
    program = torch.export.export(Layer(), inputs, strict=strict, dynamic_shapes=tuple({0: tokens} for _ in inputs))
    assert "torch.ops.ropepool.rope_pool_fused.default(" in program.graph_module.code
    exported, eager = program.module(), Layer()
    got, want = exported(*inputs), eager(*inputs)
    assert eager.v_pool.any()
    assert_same([*got, exported.k_pool, exported.v_pool], [*want, eager.k_pool, eager.v_pool])
    longer = problem("cpu", T=7, Hq=4, Hk=2, D=16, P=24)  # another T, through the same program
    longer_inputs = tuple(longer.arrays()[:5])
    got, want = exported(*longer_inputs), eager(*longer_inputs)
    assert_same([*got, exported.k_pool, exported.v_pool], [*want, eager.k_pool, eager.v_pool])


class RecordingMode(torch.utils._python_dispatch.TorchDispatchMode):
    """A TorchDispatchMode that records each operator it sees, then runs it."""

    def __init__(self, disable_dispatch=False):
        super().__init__()
        self.seen, self.disable_dispatch = [], disable_dispatch

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.seen.append(str(func))
        if self.disable_dispatch:  # the kernel then runs with this mode still on the stack
            with torch._C._DisableTorchDispatch():
                return func(*args, **(kwargs or {}))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("outputs", ["fresh", "q_out", "k_out", "both"])
@pytest.mark.parametrize("disable_dispatch", [False, True])
def test_direct_call_under_a_dispatch_mode_runs_as_the_operator_the_mode_sees(ropepool, device, outputs,
                                                                               disable_dispatch):
    """A TorchDispatchMode (make_fx, FlopCounterMode, a caller's own) sees every operator; the direct
    call on plain tensors must be one of them, and give the direct call's results."""
    p = problem(device, T=5, Hq=4, Hk=2, D=16, P=24)
    kw = p.kwargs()
    given = dict(q_out=torch.empty_like(p.q) if outputs in ("q_out", "both") else None,
                 k_out=torch.empty_like(p.k) if outputs in ("k_out", "both") else None)
    want = ropepool.rope_pool_fused(*p.arrays()[:5], *clone_all(p.arrays()[5:]), **kw)
    mode = RecordingMode(disable_dispatch)
    with mode:
        got = ropepool.rope_pool_fused(*p.arrays(), **kw, **given)
    overload = "default" if outputs == "fresh" else "out"
    assert "ropepool.rope_pool_fused." + overload in mode.seen
    assert got[2] is p.k_pool and got[3] is p.v_pool
    for name, index in (("q_out", 0), ("k_out", 1)):
        assert (got[index] is given[name]) == (given[name] is not None)
    assert_same(got, want)


def test_make_fx_of_the_direct_call_records_the_operator_and_its_pool_writes(ropepool):
    """make_fx on real tensors traces through a dispatch mode: before, the direct call ran but was
    missing from the graph, and the traced function never wrote its pools."""
    from torch.fx.experimental.proxy_tensor import make_fx

    p = problem("cpu", T=3, Hq=4, Hk=2, D=16, P=24)
    kw = p.kwargs()

    def step(q, k, v, positions, slots, k_pool, v_pool):
        return ropepool.rope_pool_fused(q, k, v, positions, slots, k_pool, v_pool, **kw)

    graph = make_fx(step)(*p.arrays()[:5], *clone_all(p.arrays()[5:]))
    assert "torch.ops.ropepool.rope_pool_fused.default(" in graph.code
    pools, want_pools = clone_all(p.arrays()[5:]), clone_all(p.arrays()[5:])
    got, want = graph(*p.arrays()[:5], *pools), step(*p.arrays()[:5], *want_pools)
    assert want_pools[1].any()
    assert_same([*got[:2], *pools], [*want[:2], *want_pools])


def fake_cuda_problem(T=3, Hq=4, Hk=2, D=16, P=24):
    """(FakeTensorMode, q, k, v, positions, slots, k_pool, v_pool) on a 'cuda' device: what
    torch.export and make_fx(tracing_mode="fake") hand a CUDA model's calls. No GPU needed where
    this torch builds fake CUDA tensors; skipped where it does not."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    mode = FakeTensorMode()
    try:
        with mode:
            data = [torch.empty(T, H, D, device="cuda") for H in (Hq, Hk, Hk)]
            indices = [torch.zeros(T, dtype=torch.int64, device="cuda"), torch.arange(T, device="cuda")]
            pools = [torch.empty(P, Hk, D, device="cuda") for _ in range(2)]
    except (RuntimeError, AssertionError) as e:  # a torch built without CUDA
        pytest.skip(f"this torch makes no fake CUDA tensors: {e}")
    return (mode, *data, *indices, *pools)


@pytest.mark.parametrize("outputs", ["fresh", "q_out"])
@pytest.mark.parametrize("k_scale", [None, 2.0, "cuda tensor"])
def test_direct_call_on_fake_cuda_tensors_runs_the_fake_kernel(ropepool, outputs, k_scale):
    """FakeTensors on a 'cuda' device have no memory to describe: the direct call runs as the
    operator (its fake kernel), with outputs on q's device of the binding's shapes and layout, the
    caller's pools and q_out returned, and make_fx(tracing_mode="fake") records the operator with a
    number scale as a host constant and a CUDA scale as the tensor given."""
    from torch.fx.experimental.proxy_tensor import make_fx

    mode, *arrays = fake_cuda_problem()
    q, k = arrays[:2]
    with mode:
        scale = torch.full((1,), 2.0, device="cuda") if k_scale == "cuda tensor" else k_scale
        q_out = torch.empty_like(q) if outputs == "q_out" else None
    kw = dict(head_dim=16, num_qo_heads=4, num_kv_heads=2, rope_base=1e4, kv_cache_dtype="auto",
              **({} if scale is None else dict(k_scale=scale)), **({} if q_out is None else dict(q_out=q_out)))
    if scale is not None:  # scales need fp8 pools
        with mode:
            arrays[5:] = [torch.empty(x.shape, dtype=torch.uint8, device="cuda") for x in arrays[5:]]
        kw["kv_cache_dtype"] = "fp8"
    with mode:
        result = ropepool.rope_pool_fused(*arrays, **kw)
    assert result[2] is arrays[5] and result[3] is arrays[6]
    assert (result[0] is q_out) == (q_out is not None)
    for got, like in zip(result[:2], (q, k)):
        assert got.device == torch.device("cuda", 0) and got.shape == like.shape and got.is_contiguous()

    tensors = {name: value for name, value in kw.items() if isinstance(value, torch.Tensor)}
    numbers = {name: value for name, value in kw.items() if name not in tensors}

    def step(*args):
        return ropepool.rope_pool_fused(*args[:7], **numbers, **dict(zip(tensors, args[7:])))[:2]

    graph = make_fx(step, tracing_mode="fake")(*arrays, *tensors.values())
    overload = "default" if q_out is None else "out"
    assert f"torch.ops.ropepool.rope_pool_fused.{overload}(" in graph.code


@pytest.mark.parametrize("grad", ["q", "k_pool leaf", "q_out"])
def test_compiled_call_refuses_what_requires_grad_as_eager_does(ropepool, grad):
    """AOTAutograd's compiled graph runs the kernel with grad mode off: the refusal comes from the
    trace (the fake kernel), with the binding's message, and nothing is written; under no_grad it
    compiles."""
    p = problem("cpu", T=3, Hq=2, Hk=1, D=16, P=8)
    kw = p.kwargs()
    q, k, v, positions, slots, k_pool, v_pool = p.arrays()
    out = {}
    if grad == "q":
        q = q.clone().requires_grad_()
        message = "q requires grad, but rope_pool_fused has no backward"
    elif grad == "k_pool leaf":
        k_pool.requires_grad_()
        message = "a leaf Variable that requires grad is being used in an in-place operation"
    else:
        out = dict(q_out=torch.zeros_like(q).requires_grad_(), k_out=torch.zeros_like(k))
        message = "a leaf Variable that requires grad .* writes q_out in place"

    def step(q, k, v, positions, slots, k_pool, v_pool):
        return ropepool.rope_pool_fused(q, k, v, positions, slots, k_pool, v_pool, **kw, **out)

    before = [x.detach().clone() for x in (k_pool, v_pool, *out.values())]
    torch._dynamo.reset()
    with pytest.raises(Exception, match=message):  # torch wraps it (TorchRuntimeError)
        torch.compile(step, fullgraph=True, backend="aot_eager")(q, k, v, positions, slots, k_pool, v_pool)
    assert all(torch.equal(x.detach(), b) for x, b in zip((k_pool, v_pool, *out.values()), before))
    with pytest.raises(ropepool.RopePoolError, match=message):
        step(q, k, v, positions, slots, k_pool, v_pool)
    torch._dynamo.reset()
    with torch.no_grad():
        torch.compile(step, fullgraph=True, backend="aot_eager")(q, k, v, positions, slots, k_pool, v_pool)


@pytest.mark.parametrize("transform", ["grad", "vjp", "jacrev"])
@pytest.mark.parametrize("overload", ["default", "out"])
def test_operator_under_a_torch_func_transform_refuses_what_requires_grad(ropepool, transform, overload):
    """Under torch.func.grad, vjp and jacrev the operator's device kernel sees the transform's
    unwrapped tensors, which do not require grad: it ran, and the gradient through q_rot came back
    as zeros (torch's autograd fallback only warned). Refused now with the direct call's message,
    nothing written; with the transform's tensors not requiring grad it still runs."""
    p = problem("cpu", T=2, Hq=2, Hk=1, D=16, P=8)
    kw = p.kwargs()
    _, k, v, positions, slots, k_pool, v_pool = p.arrays()
    outs = dict(q_out=torch.zeros_like(p.q), k_out=torch.zeros_like(p.k)) if overload == "out" else {}
    before = [x.clone() for x in (k_pool, v_pool, *outs.values())]

    def rotated(q):
        got = torch.ops.ropepool.rope_pool_fused(q, k, v, positions, slots, k_pool, v_pool, **kw, **outs)
        return (got if overload == "default" else [outs["q_out"]])[0]

    apply = {"grad": lambda f, x: torch.func.grad(lambda x: f(x).sum())(x),
             "vjp": lambda f, x: torch.func.vjp(f, x)[1](torch.ones_like(x)),
             "jacrev": lambda f, x: torch.func.jacrev(f)(x)}[transform]
    with pytest.raises(ropepool.RopePoolError, match=r"^q requires grad, but rope_pool_fused has no backward"):
        apply(rotated, p.q.clone())
    assert all(torch.equal(x, b) for x, b in zip((k_pool, v_pool, *outs.values()), before))
    with pytest.raises(ropepool.RopePoolError, match=r"^q requires grad, but rope_pool_fused has no backward"):
        rotated(p.q.clone().requires_grad_())  # the plain autograd call, as before
    with torch.no_grad():
        assert torch.equal(rotated(p.q), ropepool.rope_pool_fused(*p.arrays(), **kw)[0])


def test_importing_ropepool_before_torch_still_compiles_without_a_graph_break(ropepool):
    script = """
import ropepool, sys
assert "torch" not in sys.modules
import torch
assert hasattr(torch.ops.ropepool, "rope_pool_fused")
q, k, v = torch.randn(2, 2, 8), torch.randn(2, 1, 8), torch.randn(2, 1, 8)
k_pool, v_pool = torch.zeros(4, 1, 8), torch.zeros(4, 1, 8)
def f(q, positions, slots):
    return ropepool.rope_pool_fused(q, k, v, positions, slots, k_pool, v_pool, head_dim=8,
                                    num_qo_heads=2, num_kv_heads=1, rope_base=10000.0)[0]
got = torch.compile(f, fullgraph=True, backend="eager")(q, torch.tensor([3, 4]), torch.tensor([1, 2]))
want = ropepool.rope_pool_fused(q, k, v, torch.tensor([3, 4]), torch.tensor([1, 2]), k_pool.clone(),
                                v_pool.clone(), head_dim=8, num_qo_heads=2, num_kv_heads=1, rope_base=10000.0)[0]
assert torch.equal(got, want)
print("compiled")
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    assert done.returncode == 0 and "compiled" in done.stdout, done.stderr[-3000:]


# ---- CUDA graphs --------------------------------------------------------------------------------


class DecodeStep(torch.nn.Module):
    """One decode step's RoPE + pool write with the pools held as module buffers."""

    def __init__(self, ropepool, p):
        super().__init__()
        self.ropepool, self.kw = ropepool, p.kwargs()
        self.register_buffer("kv", torch.stack([p.k_pool, p.v_pool]))

    def forward(self, q, k, v, positions, slots):
        q_rot, k_rot, _, _ = self.ropepool.rope_pool_fused(q, k, v, positions, slots, self.kv[0], self.kv[1],
                                                           **self.kw)
        return q_rot * 1.0, k_rot


def fresh_inputs(p, seed):
    """New q, k, v, positions and distinct slots of p's shapes, in p's tensors' memory."""
    g = torch.Generator().manual_seed(seed)
    values = [torch.randn(x.shape, generator=g).to(x) for x in (p.q, p.k, p.v)]
    positions = torch.randint(0, 4096, p.positions.shape, generator=g).to(p.positions)
    slots = torch.randperm(p.P, generator=g)[:p.T].to(p.slots)
    return values + [positions, slots]


@pytest.mark.cuda
def test_reduce_overhead_replays_with_new_positions_slots_and_inputs(ropepool, device):
    if device != "cuda":
        pytest.skip("CUDA graphs need a GPU")
    p = problem(device, T=4, Hq=8, Hk=2, D=64, P=64)
    model, eager = DecodeStep(ropepool, p), DecodeStep(ropepool, p)
    compiled = torch.compile(model, mode="reduce-overhead", fullgraph=True)
    for seed in range(5):  # the first calls record, the later ones replay the graph
        inputs = fresh_inputs(p, seed)
        got = [x.clone() for x in compiled(*inputs)]
        want = eager(*inputs)
        assert_same(got, want)
        assert torch.equal(model.kv, eager.kv)


def assert_replays_as_the_direct_call(ropepool, p, graph, static, captured, kw):
    """Each replay of `graph` on new static inputs (p's shapes) leaves in `captured` (q_rot, k_rot
    and the pools it wrote) what the direct call gives on the same inputs and copies of the pools."""
    want_pools = clone_all(captured[2:])
    for seed in range(1, 4):
        for dst, src in zip(static, fresh_inputs(p, seed)):
            dst.copy_(src)
        graph.replay()
        want = ropepool.rope_pool_fused(*static, *want_pools, **kw)
        torch.cuda.synchronize()
        assert_same(captured, want)


@pytest.mark.cuda
def test_manual_cuda_graph_capture_replays_with_new_positions_slots_and_inputs(ropepool, device):
    if device != "cuda":
        pytest.skip("CUDA graphs need a GPU")
    p = problem(device, T=4, Hq=8, Hk=2, D=64, P=64)
    static = fresh_inputs(p, 0)
    pools = clone_all([p.k_pool, p.v_pool])
    kw = p.kwargs()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up outside the capture, as torch's docs ask
        torch.ops.ropepool.rope_pool_fused(*static, *pools, **kw)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        q_rot, k_rot = torch.ops.ropepool.rope_pool_fused(*static, *pools, **kw)
    assert_replays_as_the_direct_call(ropepool, p, graph, static, [q_rot, k_rot, *pools], kw)


@pytest.mark.cuda
@pytest.mark.parametrize("mode", ["caller's mode", "torch's input-liveness tracker"])
@pytest.mark.parametrize("k_scale", ["number", "cuda tensor"])
def test_direct_call_captured_under_a_dispatch_mode_replays_as_the_direct_call(ropepool, device, mode, k_scale):
    """Under a TorchDispatchMode the direct call is routed through call_op and the operator, in
    a CUDA graph capture too: a caller's mode around the capture, or torch's own input tracker
    (torch.cuda.graph(check_input_liveness=True) captures under one). Nothing on that path may
    synchronise or allocate outside the graph's pool (a number scale becomes a host tensor there),
    and each replay must write what the direct call writes. (Written without a GPU.)"""
    if device != "cuda":
        pytest.skip("CUDA graphs need a GPU")
    tracker = mode != "caller's mode"
    if tracker and "check_input_liveness" not in inspect.signature(torch.cuda.graph).parameters:
        pytest.skip("this torch's torch.cuda.graph has no check_input_liveness")
    p = problem(device, T=4, Hq=8, Hk=2, D=64, P=64)
    static = fresh_inputs(p, 0)
    pools = [torch.full_like(x, 0x55, dtype=torch.uint8) for x in (p.k_pool, p.v_pool)]
    scale = 2.0 if k_scale == "number" else torch.full((1,), 2.0, device=p.q.device)
    kw = p.kwargs(kv_cache_dtype="fp8", k_scale=scale, v_scale=0.5)
    ropepool.rope_pool_fused(*static, *pools, **kw)  # warm-up: the device's context outside the capture
    torch.cuda.synchronize()
    graph, recording = torch.cuda.CUDAGraph(), RecordingMode()
    with torch.cuda.graph(graph, **(dict(check_input_liveness=True) if tracker else {})):
        with contextlib.nullcontext() if tracker else recording:
            q_rot, k_rot, _, _ = ropepool.rope_pool_fused(*static, *pools, **kw)
    assert tracker or "ropepool.rope_pool_fused.default" in recording.seen
    assert_replays_as_the_direct_call(ropepool, p, graph, static, [q_rot, k_rot, *pools], kw)
