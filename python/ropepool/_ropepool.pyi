# Type stub for the extension module (see src/call.c and src/module.c for the documentation).
from typing import Any, Dict, Literal, Optional, Sequence, Tuple, TypeVar

_Array = TypeVar("_Array")  # numpy.ndarray or torch.Tensor: one framework per call
_Pool = TypeVar("_Pool")

VERSION_NUMBER: int
_FLAG_MEANINGS: Dict[str, str]

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
    is_neox: bool = True,
    rotary_dim: Optional[int] = None,
    inv_freq: Any = None,
    attention_scaling: float = 1.0,
    kv_layout: Literal["flat", "NHD", "HND"] = "flat",
    v_head_dim: Optional[int] = None,
    kv_cache_dtype: Literal["auto", "fp8_e4m3", "fp8", "fp8_e5m2"] = "auto",
    k_scale: Any = 1.0,
    v_scale: Any = 1.0,
    mrope_section: Optional[Sequence[int]] = None,
    mrope_interleaved: bool = False,
    q_norm_weight: Optional[_Array] = None,
    k_norm_weight: Optional[_Array] = None,
    norm_eps: Optional[float] = None,
    norm_weight_offset: float = 0.0,
    q_out: Optional[_Array] = None,
    k_out: Optional[_Array] = None,
) -> Tuple[_Array, _Array, _Pool, _Pool]: ...
def check_cuda(device: Any = None) -> None: ...
def version() -> str: ...
def cpu_kernel() -> str: ...
def has_cuda() -> bool: ...
def num_threads() -> int: ...
def _torch_reader() -> Optional[Literal["native", "exchange", "surface"]]: ...
def _time_calls(calls: int, /, *args: Any, **kwargs: Any) -> float: ...
def _keyword_fields(q_shape: Optional[Sequence[int]], k_pool_dtype: str, /, **keywords: Any) -> Dict[str, Any]: ...
def _verify(*args: Any, **kwargs: Any) -> Tuple[int, int, float, str]: ...
def _profile(enable: bool, /) -> Dict[str, float]: ...
def _check_autograd(read: Dict[str, Any], written: Dict[str, Any], /) -> None: ...
def _hf_rope_frequencies(rope_type: int, rotary_dim: int, rope_theta: float, **fields: Any) -> Tuple[Any, float]: ...
def _hf_rope_style(model_type: str, rope_interleave: int, /) -> bool: ...
