"""torch.ops.ropepool.rope_pool_fused: ropepool's call as a torch.library operator.

Engines call kernels through ``torch.ops`` so that ``torch.compile`` can trace them and CUDA graphs
can capture them. This module registers the operator (imported by the package as soon as torch is,
see ``_torch_hooks.py``; importing it again is a no-op)::

    ropepool::rope_pool_fused(Tensor q, Tensor k, Tensor v, Tensor positions, Tensor slots,
        Tensor(a!) k_pool, Tensor(b!) v_pool, *, int head_dim, int num_qo_heads, int num_kv_heads,
        Scalar rope_base, <the extension keywords>) -> (Tensor q_rot, Tensor k_rot)
    ropepool::rope_pool_fused.out(<the same>, Tensor(c!) q_out, Tensor(d!) k_out) -> ()

The default overload mutates k_pool and v_pool in place and returns fresh q_rot and k_rot; the
``out`` overload writes q_out and k_out as well and returns nothing (torch.compile functionalizes
only custom operators whose returns alias no input). ``torch.ops.ropepool.rope_pool_fused(...,
q_out=a, k_out=b)`` picks the ``out`` overload. The real kernel calls the direct binding (every
check and message is the library's), from C++ where ropepool._ropepool_torch is built (``KERNEL``);
the fake kernel allocates what the binding allocates, so shapes and strides agree under tracing.
A scale is a one-element tensor or None (1.0): an operator argument cannot be a number or a
tensor.

``ropepool.rope_pool_fused`` itself stays the direct C call in eager mode (its per-call overhead is
a fraction of the operator's: bench/results/torch-op-cpu.md), and is substituted by
:func:`call_op` when Dynamo traces it (``register_compile_path``), so it compiles with
``fullgraph=True``. Inductor then writes the pools in place. One case it does not: K and V pools
that share a storage but reach the compiled function as two separate inputs (Inductor reinplaces at
most one mutated argument per storage, and copies the other); views made inside the compiled
function (``kv[0]``, ``kv[1]`` of a cache input or buffer) are written in place, but for views
whose offset depends on dynamic shapes, which the fake kernel refuses (see
``_refuse_shape_dependent_views``).
"""

import os

import numpy as np
import torch

try:
    from torch.fx.experimental.symbolic_shapes import guard_or_false
except ImportError:  # torch before 2.7: the comparison guards, as it did there

    def guard_or_false(condition):
        return bool(condition)

from . import _ropepool
from ._names import out_of_range, refusal as _refuse, too_large_for_float64, type_name as _type_name

# The extension keywords after the seed's, in schema order, with their defaults. The direct binding
# receives only those that differ from the default, so the operator works with any binding that
# implements the keywords a caller actually uses. Flags and non-size numbers are Scalars, so that
# the binding sees what the caller passed (see _refuse_wrong_types).
EXTENSIONS = (
    ("threads", "Scalar? threads=None", None),
    ("checked", "Scalar checked=False", False),
    ("is_neox", "Scalar is_neox=True", True),
    ("rotary_dim", "int? rotary_dim=None", None),
    ("inv_freq", "Tensor? inv_freq=None", None),
    ("attention_scaling", "Scalar attention_scaling=1.0", 1.0),
    ("kv_layout", "str kv_layout=\"flat\"", "flat"),
    ("kv_cache_dtype", "str kv_cache_dtype=\"auto\"", "auto"),
    ("k_scale", "Tensor? k_scale=None", None),  # None: 1.0 (a torch operator takes no number|Tensor)
    ("v_scale", "Tensor? v_scale=None", None),
    ("v_head_dim", "int? v_head_dim=None", None),
    ("mrope_section", "int[]? mrope_section=None", None),
    ("mrope_interleaved", "Scalar mrope_interleaved=False", False),
    ("q_norm_weight", "Tensor? q_norm_weight=None", None),
    ("k_norm_weight", "Tensor? k_norm_weight=None", None),
    ("norm_eps", "Scalar? norm_eps=None", None),  # None: 1e-6 with a weight (the binding's default)
    ("norm_weight_offset", "Scalar norm_weight_offset=0.0", 0.0),
)
INPUTS = "Tensor q, Tensor k, Tensor v, Tensor positions, Tensor slots, "
KEYWORDS = (", *, int head_dim, int num_qo_heads, int num_kv_heads, Scalar rope_base, "
            + ", ".join(decl for _, decl, _ in EXTENSIONS))
OUTS = ", Tensor(c!) q_out, Tensor(d!) k_out) -> ()"
POOLS = "Tensor(a!) k_pool, Tensor(b!) v_pool"
SCHEMAS = {
    "rope_pool_fused": "(" + INPUTS + POOLS + KEYWORDS + ") -> (Tensor q_rot, Tensor k_rot)",
    "rope_pool_fused.out": "(" + INPUTS + POOLS + KEYWORDS + OUTS,
}


def _is_default(value, default):
    # A float32 NumPy scalar passed into a compiled function is traced as a tensor, its value an
    # unbacked SymFloat: a plain == would guard on data (torch raises); it is passed on instead.
    return value is default or (type(value) is type(default) and guard_or_false(value == default))


def _direct(q, k, v, positions, slots, k_pool, v_pool, *, head_dim, num_qo_heads, num_kv_heads,
            rope_base, **keywords):
    # The dispatcher passes keyword-only arguments left at their default either not at all or as
    # the default: forward only the others.
    given = {name: keywords[name] for name, _, default in EXTENSIONS
             if name in keywords and not _is_default(keywords[name], default)}
    for name in ("q_out", "k_out"):
        if name in keywords:
            given[name] = keywords[name]
    q_rot, k_rot, _, _ = _ropepool.rope_pool_fused(
        q, k, v, positions, slots, k_pool, v_pool, head_dim=head_dim, num_qo_heads=num_qo_heads,
        num_kv_heads=num_kv_heads, rope_base=rope_base, **given)
    return q_rot, k_rot


def _impl_out(*args, **keywords):
    _direct(*args, **keywords)


def _fresh(x):
    # What the binding allocates: a contiguous tensor of x's shape, dtype and device.
    return torch.empty_like(x, memory_format=torch.contiguous_format)


# Under torch.compile the compiled graph runs the kernel with grad mode off, so the fake kernel,
# which Dynamo runs on the caller's tensors and grad mode, makes the binding's autograd refusal (a
# tensor read or written in place that requires grad) as the eager call does, in the binding's order.
_READ = ("q_norm_weight", "k_norm_weight", "inv_freq", "k_scale", "v_scale")
_WRITTEN = ("q_out", "k_out")


# torch.compile with dynamic shapes hands the operator a view made inside the compiled function
# (kv[1], k_cache[layer]) at storage offset 0 when that offset depends on the shapes: its
# re-inplacing rebuilds the view from its base with aten.sym_storage_offset, which Inductor lowers
# to 0 (pytorch/pytorch#198068, torch 2.15 here). The write would land at the start of the base:
# another layer's rows, silently. Such an offset is a product or sum of shape symbols; a tensor that
# is itself an input of the compiled function keeps its own offset (one symbol, or a number), which
# is passed as it is.
def _refuse_shape_dependent_views(written):
    for name, tensor in written.items():
        offset = None if tensor is None else tensor.storage_offset()
        # the offset's sympy expression (torch's SymNode.expr); a torch without it is not checked
        expr = getattr(getattr(offset, "node", None), "expr", None) if isinstance(offset, torch.SymInt) else None
        if expr is not None and not (getattr(expr, "is_Symbol", True) or getattr(expr, "is_number", True)):
            raise _refuse(
                f"{name} is a view at a storage offset that depends on the compiled function's shapes "
                f"({expr} elements): torch.compile with dynamic shapes passes such a view to "
                "the operator at offset 0 (pytorch/pytorch#198068), so its rows would be written at the "
                "start of the tensor it views; make the offset static (torch._dynamo.mark_static on the "
                "cache, a module buffer, or the pool itself as the function's input)")


def _check_autograd(q, k, v, positions, slots, k_pool, v_pool, **keywords):
    """The binding's autograd refusal on the operator's arguments (also the Autograd kernel's)."""
    read = dict(q=q, k=k, v=v, **{name: keywords.get(name) for name in _READ})
    written = dict(k_pool=k_pool, v_pool=v_pool, **{name: keywords.get(name) for name in _WRITTEN})
    _ropepool._check_autograd(read, written)
    return written


def _trace_checks(*args, **keywords):
    """What the fake kernels refuse: autograd (above), then shape-dependent views."""
    _refuse_shape_dependent_views(_check_autograd(*args, **keywords))


# The Autograd kernel. Under torch.func.grad, vjp or jacrev the device kernel sees the transform's
# unwrapped tensors, which do not require grad, so the binding's refusal never fired: the operator
# ran and torch's autograd fallback gave zero gradients (with a warning). At the Autograd key the
# tensors are still the ones autograd tracks; refused there, the call goes on below autograd.
# (The native kernel's twin is native.cpp's autograd_kernel.)
def _autograd_kernel(overload):
    def kernel(keys, *args, **keywords):
        if torch.is_grad_enabled():
            _check_autograd(*args, **keywords)
        return overload.redispatch(keys & torch._C._after_autograd_keyset, *args, **keywords)

    return kernel


def _fake(q, k, *args, **keywords):
    _trace_checks(q, k, *args, **keywords)
    return _fresh(q), _fresh(k)


def _fake_out(*args, **keywords):
    _trace_checks(*args, **keywords)
    return None


def _native_module():
    """ropepool._ropepool_torch where it is built against the running torch and not turned off
    (ROPEPOOL_TORCH_NATIVE=0), else None."""
    if os.environ.get("ROPEPOOL_TORCH_NATIVE") == "0":
        return None
    try:
        from . import _ropepool_torch
    except ImportError:  # not built, or built against another torch
        return None
    return _ropepool_torch


# Which kernel the operator runs on CPU and CUDA tensors: "native", ropepool._ropepool_torch's C++
# kernel (the dispatcher calls the binding without boxing the arguments into a Python call: half
# the operator's overhead, bench/results/torch-op-cpu.md), or "python" (_direct and _impl_out).
KERNEL = None
# The dispatch keys the kernel is registered under. Besides the devices, the keys of a tensor with
# the negative or conjugate bit, or of a zero tensor: torch's fallbacks for these would hand the
# kernel a materialised copy (and, for a written pool, write the copy and fail torch's own check
# after the other pool was written), so the kernel takes the caller's tensors as they are, and
# the binding refuses them as the direct call does, before anything is written.
KERNEL_KEYS = ("CPU", "CUDA", "Negative", "Conjugate", "ZeroTensor")


def _define():
    global KERNEL
    if hasattr(torch.ops.ropepool, "rope_pool_fused"):  # registered by another copy of this file
        return
    native = _native_module()
    lib = torch.library.Library("ropepool", "FRAGMENT")
    for (name, schema), impl, fake in zip(SCHEMAS.items(), (_direct, _impl_out), (_fake, _fake_out)):
        lib.define(name + schema)
        if native is None:
            for key in KERNEL_KEYS:
                lib.impl(name, impl, key)
            overload = getattr(torch.ops.ropepool.rope_pool_fused, name.partition(".")[2] or "default")
            lib.impl(name, _autograd_kernel(overload), "Autograd", with_keyset=True)
        torch.library.register_fake("ropepool::" + name, fake, lib=lib)
    if native is not None:
        native.register_kernels(_ropepool.rope_pool_fused, _check_autograd, tuple(SCHEMAS), KERNEL_KEYS)
    KERNEL = "python" if native is None else "native"
    _define.lib = lib  # the registrations live as long as the library object


_define()
rope_pool_fused = torch.ops.ropepool.rope_pool_fused


def _scale_tensor(name, scale):
    """A number as the operator's one-element host tensor (read when the call is made); a tensor
    as it is (on CUDA read by the kernel, so a captured graph sees updates). A NumPy array keeps
    its dtype and size, which the binding checks as the direct call does; anything else that is no
    number (a text, a list) is refused as the direct call refuses it, never parsed or read."""
    if isinstance(scale, torch.Tensor):
        return scale
    if isinstance(scale, np.ndarray):
        _refuse_masked(name, scale)
        # a reversed view has a negative stride, which torch.as_tensor refuses, even of one element
        # (contiguous by NumPy's flags); the direct call reads its value, and so does a copy
        return torch.as_tensor(scale.copy() if scale.dtype.isnative else scale)
    if _not_a_number(scale):
        raise TypeError(f"{name} must be a number, got {_type_name(scale)}")
    if scale == 1.0:
        return None
    try:
        return torch.tensor(float(scale), dtype=torch.float64)
    except OverflowError:  # an int past float64's range, in the direct call's words
        raise _refuse(too_large_for_float64(name, scale)) from None


def _refuse_masked(name, array):
    # the binding's words (numpy_arrays.c); Dynamo reads NumPy arrays as tensors, with no mask
    if not torch.compiler.is_compiling() and isinstance(array, np.ma.MaskedArray):
        raise _refuse(f"{name} is a numpy.ma.MaskedArray, whose mask ropepool cannot honour: pass "
                                      f"{name}.data (or {name}.filled(value))")


def _host_frequencies(inv_freq):
    """inv_freq that is no tensor, read as the direct call reads it (numpy.asarray, float32 or
    float64 only, widened exactly): a float16 or integer table is refused, not converted. (Its
    dtype is asked of the tensor: Dynamo traces NumPy arrays as tensors, and not ndarray.dtype.)"""
    _refuse_masked("inv_freq", inv_freq)
    try:
        table = torch.as_tensor(np.asarray(inv_freq))
    except (TypeError, ValueError, RuntimeError):
        raise _refuse("inv_freq must be a 1-D float32 or float64 array-like, got "
                                      f"{_type_name(inv_freq)}") from None
    if table.dtype != torch.float32 and table.dtype != torch.float64:
        dtype = str(table.dtype).replace("torch.", "")
        raise _refuse(f"inv_freq must hold float32 or float64 values, got dtype {dtype}")
    return table.to(torch.float64)


def _python_number(value):
    """A NumPy scalar or 0-d array given for a number or flag, as the Python value it holds: the
    direct call reads them (numpy.float32(1.5), numpy.int64(8)); the schema's Scalar does not."""
    if isinstance(value, np.generic) or (isinstance(value, np.ndarray) and value.ndim == 0):
        return value.item()
    return value


# The direct call refuses 0 or 1 given for a bool and a bool given for a number (is_neox=0,
# rope_base=True are mistakes). The operator's bool and float keywords are Scalars, which reach the
# binding as given (a bool argument would make is_neox=2 True, a float one rope_base=True 1.0); its
# int keywords stay ints (sizes, symbolic under dynamic shapes), which torch's parser fills from a
# bool. call_op refuses all of these before the operator, so that a call refused in eager mode is
# refused compiled with the same message.
def _is_bool(value):
    return isinstance(value, bool) or type(value).__name__ in ("bool_", "bool")


def _not_a_number(value):
    """What the direct call refuses for a number (rpy_float): a bool, a text, a complex (NumPy's
    complex scalars have a __float__ that drops the imaginary part, with a warning only), or
    anything that converts to no number."""
    return _is_bool(value) or isinstance(value, (str, bytes, complex, np.complexfloating)) or not (
        hasattr(value, "__float__") or hasattr(value, "__index__"))


def _refuse_wrong_types(flags, ints, numbers):
    """The direct call's type refusals (keywords.c), in its words, for what the schema would take
    otherwise or refuse in torch's words."""
    for name, value in flags.items():
        if not _is_bool(value):
            raise _refuse(f"{name} must be {_ropepool._FLAG_MEANINGS[name]}, got {value!r}")
    for name, value in ints.items():
        if value is not None and not isinstance(value, torch.Tensor) and (
                _is_bool(value) or not hasattr(value, "__index__")):
            raise TypeError(f"{name} must be an int, got {_type_name(value)}")
    for name, value in numbers.items():
        if value is not None and not isinstance(value, (torch.Tensor, np.ndarray)) and _not_a_number(value):
            raise TypeError(f"{name} must be a number, got {_type_name(value)}")
    for name, value in {**ints, **numbers}.items():
        # The direct call reads a 0-d tensor's value; a traced call has none to read, and the schema's
        # Scalar refuses a tensor in torch's words (a FakeTensor's cast error under torch.compile).
        if isinstance(value, torch.Tensor) and name not in ("k_scale", "v_scale"):
            raise TypeError(f"{name} must be a number for the operator, got a torch.Tensor: pass a Python number "
                            f"({name}.item(), outside compiled code)")


_INT32, _INT64 = (-2**31, 2**31 - 1), (-2**63, 2**63 - 1)


def _refuse_unrepresentable(floats, ints):
    """Python ints that the schema cannot hold: its parser raises torch's own OverflowError or
    RuntimeError, naming neither the argument nor the value. Refused in the direct call's words
    (keywords.c: its float keywords, and each int keyword's C range) before the operator."""
    for name, value in floats.items():
        if type(value) is int:
            try:
                float(value)
            except OverflowError:
                raise _refuse(too_large_for_float64(name, value)) from None
    for name, value, (lo, hi) in ints:
        if type(value) is int and not lo <= value <= hi:
            raise _refuse(out_of_range(name, value, lo, hi))


def call_op(q, k, v, positions, slots, k_pool, v_pool, *, head_dim, num_qo_heads, num_kv_heads,
            rope_base, threads=None, checked=False, is_neox=True, rotary_dim=None, inv_freq=None,
            attention_scaling=1.0, kv_layout="flat", kv_cache_dtype="auto", k_scale=1.0,
            v_scale=1.0, v_head_dim=None, mrope_section=None, mrope_interleaved=False, q_norm_weight=None,
            k_norm_weight=None, norm_eps=None, norm_weight_offset=0.0, q_out=None, k_out=None):
    """``ropepool.rope_pool_fused`` through the operator: same arguments, same results
    ``(q_rot, k_rot, k_pool, v_pool)``. What Dynamo traces in place of the C call."""
    _refuse_wrong_types(
        dict(checked=checked, is_neox=is_neox, mrope_interleaved=mrope_interleaved),
        dict(head_dim=head_dim, num_qo_heads=num_qo_heads, num_kv_heads=num_kv_heads, threads=threads,
             rotary_dim=rotary_dim, v_head_dim=v_head_dim),
        dict(rope_base=rope_base, attention_scaling=attention_scaling, k_scale=k_scale, v_scale=v_scale,
             norm_eps=norm_eps, norm_weight_offset=norm_weight_offset))
    if isinstance(mrope_section, (set, frozenset, dict)):  # no order of its own: as the direct call refuses it
        raise _refuse(f"mrope_section must be three ints [t, h, w] summing to rotary_dim / 2, "
                                      f"got {mrope_section!r}")
    for entry in () if mrope_section is None or isinstance(mrope_section, torch.Tensor) else mrope_section:
        if _is_bool(entry):  # the schema's int[] would read True as 1; the direct call refuses it
            raise TypeError(f"mrope_section entry must be an int, got {_type_name(entry)}")
    if inv_freq is not None and not isinstance(inv_freq, torch.Tensor):
        inv_freq = _host_frequencies(inv_freq)
    k_scale, v_scale = _scale_tensor("k_scale", k_scale), _scale_tensor("v_scale", v_scale)
    head_dim, num_qo_heads, num_kv_heads, rope_base, threads, checked, is_neox, rotary_dim = map(
        _python_number, (head_dim, num_qo_heads, num_kv_heads, rope_base, threads, checked, is_neox, rotary_dim))
    attention_scaling, v_head_dim, mrope_interleaved, norm_eps, norm_weight_offset = map(
        _python_number, (attention_scaling, v_head_dim, mrope_interleaved, norm_eps, norm_weight_offset))
    sections = () if mrope_section is None or isinstance(mrope_section, torch.Tensor) else mrope_section
    _refuse_unrepresentable(
        dict(rope_base=rope_base, attention_scaling=attention_scaling, norm_eps=norm_eps,
             norm_weight_offset=norm_weight_offset),
        [("head_dim", head_dim, _INT64), ("num_qo_heads", num_qo_heads, _INT64),
         ("num_kv_heads", num_kv_heads, _INT64), ("threads", threads, _INT32), ("rotary_dim", rotary_dim, _INT64),
         ("v_head_dim", v_head_dim, _INT64)] + [("mrope_section entry", entry, _INT32) for entry in sections])
    given = dict(
        threads=threads, checked=checked, is_neox=is_neox, rotary_dim=rotary_dim, inv_freq=inv_freq,
        attention_scaling=attention_scaling, kv_layout=kv_layout, kv_cache_dtype=kv_cache_dtype,
        k_scale=k_scale, v_scale=v_scale, v_head_dim=v_head_dim,
        mrope_section=None if mrope_section is None else list(mrope_section),
        mrope_interleaved=mrope_interleaved, q_norm_weight=q_norm_weight, k_norm_weight=k_norm_weight,
        norm_eps=norm_eps, norm_weight_offset=norm_weight_offset)
    # Only the keywords that differ from the schema's defaults: torch parses each one given against
    # the schema (all of them cost some 6 us more per call, bench/results/torch-op-cpu.md).
    keywords = dict(head_dim=head_dim, num_qo_heads=num_qo_heads, num_kv_heads=num_kv_heads, rope_base=rope_base)
    keywords.update((name, given[name]) for name, _, default in EXTENSIONS
                    if not _is_default(given[name], default))
    if q_out is None and k_out is None:
        q_rot, k_rot = rope_pool_fused.default(q, k, v, positions, slots, k_pool, v_pool, **keywords)
        return q_rot, k_rot, k_pool, v_pool
    # An output not given is allocated here, as the binding would.
    q_rot = _fresh(q) if q_out is None else q_out
    k_rot = _fresh(k) if k_out is None else k_out
    rope_pool_fused.out(q, k, v, positions, slots, k_pool, v_pool, **keywords, q_out=q_rot, k_out=k_rot)
    return q_rot, k_rot, k_pool, v_pool


def register_compile_path():
    """Makes Dynamo trace ``ropepool.rope_pool_fused`` as :func:`call_op` (needs torch._dynamo,
    which the package's import hook provides once it is imported: importing it costs seconds)."""
    from torch._dynamo.trace_rules import _polyfilled_function_ids

    if id(_ropepool.rope_pool_fused) in _polyfilled_function_ids:
        return
    # The C signature grows with the binding's keywords; call_op takes the documented ones.
    torch.compiler.substitute_in_graph(_ropepool.rope_pool_fused, skip_signature_check=True)(call_op)
