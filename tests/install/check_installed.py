"""One call of the installed ropepool (the package under sys.argv[1], not the tree's), checked
against the float64 formula: q and k rotated (NeoX pairs), k and v written to their slots."""
import os
import sys

import numpy as np
import ropepool

site = os.path.realpath(sys.argv[1])
assert os.path.realpath(ropepool.__file__).startswith(site + os.sep), ropepool.__file__

T, Hq, Hk, D, base = 5, 4, 2, 64, 10000.0
rng = np.random.default_rng(7)
q, k, v = (rng.standard_normal((T, H, D)).astype(np.float32) for H in (Hq, Hk, Hk))
positions, slots = np.array([0, 3, 17, 250, 4095]), np.array([9, 0, 31, 4, 12])
k_pool, v_pool = np.zeros((32, Hk, D), np.float32), np.zeros((32, Hk, D), np.float32)
q_rot, k_rot, _, _ = ropepool.rope_pool_fused(q, k, v, positions, slots, k_pool, v_pool, head_dim=D,
                                              num_qo_heads=Hq, num_kv_heads=Hk, rope_base=base)


def rope(x):
    x = x.astype(np.float64)
    angle = positions[:, None, None] * base ** (-np.arange(D // 2) * 2.0 / D)
    lo, hi = x[..., : D // 2], x[..., D // 2:]
    return np.concatenate([lo * np.cos(angle) - hi * np.sin(angle), hi * np.cos(angle) + lo * np.sin(angle)], -1)


for name, got, want in (("q_rot", q_rot, rope(q)), ("k_rot", k_rot, rope(k)),
                        ("k_pool", k_pool[slots], rope(k)), ("v_pool", v_pool[slots], v)):
    error = float(np.abs(got - want).max())
    assert error < 1e-5, f"{name}: max error {error}"  # float32 outputs of values below 5
untouched = np.setdiff1d(np.arange(32), slots)
assert not k_pool[untouched].any() and not v_pool[untouched].any()
print(f"ok: ropepool {ropepool.__version__} from the sdist's wheel")
