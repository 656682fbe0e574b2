"""One call, every Python surface: the same inputs must give the same bits, or the same refusal.

The surfaces: ``ropepool.rope_pool_fused`` on NumPy arrays and on torch CPU tensors,
``torch.ops.ropepool.rope_pool_fused`` (its default overload, and ``.out`` with q_out / k_out),
the call inside ``torch.compile(fullgraph=True)`` (backends eager and inductor), and
``ropepool.mlx.rope_pool_fused`` on mx.arrays. Each case is built afresh for every surface from
NumPy arrays by a deterministic function, and each surface must either
- return q_rot, k_rot and pools bit-identical to the NumPy call's (which is itself checked against
  the float64 formula of helpers.py where the case has a plain reference), leaving its inputs as
  they were, or
- raise the NumPy call's exception type with the same message (and RopePoolError's status), and
  leave every array it was given (pools and outputs included) untouched.
MLX does not claim paged layouts, QK-norm or caller outputs (README, "MLX"): there it must refuse
them, and is not compared. The type stub and python/README.md's keyword list are checked against
every surface's signature.
"""

import ast
import inspect
import os
import re

import numpy as np
import pytest

import helpers

torch = pytest.importorskip("torch", reason="torch is not installed")
import ropepool  # noqa: E402
from ropepool import torch_op  # noqa: E402

try:
    import mlx.core as mx
    import ropepool.mlx as rp_mlx
except ImportError:  # the MLX surface is compared where MLX and the extension are installed
    mx = rp_mlx = None

T, HQ, HK, D, P = 5, 4, 2, 16, 12
NAMES = ["q", "k", "v", "positions", "slots", "k_pool", "v_pool"]


# ---- the cases: NumPy arrays and keywords, built afresh for each surface -------------------------


def base(dtype=np.float32, seed=0, positions=None, slots=None, pool_shape=(P, HK, D), pool_dtype=None, vd=D):
    rng = np.random.default_rng(seed)

    def data(*shape, lo=-2.0, hi=2.0):
        return rng.uniform(lo, hi, shape).astype(dtype)

    pool_dtype = dtype if pool_dtype is None else pool_dtype
    v_pool_shape = pool_shape[:-1] + (vd,)
    pools = (rng.integers(0, 256, pool_shape).astype(np.uint8), rng.integers(0, 256, v_pool_shape).astype(np.uint8)) \
        if pool_dtype == np.uint8 else (data(*pool_shape, lo=-9, hi=9), data(*v_pool_shape, lo=-9, hi=9))
    return dict(q=data(T, HQ, D), k=data(T, HK, D), v=data(T, HK, vd),
                positions=np.array([0, 5, 70000, 7, 2**20] if positions is None else positions, np.int32),
                slots=np.array([3, 0, -1, 11, 6] if slots is None else slots, np.int32),
                k_pool=pools[0], v_pool=pools[1])


SEED = dict(head_dim=D, num_qo_heads=HQ, num_kv_heads=HK, rope_base=10000.0)


def case(arrays=None, **keywords):
    """A case builder: the arrays (a dict, or a function of nothing returning one) and keywords,
    which may be functions of the arrays (views of them: q_out=q, a slice of a pool)."""
    def build():
        a = base() if arrays is None else arrays()
        kw = dict(SEED)
        for name, value in keywords.items():
            kw[name] = value(a) if callable(value) else value
        return a, kw
    return build


FREQS = np.array([0.9 ** j for j in range(4)], np.float32)
WEIGHT = np.linspace(0.5, 1.5, D).astype(np.float32)
FP8_POOLS = lambda: base(pool_dtype=np.uint8)  # noqa: E731


def paged(layout, block=4):
    shape = (P // block, block, HK, D) if layout == "NHD" else (P // block, HK, block, D)
    return lambda: base(pool_shape=shape)


def readonly(name):
    def arrays():
        a = base()
        a[name].flags.writeable = False
        return a
    return arrays


# name -> (builder, the reference to check the NumPy result against, or None)
VALID = {
    "seed": (case(), "rope"),
    "float16": (case(lambda: base(np.float16)), "rope"),
    "gptj": (case(is_neox=False), "rope"),
    "partial": (case(rotary_dim=8), "rope"),
    "partial_gptj_freqs_scaling": (case(is_neox=False, rotary_dim=8, inv_freq=FREQS, attention_scaling=0.75), "rope"),
    "inv_freq_float64_zeros": (case(inv_freq=np.array([1.0, 0.0, 0.25, 0.0, 1e-3, 0.0, 0.5, 2.0])), "rope"),
    "int64_positions": (case(lambda: {**base(), "positions": np.array([2**40, -3, 0, 2**31, 9], np.int64)}), "rope"),
    "fp8_e4m3": (case(FP8_POOLS, kv_cache_dtype="fp8_e4m3", k_scale=0.5, v_scale=2.0), None),
    "fp8_alias": (case(FP8_POOLS, kv_cache_dtype="fp8", k_scale=np.array([0.25], np.float32)), None),
    "fp8_e5m2": (case(FP8_POOLS, kv_cache_dtype="fp8_e5m2", v_scale=0.125), None),
    "paged_nhd": (case(paged("NHD"), kv_layout="NHD"), None),
    "paged_hnd": (case(paged("HND", 2), kv_layout="HND"), None),
    "mrope": (case(lambda: {**base(), "positions": np.arange(3 * T, dtype=np.int32).reshape(3, T)},
                   mrope_section=[2, 3, 3]), None),
    "mrope_interleaved": (case(lambda: {**base(), "positions": np.arange(3 * T, dtype=np.int32).reshape(3, T)},
                               mrope_section=[4, 2, 2], mrope_interleaved=True), None),
    "qk_norm": (case(q_norm_weight=WEIGHT, k_norm_weight=WEIGHT[::-1].copy(), norm_eps=1e-5), None),
    "k_norm_gemma": (case(k_norm_weight=WEIGHT, norm_weight_offset=1.0), None),
    "v_head_dim": (case(lambda: base(vd=24), v_head_dim=24), None),
    "outputs_in_place": (case(q_out=lambda a: a["q"], k_out=lambda a: a["k"]), "rope"),
    "outputs_fresh": (case(q_out=lambda a: np.zeros_like(a["q"]), k_out=lambda a: np.zeros_like(a["k"])), "rope"),
    "q_out_alone": (case(q_out=lambda a: np.zeros_like(a["q"])), "rope"),
    "threads_checked": (case(threads=1, checked=True), "rope"),
}

INVALID = {
    "q_float64": case(lambda: {**base(), "q": base(np.float64)["q"]}),
    "k_dtype_differs": case(lambda: {**base(), "k": base(np.float16)["k"]}),
    "positions_float": case(lambda: {**base(), "positions": np.zeros(T, np.float32)}),
    "slots_int16": case(lambda: {**base(), "slots": np.zeros(T, np.int16)}),
    "q_heads": case(num_qo_heads=3),
    "k_shape": case(lambda: {**base(), "k": base()["k"][:, :1]}),
    "v_pool_shape": case(lambda: {**base(), "v_pool": base()["v_pool"][:, :, :8]}),
    "positions_2d": case(lambda: {**base(), "positions": np.zeros((T, 1), np.int32)}),
    "slots_length": case(lambda: {**base(), "slots": np.arange(T - 1, dtype=np.int32)}),
    "slot_past_pool": case(lambda: base(slots=[3, 0, P, 1, 2])),
    "slot_far_past_pool": case(lambda: base(slots=[3, 0, 2**30, 1, 2])),
    "slots_duplicated_checked": case(lambda: base(slots=[3, 0, 3, 1, 2]), checked=True),
    "rope_base_negative": case(rope_base=-1.0),
    "rotary_dim_odd": case(rotary_dim=7),
    "rotary_dim_zero": case(rotary_dim=0),
    "rotary_dim_wide": case(rotary_dim=2 * D),
    "inv_freq_length": case(inv_freq=np.ones(3)),
    "inv_freq_negative": case(inv_freq=-np.ones(D // 2)),
    "inv_freq_nan": case(inv_freq=np.full(D // 2, np.nan)),
    "inv_freq_int": case(inv_freq=np.ones(D // 2, np.int32)),
    "attention_scaling_negative": case(attention_scaling=-1.0),
    "attention_scaling_nan": case(attention_scaling=float("nan")),
    "attention_scaling_zero_int": case(attention_scaling=0),
    "attention_scaling_subnormal": case(attention_scaling=1e-40),
    "kv_cache_dtype_unknown": case(kv_cache_dtype="fp16"),
    "kv_cache_dtype_on_float_pools": case(kv_cache_dtype="fp8_e4m3"),
    "uint8_pools_without_kv_cache_dtype": case(FP8_POOLS),
    "k_scale_negative": case(FP8_POOLS, kv_cache_dtype="fp8_e4m3", k_scale=-1.0),
    "k_scale_negative_int": case(FP8_POOLS, kv_cache_dtype="fp8_e4m3", k_scale=-1),
    "k_scale_zero_int": case(FP8_POOLS, kv_cache_dtype="fp8_e4m3", k_scale=0),
    "k_scale_nan": case(FP8_POOLS, kv_cache_dtype="fp8_e4m3", k_scale=float("nan")),
    "v_scale_inf": case(FP8_POOLS, kv_cache_dtype="fp8_e5m2", v_scale=float("inf")),
    "v_scale_array_nan": case(FP8_POOLS, kv_cache_dtype="fp8_e5m2", v_scale=np.array([np.nan], np.float32)),
    "k_scale_tiny": case(FP8_POOLS, kv_cache_dtype="fp8_e4m3", k_scale=1e300),
    "k_scale_on_float_pools": case(k_scale=0.5),
    "kv_layout_unknown": case(kv_layout="paged"),
    "v_head_dim_mismatch": case(v_head_dim=8),
    "v_head_dim_zero": case(v_head_dim=0),
    "mrope_zero_section": case(mrope_section=[0, 0, 0]),
    "mrope_two_entries": case(mrope_section=[4, 4]),
    "mrope_entry_past_int32": case(mrope_section=[2**31, 0, 0]),
    "mrope_positions_1d": case(mrope_section=[2, 3, 3]),
    "mrope_interleaved_alone": case(mrope_interleaved=True),
    "is_neox_int": case(is_neox=1),
    "threads_zero": case(threads=0),
    "threads_past_int32": case(threads=2**40),
    "rope_base_text": case(rope_base="1e4"),
    "rope_base_past_float64": case(rope_base=10**400),
    "head_dim_float": case(head_dim=16.0),
    "head_dim_bool": case(head_dim=True),
    "checked_text": case(checked="yes"),
    "norm_eps_zero": case(q_norm_weight=WEIGHT, norm_eps=0.0),
    "norm_eps_without_weight": case(norm_eps=1e-5),
    "norm_offset_without_weight": case(norm_weight_offset=1.0),
    "norm_weight_wide": case(q_norm_weight=np.ones(2 * D, np.float32)),
    "norm_weight_float16": case(k_norm_weight=np.ones(D, np.float16)),
    "paged_with_flat_pools": case(kv_layout="NHD"),
    "q_out_shape": case(q_out=lambda a: np.zeros((T, HQ, D // 2), np.float32)),
    "k_out_dtype": case(k_out=lambda a: np.zeros((T, HK, D), np.float16)),
    "q_out_read_only": case(readonly("q"), q_out=lambda a: a["q"]),
    "k_pool_read_only": case(readonly("k_pool")),
    "k_out_over_k_pool": case(k_out=lambda a: a["k_pool"][:T]),
    "q_out_over_v": case(lambda: {**base(), "v": np.zeros((T, HQ, D), np.float32)[:, :HK]},
                         q_out=lambda a: a["v"].base),
    "k_out_over_q_out": case(q_out=lambda a: a["q"], k_out=lambda a: a["q"][:, :HK]),
    "k_out_over_inv_freq": case(inv_freq=lambda a: a["k"].reshape(-1)[:D // 2],
                                k_out=lambda a: a["k"]),
    "pools_one_array": case(lambda: (lambda a: {**a, "v_pool": a["k_pool"]})(base())),
}

# MLX serves flat pools only, no QK-norm and no caller outputs (README, "MLX"): it refuses them.
MLX_REFUSES = ("kv_layout", "q_norm_weight", "k_norm_weight", "q_out", "k_out")


# ---- the surfaces -----------------------------------------------------------------------------


def _torch(x):
    if isinstance(x, np.ndarray):
        return torch.from_numpy(x) if x.flags.writeable else torch.from_numpy(x.copy())
    return x


def _bits(x):
    if isinstance(x, torch.Tensor):
        x = x.detach().contiguous()
        return x.view(torch.int16).numpy().copy() if x.dtype == torch.bfloat16 else x.numpy().copy()
    if mx is not None and isinstance(x, mx.array):
        return np.array(x, copy=True)
    return np.array(x, copy=True)


def _scale_tensor(value):
    if isinstance(value, torch.Tensor):
        return value
    return None if value == 1.0 else torch.tensor([float(value)], dtype=torch.float64)


class Surface:
    """Runs a case: returns the four results as NumPy bits, and the bits of everything the
    caller gave (arrays and array keywords), before and after. This base class: torch CPU tensors
    sharing the NumPy arrays' memory (views stay views, so overlaps stay overlaps)."""

    def convert(self, a, kw):
        conv = {id(x): _torch(x) for x in list(a.values()) + list(kw.values()) if isinstance(x, np.ndarray)}
        conv_a = {n: conv[id(x)] for n, x in a.items()}
        conv_kw = {n: conv.get(id(x), x) if isinstance(x, np.ndarray) else x for n, x in kw.items()}
        return conv_a, conv_kw

    def given(self, a, kw):
        return [x for x in list(a.values()) + list(kw.values()) if isinstance(x, (np.ndarray, torch.Tensor))]


class Direct(Surface):
    def __init__(self, framework):
        self.name = framework

    def convert(self, a, kw):
        return (a, kw) if self.name == "numpy" else Surface.convert(self, a, kw)

    def call(self, a, kw):
        return ropepool.rope_pool_fused(*[a[n] for n in NAMES], **kw)


class Operator(Surface):
    def __init__(self, out):
        self.out = out
        self.name = "op.out" if out else "op"

    def call(self, a, kw):
        kw = dict(kw)
        for name in ("k_scale", "v_scale"):
            if name in kw:
                kw[name] = _scale_tensor(kw[name])
        q_out, k_out = kw.pop("q_out", None), kw.pop("k_out", None)
        args = [a[n] for n in NAMES]
        if not self.out and q_out is None and k_out is None:
            q_rot, k_rot = torch.ops.ropepool.rope_pool_fused(*args, **kw)
            return q_rot, k_rot, a["k_pool"], a["v_pool"]
        q_out = torch.empty_like(a["q"]) if q_out is None else q_out
        k_out = torch.empty_like(a["k"]) if k_out is None else k_out
        assert torch.ops.ropepool.rope_pool_fused(*args, **kw, q_out=q_out, k_out=k_out) is None
        return q_out, k_out, a["k_pool"], a["v_pool"]


class Traced(Surface):
    """torch_op.call_op in eager mode: what ropepool.rope_pool_fused runs as on a tracer's
    FakeTensors and under a TorchDispatchMode, and what Dynamo traces in its place."""
    name = "call_op"

    def call(self, a, kw):
        return torch_op.call_op(*[a[n] for n in NAMES], **kw)


class Compiled(Surface):
    def __init__(self, backend):
        self.backend = backend
        self.name = "compile-" + backend

    def call(self, a, kw):
        tensors = {n: x for n, x in kw.items() if isinstance(x, torch.Tensor)}
        scalars = {n: x for n, x in kw.items() if n not in tensors}

        def fn(q, k, v, positions, slots, k_pool, v_pool, **tensors):
            return ropepool.rope_pool_fused(q, k, v, positions, slots, k_pool, v_pool, **tensors, **scalars)

        torch._dynamo.reset()
        compiled = torch.compile(fn, fullgraph=True, backend=self.backend, dynamic=False)
        return compiled(*[a[n] for n in NAMES], **tensors)


class Mlx(Surface):
    name = "mlx"

    def convert(self, a, kw):
        conv = {}
        for x in a.values():  # one mx.array per NumPy array (k_pool is v_pool stays so), of its dtype
            conv.setdefault(id(x), mx.array(x).astype(getattr(mx, str(x.dtype))))
        return ({n: conv[id(x)] for n, x in a.items()},
                {n: mx.array(x) if n in ("k_scale", "v_scale") and isinstance(x, np.ndarray) else x
                 for n, x in kw.items()})

    def given(self, a, kw):
        return [x for x in list(a.values()) + list(kw.values()) if isinstance(x, (np.ndarray, mx.array))]

    def call(self, a, kw):
        result = rp_mlx.rope_pool_fused(*[a[n] for n in NAMES], **kw)
        mx.eval(*result)
        return result


SURFACES = [Direct("numpy"), Direct("torch"), Operator(False), Operator(True), Traced(), Compiled("eager")]
if mx is not None:
    SURFACES.append(Mlx())
# Inductor compiles for seconds per case: a few valid cases and a refusal run there.
INDUCTOR_CASES = ("seed", "partial_gptj_freqs_scaling", "fp8_e4m3", "outputs_in_place", "slot_past_pool")


def _same_bits(a, b):
    return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a.view(np.uint8), b.view(np.uint8))


def _as_raised(error):
    """The refusal a compiled call raised: torch.compile(fullgraph=True) wraps an exception raised
    while Dynamo traces (its prefix, not ours) as 'raised exception Type(message)' or as the cause
    of its own; unwrapped here to the exception the call raised."""
    chain = error
    while isinstance(chain, torch._dynamo.exc.TorchDynamoException) or type(chain).__name__.startswith("Observed"):
        found = re.search(r"raised exception (\w+)\((.*)\)$", str(chain), re.S)
        if type(chain).__name__.startswith("Observed") and found:
            kind = {"RopePoolError": ropepool.RopePoolError, "TypeError": TypeError}.get(found.group(1), RuntimeError)
            return kind, ast.literal_eval(found.group(2)), None
        chain = chain.__cause__ or chain.__context__
        if chain is None:
            return type(error), str(error), None
    return type(chain), str(chain), getattr(chain, "status", None)


def run(surface, build):
    """(results or None, (type, message, status) or None, changed: indices of the arrays a refusal
    changed)."""
    a, kw = surface.convert(*build())
    given = surface.given(a, kw)
    before = [_bits(x) for x in given]
    try:
        result = surface.call(a, kw)
    except Exception as error:  # noqa: BLE001  (compared below, whatever it is)
        changed = [i for i, (b, x) in enumerate(zip(before, given)) if not _same_bits(b, _bits(x))]
        if isinstance(surface, Compiled):
            return None, _as_raised(error), changed
        return None, (type(error), str(error), getattr(error, "status", None)), changed
    return [_bits(x) for x in result], None, []


def _surfaces(case_name):
    out = list(SURFACES)
    if case_name in INDUCTOR_CASES:
        out.append(Compiled("inductor"))
    return out


# torch tensors cannot be read-only: those cases are NumPy's (and MLX's, whose arrays are copies).
READ_ONLY = ("q_out_read_only", "k_pool_read_only")  # MLX: q_out is refused, and its arrays are copies
# torch.ops.ropepool.rope_pool_fused called directly: torch's schema parser reads the arguments
# before any of ropepool's code runs, so a text or float given for a number or int, and an int
# past float64, get torch's RuntimeError / OverflowError, and True given for head_dim is read as 1
# (int arguments are SymInts under dynamic shapes: they cannot be Scalars). The operator still
# refuses and writes nothing; ropepool.rope_pool_fused, compiled or not, says it in its own words.
SCHEMA_PARSED = ("checked_text", "head_dim_float", "head_dim_bool", "rope_base_text", "rope_base_past_float64")


def _claimed(surface, build, case_name=""):
    if surface.name != "numpy" and case_name in READ_ONLY:
        return False
    if isinstance(surface, Operator) and case_name in SCHEMA_PARSED:
        return None  # refused, in torch's words
    if surface.name != "mlx":
        return True
    _, kw = build()
    return not any(kw.get(n) is not None and not (n == "kv_layout" and kw[n] == "flat")
                   and not (n == "norm_weight_offset" and kw[n] == 0.0) for n in MLX_REFUSES)


# ---- valid calls: the same bits everywhere, the NumPy call within the float64 bound --------------


def check_reference(build, numpy_result):
    a, kw = build()
    R = kw.get("rotary_dim") or D
    freqs = kw.get("inv_freq")
    freqs = helpers.default_inv_freq(kw["rope_base"], R) if freqs is None else np.asarray(freqs, np.float64)
    dtype = "float16" if a["q"].dtype == np.float16 else "float32"
    positions = a["positions"].astype(np.int64)
    for name, out, x in (("q_rot", numpy_result[0], a["q"]), ("k_rot", numpy_result[1], a["k"])):
        want, mag = helpers.rotate_general(x.astype(np.float64), positions, freqs, kw.get("is_neox", True),
                                           kw.get("attention_scaling", 1.0))
        helpers.assert_within_bound(name, out.astype(np.float64), want, mag, dtype)


@pytest.mark.parametrize("case_name", sorted(VALID))
def test_valid_call_gives_the_same_bits_on_every_surface(case_name):
    build, reference = VALID[case_name]
    want, error, _ = run(SURFACES[0], build)
    assert error is None, f"numpy refused a valid call: {error}"
    if reference == "rope":
        check_reference(build, want)
    for surface in _surfaces(case_name)[1:]:
        got, error, _ = run(surface, build)
        if not _claimed(surface, build):
            assert error is not None and error[0] is ropepool.RopePoolError, f"{surface.name} took {case_name}"
            continue
        assert error is None, f"{surface.name} refused {case_name}: {error[0].__name__}: {error[1]}"
        for name, g, w in zip(("q_rot", "k_rot", "k_pool", "v_pool"), got, want):
            assert _same_bits(g, w), \
                f"{surface.name}: {name} differs from the NumPy call's"


# ---- refusals: the same exception, the same message, nothing written ----------------------------


@pytest.mark.parametrize("case_name", sorted(INVALID))
def test_refusal_is_the_same_on_every_surface(case_name):
    build = INVALID[case_name]
    _, want, changed = run(SURFACES[0], build)
    assert want is not None, f"numpy took {case_name}"
    assert not changed, f"numpy's refusal changed argument(s) {changed}"
    diverged = []
    for surface in _surfaces(case_name)[1:]:
        claimed = _claimed(surface, build, case_name)
        if claimed is False:
            continue
        got, error, changed = run(surface, build)
        assert error is not None, f"{surface.name} took {case_name}, which numpy refuses: {want[1]}"
        assert not changed, f"{surface.name}'s refusal changed argument(s) {changed}"
        if isinstance(surface, Compiled) and error[2] is None:  # Dynamo's wrapper keeps no status
            error = error[:2] + want[2:]
        if claimed and error != want:
            diverged.append(f"{surface.name}: {error[0].__name__}: {error[1]} [{error[2]}]")
    assert not diverged, f"numpy: {want[0].__name__}: {want[1]} [{want[2]}]\n" + "\n".join(diverged)


# ---- the keywords: the stub, python/README.md and every surface agree --------------------------


def stub_keywords():
    stub = os.path.join(os.path.dirname(ropepool.__file__), "_ropepool.pyi")
    fn = next(node for node in ast.parse(open(stub).read()).body
              if isinstance(node, ast.FunctionDef) and node.name == "rope_pool_fused")
    return {arg.arg: (inspect.Parameter.empty if default is None else ast.literal_eval(default))
            for arg, default in zip(fn.args.kwonlyargs, fn.args.kw_defaults)}


def readme_keywords():
    """`name=default` in python/README.md (`kv_layout="flat"|"NHD"|"HND"`: the first is the default)."""
    text = open(os.path.join(os.path.dirname(__file__), "..", "README.md"), encoding="utf-8").read()
    found = re.findall(r'`([a-z_]+)=(None|True|False|-?[0-9.]+|"\w*")(?:\|[^`]*)?`', text)
    return {name: ast.literal_eval(default) for name, default in found}


def keywords_of(fn):
    return {p.name: p.default for p in inspect.signature(fn).parameters.values() if p.kind is p.KEYWORD_ONLY}


def test_every_keyword_of_the_stub_and_readme_is_on_every_surface_with_its_default():
    stub = stub_keywords()
    readme = readme_keywords()
    assert len(readme) >= 15, "the README's keyword list was not found"
    for name, default in readme.items():
        assert name in stub, f"python/README.md lists {name}={default!r}, which the stub does not have"
        assert stub[name] == default, f"{name}: README {default!r}, stub {stub[name]!r}"
    surfaces = {"ropepool.rope_pool_fused": keywords_of(ropepool.rope_pool_fused),
                "torch_op.call_op": keywords_of(torch_op.call_op)}
    if rp_mlx is not None:
        surfaces["ropepool.mlx.rope_pool_fused"] = {n: d for n, d in keywords_of(rp_mlx.rope_pool_fused).items()
                                                    if n != "stream"}  # MLX's own
    for surface, have in surfaces.items():
        assert have == stub, f"{surface}'s keywords differ from the stub's: {set(have.items()) ^ set(stub.items())}"
    # The operator: the same extension keywords with the same defaults, except the scales, which
    # are tensors there (None = 1.0), and q_out / k_out, which make the .out overload.
    for overload, outs in ((torch.ops.ropepool.rope_pool_fused.default, set()),
                           (torch.ops.ropepool.rope_pool_fused.out, {"q_out", "k_out"})):
        schema = {a.name: a.default_value for a in overload._schema.arguments if a.kwarg_only}
        want = {n: (None if n in ("k_scale", "v_scale") else inspect.Parameter.empty if n in outs else d)
                for n, d in stub.items() if n not in ("q_out", "k_out") or n in outs}
        got = {n: (inspect.Parameter.empty if n in ("head_dim", "num_qo_heads", "num_kv_heads", "rope_base")
                   or n in outs else d) for n, d in schema.items()}
        assert got == want, f"{overload}: {set(got.items()) ^ set(want.items())}"
