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
read the cache through the returned arrays, as sglang does.

Evaluation runs on the CPU stream. On a GPU default stream (Apple silicon) the primitive is still
put on the CPU stream: memory is unified, so nothing is copied, but MLX makes the CPU task wait for
the GPU work that produces q, k, v (and the GPU work that reads the results wait for it), and the
call runs at ropepool's CPU speed.

Refusals are :class:`ropepool.RopePoolError` (a ``ValueError``) with the library's message: at the
call for shapes, dtypes and keywords (the seed's checks first, with its texts); when the results
are evaluated for slot values (out of range, or two tokens on one slot), and then nothing is written.
"""

import math

try:
    import mlx.core as mx
except ImportError as error:
    raise ImportError(
        "ropepool.mlx needs MLX: install it with `python3 -m pip install \"mlx[cpu]\"` on Linux or "
        "`python3 -m pip install mlx` on macOS, or install ropepool with its mlx extra: "
        "`python3 -m pip install \"./python[mlx]\"`"
    ) from error

from . import RopePoolError, num_threads

try:
    from . import _ropepool_mlx as _ext
except ImportError as error:
    raise ImportError(
        "ropepool was built without its MLX extension (MLX or nanobind was not installed when it "
        "was built): reinstall with `python3 -m pip install \"./python[mlx]\"`"
    ) from error

if _ext.mlx_version != mx.__version__.split(".dev")[0]:
    raise ImportError(
        f"ropepool.mlx was built against MLX {_ext.mlx_version} but MLX {mx.__version__} is "
        f"installed: install mlx=={_ext.mlx_version}, or rebuild ropepool against this MLX"
    )

_KV_CACHE_DTYPES = {"auto": 0, "fp8": 14, "fp8_e4m3": 14, "fp8_e5m2": 15}  # rp_dtype values
_context_ready = False


def _positive(name, value, integer):
    """A keyword whose C field reads 0 as "default": refuse 0 and below here, the rest is the library's."""
    if integer and (isinstance(value, bool) or not isinstance(value, int)):
        raise TypeError(f"{name} must be an int or None, got {type(value).__name__}")
    if not integer:
        value = float(value)
    if not (value > 0 and math.isfinite(value)):
        raise RopePoolError(f"{name} must be positive and finite, got {value!r}")
    return value


def _frequencies(inv_freq):
    """inv_freq as a list of floats (float32 entries are exact in float64); mx.arrays are evaluated."""
    import numpy as np

    table = np.asarray(inv_freq)
    if table.ndim != 1 or table.dtype not in (np.float32, np.float64):
        raise RopePoolError(
            f"inv_freq must be a 1-D array of float32 or float64, got shape {table.shape} dtype {table.dtype}"
        )
    if table.size == 0:
        raise RopePoolError("inv_freq is empty: it needs rotary_dim / 2 frequencies")
    return table.astype(np.float64).tolist()


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
    q_out=None,
    k_out=None,
    threads=None,
    stream=None,
):
    """Apply RoPE to q and k, and write the rotated keys and the values into the KV pool, lazily.

    Args:
        q: [num_tokens, num_qo_heads, head_dim] mx.array, float32 | float16 | bfloat16.
        k, v: [num_tokens, num_kv_heads, head_dim], q's dtype.
        positions: [num_tokens] int32 | int64.
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
        q_out, k_out: not available on MLX (arrays are immutable): use the returned q_rot, k_rot.
        threads: at most this many CPU threads for this call (default: ROPEPOOL_NUM_THREADS or
            one per CPU).
        stream: an mx.Stream or mx.Device; a GPU one is replaced by the CPU stream.

    Returns:
        (q_rot, k_rot, k_pool_new, v_pool_new), lazy mx.arrays.
    """
    global _context_ready
    if q_out is not None or k_out is not None:
        raise RopePoolError(
            "q_out/k_out are not supported on MLX arrays, which are immutable: use the returned "
            "q_rot and k_rot"
        )
    if kv_layout != "flat":
        raise RopePoolError(
            f"kv_layout must be 'flat' on MLX arrays (ropepool.mlx serves the seed's [pool_size, "
            f"num_kv_heads, head_dim] pools only), got {kv_layout!r}"
        )
    if kv_cache_dtype not in _KV_CACHE_DTYPES:
        raise RopePoolError(
            f"kv_cache_dtype must be one of {', '.join(map(repr, _KV_CACHE_DTYPES))}, got {kv_cache_dtype!r}"
        )
    if not _context_ready:
        _ext.set_threads(num_threads())
        _context_ready = True
    return _ext.fused(
        q, k, v, positions, slots, k_pool, v_pool,
        head_dim, num_qo_heads, num_kv_heads, rope_base,
        0 if is_neox else 1,
        0 if rotary_dim is None else _positive("rotary_dim", rotary_dim, True),
        [] if inv_freq is None else _frequencies(inv_freq),
        _positive("attention_scaling", attention_scaling, False),
        0 if v_head_dim is None else _positive("v_head_dim", v_head_dim, True),
        _KV_CACHE_DTYPES[kv_cache_dtype],
        _positive("k_scale", k_scale, False),
        _positive("v_scale", v_scale, False),
        0 if threads is None else threads,
        stream,
    )


__all__ = ["rope_pool_fused"]
