"""What the Python tests share: the array frameworks a call can be made with, random problems,
the float64 reference, and the checks that a call did exactly what the contract says.

The reference is the contract's own statement (include/ropepool.h, src/ref/verify.c): every
output element within ulp_dtype(y64) + 8 * 2^-24 * (|x_i| + |x_{i+D/2}|) of the formula evaluated in
float64 with the library's frequencies pow(rope_base, -2i/D); pool rows bit-identical to k_rot and
v; everything else untouched.
"""

import math

import numpy as np
import pytest

try:
    import ml_dtypes
except ImportError:  # bfloat16 NumPy arrays need it; the rest of the suite does not
    ml_dtypes = None

SEED_CALL = dict(rope_base=500000.0)
MANTISSA_BITS = {"float32": 23, "float16": 10, "bfloat16": 7}
MIN_EXPONENT = {"float32": -126, "float16": -14, "bfloat16": -126}
UINT_OF_SIZE = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


# ---- frameworks ------------------------------------------------------------------------------


class NumpyFramework:
    name = "numpy"
    is_cuda = False

    def has_dtype(self, dtype):
        return dtype != "bfloat16" or ml_dtypes is not None

    def np_dtype(self, dtype):
        if dtype == "bfloat16":
            if ml_dtypes is None:
                pytest.skip("bfloat16 NumPy arrays need ml_dtypes, which is not installed")
            return np.dtype(ml_dtypes.bfloat16)
        return np.dtype(dtype)

    def array(self, values, dtype):
        """values (any float array, already representable in dtype or rounded here) as dtype."""
        return np.asarray(values, dtype=np.float32).astype(self.np_dtype(dtype))

    def index(self, values, dtype="int32"):
        return np.asarray(values, dtype=dtype)

    def f64(self, x):
        return np.asarray(x).astype(np.float64)

    def astype(self, x, dtype):
        return x.astype(dtype)

    def bits(self, x):
        x = np.ascontiguousarray(x)
        return x.view(UINT_OF_SIZE[x.dtype.itemsize]).copy()

    def is_array(self, x):
        return type(x) is np.ndarray

    def dtype_name(self, x):
        return str(x.dtype)

    def is_contiguous(self, x):
        return x.flags.c_contiguous

    def shares_memory(self, a, b):
        return np.shares_memory(a, b)

    def sync(self):
        pass


class TorchFramework:
    def __init__(self, device):
        self.torch = pytest.importorskip("torch", reason="torch is not installed")
        self.is_cuda = device.startswith("cuda")
        if self.is_cuda and not self.torch.cuda.is_available():
            pytest.skip("no CUDA device")
        self.device = device
        self.name = "torch-cuda" if self.is_cuda else "torch"

    def has_dtype(self, dtype):
        return True

    def array(self, values, dtype):
        t = self.torch.from_numpy(np.ascontiguousarray(values, dtype=np.float32))
        return t.to(device=self.device, dtype=getattr(self.torch, dtype))

    def index(self, values, dtype="int32"):
        return self.torch.from_numpy(np.asarray(values, dtype=dtype)).to(self.device)

    def f64(self, x):
        return x.detach().to("cpu", self.torch.float64).numpy()

    def astype(self, x, dtype):
        return x.to(getattr(self.torch, dtype))

    def bits(self, x):
        size = x.element_size()
        ints = {1: self.torch.uint8, 2: self.torch.int16, 4: self.torch.int32, 8: self.torch.int64}
        raw = x.detach().cpu().contiguous().view(ints[size]).numpy()
        return raw.view(UINT_OF_SIZE[size]).copy()

    def is_array(self, x):
        return isinstance(x, self.torch.Tensor) and x.device.type == self.torch.device(self.device).type

    def dtype_name(self, x):
        return str(x.dtype).replace("torch.", "")

    def is_contiguous(self, x):
        return x.is_contiguous()

    def shares_memory(self, a, b):
        if a.numel() == 0 or b.numel() == 0:
            return False  # empty CUDA storages all have data_ptr 0 and share nothing
        sa, sb = a.untyped_storage(), b.untyped_storage()
        return sa.data_ptr() == sb.data_ptr()

    def sync(self):
        if self.is_cuda:
            self.torch.cuda.synchronize()


class MlxFramework:
    """mx.arrays (ropepool.mlx): NumPy views of evaluated arrays read their buffers in place."""

    name = "mlx"
    is_cuda = False

    def __init__(self):
        self.mx = pytest.importorskip("mlx.core", reason="mlx is not installed")

    def has_dtype(self, dtype):
        return True

    def array(self, values, dtype):
        return self.mx.array(np.asarray(values, dtype=np.float32)).astype(getattr(self.mx, dtype))

    def index(self, values, dtype="int32"):
        return self.mx.array(np.asarray(values, dtype=dtype))

    def f64(self, x):
        if x.dtype == self.mx.bfloat16:
            x = x.astype(self.mx.float32)  # exact; NumPy has no bfloat16 of its own
        return np.asarray(x).astype(np.float64)

    def astype(self, x, dtype):
        return x.astype(getattr(self.mx, dtype))

    def bits(self, x):
        if x.dtype == self.mx.bfloat16:
            x = x.view(self.mx.uint16)
        x = np.asarray(x)
        return np.ascontiguousarray(x).view(UINT_OF_SIZE[x.dtype.itemsize]).copy()

    def is_array(self, x):
        return isinstance(x, self.mx.array)

    def dtype_name(self, x):
        return str(x.dtype).rsplit(".", 1)[-1]


def make_framework(name):
    if name == "numpy":
        return NumpyFramework()
    if name == "mlx":
        return MlxFramework()
    return TorchFramework("cpu" if name == "torch" else "cuda")


# ---- problems -------------------------------------------------------------------------------


def representable(values, dtype):
    """float32 values that dtype holds exactly (so every framework sees the same inputs)."""
    values = np.asarray(values, dtype=np.float32)
    if dtype == "float16":
        return values.astype(np.float16).astype(np.float32)
    if dtype == "bfloat16":
        return (values.view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)
    return values


class Problem:
    """One call's arguments in framework fw, and what is needed to check it afterwards."""

    def __init__(self, fw, T=6, Hq=8, Hk=2, D=64, P=16, dtype="float32", index_dtype="int32",
                 max_pos=4096, positions=None, slots=None, seed=0):
        if not fw.has_dtype(dtype):
            pytest.skip(f"{fw.name} cannot hold {dtype} here (ml_dtypes not installed)")
        rng = np.random.default_rng(seed)
        self.fw, self.dtype = fw, dtype
        self.T, self.Hq, self.Hk, self.D, self.P = T, Hq, Hk, D, P

        def data(*shape, lo=-2.0, hi=2.0):
            return fw.array(representable(rng.uniform(lo, hi, shape), dtype), dtype)

        self.q, self.k, self.v = data(T, Hq, D), data(T, Hk, D), data(T, Hk, D)
        self.k_pool, self.v_pool = data(P, Hk, D, lo=-9, hi=9), data(P, Hk, D, lo=-9, hi=9)
        if positions is None:
            positions = rng.integers(0, max_pos, T)
        if slots is None:
            slots = rng.permutation(P)[:T] if T <= P else np.arange(T) % P
        self.positions = fw.index(positions, index_dtype)
        self.slots = fw.index(slots, index_dtype)

    def arrays(self):
        return [self.q, self.k, self.v, self.positions, self.slots, self.k_pool, self.v_pool]

    def kwargs(self, **overrides):
        kw = dict(head_dim=self.D, num_qo_heads=self.Hq, num_kv_heads=self.Hk, **SEED_CALL)
        kw.update(overrides)
        return kw

    def call(self, ropepool, *arrays, **overrides):
        """The seed's call on this problem; `arrays` replaces the leading arrays when given."""
        args = list(arrays) + self.arrays()[len(arrays):]
        return ropepool.rope_pool_fused(*args, **self.kwargs(**overrides))

    def guard_pools(self, rows=4):
        """Makes the pools the first P rows of buffers `rows` rows longer, so that a write past the
        pool's end lands somewhere a test can see. Returns the two whole buffers."""
        longer = Problem(self.fw, T=0, Hk=self.Hk, D=self.D, P=self.P + rows, dtype=self.dtype, seed=99)
        self.k_pool, self.v_pool = longer.k_pool[:self.P], longer.v_pool[:self.P]
        return longer.k_pool, longer.v_pool

    def snapshot(self, *extra):
        """Bits of every array the caller owns: to prove what a call did (not) change."""
        return [self.fw.bits(x) for x in self.arrays() + list(extra)]


def assert_unchanged(problem, before, *extra, what="a failed call"):
    names = ["q", "k", "v", "positions", "slots", "k_pool", "v_pool"] + [f"extra{i}" for i in range(len(extra))]
    for name, old, x in zip(names, before, problem.arrays() + list(extra)):
        assert np.array_equal(old, problem.fw.bits(x)), f"{what} changed {name}"


# ---- the float64 reference ------------------------------------------------------------------


def inv_freq(rope_base, D):
    """The library's frequencies, with the same libm pow and the same float64 exponent."""
    return np.array([math.pow(rope_base, -(2 * i) / D) for i in range(D // 2)], dtype=np.float64)


def cos_sin(positions, rope_base, D):
    """[T, D/2] cos and sin of position * inv_freq, each angle formed in float64 as the library
    forms it and evaluated by libm (math.cos), not by a vectorised approximation."""
    angles = np.asarray(positions, dtype=np.float64)[:, None] * inv_freq(rope_base, D)[None, :]
    flat = angles.ravel()
    c = np.array([math.cos(a) for a in flat]).reshape(angles.shape)
    s = np.array([math.sin(a) for a in flat]).reshape(angles.shape)
    return c, s


def rotate64(x, c, s):
    """The contract's formula in float64; also returns |x_i| + |x_{i+D/2}| for the bound."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    c, s = c[:, None, :], s[:, None, :]
    y = np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1)
    mag = np.abs(x1) + np.abs(x2)
    return y, np.concatenate([mag, mag], axis=-1)


def ulp(dtype, y):
    _, e = np.frexp(y)
    e = np.maximum(e - 1, MIN_EXPONENT[dtype])
    return np.ldexp(1.0, e - MANTISSA_BITS[dtype])


def assert_within_bound(what, got, want, mag, dtype):
    bound = ulp(dtype, want) + 2.0**-21 * mag  # 8 * 2^-24
    err = np.abs(got - want)
    bad = ~(err <= bound)
    if bad.any():
        idx = tuple(int(i) for i in np.argwhere(bad)[0])
        pytest.fail(f"{what}{list(idx)} = {got[idx]!r}, float64 formula {want[idx]!r}, "
                    f"error {err[idx]:.3g} > bound {bound[idx]:.3g} ({int(bad.sum())} elements)")


def check_call(problem, before, result, rope_base=SEED_CALL["rope_base"]):
    """Everything a successful call promises, against the inputs captured in `before`
    (problem.snapshot() taken before the call): q_rot and k_rot within the bound of the float64
    formula, pool rows named by non-negative slots bit-equal to k_rot and v, every other pool row
    and every input unchanged, the pools returned as the caller's objects."""
    fw, p = problem.fw, problem
    q_rot, k_rot, k_pool, v_pool = result
    assert k_pool is p.k_pool and v_pool is p.v_pool
    for name, out, like in (("q_rot", q_rot, p.q), ("k_rot", k_rot, p.k)):
        assert fw.is_array(out), f"{name} is a {type(out)}"
        assert tuple(out.shape) == tuple(like.shape) and fw.dtype_name(out) == fw.dtype_name(like)
        assert fw.is_contiguous(out) and not fw.shares_memory(out, like)
    fw_sync = getattr(fw, "sync", None)
    if fw_sync:
        fw_sync()
    # inputs untouched
    for name, old, x in zip(["q", "k", "v", "positions", "slots"], before[:5], p.arrays()[:5]):
        assert np.array_equal(old, fw.bits(x)), f"the call changed its input {name}"

    positions = fw.f64(p.positions).astype(np.int64)
    slots = fw.f64(p.slots).astype(np.int64)
    c, s = cos_sin(positions, rope_base, p.D)
    for name, out, x in (("q_rot", q_rot, p.q), ("k_rot", k_rot, p.k)):
        want, mag = rotate64(fw.f64(x), c, s)
        assert_within_bound(name, fw.f64(out), want, mag, p.dtype)

    k_rot_bits, v_bits = fw.bits(k_rot), fw.bits(p.v)
    for pool_name, pool, old, rows in (("k_pool", p.k_pool, before[5], k_rot_bits),
                                       ("v_pool", p.v_pool, before[6], v_bits)):
        now = fw.bits(pool)
        expected = old.copy()
        for t, slot in enumerate(slots):
            if slot >= 0:
                expected[slot] = rows[t]
        assert np.array_equal(now, expected), f"{pool_name} rows differ from the contract"


# ---- refusals ---------------------------------------------------------------------------------

ARG_NAMES = ["q", "k", "v", "positions", "slots", "k_pool", "v_pool"]


def expect_refusal(ropepool, fw, args, kwargs, message, status="RP_ERR_INVALID_ARGUMENT"):
    """The call raises RopePoolError (a ValueError) with exactly `message` and `status`, and
    changes none of the arrays it was given (both pools included)."""
    before = [fw.bits(a) for a in args]
    with pytest.raises(ropepool.RopePoolError) as info:
        ropepool.rope_pool_fused(*args, **kwargs)
    assert isinstance(info.value, ValueError)
    assert str(info.value) == message
    assert info.value.status == status
    for name, old, a in zip(ARG_NAMES, before, args):
        assert np.array_equal(old, fw.bits(a)), f"the refused call changed {name}"
    return info.value


def fused_qkv(p):
    """A [T, (Hq + 2 Hk) * D] QKV projection output holding p.q, p.k and p.v side by side, as
    the linear layer of an attention block produces it."""
    fw = p.fw
    parts = [fw.f64(x).reshape(p.T, -1) for x in (p.q, p.k, p.v)]
    return fw.array(np.concatenate(parts, axis=1), p.dtype)


def split_qkv(p, qkv):
    """The views of q, k and v in a fused QKV buffer (no copies)."""
    q_size, kv_size = p.Hq * p.D, p.Hk * p.D
    q = qkv[:, :q_size].reshape(p.T, p.Hq, p.D)
    k = qkv[:, q_size:q_size + kv_size].reshape(p.T, p.Hk, p.D)
    v = qkv[:, q_size + kv_size:].reshape(p.T, p.Hk, p.D)
    return q, k, v


# ---- the general reference: RoPE variants, paged and fp8 pools, caller outputs ----------------


def default_inv_freq(rope_base, R):
    """rope_base's frequencies over rotary_dim R: pow(rope_base, -2j/R), as the library forms them."""
    return inv_freq(rope_base, R)


def rotate_general(x, positions, freqs, is_neox=True, attention_scaling=1.0):
    """The contract's formula in float64 for the RoPE variants: the leading R = 2 len(freqs) dims
    of every head rotated in pairs (j, j + R/2) (NeoX) or (2j, 2j + 1) (GPT-J) by
    attention_scaling * (cos, sin) of position * freqs[j]; dims R.. pass through. Returns the
    rotated values and the per-element bound's magnitude s * (|x_a| + |x_b|) (0 where passed)."""
    x = np.asarray(x, dtype=np.float64)
    half = len(freqs)
    angles = np.asarray(positions, dtype=np.float64)[:, None] * np.asarray(freqs, dtype=np.float64)[None, :]
    c = np.array([math.cos(a) for a in angles.ravel()]).reshape(angles.shape)[:, None, :] * attention_scaling
    s = np.array([math.sin(a) for a in angles.ravel()]).reshape(angles.shape)[:, None, :] * attention_scaling
    j = np.arange(half)
    a, b = (2 * j, 2 * j + 1) if not is_neox else (j, j + half)
    xa, xb = x[..., a], x[..., b]
    y, mag = x.copy(), np.zeros_like(x)
    y[..., a], y[..., b] = xa * c - xb * s, xb * c + xa * s
    m = attention_scaling * (np.abs(xa) + np.abs(xb))
    mag[..., a], mag[..., b] = m, m
    return y, mag


def pool_rows(pool, slots, layout, block_size=None):
    """The views of pool rows slots[t] ([Hk, D] each) under kv_layout: flat [P, Hk, D], NHD
    [blocks, block_size, Hk, D], HND [blocks, Hk, block_size, D]."""
    rows = []
    for s in slots:
        s = int(s)
        if layout == "flat":
            rows.append(pool[s])
        elif layout == "NHD":
            rows.append(pool[s // block_size, s % block_size])
        else:
            rows.append(pool[s // block_size, :, s % block_size])
    return rows


FP8_MAX = {"float8_e4m3fn": 448.0, "float8_e5m2": 57344.0}


def fp8_of(values, fp8_name):
    """fp8(values), round to nearest even, saturating to the format's finite range (ml_dtypes
    rounds to nearest even; the clip is the saturation)."""
    dt = getattr(ml_dtypes, fp8_name)
    v = np.clip(np.asarray(values, dtype=np.float64), -FP8_MAX[fp8_name], FP8_MAX[fp8_name])
    return v.astype(dt)


def fp8_neighbours_ok(got_codes, want64, err64, fp8_name):
    """Each fp8 code in got_codes lies between fp8(want - err) and fp8(want + err): the correctly
    rounded value, or its neighbour across a rounding midpoint within the kernel's error err."""
    dt = getattr(ml_dtypes, fp8_name)
    got = np.asarray(got_codes).view(dt).astype(np.float64)
    lo = fp8_of(want64 - err64, fp8_name).astype(np.float64)
    hi = fp8_of(want64 + err64, fp8_name).astype(np.float64)
    return (lo <= got) & (got <= hi)


def call_or_skip_on_cuda(ropepool, problem, **kwargs):
    """problem.call(**kwargs); on CUDA tensors, a feature the CUDA backend does not serve yet
    (RP_ERR_UNSUPPORTED) skips the test instead of failing it. CPU calls never skip."""
    try:
        return problem.call(ropepool, **kwargs)
    except ropepool.RopePoolError as e:
        if problem.fw.is_cuda and e.status == "RP_ERR_UNSUPPORTED":
            pytest.skip(f"the CUDA backend does not serve this yet: {e}")
        raise


def readme_blocks(heading):
    """The Python code blocks of the README's section that starts at `heading` (a line such as
    "## Python"), up to the next heading of any level: the tests that run its examples as written."""
    import pathlib
    import re

    text = (pathlib.Path(__file__).parents[2] / "README.md").read_text(encoding="utf-8")
    section = text[text.index("\n" + heading + "\n") + len(heading) + 2:]
    section = re.split(r"\n#{2,3} ", section, maxsplit=1)[0]
    return re.findall(r"```python\n(.*?)```", section, re.S)
