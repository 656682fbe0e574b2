"""A real model end to end: examples/torch_engine.py (paged KV pools, ropepool for RoPE and the
pool write, SDPA over pool rows) generates the tokens transformers' own `generate` does.

Tiny random models (transformers' classes, from_config, fixed seed) with the RoPE of Llama 3.1
(llama3 scaling, GQA), Qwen2.5 (YaRN with attention scaling, QKV bias), a linear-scaled MHA model
and dynamic NTK (past max_position_embeddings = 16, so its table changes while the sequences grow:
the engine calls ropepool once per sequence there, each with its length's table, into q_out/k_out
views). RoPE parameters come from ropepool.hf_rope_kwargs. The reference is transformers' greedy `generate` with its own KV cache, one prompt at a
time; the engine runs the prompts together (one prefill of different lengths, then batched decode).

Tolerance (float32 on the CPU): the engine's logits are within LOGIT_TOL of transformers' at every
step. Both compute the same float32 network; they differ only in RoPE (ropepool forms the angle
in float64 and rounds each output once; transformers forms it in float32, rounds cos and sin, then
each product) and in summation order, a few float32 ulps of q and k: measured <= 3.3e-7 on these
models, LOGIT_TOL = 1e-5 is 30x that. Random weights give flat logits, so a token is compared only
where transformers' top-2 margin exceeds LOGIT_TOL (where it does not, either token is a correct
greedy choice and the sequences may part; the comparison of that sequence stops there). With these
seeds the smallest margin is 7.5e-5 (dynamic; 1.2e-4 YaRN): every one of the 4 x 3 x 8 tokens is
compared, none falls within the tolerance.

bf16 on CUDA (marked cuda): every bf16 rounding is a relative error of up to 2^-8. transformers
rounds q, k, cos, sin and each product and sum of the rotation to bf16, ropepool rounds q_rot and
k_rot once from float32: the rotated values differ by up to about 3 bf16 ulps; the attention, the
MLP and the residual stream round to bf16 identically in both. The logits then agree to a few bf16
ulps of the largest logit: BF16_TOL = 8 * 2^-8 * max|logit|, with the same margin rule.
"""

import os
import socket
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")
transformers = pytest.importorskip("transformers", reason="transformers is not installed")

EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples")
sys.path.insert(0, EXAMPLES)
import torch_engine as te  # noqa: E402

LOGIT_TOL = 1e-5
LENGTHS = [5, 11, 3]
NEW_TOKENS = 8


def free_port():
    """A TCP port nothing listens on now: fixed ports collide with other jobs on a shared CI host."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def reference(model, prompts, new_tokens=NEW_TOKENS):
    """transformers' greedy generate, one prompt at a time: (tokens, [steps] logits) per prompt."""
    model.generation_config.eos_token_id = None  # random weights: never stop early
    model.generation_config.pad_token_id = 0
    out = []
    for p in prompts:
        done = model.generate(torch.tensor([p], device=model.device), max_new_tokens=new_tokens,
                              do_sample=False, output_logits=True, return_dict_in_generate=True)
        out.append((done.sequences[0, len(p):].tolist(), [x[0].float() for x in done.logits]))
    return out


def compare(got_tokens, got_logits, want, tol):
    """Asserts the engine's tokens and logits are transformers' (the margin rule above). Returns
    (tokens compared, steps whose margin was within tol)."""
    compared = close_calls = 0
    for s, (tokens, logits) in enumerate(want):
        for t, ref in enumerate(logits):
            diff = float((got_logits[t][s] - ref).abs().max())
            limit = tol(ref)
            assert diff <= limit, f"sequence {s} step {t}: logits differ by {diff:.3g} > {limit:.3g}"
            top2 = ref.topk(2).values
            if float(top2[0] - top2[1]) <= limit:
                close_calls += 1
                if got_tokens[s][t] != tokens[t]:
                    break  # both are greedy choices within the tolerance: the sequences part here
                continue
            assert got_tokens[s][t] == tokens[t], f"sequence {s} step {t}: token {got_tokens[s][t]} != {tokens[t]}"
            compared += 1
    return compared, close_calls


@pytest.mark.parametrize("config", sorted(te.CONFIGS))
def test_engine_generates_transformers_tokens(ropepool, config):
    model = te.tiny_model(config)
    prompts = te.random_prompts(model.config.vocab_size, LENGTHS)
    engine = te.Engine(model, num_blocks=16, block_size=4)  # sequences spread over shuffled blocks
    tokens, logits = engine.generate(prompts, NEW_TOKENS)
    compared, close_calls = compare(tokens, logits, reference(model, prompts), lambda ref: LOGIT_TOL)
    assert (compared, close_calls) == (len(LENGTHS) * NEW_TOKENS, 0)  # with these seeds: all compared


def test_engine_pools_hold_each_sequences_rotated_keys_at_its_slots(ropepool):
    """The fused path and the unfused torch path (RoPE tables + index_copy_) fill the same pools."""
    model = te.tiny_model("llama3")
    prompts = te.random_prompts(model.config.vocab_size, LENGTHS)
    fused, unfused = (te.Engine(model, num_blocks=16, block_size=4, rope=r) for r in ("ropepool", "torch"))
    assert fused.generate(prompts, 3)[0] == unfused.generate(prompts, 3)[0]
    used = [s for seq, blocks in fused.table.blocks.items() for b in blocks for s in range(b * 4, b * 4 + 4)]
    for a, b in zip(fused.k_pools + fused.v_pools, unfused.k_pools + unfused.v_pools):
        torch.testing.assert_close(a[used], b[used], rtol=0, atol=1e-6)


@pytest.mark.parametrize("backend", ["gloo", pytest.param("nccl", marks=pytest.mark.cuda)])
def test_tensor_parallel_engine_on_one_rank_generates_the_same_tokens(ropepool, backend):
    """torch.distributed with one rank: the collective path (gloo on the CPU, NCCL on a GPU)."""
    import torch.distributed as dist

    device = "cuda" if backend == "nccl" else "cpu"
    if device == "cuda" and not (torch.cuda.is_available() and ropepool.has_cuda()):
        pytest.skip("needs a GPU and ropepool's CUDA backend")
    model = te.tiny_model("qwen2-yarn", device=device)
    prompts = te.random_prompts(model.config.vocab_size, LENGTHS)
    alone = te.Engine(model).generate(prompts, NEW_TOKENS)
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    try:
        assert te.Engine(model, group=dist.group.WORLD).generate(prompts, NEW_TOKENS)[0] == alone[0]
    finally:
        dist.destroy_process_group()


def test_tensor_parallel_engine_on_two_gloo_ranks_generates_the_same_tokens(ropepool, tmp_path):
    """Heads (and the MLP) sharded over 2 processes, each calling ropepool on its own heads and
    pools: the tokens of one process. The all_reduce sums the shards in another order, so tokens
    are compared with the margin rule against the one-process logits."""
    out = tmp_path / "tokens.json"
    command = [sys.executable, os.path.join(EXAMPLES, "torch_engine.py"), "--config", "llama3", "--tokens",
               str(NEW_TOKENS), "--lengths", *map(str, LENGTHS), "--json", str(out)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(free_port()), OMP_NUM_THREADS="1")
    ranks = [subprocess.Popen(command, env=dict(env, RANK=str(r), LOCAL_RANK=str(r)), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for r in range(2)]  # as torchrun starts them
    outputs = [rank.communicate(timeout=300) for rank in ranks]
    for r, (rank, (out_text, err)) in enumerate(zip(ranks, outputs)):
        assert rank.returncode == 0, f"rank {r} exited with {rank.returncode}:\n{out_text[-1500:]}\n{err[-3000:]}"
    import json

    sharded = json.loads(out.read_text())
    model = te.tiny_model("llama3")
    prompts = te.random_prompts(model.config.vocab_size, LENGTHS)
    tokens, logits = te.Engine(model).generate(prompts, NEW_TOKENS)
    want = [(tokens[s], [step[s] for step in logits]) for s in range(len(prompts))]
    compared, _ = compare(sharded, logits, want, lambda ref: LOGIT_TOL)
    assert compared == len(LENGTHS) * NEW_TOKENS


@pytest.mark.cuda
@pytest.mark.parametrize("config", sorted(te.CONFIGS))
def test_engine_generates_transformers_tokens_in_bf16_on_cuda(ropepool, config):
    if not (torch.cuda.is_available() and ropepool.has_cuda()):
        pytest.skip("needs a GPU and ropepool's CUDA backend")
    model = te.tiny_model(config, dtype=torch.bfloat16, device="cuda")
    prompts = te.random_prompts(model.config.vocab_size, LENGTHS)
    tokens, logits = te.Engine(model).generate(prompts, NEW_TOKENS)
    want = reference(model, prompts)
    compared, close_calls = compare(tokens, logits, want, lambda ref: 8 * 2**-8 * float(ref.abs().max()))
    print(f"{config}: {compared} tokens compared, {close_calls} steps within the bf16 tolerance")
    assert compared >= len(LENGTHS)  # at least the first token of each sequence
