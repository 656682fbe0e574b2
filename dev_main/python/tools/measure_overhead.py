"""Per-call overhead of ropepool.rope_pool_fused over the C call rp_rope_pool_fused, at decode size.

Both run on the same buffers (torch tensors are torch.from_numpy views of the NumPy arrays), in
interleaved rounds: each round times `calls` back-to-back C calls (a C loop, see overhead_loop.c),
then `calls` Python calls on NumPy arrays, then on torch CPU tensors. The figures are medians over
rounds of the mean time per call; overhead = Python median - C median.

    python python/tools/measure_overhead.py --build build [--tokens 1] [--rounds 300] [--calls 200]

Needs a `make` build (for include/ and build/src/libropepool.so) and a C compiler; torch is used
when importable.
"""

import argparse
import ctypes
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
RP_F32, RP_I32, RP_I64 = 1, 4, 5


def build_c_timer(build_dir, out_dir):
    lib_dir = os.path.join(build_dir, "src")
    so = os.path.join(out_dir, "overhead_loop.so")
    cc = os.environ.get("CC", "cc")
    subprocess.run([cc, "-O2", "-shared", "-fPIC", "-I", os.path.join(REPO, "include"),
                    os.path.join(HERE, "overhead_loop.c"), "-L", lib_dir, "-lropepool",
                    f"-Wl,-rpath,{os.path.abspath(lib_dir)}", "-o", so], check=True)
    lib = ctypes.CDLL(so)
    f = lib.rp_overhead_time_c
    f.restype = ctypes.c_int
    f.argtypes = [ctypes.c_void_p] * 9 + [ctypes.c_int64] * 5 + [ctypes.c_int, ctypes.c_int, ctypes.c_double,
                                                                   ctypes.c_int, ctypes.c_int, ctypes.c_int,
                                                                   ctypes.c_void_p]
    return f


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", default=os.path.join(REPO, "build"))
    parser.add_argument("--tokens", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--index-dtype", default="int64", choices=["int32", "int64"])
    args = parser.parse_args()
    sys.path.insert(0, os.path.join(os.path.abspath(args.build), "python"))
    import ropepool

    try:
        import torch
    except ImportError:
        torch = None

    T, Hq, Hk, D, P = args.tokens, 32, 8, 128, 4096  # Llama-3-8B, one layer's pool of 4096 slots
    base = 500000.0
    rng = np.random.default_rng(0)
    q = rng.standard_normal((T, Hq, D), dtype=np.float32)
    k = rng.standard_normal((T, Hk, D), dtype=np.float32)
    v = rng.standard_normal((T, Hk, D), dtype=np.float32)
    positions = rng.integers(0, 8192, T).astype(args.index_dtype)
    slots = rng.permutation(P)[:T].astype(args.index_dtype)
    k_pool = np.zeros((P, Hk, D), np.float32)
    v_pool = np.zeros((P, Hk, D), np.float32)
    q_rot, k_rot = np.empty_like(q), np.empty_like(k)

    with tempfile.TemporaryDirectory() as tmp:
        time_c = build_c_timer(args.build, tmp)
        ptr = lambda a: a.ctypes.data  # noqa: E731
        one = (ctypes.c_double * 1)()
        index_code = RP_I64 if args.index_dtype == "int64" else RP_I32

        def c_round():
            st = time_c(ptr(q), ptr(k), ptr(v), ptr(positions), ptr(slots), ptr(k_pool), ptr(v_pool),
                        ptr(q_rot), ptr(k_rot), T, Hq, Hk, D, P, RP_F32, index_code, base, 0, 1,
                        args.calls, one)
            assert st == 0, f"C call failed with status {st}"
            return one[0]

        def python_round(arrays):
            f, calls = ropepool.rope_pool_fused, args.calls
            a0, a1, a2, a3, a4, a5, a6 = arrays
            for _ in range(calls):  # warm-up, as the C side does
                f(a0, a1, a2, a3, a4, a5, a6, head_dim=D, num_qo_heads=Hq, num_kv_heads=Hk, rope_base=base)
            start = time.perf_counter_ns()
            for _ in range(calls):
                f(a0, a1, a2, a3, a4, a5, a6, head_dim=D, num_qo_heads=Hq, num_kv_heads=Hk, rope_base=base)
            return (time.perf_counter_ns() - start) / calls

        np_arrays = (q, k, v, positions, slots, k_pool, v_pool)
        methods = {"C rp_rope_pool_fused": c_round, "Python, NumPy arrays": lambda: python_round(np_arrays)}
        if torch is not None:
            torch_arrays = tuple(torch.from_numpy(a) for a in np_arrays)  # the same memory
            methods["Python, torch CPU tensors"] = lambda: python_round(torch_arrays)
        samples = {name: [] for name in methods}
        for _ in range(args.rounds):
            for name, run in methods.items():
                samples[name].append(run())

    c_median = statistics.median(samples["C rp_rope_pool_fused"])
    print(f"T={T} Hq={Hq} Hk={Hk} D={D} P={P} float32, {args.index_dtype} positions/slots; "
          f"{args.rounds} rounds x {args.calls} calls; cpu kernel {ropepool.cpu_kernel()}, "
          f"numpy {np.__version__}" + (f", torch {torch.__version__}" if torch else ""))
    print("| call | median ns/call | overhead over C, ns |")
    print("| --- | ---: | ---: |")
    for name, values in samples.items():
        median = statistics.median(values)
        overhead = "—" if name.startswith("C ") else f"{median - c_median:.0f}"
        print(f"| {name} | {median:.0f} | {overhead} |")


if __name__ == "__main__":
    main()
