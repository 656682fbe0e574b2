"""ropepool.mlx: the seed's call on MLX arrays, lazy, backed by ropepool's CPU backend.

sglang's MLX backend calls ``sgl_kernel.metal.rope_pool_fused`` and rebinds the returned pools;
this is the same call::

    import mlx.core as mx
    import ropepool.mlx
    q_rot, k_rot, k_pool, v_pool = ropepool.mlx.rope_pool_fused(
        q, k, v, positions, slots, k_pool, v_pool,
        head_dim=D, num_qo_heads=Hq, num_kv_heads=Hk, rope_base=500000.0)

The results are lazy ``mx.array`` s from one MLX primitive: nothing runs until they are evaluated
(``mx.eval``, ``.item()``, ...), and they compose with the rest of an MLX graph. The new pools share
the buffers of the pools passed in (the call never copies a pool): the rows ``slots[t]`` are written
into those buffers when the primitive is evaluated, so treat the pools passed in as consumed and
read the cache through the returned arrays, as sglang does. A lazy read of a pool passed in that
is not evaluated before the results are (``old = v_pool * 1``, attention over the previous cache)
may see the new rows: MLX does not order an earlier reader of a shared buffer before the write.
Evaluate such reads first: ``mx.eval``, or ``mx.async_eval`` on the CPU stream (the call waits for
what is queued there before it writes); a read queued on another stream needs ``mx.eval``. A layer
of a cache is ``cache[i, ...]`` (a view); ``cache[i]`` is a gathered copy, which the call writes
instead of ``cache``. Under ``mx.compile`` (and ``mx.vmap``, ``mx.grad``) a pool must be an
argument of the function, a view of one, or an evaluated array: one computed there is refused at
the call, since compile may merge it with an equal computation or compute it afresh at each call.

Evaluation runs ropepool's CPU backend (its worker threads, ROPEPOOL_NUM_THREADS) on the thread
that evaluates the graph, so that a refusal reaches ``mx.eval`` as itself, after waiting for the CPU
stream (one synchronisation: inputs computed in the same evaluation and earlier reads of the pools
finish first). The primitive is always put on the CPU stream. On a GPU default stream (Apple
silicon) that still works: memory is unified, so nothing is copied, but the CPU waits for the GPU
work that produces q, k, v, the GPU work that reads the results waits for the CPU, and the call
runs at ropepool's CPU speed (there is no Metal kernel).

Refusals are :class:`ropepool.RopePoolError` (a ``ValueError``) with the library's message: at the
call for shapes, dtypes and keywords (the seed's checks first, with its texts; an argument that is
no mx.array is a ``TypeError`` there); when the results are evaluated for what needs the buffers
(slot values out of range or two tokens on one slot; pools that overlap each other or an input,
or hold one element twice, as a stride-0 broadcast does), and then nothing is written.
"""

import importlib.util
import math
import operator
import threading

import numpy as np

_NOT_BUILT = (
    "ropepool was built without its MLX extension (MLX, nanobind or a C++ compiler was missing "
    "when it was built): on macOS reinstall from the repository root with "
    "`python3 -m pip install \".[mlx]\"`; on "
    "Linux install `\"mlx[cpu]==0.32.4\" nanobind==3.1.0 scikit-build-core numpy` first, then "
    "`python3 -m pip install --no-build-isolation \".[mlx]\"`"
)

# Said before MLX is imported: a plain pip install on Linux has no extension, and installing MLX,
# which the message below asks for, would not give it one (the user met this one only next).
if importlib.util.find_spec(__package__ + "._ropepool_mlx") is None:
    raise ImportError(_NOT_BUILT)

try:
    import mlx.core as mx
except ImportError as error:
    raise ImportError(
        "ropepool.mlx needs MLX: install it with `python3 -m pip install \"mlx[cpu]\"` on Linux or "
        "`python3 -m pip install mlx` on macOS, or install ropepool with its mlx extra (from the "
        "repository root): `python3 -m pip install \".[mlx]\"`"
    ) from error

from . import RopePoolError, num_threads
from ._names import too_large_for_float64, type_name as _type_name

try:
    from . import _ropepool_mlx as _ext
except ImportError as error:
    raise ImportError(_NOT_BUILT) from error

if _ext.mlx_version != mx.__version__.split(".dev")[0]:
    raise ImportError(
        f"ropepool.mlx was built against MLX {_ext.mlx_version} but MLX {mx.__version__} is "
        f"installed: install mlx=={_ext.mlx_version}, or rebuild ropepool against this MLX"
    )

# The NumPy/torch call's spellings (python/src/keywords.c) and rp_dtype values.
_KV_CACHE_DTYPES = {"auto": 0, "fp8_e4m3": 14, "fp8": 14, "fp8_e5m2": 15}
_context_ready = False
# First calls from several threads must create one context: each set_threads makes one (with its
# worker threads), and all but the last stored would be leaked.
_context_lock = threading.Lock()


def _is_bool(value):
    """True, False or a numpy.bool_: never a number here (rope_base=True would silently mean 1.0),
    as in the NumPy call."""
    return isinstance(value, (bool, np.bool_))


def _integer(name, value, zero_refused=None, none_means="head_dim", least=1, bits=64):
    """None (the library's 0: its default) or an int; every range check is the library's, except
    that an explicit 0 is refused where the library would read it as "not set" (rotary_dim,
    v_head_dim): None is that default here, so 0 is a value the call cannot honour. So is any
    value below `least` there, whose library message would offer C's 0 as the default."""
    if value is None:
        return 0
    value = _config_integer(name, value, bits)
    if value < least and zero_refused:
        raise RopePoolError(f"{name} must be {zero_refused} (None = {none_means}), got {value}")
    return value


def _number(name, value):
    """A float (a one-element mx.array is read now: the call uses the value it has at this moment);
    a text is refused, as the NumPy call refuses it, not parsed."""
    if isinstance(value, np.ndarray) and value.ndim > 0:  # as the NumPy call: a 0-d array is a number
        raise TypeError(f"{name} must be a number, got numpy.ndarray")
    size = getattr(value, "size", 1)
    if size != 1:
        raise RopePoolError(f"{name} must be a number or a one-element array, got {size} elements")
    try:
        if isinstance(value, (str, bytes)) or _is_bool(value):
            raise TypeError
        if hasattr(value, "item") and not isinstance(value, (int, float)):
            value = value.item()  # a one-element array: NumPy 2 no longer converts 1-D ones with float()
            if _is_bool(value):
                raise TypeError
        return float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a number, got {_type_name(value)}") from None
    except OverflowError:  # an int past float64's range, as the NumPy call words it
        raise RopePoolError(too_large_for_float64(name, value)) from None


def _config_integer(name, value, bits=64):
    """An int (NumPy's too: head_dim, num_qo_heads, ...) that the extension's C type holds; the
    library checks the value."""
    try:
        if _is_bool(value):
            raise TypeError
        value = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an int, got {_type_name(value)}") from None
    lo, hi = -2 ** (bits - 1), 2 ** (bits - 1) - 1
    if not lo <= value <= hi:
        raise RopePoolError(f"{name} = {value} is out of range [{lo}, {hi}]")
    return value


def _scale(name, value):
    """k_scale / v_scale: the library reads 0 as "not set" (1.0), so an explicit 0 (a calibration
    gone wrong) is refused here, as every scale that is not positive and finite. An array: one
    float32 element (or float64), as the NumPy call takes it."""
    if isinstance(value, (np.ndarray, mx.array)):
        dtype = str(value.dtype).rsplit(".", 1)[-1]
        if value.size != 1 or dtype not in ("float32", "float64"):
            raise RopePoolError(f"{name} must be a number or a one-element float32 array (float64 on the host), "
                                f"got {value.size} element{'' if value.size == 1 else 's'} of {dtype}")
        value = value.item()
    value = _number(name, value)
    if not (math.isfinite(value) and value > 0.0):
        raise RopePoolError(f"{name} must be a positive finite number (default 1.0), got {value!r}")
    return value


def _strict_bool(name, value, meaning):
    """True or False (a numpy.bool_ too), as the NumPy call's rpy_strict_bool takes a flag: a truthy
    string or list is a mistake, not a choice."""
    if not _is_bool(value):
        raise RopePoolError(f"{name} must be {meaning}, got {value!r}")
    return bool(value)


def _style(is_neox):
    is_neox = _strict_bool("is_neox", is_neox, "True (NeoX rotate-half) or False (GPT-J interleaved)")
    return 0 if is_neox else 1  # rp_rope_style


def _frequencies(inv_freq, rotary_dim, head_dim):
    """inv_freq as a list of float64 (float32 entries widen exactly). With a rotary_dim the library
    will refuse, the table is left out so that the library's message about rotary_dim is reported."""
    try:
        R = operator.index(rotary_dim or head_dim)  # NumPy integers too: never drop a table for its type
        head_dim = operator.index(head_dim)
    except TypeError:
        R = None  # the library refuses the argument, naming it
    if inv_freq is None or R is None or R <= 0 or R % 2 or R > head_dim:
        return []
    try:
        table = np.asarray(inv_freq)
    except (TypeError, ValueError):  # e.g. an mx.array of bfloat16, which NumPy cannot read
        raise RopePoolError(f"inv_freq must hold float32 or float64 values, got dtype "
                            f"{getattr(inv_freq, 'dtype', type(inv_freq).__name__)}") from None
    if table.dtype not in (np.float32, np.float64):
        raise RopePoolError(f"inv_freq must hold float32 or float64 values, got dtype {table.dtype}")
    if table.shape != (R // 2,):
        raise RopePoolError(f"inv_freq must be 1-D with rotary_dim/2 = {R // 2} entries, got shape {table.shape}")
    return table.astype(np.float64).tolist()


def _mrope(section, interleaved):
    """rp_rope_pool_args.mrope_section and .mrope_interleaved (the library checks the values). The
    library reads an all-zero section as "no mRoPE", which None is here: [0, 0, 0] is refused."""
    _strict_bool("mrope_interleaved", interleaved, "True (Qwen3-VL's interleaved rule) or False")
    if section is None:
        return [0, 0, 0], int(interleaved)
    try:  # a set or dict has no order of its own: refused, as by the NumPy call
        entries = None if isinstance(section, (set, frozenset, dict)) else list(section)
    except TypeError:
        entries = None
    if entries is None or len(entries) != 3:
        raise RopePoolError(f"mrope_section must be three ints [t, h, w] summing to rotary_dim / 2, got {section!r}")
    for x in entries:  # the NumPy binding's words: a bool is a mistake, not 0 or 1
        if _is_bool(x) or not hasattr(x, "__index__"):
            raise TypeError(f"mrope_section entry must be an int, got {_type_name(x)}")
    entries = [operator.index(x) for x in entries]
    if entries == [0, 0, 0]:
        raise RopePoolError("mrope_section [0, 0, 0] sums to 0, but must sum to rotary_dim / 2 (None = no mRoPE)")
    if any(not -2**31 <= x < 2**31 for x in entries):
        raise RopePoolError(f"mrope_section entries must be int32, got {entries}")
    return entries, int(interleaved)


def _pool_format(kv_cache_dtype, k_pool):
    """rp_rope_pool_args.pool_dtype: MLX has no float8 dtype, so fp8 pools are uint8 arrays."""
    if not isinstance(kv_cache_dtype, str) or kv_cache_dtype not in _KV_CACHE_DTYPES:
        raise RopePoolError("kv_cache_dtype must be one of 'auto', 'fp8_e4m3' (or vLLM's 'fp8') or 'fp8_e5m2', "
                            f"got {kv_cache_dtype!r}")
    fmt = _KV_CACHE_DTYPES[kv_cache_dtype]  # uint8 without one: refused after the seed's checks
    if k_pool.dtype != mx.uint8 and fmt != 0:
        raise RopePoolError(f"kv_cache_dtype={kv_cache_dtype!r} needs fp8 pools (uint8 on MLX), got k_pool "
                            f"{str(k_pool.dtype).rsplit('.', 1)[-1]}")
    return fmt


def rope_pool_fused(
    q,
    k,
    v,
    positions,
    slots,
    k_pool,
    v_pool,
    *,
    head_dim,
    num_qo_heads,
    num_kv_heads,
    rope_base,
    is_neox=True,
    rotary_dim=None,
    inv_freq=None,
    attention_scaling=1.0,
    v_head_dim=None,
    kv_layout="flat",
    kv_cache_dtype="auto",
    k_scale=1.0,
    v_scale=1.0,
    mrope_section=None,
    mrope_interleaved=False,
    q_norm_weight=None,
    k_norm_weight=None,
    norm_eps=None,
    norm_weight_offset=0.0,
    q_out=None,
    k_out=None,
    threads=None,
    checked=False,
    stream=None,
):
    """Apply RoPE to q and k, and write the rotated keys and the values into the KV pool, lazily.

    Args:
        q: [num_tokens, num_qo_heads, head_dim] mx.array, float32 | float16 | bfloat16.
        k, v: [num_tokens, num_kv_heads, head_dim], q's dtype.
        positions: [num_tokens] int32 | int64 ([3, num_tokens], rows t, h, w, with mrope_section).
        slots: [num_tokens] int32 | int64, the pool row of each token; < 0 skips its write.
        k_pool, v_pool: [pool_size, num_kv_heads, head_dim], q's dtype; their buffers receive
            the rows (shared, never copied).
        head_dim, num_qo_heads, num_kv_heads, rope_base: the model's configuration.
        is_neox: True for rotate-half pairs (j, j + R/2), False for GPT-J pairs (2j, 2j + 1).
        rotary_dim: R, the rotated leading part of each head (None = head_dim).
        inv_freq: 1-D float32/float64 array-like of R/2 frequencies (None = rope_base's).
        attention_scaling: cos and sin are multiplied by it (YaRN, LongRoPE).
        v_head_dim: width of v and v_pool heads (None = head_dim).
        kv_layout: "flat" only: ropepool.mlx serves the seed's [P, Hk, D] pools.
        kv_cache_dtype, k_scale, v_scale: fp8 pools stored as uint8 ("fp8_e4m3", "fp8_e5m2").
        mrope_section, mrope_interleaved: multimodal RoPE (Qwen2-VL / Qwen2.5-VL chunks, Qwen3-VL
            interleaved), as ropepool.rope_pool_fused.
        q_norm_weight, k_norm_weight, norm_eps, norm_weight_offset: QK-norm, not available on
            MLX yet (the primitive takes no weight arrays): refused; apply the RMSNorm to q and k
            with mx.fast.rms_norm first.
        q_out, k_out: not available on MLX (arrays are immutable): use the returned q_rot, k_rot.
        threads: at most this many CPU threads for this call (default: ROPEPOOL_NUM_THREADS or
            one per CPU).
        checked: the NumPy call's flag (CUDA: validate the slot values on the host first), taken so
            that one set of keywords serves both calls: True or False, the same call here, since
            the CPU backend always validates the slot values before writing.
        stream: an mx.Stream or mx.Device; a GPU one is replaced by the CPU stream (also where
            MLX has no GPU).

    Returns:
        (q_rot, k_rot, k_pool_new, v_pool_new), lazy mx.arrays.
    """
    global _context_ready
    if q_out is not None or k_out is not None:
        raise RopePoolError(
            "q_out/k_out are not supported on MLX arrays, which are immutable: use the returned "
            "q_rot and k_rot"
        )
    norm_weight_offset = _number("norm_weight_offset", norm_weight_offset)
    if q_norm_weight is not None or k_norm_weight is not None or norm_eps is not None or norm_weight_offset != 0.0:
        raise RopePoolError(
            "q_norm_weight/k_norm_weight (QK-norm) are not supported on MLX arrays yet: apply the "
            "RMSNorm to q and k first (mx.fast.rms_norm), or call ropepool.rope_pool_fused on NumPy arrays"
        )
    _strict_bool("checked", checked, "True (CUDA: validate the slot values on the host first) or False")
    if kv_layout != "flat":
        raise RopePoolError(
            f"kv_layout must be 'flat' on MLX arrays (ropepool.mlx serves the seed's [pool_size, "
            f"num_kv_heads, head_dim] pools only), got {kv_layout!r}"
        )
    for name, array in (("q", q), ("k", k), ("v", v), ("positions", positions), ("slots", slots),
                        ("k_pool", k_pool), ("v_pool", v_pool)):
        if not isinstance(array, mx.array):
            raise TypeError(f"ropepool.mlx takes mx.arrays: {name} is a {type(array).__name__} (convert it with "
                            f"mx.array, or call ropepool.rope_pool_fused on NumPy arrays)")
    if k_pool is v_pool:  # the same buffer twice: known now (other overlaps when evaluated)
        raise RopePoolError("v_pool overlaps k_pool: outputs must not share memory")
    if not _context_ready:
        with _context_lock:
            if not _context_ready:
                _ext.set_threads(num_threads())
                _context_ready = True
    head_dim = _config_integer("head_dim", head_dim)
    num_qo_heads = _config_integer("num_qo_heads", num_qo_heads)
    num_kv_heads = _config_integer("num_kv_heads", num_kv_heads)
    rope_base = _number("rope_base", rope_base)
    rotary_dim = _integer("rotary_dim", rotary_dim, zero_refused=">= 2", least=2)
    section, interleaved = _mrope(mrope_section, mrope_interleaved)
    attention_scaling = _number("attention_scaling", attention_scaling)
    if not (math.isfinite(attention_scaling) and attention_scaling > 0.0):  # 0 is the library's "not set"
        raise RopePoolError(f"attention_scaling must be positive and finite (default 1.0), got {attention_scaling!r}")
    return _ext.fused(
        q, k, v, positions, slots, k_pool, v_pool,
        head_dim, num_qo_heads, num_kv_heads, rope_base,
        _style(is_neox),
        rotary_dim,
        _frequencies(inv_freq, rotary_dim, head_dim),
        attention_scaling,
        _integer("v_head_dim", v_head_dim, zero_refused="positive"),
        _pool_format(kv_cache_dtype, k_pool),
        _scale("k_scale", k_scale),
        _scale("v_scale", v_scale),
        section,
        interleaved,
        _integer("threads", threads, zero_refused=">= 1", none_means="ROPEPOOL_NUM_THREADS", bits=32),
        stream,
    )


__all__ = ["rope_pool_fused"]
