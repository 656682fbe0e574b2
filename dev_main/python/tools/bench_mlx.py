"""ropepool.mlx against MLX's own unfused path, on MLX's CPU stream, per call (graph + evaluation).

MLX's path is what an MLX user writes today: mx.fast.rope on q and on k, then the pool writes
`k_pool[slots] = k_rot` and `v_pool[slots] = v` (a scatter), or mx.slice_update when the slots are
one contiguous range (prefill). The best of these candidates at each size is what ropepool.mlx is
compared with:
  rope per token:    q as [T, Hq, 1, D], one position offset per token (any positions; decode)
  rope per sequence: q as [Hq, T, D] with the first position as offset (one sequence, prefill)
  write by scatter / by slice_update
  and the whole step under mx.compile.
Every call rebinds the returned pools, as sglang does, so MLX can donate the old pool's buffer to
the scatter instead of copying it (`pool[slots] = x` also rebinds the Python object itself); the
column "MLX, old pool kept" holds a view of each pool passed in, which makes MLX's functional
update copy the pool, to show what a copy costs. ropepool.mlx never copies a pool.

    PYTHONPATH=build/python build/venv/bin/python python/tools/bench_mlx.py --markdown out.md
"""

import argparse
import os
import platform
import statistics
import time

import mlx.core as mx
import numpy as np

import ropepool
import ropepool.mlx

HQ, HK, D, BASE = 32, 8, 128, 500000.0  # Llama-3-8B


def rope_per_token(x, positions, start):
    T, H, _ = x.shape
    return mx.fast.rope(x.reshape(T, H, 1, D), D, traditional=False, base=BASE, scale=1.0,
                        offset=positions).reshape(T, H, D)


def rope_per_sequence(x, positions, start):
    return mx.swapaxes(mx.fast.rope(mx.swapaxes(x, 0, 1), D, traditional=False, base=BASE, scale=1.0,
                                    offset=start), 0, 1)


def write_scatter(pool, rows, slots, start):
    pool[slots] = rows
    return pool


def write_slice(pool, rows, slots, start):
    return mx.slice_update(pool, rows, start, axes=(0,))


def mlx_step(rope, write):
    def step(q, k, v, positions, slots, k_pool, v_pool, start):
        k_rot = rope(k, positions, start)
        return rope(q, positions, start), k_rot, write(k_pool, k_rot, slots, start), write(v_pool, v, slots, start)
    return step


def ropepool_step(threads=None):
    def step(q, k, v, positions, slots, k_pool, v_pool, start):
        return ropepool.mlx.rope_pool_fused(q, k, v, positions, slots, k_pool, v_pool, head_dim=D,
                                            num_qo_heads=HQ, num_kv_heads=HK, rope_base=BASE, threads=threads)
    return step


def problem(T, P, dtype, decode):
    rng = np.random.default_rng(T)
    data = lambda *shape: mx.array(rng.uniform(-2, 2, shape).astype(np.float32)).astype(dtype)
    q, k, v = data(T, HQ, D), data(T, HK, D), data(T, HK, D)
    k_pool, v_pool = mx.zeros((P, HK, D), dtype=dtype), mx.zeros((P, HK, D), dtype=dtype)
    if decode:  # T sequences, one token each, anywhere in the pool
        positions = rng.integers(0, 8192, T)
        slots = rng.choice(P, T, replace=False)
        start = None
    else:  # one sequence's prompt: consecutive positions and slots
        positions = np.arange(T)
        slots = np.arange(P // 2, P // 2 + T)
        start = mx.array([P // 2])
    positions, slots = mx.array(positions.astype(np.int32)), mx.array(slots.astype(np.int32))
    mx.eval(q, k, v, k_pool, v_pool, positions, slots)
    return [q, k, v, positions, slots, k_pool, v_pool], start


def race(steps, T, P, dtype, decode, seconds, block_seconds=0.05):
    """Times the steps in turn, a block of calls each, round after round, so that all of them meet
    the same load (this machine is shared). Each step keeps its own pools and rebinds what it
    returns, as sglang does. The first call of a block is not counted: it pays for what the step
    before it did to the caches (a step that copies a pool evicts everything).
    steps: {name: (step, keep_old)}. Returns {name: (fastest, median)} in microseconds."""
    arrays, start = problem(T, P, dtype, decode)
    *inputs, k_pool, v_pool = arrays
    pools = {name: [mx.array(k_pool), mx.array(v_pool)] for name in steps}
    mx.eval(pools)
    del k_pool, v_pool
    times = {name: [] for name in steps}
    deadline = time.perf_counter() + seconds * len(steps)
    rounds = 0
    while rounds < 2 or (time.perf_counter() < deadline and rounds < 200):
        for name, (step, keep_old) in steps.items():
            block_end, calls = time.perf_counter() + block_seconds, 0
            while calls < 2 or time.perf_counter() < block_end:
                k_pool, v_pool = pools.pop(name)
                # keep_old: the caller still holds views of the pools it passes: MLX cannot donate
                kept = [k_pool[:], v_pool[:]] if keep_old else []
                t0 = time.perf_counter()
                out = step(*inputs, k_pool, v_pool, start)
                del k_pool, v_pool  # rebound before the evaluation, as a model step does
                mx.eval(*out)
                if calls > 0:
                    times[name].append(time.perf_counter() - t0)
                calls += 1
                pools[name] = [out[2], out[3]]
                del out, kept
        rounds += 1
    # The fastest call is reported first: on a shared machine other work only ever adds time.
    return {name: (min(t) * 1e6, statistics.median(t) * 1e6) for name, t in times.items()}


KEPT, OURS, OURS_1 = "MLX, old pool kept", "ropepool.mlx", "ropepool.mlx, 1 thread"


def candidates(decode):
    ropes = [("rope per token", rope_per_token)] + ([] if decode else [("rope per sequence", rope_per_sequence)])
    writes = [("scatter", write_scatter)] + ([] if decode else [("slice_update", write_slice)])
    for rope_name, rope in ropes:
        for write_name, write in writes:
            fn = mlx_step(rope, write)
            yield f"{rope_name}, {write_name}", fn
            yield f"{rope_name}, {write_name}, compiled", mx.compile(fn)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=[1, 16, 256, 4096])
    parser.add_argument("--pool", type=int, default=65536, help="pool slots (a pool copy must show)")
    parser.add_argument("--small-pool", type=int, default=4096, help="also time T=1 on this pool size")
    parser.add_argument("--seconds", type=float, default=0.4, help="time per measurement")
    parser.add_argument("--markdown", help="write the table here too")
    args = parser.parse_args()
    mx.set_default_device(mx.cpu)

    rows = []
    header = ("| dtype | T | pool slots | MLX best, µs: fastest (median) | MLX's best path | "
              "MLX, old pool kept, µs | ropepool.mlx, µs | ropepool.mlx, 1 thread, µs | speed-up (fastest) |")
    print(header)
    sizes = [(T, args.pool) for T in args.tokens] + [(1, args.small_pool)]
    for dtype_name in ("float16", "float32"):
        dtype = getattr(mx, dtype_name)
        for T, P in sizes:
            decode = T <= 16
            steps = {name: (fn, False) for name, fn in candidates(decode)}
            steps[OURS] = (ropepool_step(), False)
            steps[OURS_1] = (ropepool_step(threads=1), False)
            result = race(steps, T, P, dtype, decode, args.seconds)
            best = min((name for name in result if name not in (OURS, OURS_1)), key=lambda name: result[name][0])
            (mlx_min, mlx_med), (ours_min, ours_med), one = result[best], result[OURS], result[OURS_1]
            # Alone: its pool copies (hundreds of MiB a call) would disturb the others' timing.
            kept = race({KEPT: (mlx_step(rope_per_token, write_scatter), True)}, T, P, dtype, decode, 0, 0)[KEPT]
            row = (f"| {dtype_name} | {T} | {P} | {mlx_min:.1f} ({mlx_med:.0f}) | {best} | {kept[0]:.0f} ({kept[1]:.0f}) "
                   f"| {ours_min:.1f} ({ours_med:.0f}) | {one[0]:.1f} ({one[1]:.0f}) | {mlx_min / ours_min:.2f}x |")
            print(row, flush=True)
            rows.append(row)

    if args.markdown:
        with open(args.markdown, "w") as out:
            out.write(f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs; "
                      f"MLX {mx.__version__} (CPU), ropepool {ropepool.__version__} "
                      f"({ropepool.cpu_kernel()} kernels, {ropepool.num_threads()} threads).\n\n")
            out.write(header + "\n|---|---|---|---|---|---|---|---|---|\n" + "\n".join(rows) + "\n")


if __name__ == "__main__":
    main()
