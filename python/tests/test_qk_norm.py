"""QK-norm (q_norm_weight, k_norm_weight, norm_eps, norm_weight_offset) through the Python call and
the torch operator: the float64 formula, transformers' Qwen3 and Gemma 3 parity, and the refusals.

fixtures/hf_qk_norm.npz was recorded by python/tools/record_hf_qk_norm.py from transformers'
Qwen3Attention (q_proj, k_proj, q_norm, k_norm, apply_rotary_pos_emb) and Gemma3RMSNorm on a small
random config. transformers computes RoPE's angle in float32 and, for Qwen3, rounds the normalised
value to the input dtype before multiplying by the weight; ropepool does neither (float64 formula,
one rounding). The tolerances below are those differences, stated per dtype.
"""

import pathlib

import numpy as np
import pytest

ml_dtypes = pytest.importorskip("ml_dtypes")

FIXTURE = np.load(pathlib.Path(__file__).parent / "fixtures" / "hf_qk_norm.npz")


def normalised(x, w, eps, offset):
    x = x.astype(np.float64)
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * (w.astype(np.float64) + offset)


def neox_partner(D):
    d = np.arange(D)
    return np.where(d < D // 2, d + D // 2, d - D // 2)


def call(ropepool, q, k, positions, **kw):
    T, Hq, D = q.shape
    Hk = k.shape[1]
    pool = np.zeros((T, Hk, D), q.dtype)
    return ropepool.rope_pool_fused(q, k, k, positions, np.arange(T), pool, pool.copy(), head_dim=D,
                                    num_qo_heads=Hq, num_kv_heads=Hk, rope_base=kw.pop("rope_base", 1e6), **kw)


@pytest.mark.parametrize("tag", ["float32", "bfloat16"])
@pytest.mark.parametrize("model,offset", [("qwen3", 0.0), ("gemma3", 1.0)])
def test_matches_transformers_qk_norm_and_rope(ropepool, tag, model, offset):
    dt = np.float32 if tag == "float32" else ml_dtypes.bfloat16
    f = FIXTURE
    q, k, positions = f[f"{tag}/q"].astype(dt), f[f"{tag}/k"].astype(dt), f["positions"]
    wq, wk = f[f"{tag}/{model}/q_norm_weight"].astype(dt), f[f"{tag}/{model}/k_norm_weight"].astype(dt)
    eps = float(f["eps"])
    q_rot, k_rot, k_pool, _ = call(ropepool, q, k, positions, rope_base=float(f["rope_theta"]),
                                   q_norm_weight=wq, k_norm_weight=wk, norm_eps=eps, norm_weight_offset=offset)
    assert np.array_equal(k_pool, k_rot)
    D = q.shape[-1]
    inv_freq = float(f["rope_theta"]) ** (-np.arange(0, D, 2) / D)
    angle = positions[:, None, None] * np.concatenate([inv_freq, inv_freq])
    for got, want, x, w in ((q_rot, f[f"{tag}/{model}/q_rot"], q, wq), (k_rot, f[f"{tag}/{model}/k_rot"], k, wk)):
        y = normalised(x, w, eps, offset)
        mag = np.abs(y) + np.abs(y[..., neox_partner(D)])
        if tag == "float32":
            # transformers: the float32 angle (error ~ angle * 2^-24), its float32 mean of squares
            # (up to D * 2^-24 relative) and products.
            bound = 2.0 ** -24 * (mag * (np.abs(angle) + 8 + D) + np.abs(want))
        else:
            # transformers rounds to bfloat16 the normalised value (Qwen3), its product with the
            # weight, cos and sin, both products and the sum: 2.2 * 2^-8 * mag on this fixture,
            # up to 3.9 on 8192 tokens of 32 heads; counting the roundings allows 7 (README).
            bound = 4 * 2.0 ** -8 * mag
        err = np.abs(got.astype(np.float64) - want)
        assert np.all(err <= bound), f"worst {(err / bound).max():.3g} of the bound"


@pytest.mark.parametrize("which", ["both", "q", "k"])
def test_matches_the_float64_formula(ropepool, which):
    rng = np.random.default_rng(14)
    T, Hq, Hk, D = 5, 4, 2, 64
    q = (rng.standard_normal((T, Hq, D)) * 30).astype(np.float32)
    k = (rng.standard_normal((T, Hk, D)) * 0.01).astype(np.float32)
    wq, wk = rng.standard_normal(D).astype(np.float32), rng.standard_normal(D).astype(np.float32)
    positions = np.array([0, 1, 7, 4000, 123456])
    kw = dict(q_norm_weight=wq if which != "k" else None, k_norm_weight=wk if which != "q" else None)
    q_rot, k_rot, _, _ = call(ropepool, q, k, positions, rope_base=10000.0, **kw)  # norm_eps: 1e-6
    angle = positions[:, None] * 10000.0 ** (-np.arange(0, D, 2) / D)
    c, s = np.cos(angle)[:, None, :], np.sin(angle)[:, None, :]
    for got, x, w in ((q_rot, q, kw["q_norm_weight"]), (k_rot, k, kw["k_norm_weight"])):
        y = normalised(x, w, 1e-6, 0.0) if w is not None else x.astype(np.float64)
        a, b = y[..., : D // 2], y[..., D // 2:]
        want = np.concatenate([a * c - b * s, b * c + a * s], axis=-1)
        mag = np.abs(y) + np.abs(y[..., neox_partner(D)])
        assert np.all(np.abs(got - want) <= np.spacing(np.abs(want).astype(np.float32)) + 10 * 2.0 ** -24 * mag)


def test_default_eps_is_qwen3s(ropepool):
    q = np.zeros((1, 1, 8), np.float32)
    q[0, 0, 0] = 1e-3
    w = np.ones(8, np.float32)
    got = call(ropepool, q, q.copy(), np.zeros(1, np.int64), q_norm_weight=w)[0]
    x = float(q[0, 0, 0])
    want = x / np.sqrt(x * x / 8 + 1e-6)
    assert got[0, 0, 0] == np.float32(want)


def test_torch_operator_takes_the_norm_keywords(ropepool):
    torch = pytest.importorskip("torch")
    from ropepool import torch_op

    rng = np.random.default_rng(3)
    q, k = torch.randn(3, 4, 64, dtype=torch.bfloat16), torch.randn(3, 2, 64, dtype=torch.bfloat16)
    w = torch.randn(64, dtype=torch.float32)
    pos, slots = torch.tensor([0, 5, 9]), torch.tensor([2, 0, 1])
    pools = [torch.zeros(4, 2, 64, dtype=torch.bfloat16) for _ in range(4)]
    kw = dict(head_dim=64, num_qo_heads=4, num_kv_heads=2, rope_base=1e6, q_norm_weight=w, k_norm_weight=w,
              norm_eps=1e-5, norm_weight_offset=1.0)
    direct = ropepool.rope_pool_fused(q, k, k, pos, slots, pools[0], pools[1], **kw)
    op = torch_op.call_op(q, k, k, pos, slots, pools[2], pools[3], **kw)
    for a, b in zip(direct, op):
        assert torch.equal(a, b)
    torch.library.opcheck(torch.ops.ropepool.rope_pool_fused.default,
                          (q, k, k, pos, slots, pools[2], pools[3]), kw)
    del rng


def test_bad_weights_and_eps_are_refused_and_write_nothing(ropepool):
    q = np.ones((2, 2, 16), np.float32)
    k = np.ones((2, 1, 16), np.float32)
    pool = np.full((2, 1, 16), 7.0, np.float32)
    base = dict(head_dim=16, num_qo_heads=2, num_kv_heads=1, rope_base=1e4)
    cases = [
        (dict(q_norm_weight=np.ones(8, np.float32)), "q_norm_weight must be a contiguous 1-D array of head_dim = 16"),
        (dict(k_norm_weight=np.ones((1, 16), np.float32)), "k_norm_weight must be a contiguous 1-D array"),
        (dict(q_norm_weight=np.ones(32, np.float32)[::2]), "with a stride"),
        (dict(q_norm_weight=np.ones(16, np.float16)), "q_norm_weight dtype must be q's dtype float32, got float16"),
        (dict(q_norm_weight=np.ones(16, np.float32), norm_eps=0.0), "norm_eps must be a positive finite number"),
        (dict(k_norm_weight=np.ones(16, np.float32), norm_eps=float("inf")), "norm_eps must be a positive finite"),
        (dict(norm_eps=1e-5), "^norm_eps 1e-05 needs q_norm_weight or k_norm_weight, and neither is given"),
        (dict(norm_weight_offset=1.0), "^norm_weight_offset 1 needs q_norm_weight or k_norm_weight"),
        (dict(norm_eps=1e-5, norm_weight_offset=1.0), "^norm_eps 1e-05 and norm_weight_offset 1 need q_norm_weight"),
        (dict(q_norm_weight=np.ones(16, np.float32), norm_weight_offset=float("nan")), "norm_weight_offset must be finite"),
        # a negative offset is a value (any finite one is): the refusal of one past float64 must
        # not ask for a positive number
        (dict(q_norm_weight=np.ones(16, np.float32), norm_weight_offset=-10**400),
         "^norm_weight_offset must be a finite number, got -100000000000000... (402 characters), too large for a float64$"),
    ]
    for extra, message in cases:
        k_pool, v_pool = pool.copy(), pool.copy()
        with pytest.raises(ropepool.RopePoolError, match=message.replace("(", r"\(").replace(")", r"\)")):
            ropepool.rope_pool_fused(q, k, k, np.zeros(2, np.int64), np.arange(2), k_pool, v_pool, **base, **extra)
        assert np.array_equal(k_pool, pool) and np.array_equal(v_pool, pool)


def test_mlx_refuses_qk_norm_clearly(ropepool):
    pytest.importorskip("mlx.core")
    from ropepool import mlx as rp_mlx

    with pytest.raises(ropepool.RopePoolError, match="not supported on MLX"):
        rp_mlx.rope_pool_fused(None, None, None, None, None, None, None, head_dim=8, num_qo_heads=1,
                               num_kv_heads=1, rope_base=1e4, q_norm_weight=object())


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_cuda_call_matches_the_cpu_call(ropepool, dtype):
    torch = pytest.importorskip("torch")
    if not (torch.cuda.is_available() and ropepool.has_cuda()):
        pytest.skip("needs a CUDA device and ropepool's CUDA backend")
    dt = getattr(torch, dtype)
    gen = torch.Generator().manual_seed(18)
    T, Hq, Hk, D = 37, 32, 8, 128
    q, k, v = (torch.randn(T, H, D, generator=gen).to(dt) for H in (Hq, Hk, Hk))
    wq, wk = (torch.rand(D, generator=gen) + 0.5 for _ in range(2))
    positions, slots = torch.arange(T) * 977, torch.randperm(64, generator=gen)[:T]
    kw = dict(head_dim=D, num_qo_heads=Hq, num_kv_heads=Hk, rope_base=1e6, q_norm_weight=wq, k_norm_weight=wk.to(dt))
    results = []
    for device in ("cpu", "cuda"):
        pools = [torch.zeros(64, Hk, D, dtype=dt, device=device) for _ in range(2)]
        args = [x.to(device) for x in (q, k, v, positions, slots)]
        out = ropepool.rope_pool_fused(*args, *pools, **{**kw, "q_norm_weight": wq.to(device),
                                                           "k_norm_weight": kw["k_norm_weight"].to(device)})
        torch.cuda.synchronize()
        results.append([x.cpu() for x in out])
    # float32: the same float64 formula with one rounding, bit-identical but where the two sums of
    # squares (in different orders) round rstd to different float64 neighbours, rarely: 1 ulp at
    # most. bfloat16: both take the float32 path (ropepool.h), whose sums of squares differ (float32
    # partial sums on CUDA, float64 on the CPU): within 2^-7 relative, about one bfloat16 ulp.
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, rtol=2.0 ** -7 if dtype == "bfloat16" else 2.0 ** -22, atol=0.0)
