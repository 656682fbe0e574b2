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

from . import _ropepool, num_threads
from ._names import refusal as _refuse

try:
    from . import _ropepool_mlx as _ext
except ImportError as error:
    raise ImportError(_NOT_BUILT) from error

if _ext.mlx_version != mx.__version__.split(".dev")[0]:
    raise ImportError(
        f"ropepool.mlx was built against MLX {_ext.mlx_version} but MLX {mx.__version__} is "
        f"installed: install mlx=={_ext.mlx_version}, or rebuild ropepool against this MLX"
    )

_context_ready = False
# First calls from several threads must create one context: each set_threads makes one (with its
# worker threads), and all but the last stored would be leaked.
_context_lock = threading.Lock()


def _host(value):
    """An mx.array given for inv_freq or a scale, as the NumPy array the binding reads (bfloat16
    through ml_dtypes, so that its refusal names the dtype); anything else as it is."""
    if not isinstance(value, mx.array):
        return value
    if value.dtype == mx.bfloat16:
        try:
            import ml_dtypes
        except ImportError:  # the binding then names what it got
            return np.asarray(value.astype(mx.float16))
        return np.asarray(value.view(mx.uint16)).view(ml_dtypes.bfloat16)
    return np.asarray(value)


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
        q_norm_weight, k_norm_weight: QK-norm, not available on MLX yet (the primitive takes no
            weight arrays): refused; apply the RMSNorm to q and k with mx.fast.rms_norm first.
        norm_eps, norm_weight_offset: taken for one set of keywords, refused without a weight.
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
    # The keywords are converted and refused by the NumPy call's own code (ropepool._ropepool), so
    # that a mistake reads the same on every surface; MLX refuses only what it does not serve.
    fields = _ropepool._keyword_fields(
        getattr(q, "shape", None), str(getattr(k_pool, "dtype", "")).rsplit(".", 1)[-1],
        head_dim=head_dim, num_qo_heads=num_qo_heads, num_kv_heads=num_kv_heads,
        rope_base=rope_base, threads=threads, checked=checked, is_neox=is_neox, rotary_dim=rotary_dim,
        inv_freq=_host(inv_freq), attention_scaling=attention_scaling, kv_layout=kv_layout, v_head_dim=v_head_dim,
        kv_cache_dtype=kv_cache_dtype, k_scale=_host(k_scale), v_scale=_host(v_scale), mrope_section=mrope_section,
        mrope_interleaved=mrope_interleaved, norm_eps=norm_eps, norm_weight_offset=norm_weight_offset)
    if q_out is not None or k_out is not None:
        raise _refuse(
            "q_out/k_out are not supported on MLX arrays, which are immutable: use the returned "
            "q_rot and k_rot", "RP_ERR_UNSUPPORTED"
        )
    if q_norm_weight is not None or k_norm_weight is not None:
        raise _refuse(
            "q_norm_weight/k_norm_weight (QK-norm) are not supported on MLX arrays yet: apply the "
            "RMSNorm to q and k first (mx.fast.rms_norm), or call ropepool.rope_pool_fused on NumPy arrays",
            "RP_ERR_UNSUPPORTED"
        )
    if kv_layout != "flat":
        raise _refuse(
            f"kv_layout must be 'flat' on MLX arrays (ropepool.mlx serves the seed's [pool_size, "
            f"num_kv_heads, head_dim] pools only), got {kv_layout!r}", "RP_ERR_UNSUPPORTED"
        )
    for name, array in (("q", q), ("k", k), ("v", v), ("positions", positions), ("slots", slots),
                        ("k_pool", k_pool), ("v_pool", v_pool)):
        if not isinstance(array, mx.array):
            raise TypeError(f"ropepool.mlx takes mx.arrays: {name} is a {type(array).__name__} (convert it with "
                            f"mx.array, or call ropepool.rope_pool_fused on NumPy arrays)")
    if k_pool is v_pool:  # the same buffer twice: known now (other overlaps when evaluated)
        raise _refuse("v_pool overlaps k_pool: outputs must not share memory", "RP_ERR_OVERLAP")
    if not _context_ready:
        with _context_lock:
            if not _context_ready:
                _ext.set_threads(num_threads())
                _context_ready = True
    f = fields
    return _ext.fused(
        q, k, v, positions, slots, k_pool, v_pool,
        f["head_dim"], f["num_qo_heads"], f["num_kv_heads"], f["rope_base"], f["style"], f["rotary_dim"],
        f["inv_freq"], f["attention_scaling"], f["v_head_dim"], f["pool_dtype"],
        f["k_scale"], f["v_scale"], f["mrope_section"], f["mrope_interleaved"], f["norm_eps"],
        f["norm_weight_offset"], f["num_threads"], stream,
    )


__all__ = ["rope_pool_fused"]
