"""Record transformers' Qwen3 and Gemma 3 QK-norm + RoPE, for ropepool's tests to check without it.

Run where transformers (5.x) and torch are installed:

    python python/tools/record_hf_qk_norm.py [--out python/tests/fixtures]

For a small random Qwen3 config it builds the model's own attention block (Qwen3Attention, with
random q_norm / k_norm weights) and rotary embedding, feeds seeded random hidden states, and stores
what its forward computes up to the cache write: the projected q and k (ropepool's inputs), the
norm weights, and q, k after q_norm / k_norm and apply_rotary_pos_emb, in float32 and bfloat16.
Gemma 3's norm (Gemma3RMSNorm: (1 + w), computed in float32 before one rounding) is recorded on the
same projections with the same rotation. bfloat16 arrays are stored as their exact float32 values.
Sibling of record_hf_fixtures.py; writes hf_qk_norm.npz.
"""

import argparse
import pathlib

import numpy as np
import torch
import transformers
from transformers.models.gemma3 import modeling_gemma3
from transformers.models.qwen3 import configuration_qwen3, modeling_qwen3

CONFIG = dict(hidden_size=256, num_attention_heads=4, num_key_value_heads=2, head_dim=64, rms_norm_eps=1e-6,
              rope_theta=1000000.0, max_position_embeddings=4096, num_hidden_layers=1, intermediate_size=512,
              attention_bias=False)
POSITIONS = np.array([0, 1, 5, 63, 1000, 3000])


def record(dtype, gen):
    config = configuration_qwen3.Qwen3Config(**CONFIG)
    attn = modeling_qwen3.Qwen3Attention(config, layer_idx=0)
    rotary = modeling_qwen3.Qwen3RotaryEmbedding(config)
    gemma_q = modeling_gemma3.Gemma3RMSNorm(CONFIG["head_dim"], eps=CONFIG["rms_norm_eps"])
    gemma_k = modeling_gemma3.Gemma3RMSNorm(CONFIG["head_dim"], eps=CONFIG["rms_norm_eps"])
    with torch.no_grad():
        for p in attn.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.2)
        attn.q_norm.weight.copy_(1.0 + 0.5 * torch.randn(CONFIG["head_dim"], generator=gen))
        attn.k_norm.weight.copy_(1.0 + 0.5 * torch.randn(CONFIG["head_dim"], generator=gen))
        gemma_q.weight.copy_(0.5 * torch.randn(CONFIG["head_dim"], generator=gen))
        gemma_k.weight.copy_(0.5 * torch.randn(CONFIG["head_dim"], generator=gen))
    # The rotary module stays float32, as a served model's inv_freq is (cos and sin are cast to the
    # activations' dtype by its forward).
    attn, gemma_q, gemma_k = (m.to(dtype) for m in (attn, gemma_q, gemma_k))
    T, D = len(POSITIONS), CONFIG["head_dim"]
    hidden = (torch.randn(1, T, CONFIG["hidden_size"], generator=gen) * 3).to(dtype)
    pos = torch.as_tensor(POSITIONS, dtype=torch.int64)[None]
    out = {}
    with torch.no_grad():
        # Qwen3Attention.forward up to the cache update, written out to keep the projections.
        q = attn.q_proj(hidden).view(1, T, -1, D)
        k = attn.k_proj(hidden).view(1, T, -1, D)
        cos, sin = rotary(hidden, pos)
        for name, qn, kn in (("qwen3", attn.q_norm, attn.k_norm), ("gemma3", gemma_q, gemma_k)):
            qr, kr = modeling_qwen3.apply_rotary_pos_emb(qn(q).transpose(1, 2), kn(k).transpose(1, 2), cos, sin)
            out[f"{name}/q_rot"] = qr[0].transpose(0, 1)
            out[f"{name}/k_rot"] = kr[0].transpose(0, 1)
            out[f"{name}/q_norm_weight"] = qn.weight
            out[f"{name}/k_norm_weight"] = kn.weight
        out["q"], out["k"] = q[0], k[0]
    tag = "float32" if dtype == torch.float32 else "bfloat16"
    return {f"{tag}/{key}": value.detach().float().numpy() for key, value in out.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(pathlib.Path(__file__).resolve().parents[1] / "tests" / "fixtures"))
    out = pathlib.Path(parser.parse_args().out)
    out.mkdir(parents=True, exist_ok=True)
    gen = torch.Generator().manual_seed(20261214)
    arrays = dict(positions=POSITIONS, transformers=np.array(transformers.__version__),
                  rope_theta=np.array(CONFIG["rope_theta"]), eps=np.array(CONFIG["rms_norm_eps"]))
    for dtype in (torch.float32, torch.bfloat16):
        arrays.update(record(dtype, gen))
    np.savez_compressed(out / "hf_qk_norm.npz", **arrays)
    print(f"{len(arrays)} arrays -> {out / 'hf_qk_norm.npz'}")


if __name__ == "__main__":
    main()
