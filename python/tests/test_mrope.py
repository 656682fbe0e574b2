"""Multimodal RoPE end to end: mrope_section (Qwen2-VL / Qwen2.5-VL chunks) and mrope_interleaved
(Qwen3-VL) on NumPy, torch and torch CUDA arrays, positions [3, T] of any strides and int dtype;
checked against the float64 formula with each frequency's own position row, text tokens (three
equal rows) bit-identical to the plain call on every pool format, every bad value refused naming
the argument and the value with nothing written; the torch operator and ropepool.mlx take it too."""

import numpy as np
import pytest

from helpers import Problem, assert_within_bound, default_inv_freq, expect_refusal, rotate_general


def expected_row(section, interleaved, j):
    """The issue's rules, written out apart from the library's."""
    t, h, w = section
    if interleaved:
        return 1 if j % 3 == 1 and j < 3 * h else 2 if j % 3 == 2 and j < 3 * w else 0
    return 0 if j < t else 1 if j < t + h else 2


def image_rows(T, base=7000, columns=5):
    """Positions [3, T] of an image: t constant, h and w walking a grid of `columns` columns."""
    i = np.arange(T)
    return np.stack([np.full(T, base), base + i // columns, base + i % columns])


def rotate_mrope(x, rows, freqs, section, interleaved, is_neox, attention_scaling=1.0):
    """rotate_general with frequency j at position row expected_row(j): each row's rotation, kept
    on the pairs whose frequency takes that row."""
    half = len(freqs)
    y, mag = rotate_general(x, rows[0], freqs, is_neox, attention_scaling)
    for r in (1, 2):
        yr, mr = rotate_general(x, rows[r], freqs, is_neox, attention_scaling)
        for j in range(half):
            if expected_row(section, interleaved, j) == r:
                dims = [2 * j, 2 * j + 1] if not is_neox else [j, j + half]
                y[..., dims], mag[..., dims] = yr[..., dims], mr[..., dims]
    return y, mag


def positions_of(fw, rows, dtype, layout):
    """rows [3, T] as fw's index array: contiguous, or a transposed view of [T, 3] memory."""
    if layout == "contiguous":
        return fw.index(rows, dtype)
    return fw.index(np.ascontiguousarray(rows.T), dtype).T


CASES = [  # (section, interleaved, rotary_dim) for head_dim 128
    ((16, 24, 24), False, None),  # Qwen2-VL / Qwen2.5-VL
    ((24, 20, 20), True, None),   # Qwen3-VL
    ((32, 0, 32), False, None),   # empty h
    ((40, 24, 0), True, None),    # empty w
    ((8, 12, 12), False, 64),     # partial rotary
    ((12, 10, 10), True, 64),
]


@pytest.mark.parametrize("section, interleaved, rotary_dim", CASES)
@pytest.mark.parametrize("is_neox", [True, False])
@pytest.mark.parametrize("index_dtype, layout", [("int32", "contiguous"), ("int64", "transposed")])
def test_each_frequency_takes_its_row(ropepool, fw, section, interleaved, rotary_dim, is_neox, index_dtype, layout):
    p = Problem(fw, T=12, Hq=4, Hk=2, D=128, P=16)
    rows = image_rows(p.T) + np.array([[0], [3], [11]])  # three distinct rows
    R = rotary_dim or p.D
    rng = np.random.default_rng(1)
    freqs = default_inv_freq(1e6, R) * rng.uniform(0.5, 1.0, R // 2)  # a caller's table
    s = 1.25
    before = p.snapshot()
    positions = positions_of(fw, rows, index_dtype, layout)
    q_rot, k_rot, k_pool, v_pool = ropepool.rope_pool_fused(
        p.q, p.k, p.v, positions, p.slots, p.k_pool, p.v_pool, **p.kwargs(
            rotary_dim=rotary_dim, is_neox=is_neox, inv_freq=freqs, attention_scaling=s,
            mrope_section=list(section), mrope_interleaved=interleaved))
    getattr(fw, "sync", lambda: None)()
    for name, out, x in (("q_rot", q_rot, p.q), ("k_rot", k_rot, p.k)):
        want, mag = rotate_mrope(fw.f64(x), rows, freqs, section, interleaved, is_neox, s)
        assert_within_bound(name, fw.f64(out), want, mag, p.dtype)
        assert np.array_equal(fw.bits(out)[..., R:], fw.bits(x)[..., R:])
    slots = fw.f64(p.slots).astype(np.int64)
    want_k = before[5].copy()
    want_k[slots] = fw.bits(k_rot)
    assert np.array_equal(fw.bits(k_pool), want_k)


def plain_and_mrope(ropepool, fw, make_pools, section, interleaved, positions_rows, **kw):
    """The same problem twice: the plain call and mRoPE with the three given rows."""
    out = []
    for mrope in (False, True):
        p = Problem(fw, T=9, Hq=4, Hk=2, D=128, P=32, dtype="bfloat16" if fw.name != "numpy" else "float32")
        pools = make_pools(p)
        extra = dict(mrope_section=section, mrope_interleaved=interleaved) if mrope else {}
        positions = positions_rows(p) if mrope else p.positions
        q_rot, k_rot, k_pool, v_pool = ropepool.rope_pool_fused(
            p.q, p.k, p.v, positions, p.slots, *pools, **p.kwargs(**kw, **extra))
        out.append([fw.bits(x) for x in (q_rot, k_rot, k_pool, v_pool)])
    return out


@pytest.mark.parametrize("section, interleaved", [((16, 24, 24), False), ((24, 20, 20), True)])
@pytest.mark.parametrize("pools", ["flat", "NHD", "fp8"])
def test_text_tokens_equal_the_plain_call_bit_for_bit(ropepool, fw, section, interleaved, pools):
    def make_pools(p):
        if pools == "NHD":  # 32 slots as 8 blocks of 4 rows
            return p.k_pool.reshape(8, 4, p.Hk, p.D), p.v_pool.reshape(8, 4, p.Hk, p.D)
        if pools == "fp8":
            if fw.name == "numpy":
                return np.zeros((p.P, p.Hk, p.D), np.uint8), np.zeros((p.P, p.Hk, p.D), np.uint8)
            zeros = fw.torch.zeros((p.P, p.Hk, p.D), dtype=fw.torch.uint8, device=fw.device)
            return zeros, zeros.clone()
        return p.k_pool, p.v_pool

    def equal_rows(p):  # one row seen three times: a stride-0 view
        if fw.name == "numpy":
            return np.broadcast_to(p.positions, (3, p.T))
        return p.positions.expand(3, p.T)

    kw = {"kv_layout": "NHD"} if pools == "NHD" else {"kv_cache_dtype": "fp8_e4m3", "k_scale": 0.5} if pools == "fp8" else {}
    plain, mrope = plain_and_mrope(ropepool, fw, make_pools, list(section), interleaved, equal_rows, **kw)
    for name, a, b in zip(("q_rot", "k_rot", "k_pool", "v_pool"), plain, mrope):
        assert np.array_equal(a, b), f"{name} differs from the plain call"


def refusal(ropepool, fw, message, positions=None, **kw):
    p = Problem(fw)  # T 6, D 64: rotary_dim / 2 = 32
    args = p.arrays()
    if positions is not None:
        args[3] = fw.index(positions)
    expect_refusal(ropepool, fw, args, p.kwargs(**kw), message)


ROWS = image_rows(6)


@pytest.mark.parametrize("positions, kw, message", [
    (ROWS, dict(mrope_section=[10, 10, 10]),
     "mrope_section [10, 10, 10] sums to 30, but must sum to rotary_dim / 2 = 32"),
    (ROWS, dict(mrope_section=(16, 8, 8), rotary_dim=32),
     "mrope_section [16, 8, 8] sums to 32, but must sum to rotary_dim / 2 = 16"),
    (ROWS, dict(mrope_section=[-1, 17, 16]),
     "mrope_section [-1, 17, 16] must be three non-negative counts of frequencies (t, h, w)"),
    (ROWS, dict(mrope_section=[16, 16]),
     "mrope_section must be three ints [t, h, w] summing to rotary_dim / 2, got [16, 16]"),
    (ROWS, dict(mrope_section="abc"),
     "mrope_section must be three ints [t, h, w] summing to rotary_dim / 2, got 'abc'"),
    (ROWS, dict(mrope_section=[0, 0, 0]),
     "mrope_section [0, 0, 0] sums to 0, but must sum to rotary_dim / 2 = 32 (None = no mRoPE)"),
    (None, dict(mrope_section=[16, 8, 8]),
     "mrope_section [16, 8, 8] is set, so positions must be 2-D [3, num_tokens] (rows t, h, w), "
     "got 1-D positions (6,)"),
    (ROWS[:2], dict(mrope_section=[16, 8, 8]),
     "mrope_section is set, so positions must be [3, num_tokens] = (3, 6) (rows t, h, w), got (2, 6)"),
    (ROWS, {}, "rope_pool_fused expects positions/slots to be 1-D"),
    (None, dict(mrope_interleaved=True),
     "mrope_interleaved is set but mrope_section is not: interleaving needs the section [t, h, w]"),
    (ROWS, dict(mrope_section=[16, 8, 8], mrope_interleaved=1),
     "mrope_interleaved must be True (Qwen3-VL's interleaved rule) or False, got 1"),
])
def test_bad_sections_and_positions_are_refused(ropepool, fw, positions, kw, message):
    refusal(ropepool, fw, message, positions, **kw)


def test_torch_operator_takes_the_section(ropepool):
    torch = pytest.importorskip("torch")
    import ropepool.torch_op as op

    p = Problem(__import__("helpers").make_framework("torch"), T=8, Hq=4, Hk=2, D=128, P=16)
    rows = torch.from_numpy(image_rows(p.T))
    kw = p.kwargs(mrope_section=[24, 20, 20], mrope_interleaved=True)
    direct = ropepool.rope_pool_fused(p.q, p.k, p.v, rows, p.slots, p.k_pool.clone(), p.v_pool.clone(), **kw)
    via_op = op.call_op(p.q, p.k, p.v, rows, p.slots, p.k_pool.clone(), p.v_pool.clone(), **kw)
    for a, b in zip(direct, via_op):
        assert torch.equal(a, b)
    torch.library.opcheck(torch.ops.ropepool.rope_pool_fused.default,
                          (p.q, p.k, p.v, rows, p.slots, p.k_pool.clone(), p.v_pool.clone()),
                          dict(kw, mrope_section=[24, 20, 20]))
    with pytest.raises(ropepool.RopePoolError, match="sums to 30"):
        torch.ops.ropepool.rope_pool_fused(p.q, p.k, p.v, rows, p.slots, p.k_pool, p.v_pool,
                                           **p.kwargs(mrope_section=[10, 10, 10]))


def test_mlx_takes_the_section(ropepool):
    mx = pytest.importorskip("mlx.core")
    try:
        import ropepool.mlx as rmx
    except ImportError as error:
        pytest.skip(f"ropepool.mlx is not available: {error}")
    from helpers import MlxFramework

    fw = MlxFramework()
    p = Problem(fw, T=8, Hq=4, Hk=2, D=128, P=16)
    rows = image_rows(p.T)
    q_rot, k_rot, _, _ = rmx.rope_pool_fused(p.q, p.k, p.v, mx.array(rows), p.slots, p.k_pool, p.v_pool,
                                             **p.kwargs(mrope_section=[16, 24, 24]))
    np_rot = ropepool.rope_pool_fused(np.asarray(p.q), np.asarray(p.k), np.asarray(p.v), rows,
                                      np.asarray(p.slots), np.asarray(p.k_pool).copy(),
                                      np.asarray(p.v_pool).copy(), **p.kwargs(mrope_section=[16, 24, 24]))
    assert np.array_equal(np.asarray(q_rot), np_rot[0]) and np.array_equal(np.asarray(k_rot), np_rot[1])
    with pytest.raises(ropepool.RopePoolError, match="must be 2-D"):
        rmx.rope_pool_fused(p.q, p.k, p.v, p.positions, p.slots, p.k_pool, p.v_pool,
                            **p.kwargs(mrope_section=[16, 24, 24]))


@pytest.mark.parametrize("section", [{8, 16, 24}, frozenset((8, 16, 24)), {8: 1, 16: 2, 24: 3}])
def test_a_section_without_an_order_is_refused(ropepool, section):
    """A set (or dict) was read in hash order, not as written: {8, 16, 24} became [8, 24, 16] or
    whatever its table held. Refused by the direct call, the torch operator's path and MLX alike,
    nothing written."""
    from helpers import make_framework

    message = f"mrope_section must be three ints [t, h, w] summing to rotary_dim / 2, got {section!r}"
    p = Problem(make_framework("numpy"))
    expect_refusal(ropepool, p.fw, [*p.arrays()[:3], image_rows(p.T), *p.arrays()[4:]],
                   p.kwargs(mrope_section=section), message)
    try:
        import torch
        import ropepool.torch_op as op
    except ImportError:
        torch = None
    if torch is not None:
        arrays = [torch.from_numpy(x) for x in [*p.arrays()[:3], image_rows(p.T), *p.arrays()[4:]]]
        with pytest.raises(ropepool.RopePoolError) as info:
            op.call_op(*arrays, **p.kwargs(mrope_section=section))
        assert str(info.value) == message
    try:
        import mlx.core as mx
        import ropepool.mlx as rmx
    except ImportError:
        return
    arrays = [mx.array(x) for x in [*p.arrays()[:3], image_rows(p.T), *p.arrays()[4:]]]
    with pytest.raises(ropepool.RopePoolError, match="^mrope_section must be three ints"):
        rmx.rope_pool_fused(*arrays, **p.kwargs(mrope_section=section))


def transformers_interleaved_rows(section, half):
    """Row of each frequency as transformers' Qwen3-VL recomposition_frequencies picks it: row 0,
    then slice(1, 3h, 3) from row 1 and slice(2, 3w, 3) from row 2 (t is never read, and the
    slices stop at the table's end)."""
    rows = np.zeros(half, int)
    rows[slice(1, section[1] * 3, 3)] = 1
    rows[slice(2, section[2] * 3, 3)] = 2
    return rows


@pytest.mark.parametrize("model_type", ["qwen3_vl_text", "qwen3_vl_moe_text"])
@pytest.mark.parametrize("head_dim, section", [(64, None), (64, [24, 20, 20]), (32, [8, 12, 12]),
                                               (128, [40, 20, 20]), (128, [0, 30, 40]), (128, [24, 20, 20])])
def test_hf_rope_kwargs_serve_every_qwen3_vl_section_transformers_runs(ropepool, model_type, head_dim, section):
    """transformers' Qwen3-VL runs any section: its default [24, 20, 20] under a head_dim of 64 (its
    small test configs), [8, 12, 12] under 32. hf_rope_kwargs handed those on as they were, and the
    call refused them (the sum is not rotary_dim / 2): the keywords it returns must run, and rotate
    every frequency by the row transformers uses, against the float64 formula."""
    rope = dict(rope_type="default", rope_theta=5e6, **({} if section is None else dict(mrope_section=section)))
    config = dict(model_type=model_type, hidden_size=4 * head_dim, num_attention_heads=4, head_dim=head_dim,
                  rope_parameters=rope)
    kw = ropepool.hf_rope_kwargs(config)
    half = head_dim // 2
    assert kw["mrope_interleaved"] is True and sum(kw["mrope_section"]) == half
    if section is not None and sum(section) == half:
        assert kw["mrope_section"] == section  # a section the call takes is handed on unchanged
    rows = image_rows(6) + np.array([[0], [3], [11]])
    x = np.random.default_rng(3).standard_normal((6, 1, head_dim)).astype(np.float32)
    pool = np.zeros((6, 1, head_dim), np.float32)
    got = ropepool.rope_pool_fused(x, x, x, rows, np.arange(6), pool, pool.copy(), head_dim=head_dim,
                                   num_qo_heads=1, num_kv_heads=1, rope_base=5e6, **kw)[0]
    pick = transformers_interleaved_rows(section or [24, 20, 20], half)
    want, mag = np.zeros_like(got, np.float64), np.zeros_like(got, np.float64)
    for r in range(3):
        yr, mr = rotate_general(x, rows[r], kw["inv_freq"], True)
        dims = np.concatenate([np.flatnonzero(pick == r), np.flatnonzero(pick == r) + half])
        want[..., dims], mag[..., dims] = yr[..., dims], mr[..., dims]
    assert_within_bound("q_rot", got.astype(np.float64), want, mag, "float32")
