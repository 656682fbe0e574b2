"""A small paged-KV inference engine for transformers' Llama and Qwen2 models, on ropepool.

Each attention layer runs as: fused QKV projection -> ropepool.rope_pool_fused (RoPE with the
model's own parameters from ropepool.hf_rope_kwargs, and the K/V write into the layer's [P, Hk, D]
pools at slots from a block table) -> SDPA over the sequence's pool rows -> output projection. The
embeddings, norms, MLPs and LM head are the model's own weights. A batch of prompts of different
lengths is prefilled in one step, then all sequences decode greedily together.

    python examples/torch_engine.py                            # a tiny random Llama-3.1-style model
    python examples/torch_engine.py --config qwen2-yarn --rope torch   # the unfused torch baseline
    python examples/torch_engine.py --model PATH --prompt "Hello" --tokens 32   # a checkpoint dir
    python examples/torch_engine.py --world-size 2             # heads sharded over 2 ranks (gloo)
    torchrun --nproc-per-node 2 examples/torch_engine.py --model PATH --device cuda   # NCCL

Random weights come from transformers' own classes (from_config) under a fixed seed, so every
process of a tensor-parallel run builds the same model. Tensor parallelism shards the attention
heads (and the MLP's intermediate dimension) across ranks: each rank calls ropepool on its heads
and its own pools, and one all_reduce after each output projection joins the shards.
"""

import argparse
import contextlib
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F
import transformers
from torch.nn.attention import SDPBackend, sdpa_kernel

import ropepool

# SDPA's backends on CUDA: not cuDNN's, which builds (and caches) one graph per key length, about
# 1.5 ms of host time each on an H200 host, while decode steps bring a new key length for every
# sequence at every step (measured: the first of two engines on one schedule, which met every
# length first, ran its decode steps 6.6x slower; bench/results/cuda-h200-mla-engine.md).
SDPA_BACKENDS = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]

# Tiny configs for tests and the CPU benchmark: the RoPE of Llama 3.1 (llama3 scaling, GQA),
# Qwen2.5 (YaRN, attention bias) and a linear-scaled MHA model.
TINY = dict(vocab_size=256, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=256)
CONFIGS = {
    "llama3": ("llama", dict(rope_parameters=dict(
        rope_type="llama3", rope_theta=500000.0, factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
        original_max_position_embeddings=32))),
    "qwen2-yarn": ("qwen2", dict(rope_parameters=dict(
        rope_type="yarn", rope_theta=1000000.0, factor=4.0, original_max_position_embeddings=64))),
    "llama-linear": ("llama", dict(num_key_value_heads=4, rope_parameters=dict(
        rope_type="linear", rope_theta=10000.0, factor=2.0))),
    # Dynamic NTK past max_position_embeddings = 16: the table changes as the sequences grow.
    "llama-dynamic": ("llama", dict(max_position_embeddings=16, rope_parameters=dict(
        rope_type="dynamic", rope_theta=10000.0, factor=2.0))),
}


def tiny_model(name, *, seed=0, dtype=torch.float32, device="cpu", **overrides):
    model_type, extra = CONFIGS[name]
    config = transformers.AutoConfig.for_model(model_type, **{**TINY, **extra, **overrides})
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=dtype)
    return model.to(device).eval()


class BlockTable:
    """Pool rows in blocks of block_size: a sequence's position p lives in slot
    blocks[p // block_size] * block_size + p % block_size. Free blocks are handed out in a
    shuffled order, as in an engine that has been serving for a while."""

    def __init__(self, num_blocks, block_size, seed=0):
        self.block_size, self.blocks = block_size, {}
        self.free = torch.randperm(num_blocks, generator=torch.Generator().manual_seed(seed)).tolist()

    def slots(self, seq, positions):
        blocks = self.blocks.setdefault(seq, [])
        while positions[-1] // self.block_size >= len(blocks):
            blocks.append(self.free.pop(0))  # IndexError: the pool is full
        bs = self.block_size
        return [blocks[p // bs] * bs + p % bs for p in positions]


class Layer:
    """One decoder layer's weights for this rank's heads and MLP shard."""

    def __init__(self, layer, shard):
        attn, mlp, (rank, world) = layer.self_attn, layer.mlp, shard
        d = attn.head_dim

        def rows(linear, heads):  # this rank's output rows of a projection of `heads` heads
            n = heads // world * d
            return (linear.weight[rank * n:(rank + 1) * n],
                    None if linear.bias is None else linear.bias[rank * n:(rank + 1) * n])

        cfg = attn.config
        parts = [rows(attn.q_proj, cfg.num_attention_heads), rows(attn.k_proj, cfg.num_key_value_heads),
                 rows(attn.v_proj, cfg.num_key_value_heads)]
        self.w_qkv = torch.cat([w for w, _ in parts])
        self.b_qkv = None if parts[0][1] is None else torch.cat([b for _, b in parts])
        n = cfg.num_attention_heads // world * d
        self.w_o = attn.o_proj.weight[:, rank * n:(rank + 1) * n]
        self.b_o = attn.o_proj.bias if rank == 0 else None  # added once, not once per rank
        m = mlp.gate_proj.weight.shape[0] // world
        self.w_gate, self.w_up = (w.weight[rank * m:(rank + 1) * m] for w in (mlp.gate_proj, mlp.up_proj))
        self.w_down = mlp.down_proj.weight[:, rank * m:(rank + 1) * m]
        self.act, self.norm1, self.norm2 = mlp.act_fn, layer.input_layernorm, layer.post_attention_layernorm


class Engine:
    def __init__(self, model, *, num_blocks=64, block_size=16, rope="ropepool", group=None):
        cfg = model.config
        self.group = group
        rank, world = (dist.get_rank(group), dist.get_world_size(group)) if group is not None else (0, 1)
        if cfg.num_key_value_heads % world:
            raise ValueError(f"{cfg.num_key_value_heads} KV heads cannot be split over {world} ranks")
        self.d = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.hq, self.hk = cfg.num_attention_heads // world, cfg.num_key_value_heads // world
        inner = model.model
        self.embed, self.norm, self.lm_head = inner.embed_tokens, inner.norm, model.lm_head
        self.layers = [Layer(layer, (rank, world)) for layer in inner.layers]
        weight = self.embed.weight
        pool = dict(size=(num_blocks * block_size, self.hk, self.d), dtype=weight.dtype, device=weight.device)
        self.k_pools = [torch.zeros(**pool) for _ in self.layers]
        self.v_pools = [torch.zeros(**pool) for _ in self.layers]
        self.table = BlockTable(num_blocks, block_size)
        self.cfg, self.tables = cfg, {}
        # dynamic and longrope tables depend on the sequence's length, as transformers updates them
        self.per_length = cfg.rope_parameters.get("rope_type") in ("dynamic", "longrope")
        self.rope_pool = self.ropepool_write if rope == "ropepool" else self.torch_write

    def rope(self, seq_len):
        """rope_pool_fused's keywords for a sequence of seq_len tokens: the model's RoPE from
        ropepool.hf_rope_kwargs (its inv_freq table, attention scaling, rotary_dim, style)."""
        key = seq_len if self.per_length else None
        if key not in self.tables:
            kw = ropepool.hf_rope_kwargs(self.cfg, seq_len=key)
            self.tables[key] = dict(head_dim=self.d, num_qo_heads=self.hq, num_kv_heads=self.hk,
                                    rope_base=float(self.cfg.rope_parameters["rope_theta"]), **kw)
        return self.tables[key]

    def ropepool_write(self, i, q, k, v, positions, slots, batch):
        pools = self.k_pools[i], self.v_pools[i]
        if not self.per_length:
            return ropepool.rope_pool_fused(q, k, v, positions, slots, *pools, **self.rope(None))[:2]
        q_rot, k_rot, row = torch.empty_like(q), torch.empty_like(k), 0
        for _, start, n in batch:  # one call per sequence, with its own table, into views of q_rot/k_rot
            rows = slice(row, row + n)
            ropepool.rope_pool_fused(q[rows], k[rows], v[rows], positions[rows], slots[rows], *pools,
                                     **self.rope(start + n), q_out=q_rot[rows], k_out=k_rot[rows])
            row += n
        return q_rot, k_rot

    def torch_write(self, i, q, k, v, positions, slots, batch):
        """The same step unfused, as transformers and most engines write it: cos/sin tables, rotate
        half, then index_copy_ into the pools."""
        rope = self.rope(max(start + n for _, start, n in batch))  # one table (not per_length models)
        if "inv_freq32" not in self.tables:  # float32, as transformers holds it
            self.tables["inv_freq32"] = torch.as_tensor(rope["inv_freq"], dtype=torch.float32, device=q.device)
        inv_freq = self.tables["inv_freq32"]
        angles = positions[:, None].float() * inv_freq[None, :]
        angles = torch.cat([angles, angles], dim=-1)[:, None, :]
        scale = rope["attention_scaling"]
        cos, sin = (angles.cos() * scale).to(q.dtype), (angles.sin() * scale).to(q.dtype)

        def rotate(x):
            x1, x2 = x.chunk(2, dim=-1)
            return x * cos + torch.cat([-x2, x1], dim=-1) * sin

        q_rot, k_rot = rotate(q), rotate(k)
        self.k_pools[i].index_copy_(0, slots, k_rot)
        self.v_pools[i].index_copy_(0, slots, v)
        return q_rot, k_rot

    def all_reduce(self, x):
        if self.group is not None:
            dist.all_reduce(x, group=self.group)
        return x

    def attend(self, i, q, batch):
        """SDPA of each sequence's queries over its pool rows (GQA: Hq/Hk queries per KV head),
        on CUDA without cuDNN's backend (SDPA_BACKENDS)."""
        out, row = torch.empty_like(q), 0
        with sdpa_kernel(SDPA_BACKENDS) if q.is_cuda else contextlib.nullcontext():
            for seq, start, n in batch:
                keys = torch.as_tensor(self.table.slots(seq, list(range(start + n))), device=q.device)
                k = self.k_pools[i].index_select(0, keys).transpose(0, 1)[None]
                v = self.v_pools[i].index_select(0, keys).transpose(0, 1)[None]
                qs = q[row:row + n].transpose(0, 1)[None]
                if start == 0 or n == 1:  # causal from position 0 (prefill), or one query (decode)
                    o = F.scaled_dot_product_attention(qs, k, v, is_causal=n > 1, enable_gqa=True)
                else:
                    mask = torch.arange(start + n, device=q.device)[None] <= torch.arange(start, start + n,
                                                                                         device=q.device)[:, None]
                    o = F.scaled_dot_product_attention(qs, k, v, attn_mask=mask, enable_gqa=True)
                out[row:row + n] = o[0].transpose(0, 1)
                row += n
        return out

    @torch.inference_mode()
    def step(self, batch, tokens):
        """Runs `tokens` ([T] ids: each sequence's new tokens in batch order) through the model.
        batch: (seq, start, n) per sequence, its n new tokens at positions start..start+n-1.
        Returns the logits of each sequence's last token ([len(batch), vocab])."""
        dev = self.embed.weight.device
        positions = [p for _, start, n in batch for p in range(start, start + n)]
        slots = [s for seq, start, n in batch for s in self.table.slots(seq, list(range(start, start + n)))]
        positions, slots = (torch.as_tensor(x, device=dev) for x in (positions, slots))
        h = self.embed(tokens)
        T, qn, kn = tokens.shape[0], self.hq * self.d, self.hk * self.d
        for i, layer in enumerate(self.layers):
            qkv = F.linear(layer.norm1(h), layer.w_qkv, layer.b_qkv)
            q = qkv[:, :qn].view(T, self.hq, self.d)
            k = qkv[:, qn:qn + kn].view(T, self.hk, self.d)
            v = qkv[:, qn + kn:].view(T, self.hk, self.d)
            q_rot, _ = self.rope_pool(i, q, k, v, positions, slots, batch)
            attn = self.attend(i, q_rot, batch).view(T, qn)
            h = h + self.all_reduce(F.linear(attn, layer.w_o, layer.b_o))
            x = layer.norm2(h)
            h = h + self.all_reduce(F.linear(layer.act(F.linear(x, layer.w_gate)) * F.linear(x, layer.w_up),
                                             layer.w_down))
        last = torch.as_tensor([0] + [n for _, _, n in batch], device=dev).cumsum(0)[1:] - 1
        return self.lm_head(self.norm(h[last])).float()

    def generate(self, prompts, max_new_tokens):
        """Greedy decoding of every prompt (lists of token ids) at once. Returns the new tokens
        per prompt and the logits each was chosen from ([steps][sequence] tensors)."""
        dev = self.embed.weight.device
        lengths = [len(p) for p in prompts]
        batch = [(s, 0, n) for s, n in enumerate(lengths)]
        logits = self.step(batch, torch.as_tensor([t for p in prompts for t in p], device=dev))
        out, steps = [[] for _ in prompts], []
        for _ in range(max_new_tokens):
            steps.append(logits)
            chosen = logits.argmax(-1)
            for s, t in enumerate(chosen.tolist()):
                out[s].append(t)
            if len(steps) == max_new_tokens:
                break
            batch = [(s, lengths[s] + len(out[s]) - 1, 1) for s in range(len(prompts))]
            logits = self.step(batch, chosen)
        return out, steps


def random_prompts(vocab, lengths, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab, (n,), generator=g).tolist() for n in lengths]


def run(args, rank=0, world=1, local_rank=0):
    device = torch.device(args.device, local_rank) if args.device == "cuda" else torch.device(args.device)
    group = None
    if world > 1 or "RANK" in os.environ:
        dist.init_process_group("nccl" if args.device == "cuda" else "gloo", rank=rank, world_size=world)
        group = dist.group.WORLD
    dtype = getattr(torch, args.dtype)
    tokenizer = None
    if args.model:
        model = transformers.AutoModelForCausalLM.from_pretrained(args.model, dtype=dtype).to(device).eval()
        if os.path.exists(os.path.join(args.model, "tokenizer_config.json")):
            tokenizer = transformers.AutoTokenizer.from_pretrained(args.model)
    else:
        model = tiny_model(args.config, seed=args.seed, dtype=dtype, device=device)
    if tokenizer is not None and args.prompt:
        prompts = [tokenizer(p)["input_ids"] for p in args.prompt]
    else:
        prompts = random_prompts(model.config.vocab_size, args.lengths)
    engine = Engine(model, num_blocks=args.blocks, block_size=args.block_size, rope=args.rope, group=group)
    tokens, _ = engine.generate(prompts, args.tokens)
    if rank == 0:
        for prompt, new in zip(prompts, tokens):
            text = tokenizer.decode(new) if tokenizer is not None else new
            print(f"{len(prompt):3d} prompt tokens -> {text}")
        if args.json:
            with open(args.json, "w") as f:
                json.dump(tokens, f)
    if group is not None:
        # Leave together: a rank that tears its process group down while a peer still talks to it
        # (rank 0 is still printing and writing the JSON) can abort the peer's gloo threads.
        dist.barrier(group)
        del engine
        dist.destroy_process_group()


def leave_rank():
    """Ends a rank whose work is done and whose process group is destroyed, without the
    interpreter's teardown: there torch's C++ state (gloo, torch 2.15) aborted about one two-rank
    run in 25 on a 2-core machine ("terminate called without an active exception", no Python
    frame left), after every token was written."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def spawned(rank, args, world):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(args.port))
    run(args, rank, world, rank)
    leave_rank()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="a transformers checkpoint directory (Llama or Qwen2 architecture)")
    parser.add_argument("--config", default="llama3", choices=sorted(CONFIGS), help="tiny random model")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--prompt", action="append", help="prompt text (with --model and a tokenizer)")
    parser.add_argument("--lengths", type=int, nargs="+", default=[5, 11, 3], help="random prompt lengths")
    parser.add_argument("--tokens", type=int, default=16, help="tokens to generate per sequence")
    parser.add_argument("--rope", default="ropepool", choices=["ropepool", "torch"])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--blocks", type=int, default=64)
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument("--world-size", type=int, default=1, help="ranks to spawn (without torchrun)")
    parser.add_argument("--port", type=int, default=29533)
    parser.add_argument("--json", help="write the generated tokens here (rank 0)")
    args = parser.parse_args(argv)
    if "RANK" in os.environ:  # launched by torchrun
        run(args, int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ.get("LOCAL_RANK", 0)))
        if int(os.environ["WORLD_SIZE"]) > 1:
            leave_rank()
    elif args.world_size > 1:
        torch.multiprocessing.spawn(spawned, args=(args, args.world_size), nprocs=args.world_size)
    else:
        run(args)


if __name__ == "__main__":
    main()
