# Type stub for the extension module (see src/call.c and src/module.c for the documentation).
from typing import Any, Literal, Optional, Tuple, TypeVar, Union

_Array = TypeVar("_Array")  # numpy.ndarray or torch.Tensor: one framework per call
_Pool = TypeVar("_Pool")

VERSION_NUMBER: int

class RopePoolError(ValueError):
    status: str

def rope_pool_fused(
    q: _Array,
    k: _Array,
    v: _Array,
    positions: _Array,
    slots: _Array,
    k_pool: _Pool,
    v_pool: _Pool,
    *,
    head_dim: int,
    num_qo_heads: int,
    num_kv_heads: int,
    rope_base: float,
    threads: Optional[int] = None,
    checked: bool = False,
    style: Union[Literal["neox", "gptj"], int, None] = "neox",
    rotary_dim: Optional[int] = None,
) -> Tuple[_Array, _Array, _Pool, _Pool]: ...
def check_cuda(device: Any = None) -> None: ...
def version() -> str: ...
def cpu_kernel() -> str: ...
def has_cuda() -> bool: ...
def num_threads() -> int: ...
