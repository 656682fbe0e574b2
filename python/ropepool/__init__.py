"""ropepool: RoPE (NeoX, GPT-J, partial, scaled) fused with the KV-cache pool write, on NumPy and torch.

The call of sglang's ``sgl_kernel.metal.rope_pool_fused``, backed by the C library libropepool::

    import ropepool
    q_rot, k_rot, k_pool, v_pool = ropepool.rope_pool_fused(
        q, k, v, positions, slots, k_pool, v_pool,
        head_dim=D, num_qo_heads=Hq, num_kv_heads=Hk, rope_base=500000.0)

A refused value is a :class:`RopePoolError` (a ``ValueError``) carrying the library's message; an
argument of the wrong Python type a ``TypeError``. Nothing is written either way.
"""

try:
    from ._ropepool import (
        RopePoolError,
        check_cuda,
        cpu_kernel,
        has_cuda,
        num_threads,
        rope_pool_fused,
        version,
    )
except ModuleNotFoundError as error:  # the source tree's python/ropepool, not a built package
    if error.name != __name__ + "._ropepool":
        raise
    raise ImportError(
        "ropepool's extension module is not built here (" + __path__[0] + "): install the package "
        "with `python3 -m pip install .` from the repository root, or run `make` and use PYTHONPATH=build/python"
    ) from error

from ._hf import hf_rope_kwargs, hf_rope_parameters  # noqa: E402  (needs the extension)

__version__ = version()

from . import _torch_hooks  # noqa: E402  (torch.ops.ropepool.rope_pool_fused, once torch is imported)

_torch_hooks.install()

__all__ = [
    "RopePoolError",
    "check_cuda",
    "cpu_kernel",
    "has_cuda",
    "hf_rope_kwargs",
    "hf_rope_parameters",
    "num_threads",
    "rope_pool_fused",
    "version",
]
