"""What torch's operator call costs for the shape of ropepool's schema, with a kernel that does nothing.

torch.ops.ropepool.rope_pool_fused.out costs some 5 µs over the direct call on a CPU (torch-op-cpu.md);
most of it is torch's own: createStackForSchema looks every one of the schema's 31 arguments up
among the keywords, then the dispatcher's fallbacks walk them. This registers three operators with a
boxed C++ kernel that only pops its arguments (compiled with torch.utils.cpp_extension) and times them
from Python, interleaved with the real operator and the direct call:

  kwonly   ropepool's `out` schema (keyword-only extensions), called as call_op calls it
  seedpos  the same arguments, none keyword-only, the seed's given by position
  packed   the 9 tensors and two lists (a schema packing the scalars; not ropepool's)

    PYTHONPATH=build/python python python/tools/measure_schema_arity.py [--rounds 30] [--calls 2000]

Needs a C++ compiler (torch's extension build); CPU tensors, T = 1, Llama-3-8B shapes.
"""

import argparse
import statistics
import time

import torch
from torch.utils.cpp_extension import load_inline

import ropepool
from ropepool import torch_op

KERNEL = r"""
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>
void noop(const c10::OperatorHandle &op, torch::jit::Stack *stack) {
    torch::jit::drop(*stack, op.schema().arguments().size());
}
void registered() {}
TORCH_LIBRARY_IMPL(ropepool_arity, CPU, m) {
    for (const char *name : {"kwonly", "seedpos", "packed"})
        m.impl(name, torch::CppFunction::makeFromBoxedFunction<&noop>());
}
"""


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--calls", type=int, default=2000)
    opts = parser.parse_args()

    lib = torch.library.Library("ropepool_arity", "FRAGMENT")
    outs = ", Tensor(c!) q_out, Tensor(d!) k_out"
    lib.define("kwonly(" + torch_op.INPUTS + torch_op.POOLS + torch_op.KEYWORDS + outs + ") -> ()")
    lib.define("seedpos(" + torch_op.INPUTS + torch_op.POOLS + outs + torch_op.KEYWORDS.replace(", *,", ",") + ") -> ()")
    lib.define("packed(" + torch_op.INPUTS + torch_op.POOLS + outs + ", int[] ints, float[] floats) -> ()")
    load_inline("ropepool_arity_kernel", cpp_sources=KERNEL, functions=["registered"], verbose=False)

    q, k, v = torch.zeros(1, 32, 128), torch.zeros(1, 8, 128), torch.zeros(1, 8, 128)
    positions, slots = torch.zeros(1, dtype=torch.long), torch.zeros(1, dtype=torch.long)
    k_pool, v_pool = torch.zeros(16, 8, 128), torch.zeros(16, 8, 128)
    q_out, k_out = torch.empty_like(q), torch.empty_like(k)
    inputs = (q, k, v, positions, slots, k_pool, v_pool)
    seed = dict(head_dim=128, num_qo_heads=32, num_kv_heads=8, rope_base=10000.0)
    ops = torch.ops.ropepool_arity
    ints, floats = [128, 32, 8], [10000.0]
    paths = {
        "no-op kernel, ropepool's schema (keyword-only)": lambda: ops.kwonly(*inputs, **seed, q_out=q_out, k_out=k_out),
        "no-op kernel, nothing keyword-only, seed by position": lambda: ops.seedpos(*inputs, q_out, k_out, 128, 32, 8, 10000.0),
        "no-op kernel, 9 tensors + 2 lists": lambda: ops.packed(*inputs, q_out, k_out, ints, floats),
        "the operator (out overload)": lambda: torch.ops.ropepool.rope_pool_fused.out(*inputs, **seed, q_out=q_out, k_out=k_out),
        "the direct call": lambda: ropepool.rope_pool_fused(*inputs, **seed, q_out=q_out, k_out=k_out),
    }
    samples = {name: [] for name in paths}
    for _ in range(opts.rounds):
        for name, call in paths.items():
            start = time.perf_counter()
            for _ in range(opts.calls):
                call()
            samples[name].append((time.perf_counter() - start) / opts.calls * 1e6)
    print(f"torch {torch.__version__}, T = 1, 32/8/128 float32, {opts.rounds} interleaved rounds x {opts.calls} calls: "
          "median us per call")
    for name, times in samples.items():
        print(f"  {name:55s} {statistics.median(times):7.2f}")


if __name__ == "__main__":
    main()
