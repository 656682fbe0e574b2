"""Decode step time of examples/torch_engine.py with ropepool vs the same engine with unfused torch
RoPE (cos/sin tables, rotate-half) + index_copy_ into the pools.

A small random Llama-3.1-style model (llama3 scaling, GQA), a batch of sequences prefilled with
prompts of different lengths, then rounds of decode steps alternating between the two engines
(each with its own pools, on the same schedule). Reported: the median time per decode step of the
whole model, and of the RoPE + pool write alone (per layer, same shapes as the step).

    PYTHONPATH=build/python python examples/torch_engine_bench.py                 # CPU, float32
    PYTHONPATH=build/python python examples/torch_engine_bench.py --device cuda --dtype bfloat16
"""

import argparse
import statistics
import time

import torch

import torch_engine as te

SMALL = dict(hidden_size=512, intermediate_size=1408, num_hidden_layers=4, num_attention_heads=8,
             num_key_value_heads=2, head_dim=64, vocab_size=2048)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--batch", type=int, default=8, help="sequences decoding together")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--steps", type=int, default=8, help="decode steps per round and engine")
    parser.add_argument("--profile", action="store_true",
                        help="also print torch.profiler's top operators of one decode step per engine")
    args = parser.parse_args()
    dev, dtype = torch.device(args.device), getattr(torch, args.dtype)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    model = te.tiny_model("llama3", dtype=dtype, device=dev, **SMALL)
    lengths = [32 + 13 * i for i in range(args.batch)]
    prompts = te.random_prompts(model.config.vocab_size, lengths)
    blocks = (max(lengths) + args.rounds * args.steps + 16) // 16 * args.batch + 1
    engines = {r: te.Engine(model, num_blocks=blocks, block_size=16, rope=r) for r in ("ropepool", "torch")}
    state = {}
    for name, engine in engines.items():
        logits = engine.step([(s, 0, n) for s, n in enumerate(lengths)],
                             torch.tensor([t for p in prompts for t in p], device=dev))
        state[name] = (logits.argmax(-1), list(lengths))
    step_times = {name: [] for name in engines}
    # Each round runs both engines on the same schedule, in alternating order, so that neither is
    # always the first to meet a shape (framework caches keyed by shape are shared between them).
    order = list(engines.items())
    for r in range(args.rounds):
        for name, engine in order if r % 2 == 0 else order[::-1]:
            tokens, pos = state[name]
            sync()
            start = time.perf_counter()
            for _ in range(args.steps):
                tokens = engine.step([(s, pos[s], 1) for s in range(args.batch)], tokens).argmax(-1)
                pos = [p + 1 for p in pos]
            sync()
            step_times[name].append((time.perf_counter() - start) / args.steps * 1e6)
            state[name] = (tokens, pos)

    if args.profile:  # where a step's time goes, per engine (host and device operators)
        for name, engine in engines.items():
            tokens, pos = state[name]
            sync()
            with torch.profiler.profile() as prof:
                engine.step([(s, pos[s], 1) for s in range(args.batch)], tokens)
                sync()
            print(f"== {name}: one decode step")
            print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12, max_name_column_width=40))

    # The RoPE + pool write alone, on one decode step's shapes (layer 0's pools).
    e = engines["ropepool"]
    g = torch.Generator().manual_seed(0)
    qkv = torch.randn(args.batch, (e.hq + 2 * e.hk) * e.d, generator=g).to(dev, dtype)
    q = qkv[:, :e.hq * e.d].view(args.batch, e.hq, e.d)
    k = qkv[:, e.hq * e.d:(e.hq + e.hk) * e.d].view(args.batch, e.hk, e.d)
    v = qkv[:, (e.hq + e.hk) * e.d:].view(args.batch, e.hk, e.d)
    positions = torch.tensor(state["ropepool"][1], device=dev)
    slots = torch.arange(args.batch, device=dev) * 16 + 15
    batch = [(s, p, 1) for s, p in enumerate(state["ropepool"][1])]
    write_times = {name: [] for name in engines}
    for r in range(args.rounds):
        for name, engine in order if r % 2 == 0 else order[::-1]:
            sync()
            start = time.perf_counter()
            for _ in range(200):
                engine.rope_pool(0, q, k, v, positions, slots, batch)
            sync()
            write_times[name].append((time.perf_counter() - start) / 200 * 1e6)

    print(f"torch {torch.__version__}, {dev}, {args.dtype}, {SMALL['num_hidden_layers']} layers, "
          f"{SMALL['num_attention_heads']}/{SMALL['num_key_value_heads']}/{SMALL['head_dim']} heads, "
          f"hidden {SMALL['hidden_size']}, batch {args.batch}, contexts {lengths[0]}..{max(lengths)}+, "
          f"{args.rounds} rounds x {args.steps} steps; median us")
    print(f"  {'':10s} {'decode step':>12s} {'RoPE + pool write (one layer)':>31s}")
    for name in engines:
        print(f"  {name:10s} {statistics.median(step_times[name]):12.1f} {statistics.median(write_times[name]):31.2f}")


if __name__ == "__main__":
    main()
