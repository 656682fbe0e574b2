"""Fresh outputs when T changes from call to call, as in an engine's continuous batching: does the
binding's cache of freed outputs' blocks (python/src/fresh_memory.c) still spare the page faults?

    PYTHONPATH=build/python python python/tools/measure_varying_t.py [vary|fixed] [--rounds 5]

Llama-3-8B shapes (Hq 32, Hk 8, D 128), float32, NumPy arrays; twelve calls a round with T drawn
from [1024, 16384] (vary) or T = 16384 (fixed), once with fresh outputs and once with q_out /
k_out (views of arrays allocated once), in interleaved rounds. Prints the median over rounds of
ns per token, minor page faults and kernel-mode CPU us per call.
"""
import argparse
import resource
import statistics
import time

import numpy as np

import ropepool

HQ, HK, D, P, BASE, TMAX = 32, 8, 128, 65536, 500000.0, 16384


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=["vary", "fixed"], nargs="?", default="vary")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    rng = np.random.default_rng(3)
    q = rng.standard_normal((TMAX, HQ, D), dtype=np.float32)
    k = rng.standard_normal((TMAX, HK, D), dtype=np.float32)
    v = rng.standard_normal((TMAX, HK, D), dtype=np.float32)
    positions, slots = rng.integers(0, 8192, TMAX), rng.permutation(P)[:TMAX]
    k_pool, v_pool = np.zeros((P, HK, D), np.float32), np.zeros((P, HK, D), np.float32)
    q_out, k_out = np.empty_like(q), np.empty_like(k)
    tokens = [TMAX] * 12 if args.mode == "fixed" else [int(t) for t in rng.integers(1024, TMAX + 1, 12)]
    shape = dict(head_dim=D, num_qo_heads=HQ, num_kv_heads=HK, rope_base=BASE)

    def run(fresh):
        before, start = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        for T in tokens:
            outs = {} if fresh else dict(q_out=q_out[:T], k_out=k_out[:T])
            result = ropepool.rope_pool_fused(q[:T], k[:T], v[:T], positions[:T], slots[:T], k_pool, v_pool,
                                              **shape, **outs)
            del result
        elapsed, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_SELF)
        return (elapsed / sum(tokens) * 1e9, (after.ru_minflt - before.ru_minflt) / len(tokens),
                (after.ru_stime - before.ru_stime) / len(tokens) * 1e6)

    run(True), run(False)  # untimed: the thread pool, the pools' pages, the cache's first blocks
    results = {"fresh outputs": [], "q_out / k_out": []}
    for _ in range(args.rounds):
        results["fresh outputs"].append(run(True))
        results["q_out / k_out"].append(run(False))
    print(f"T {'from 1024 to 16384' if args.mode == 'vary' else '16384'}, {args.rounds} rounds of {len(tokens)} calls")
    for name, samples in results.items():
        ns, faults, sys_us = (statistics.median(s[i] for s in samples) for i in range(3))
        print(f"  {name:14s} {ns:8.1f} ns/token  {faults:6.0f} faults/call  sys {sys_us:6.0f} us/call")


if __name__ == "__main__":
    main()
