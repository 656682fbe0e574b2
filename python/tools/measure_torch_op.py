"""Per-call wall time of ropepool.rope_pool_fused on torch tensors, the direct binding vs the
torch.library operator (torch.ops.ropepool.rope_pool_fused, as ropepool.torch_op.call_op calls it,
and its out overload), at decode size (T = 1 by default), on the CPU or a CUDA device. The operator
runs its C++ kernel where ropepool._ropepool_torch is built (torch_op.KERNEL); the same schema with
the Python kernel is timed beside it (ropepool_python::rope_pool_fused), and, where torch can build a
C++ extension here, with a kernel that does nothing (ropepool_noop::rope_pool_fused): torch's own
cost of calling an operator of this schema, which the operator pays on top of the direct call.

Both paths run on the same tensors in interleaved rounds; each round times `calls` back-to-back
calls of one path (CUDA: then synchronises, so the figure is the host's cost per call while the GPU
keeps up). Figures are medians over rounds of the mean time per call.

    PYTHONPATH=build/python python python/tools/measure_torch_op.py [--device cuda] [--tokens 1]
"""

import argparse
import statistics
import time

import torch

import ropepool
from ropepool import torch_op


def python_kernel_operator():
    """The operator's schema with torch_op's Python kernels, as ropepool_python::rope_pool_fused:
    what torch.ops.ropepool.rope_pool_fused runs where ropepool._ropepool_torch is not built, timed
    beside it in the same process."""
    lib = torch.library.Library("ropepool_python", "DEF")
    for (name, schema), impl in zip(torch_op.SCHEMAS.items(), (torch_op._direct, torch_op._impl_out)):
        lib.define(name + schema)
        for key in ("CPU", "CUDA"):
            lib.impl(name, impl, key)
    python_kernel_operator.lib = lib  # the registrations live as long as the library object
    return torch.ops.ropepool_python.rope_pool_fused


# A boxed C++ kernel that does nothing but drop its arguments: the operator's schema with it is
# torch's own cost of an operator call from Python (parsing the arguments against the schema,
# the dispatcher, the autograd and ADInplaceOrView fallbacks), without ropepool's.
NOOP_SOURCE = r"""
#include <torch/library.h>
namespace {
void noop(const c10::OperatorHandle &op, torch::jit::Stack *stack)
{
    torch::jit::drop(*stack, op.schema().arguments().size());
    for (size_t i = 0; i < op.schema().returns().size(); i++)
        stack->emplace_back(at::Tensor()); /* the default overload's two results, undefined */
}
}
void register_noop(const std::string &name)
{
    for (auto key : {c10::DispatchKey::CPU, c10::DispatchKey::CUDA}) {
        auto *library = new torch::Library(torch::Library::IMPL, "ropepool_noop", key, __FILE__, __LINE__);
        library->impl(name.c_str(), torch::CppFunction::makeFromBoxedFunction<&noop>());
    }
}
"""


def noop_kernel_operator():
    """The operator's schema with a C++ kernel that does nothing, as ropepool_noop::rope_pool_fused,
    or None (with the reason printed) where torch cannot build a C++ extension here."""
    try:
        from torch.utils.cpp_extension import load_inline

        module = load_inline("ropepool_noop_kernel", cpp_sources=NOOP_SOURCE, functions=["register_noop"],
                             extra_cflags=["-O2"])
    except Exception as e:  # no compiler, no ninja, no headers: the row is left out
        print(f"(the no-op kernel row is left out: building it failed: {str(e).splitlines()[0][:200]})")
        return None
    lib = torch.library.Library("ropepool_noop", "DEF")
    for name, schema in torch_op.SCHEMAS.items():
        lib.define(name + schema)
        module.register_noop(name)
    noop_kernel_operator.lib = lib
    return torch.ops.ropepool_noop.rope_pool_fused


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"])
    parser.add_argument("--tokens", type=int, default=1)
    parser.add_argument("--shape", default="32/8/128", help="Hq/Hk/D (default: Llama-3-8B)")
    parser.add_argument("--pool", type=int, default=65536)
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--calls", type=int, default=100)
    args = parser.parse_args()
    hq, hk, d = (int(x) for x in args.shape.split("/"))
    dev, dtype, t = torch.device(args.device), getattr(torch, args.dtype), args.tokens
    g = torch.Generator().manual_seed(0)

    def rand(*shape):
        return torch.randn(*shape, generator=g).to(dev, dtype)

    q, k, v = rand(t, hq, d), rand(t, hk, d), rand(t, hk, d)
    positions = torch.randint(0, 4096, (t,), generator=g).to(dev)
    slots = torch.randperm(args.pool, generator=g)[:t].to(dev)
    k_pool, v_pool = rand(args.pool, hk, d), rand(args.pool, hk, d)
    kw = dict(head_dim=d, num_qo_heads=hq, num_kv_heads=hk, rope_base=500000.0)
    q_out, k_out = torch.empty_like(q), torch.empty_like(k)
    python_op = python_kernel_operator()
    noop_op = noop_kernel_operator()
    arrays = (q, k, v, positions, slots, k_pool, v_pool)
    outs = dict(q_out=q_out, k_out=k_out)
    paths = {
        "direct (ropepool.rope_pool_fused)": lambda: ropepool.rope_pool_fused(*arrays, **kw),
        f"op, {torch_op.KERNEL} kernel": lambda: torch_op.rope_pool_fused.default(*arrays, **kw),
        "op, Python kernel": lambda: python_op.default(*arrays, **kw),
        f"op through call_op, {torch_op.KERNEL} kernel": lambda: torch_op.call_op(*arrays, **kw),
        "direct, q_out/k_out": lambda: ropepool.rope_pool_fused(*arrays, **kw, **outs),
        f"op.out, {torch_op.KERNEL} kernel": lambda: torch_op.rope_pool_fused.out(*arrays, **kw, **outs),
        "op.out, Python kernel": lambda: python_op.out(*arrays, **kw, **outs),
    }
    if noop_op is not None:
        paths["op, a C++ kernel that does nothing"] = lambda: noop_op.default(*arrays, **kw)
        paths["op.out, a C++ kernel that does nothing"] = lambda: noop_op.out(*arrays, **kw, **outs)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    times = {name: [] for name in paths}
    for name, fn in paths.items():  # warm up: first-call lookups, caches, the CUDA context
        for _ in range(args.calls):
            fn()
    sync()
    for _ in range(args.rounds):
        for name, fn in paths.items():
            start = time.perf_counter()
            for _ in range(args.calls):
                fn()
            sync()
            times[name].append((time.perf_counter() - start) / args.calls * 1e6)
    print(f"torch {torch.__version__}, {dev}, {args.dtype}, T={t}, {args.shape}, pool {args.pool}, "
          f"{args.rounds} rounds x {args.calls} calls: median us per call")
    base = {True: statistics.median(times["direct, q_out/k_out"]),
            False: statistics.median(times["direct (ropepool.rope_pool_fused)"])}
    for name, ts in times.items():
        m = statistics.median(ts)
        print(f"  {name:46s} {m:8.2f}   ({m - base['out' in name]:+.2f} over the direct call)")


if __name__ == "__main__":
    main()
