"""The QK-norm call against the unfused path an engine runs without it (issue 14), on a GPU.

An engine without a fused QK-norm call runs an RMSNorm over q's heads and one over k's, then its
rope + cache append. This times, inside CUDA graphs of 20 calls (GPU time per call, hot: the
same inputs every call, as `ropepool-bench`'s hot rows), Qwen3-8B's shapes in bf16:

    fused      ropepool.rope_pool_fused with q_norm_weight, k_norm_weight (one kernel)
    plain      the same call without them (ropepool's rope + append alone)
    rms_norm   torch.nn.functional.rms_norm on q and on k (the engine's two RMSNorm kernels)
    unfused    rms_norm on q and k, then the plain call on their results

`unfused` puts ropepool's own rope + append where the engine runs FlashInfer's; ropepool's is
the faster of the two at every T for this shape (bench/results/cuda-h200.md), so `unfused` is a
lower bound of the engine's path and fused / unfused an upper bound of the fused call's ratio to
it. The outputs of fused and unfused are compared too (they differ by the bf16 rounding torch's
rms_norm applies between the norm and RoPE, a few bf16 ulps).

    python python/tools/measure_unfused_qk_norm.py [-T 1,16,64,256,1024,4096,16384] [--rounds 5]

Needs torch with CUDA and ropepool's CUDA backend (PYTHONPATH=<build>/python). `--device cpu`
runs the same calls on the CPU, timed by the wall clock (a check of the script, or CPU figures).
"""

import argparse
import statistics
import time

import numpy as np
import torch

import ropepool
from ropepool.bench import graph_timer

HQ, HK, D, BASE, EPS = 32, 8, 128, 1e6, 1e-6
POOL = 1 << 20
PER_GRAPH = 20


def make_inputs(T, rng, dev):
    bf16 = torch.bfloat16
    x = dict(
        q=torch.randn(T, HQ, D, device=dev).to(bf16),
        k=torch.randn(T, HK, D, device=dev).to(bf16),
        v=torch.randn(T, HK, D, device=dev).to(bf16),
        positions=torch.from_numpy(rng.integers(0, 32768, T)).to(dev),
        slots=torch.from_numpy(rng.choice(POOL, T, replace=False)).to(dev),
        k_pool=torch.zeros(POOL, HK, D, device=dev, dtype=bf16),
        v_pool=torch.zeros(POOL, HK, D, device=dev, dtype=bf16),
    )
    wq = (1.0 + 0.1 * torch.randn(D, device=dev)).to(bf16)
    wk = (1.0 + 0.1 * torch.randn(D, device=dev)).to(bf16)
    return x, wq, wk


def wall_timer(body):
    """CPU ns per call of body(), from about n calls: the wall clock, as graph_timer's GPU time."""
    body()

    def run(calls):
        start = time.perf_counter_ns()
        for _ in range(calls):
            body()
        return (time.perf_counter_ns() - start) / calls

    return run


def bodies(T, rng, dev):
    x, wq, wk = make_inputs(T, rng, dev)
    shape = dict(head_dim=D, num_qo_heads=HQ, num_kv_heads=HK, rope_base=BASE)
    q_out, k_out = torch.empty_like(x["q"]), torch.empty_like(x["k"])
    uq_out, uk_out = torch.empty_like(x["q"]), torch.empty_like(x["k"])
    args = [x[n] for n in ("q", "k", "v", "positions", "slots", "k_pool", "v_pool")]
    norm = torch.nn.functional.rms_norm

    def fused():
        ropepool.rope_pool_fused(*args, **shape, q_norm_weight=wq, k_norm_weight=wk, norm_eps=EPS,
                                 q_out=q_out, k_out=k_out)

    def plain():
        ropepool.rope_pool_fused(*args, **shape, q_out=uq_out, k_out=uk_out)

    def rms_norm():
        return norm(x["q"], (D,), wq, EPS), norm(x["k"], (D,), wk, EPS)

    def unfused():
        qn, kn = rms_norm()
        ropepool.rope_pool_fused(qn, kn, *args[2:], **shape, q_out=uq_out, k_out=uk_out)

    fused()
    unfused()
    if dev == "cuda":
        torch.cuda.synchronize()
    diff = max((q_out.float() - uq_out.float()).abs().max().item(), (k_out.float() - uk_out.float()).abs().max().item())
    return dict(fused=fused, plain=plain, rms_norm=rms_norm, unfused=unfused), diff


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-T", default="1,16,64,256,1024,4096,16384")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=4000, help="calls a timed sample (default 4000)")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    args = parser.parse_args()
    rng = np.random.default_rng(14)
    where = (f"{torch.cuda.get_device_name()}, GPU us per call in CUDA graphs of {PER_GRAPH}" if args.device == "cuda"
             else "CPU, wall-clock us per call")
    print(f"# {where}, torch {torch.__version__}, Qwen3-8B {HQ}/{HK}/{D} bf16, pool {POOL}, "
          f"median of {args.rounds} interleaved rounds")
    print(f"{'T':>6} {'fused':>8} {'plain':>8} {'rms_norm':>9} {'unfused':>8} {'fused/plain':>11} "
          f"{'fused/unfused':>13} {'max |fused - unfused|':>22}")
    for T in (int(t) for t in args.T.split(",")):
        calls, diff = bodies(T, rng, args.device)
        timers = {name: graph_timer(torch, body, PER_GRAPH) if args.device == "cuda" else wall_timer(body)
                  for name, body in calls.items()}
        samples = {name: [] for name in timers}
        for _ in range(args.rounds):
            for name, run in timers.items():
                samples[name].append(run(args.calls) / 1e3)
        med = {name: statistics.median(s) for name, s in samples.items()}
        print(f"{T:>6} {med['fused']:>8.2f} {med['plain']:>8.2f} {med['rms_norm']:>9.2f} {med['unfused']:>8.2f} "
              f"{med['fused'] / med['plain']:>11.2f} {med['fused'] / med['unfused']:>13.2f} {diff:>22.4g}")


if __name__ == "__main__":
    main()
