"""Record what transformers itself computes for RoPE, for ropepool's tests to check without it.

Run where transformers (5.x) and torch are installed:

    python python/tools/record_hf_fixtures.py [--out python/tests/fixtures]

For each real-looking config below (config.json fields of the named checkpoint, trimmed to what
RoPE reads) it builds transformers' config object from the dict, instantiates the model's own
rotary embedding module (so the table is the one a model holds, after its runtime update where
seq_len matters), and stores its inv_freq buffer and attention_scaling in hf_rope.json; likewise
for a bare config of every model type in ropepool's style table (FAMILIES). For one
config per style it also applies the model's own apply_rotary_pos_emb (or its GPT-J / DeepSeek /
mRoPE counterpart) to a small seeded random q and k and stores inputs and outputs in
hf_rope_rotations.npz. The torch CPU used is noted: torch's powf differs by CPU (vector lanes).
"""

import argparse
import importlib
import inspect
import json
import pathlib
import platform

import numpy as np
import torch
import transformers
from transformers import AutoConfig

_LLAMA31 = dict(model_type="llama", hidden_size=4096, num_attention_heads=32, num_key_value_heads=8,
                head_dim=128, max_position_embeddings=131072, rope_theta=500000.0,
                rope_scaling=dict(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                                  original_max_position_embeddings=8192, rope_type="llama3"))
_QWEN25_YARN = dict(model_type="qwen2", hidden_size=3584, num_attention_heads=28, num_key_value_heads=4,
                    max_position_embeddings=131072, rope_theta=1000000.0,
                    rope_scaling=dict(factor=4.0, original_max_position_embeddings=32768, type="yarn"))
# Phi-3-mini-128k-instruct's shape; its 48 short/long factors here follow the published curve's
# form (short near 1, long rising to ~60), seeded.
_rng = np.random.default_rng(3)
_PHI3 = dict(model_type="phi3", hidden_size=3072, num_attention_heads=32, num_key_value_heads=32,
             max_position_embeddings=131072, original_max_position_embeddings=4096, rope_theta=10000.0,
             rope_scaling=dict(type="longrope",
                               short_factor=[round(float(x), 6) for x in 1.0 + np.sort(_rng.random(48)) * 0.1],
                               long_factor=[round(float(x), 6) for x in np.geomspace(1.0, 60.0, 48)]))
_LLAMA2_LINEAR = dict(model_type="llama", hidden_size=5120, num_attention_heads=40, max_position_embeddings=4096,
                      rope_theta=10000.0, rope_scaling=dict(factor=4.0, type="linear"))
_LLAMA2_DYNAMIC = dict(model_type="llama", hidden_size=4096, num_attention_heads=32, max_position_embeddings=4096,
                       rope_theta=10000.0, rope_scaling=dict(factor=2.0, type="dynamic"))
_GPTJ = dict(model_type="gptj", n_embd=4096, n_head=16, rotary_dim=64, n_positions=2048)
_NEOX20B = dict(model_type="gpt_neox", hidden_size=6144, num_attention_heads=64, rotary_pct=0.25,
                rotary_emb_base=10000, max_position_embeddings=2048)
_GLM4 = dict(model_type="glm4", hidden_size=4096, num_attention_heads=32, num_key_value_heads=2, head_dim=128,
             partial_rotary_factor=0.5, rope_theta=10000.0, max_position_embeddings=32768)
_DEEPSEEK_V3 = dict(model_type="deepseek_v3", hidden_size=7168, num_attention_heads=128, num_key_value_heads=128,
                    qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128, kv_lora_rank=512,
                    q_lora_rank=1536, max_position_embeddings=163840, rope_theta=10000.0,
                    num_hidden_layers=1, n_routed_experts=8, num_experts_per_tok=2, n_group=1, topk_group=1,
                    rope_scaling=dict(beta_fast=32, beta_slow=1, factor=40, mscale=1.0, mscale_all_dim=1.0,
                                      original_max_position_embeddings=4096, type="yarn"))
# A YaRN whose attention factor is not 1 (mscale without mscale_all_dim), on DeepSeek-V2-Lite's shape.
_DEEPSEEK_V2_MSCALE = dict(model_type="deepseek_v2", hidden_size=2048, num_attention_heads=16,
                           qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128, kv_lora_rank=512,
                           max_position_embeddings=163840, rope_theta=10000.0, num_hidden_layers=1,
                           rope_scaling=dict(beta_fast=32, beta_slow=1, factor=40, mscale=0.707,
                                             original_max_position_embeddings=4096, type="yarn"))
_QWEN2_VL = dict(model_type="qwen2_vl", hidden_size=3584, num_attention_heads=28, num_key_value_heads=4,
                 max_position_embeddings=32768, rope_theta=1000000.0,
                 rope_scaling=dict(type="mrope", mrope_section=[16, 24, 24]))
_QWEN3_VL = dict(model_type="qwen3_vl",
                 text_config=dict(model_type="qwen3_vl_text", hidden_size=4096, num_attention_heads=32,
                                  num_key_value_heads=8, head_dim=128, max_position_embeddings=262144,
                                  rope_theta=5000000.0,
                                  rope_scaling=dict(rope_type="default", mrope_section=[24, 20, 20],
                                                    mrope_interleaved=True)))
_GEMMA3 = dict(model_type="gemma3_text", hidden_size=2560, num_attention_heads=8, num_key_value_heads=4,
               head_dim=256, max_position_embeddings=131072, rope_theta=1000000.0,
               rope_local_base_freq=10000.0, rope_scaling=dict(factor=8.0, rope_type="linear"))
# Hunyuan-7B-Instruct's shape and rope_scaling: "dynamic" with an alpha, which HunYuan's modeling
# code reads as a fixed NTK base (ropepool read it as dynamic NTK with factor 1 before).
_HUNYUAN_ALPHA = dict(model_type="hunyuan_v1_dense", hidden_size=4096, num_attention_heads=32, num_key_value_heads=8,
                      head_dim=128, max_position_embeddings=32768, rope_theta=10000.0,
                      rope_scaling=dict(alpha=1000.0, beta_fast=32, beta_slow=1, factor=1.0, mscale=1.0,
                                        mscale_all_dim=1.0, type="dynamic"))
# Proportional rope (transformers' "proportional"): a Gemma-4-like text config (its config class's
# shape, layers trimmed), whose full-attention layers have head_dim global_head_dim (512) and rotate
# the first 0.25 of its pairs (64 of 256), then with a factor 8 on them; and LFM3's class defaults
# (head_dim 128, half its pairs rotated on full attention).
_GEMMA4 = dict(model_type="gemma4_text", hidden_size=2304, num_attention_heads=8, num_key_value_heads=4, head_dim=256,
               global_head_dim=512, num_hidden_layers=6, max_position_embeddings=131072,
               rope_parameters=dict(sliding_attention=dict(rope_type="default", rope_theta=10000.0),
                                    full_attention=dict(rope_type="proportional", partial_rotary_factor=0.25,
                                                        rope_theta=1000000.0)))
_GEMMA4_FACTOR8 = dict(_GEMMA4, rope_parameters=dict(
    _GEMMA4["rope_parameters"], full_attention=dict(_GEMMA4["rope_parameters"]["full_attention"], factor=8.0)))
_LFM3 = dict(model_type="lfm3", hidden_size=2048, num_attention_heads=16, num_key_value_heads=4, head_dim=128,
             max_position_embeddings=128000,
             rope_parameters=dict(sliding_attention=dict(rope_type="default", rope_theta=10000.0),
                                  full_attention=dict(rope_type="proportional", rope_theta=1000000.0,
                                                      partial_rotary_factor=0.5)))

# (name, config.json, seq_lens, layer_types)
# LongCat-Flash-Chat's attention shape (its theta 1e7 the class's default); Mistral 4's with the
# class's YaRN (factor 128 over 8192); GLM-4.7-Flash's with rope_interleave false; MiniCPM3-4B's.
_LONGCAT_FLASH = dict(model_type="longcat_flash", hidden_size=6144, num_attention_heads=64, qk_rope_head_dim=64,
                      qk_nope_head_dim=128, v_head_dim=128, kv_lora_rank=512, q_lora_rank=1536,
                      max_position_embeddings=131072, num_layers=1)
_MISTRAL4 = dict(model_type="mistral4", hidden_size=4096, num_attention_heads=32, qk_rope_head_dim=64,
                 qk_nope_head_dim=64, v_head_dim=128, kv_lora_rank=256, q_lora_rank=1024,
                 max_position_embeddings=1048576, num_hidden_layers=1)
_GLM4_MOE_LITE_HALVES = dict(model_type="glm4_moe_lite", hidden_size=2048, num_attention_heads=20,
                             qk_rope_head_dim=64, qk_nope_head_dim=192, v_head_dim=256, kv_lora_rank=512,
                             q_lora_rank=768, max_position_embeddings=202752, rope_theta=1000000.0,
                             rope_interleave=False, num_hidden_layers=1)
_MINICPM3 = dict(model_type="minicpm3", hidden_size=2560, num_attention_heads=40, qk_rope_head_dim=32,
                 qk_nope_head_dim=64, kv_lora_rank=256, q_lora_rank=768, max_position_embeddings=32768,
                 rope_theta=10000.0, num_hidden_layers=1)

TABLES = [
    ("llama3.1-8b", _LLAMA31, [None], [None]),
    ("qwen2.5-7b-yarn", _QWEN25_YARN, [None], [None]),
    ("phi3-mini-128k", _PHI3, [None, 4096, 8192], [None]),
    ("llama2-13b-linear", _LLAMA2_LINEAR, [None], [None]),
    ("llama2-7b-dynamic", _LLAMA2_DYNAMIC, [None, 4096, 6000, 16384, 100003], [None]),
    ("gpt-j-6b", _GPTJ, [None], [None]),
    ("gpt-neox-20b", _NEOX20B, [None], [None]),
    ("glm-4-9b", _GLM4, [None], [None]),
    ("deepseek-v3", _DEEPSEEK_V3, [None], [None]),
    ("deepseek-v2-lite-mscale", _DEEPSEEK_V2_MSCALE, [None], [None]),
    ("qwen2-vl-7b", _QWEN2_VL, [None], [None]),
    ("qwen3-vl-8b", _QWEN3_VL, [None], [None]),
    ("gemma3-4b", _GEMMA3, [None], ["full_attention", "sliding_attention"]),
    ("hunyuan-7b-alpha", _HUNYUAN_ALPHA, [None, 40000], [None]),
    ("gemma4-like", _GEMMA4, [None], ["full_attention", "sliding_attention"]),
    ("gemma4-like-factor8", _GEMMA4_FACTOR8, [None], ["full_attention"]),
    ("lfm3", _LFM3, [None], ["full_attention", "sliding_attention"]),
]


def transformers_config(cfg):
    cfg = json.loads(json.dumps(cfg))  # transformers edits the dicts it is given
    return AutoConfig.for_model(cfg.pop("model_type"), **cfg)


def text_config(config):
    return getattr(config, "text_config", None) or config


def modeling(config):
    mt = config.model_type.removesuffix("_text")
    return importlib.import_module(f"transformers.models.{mt}.modeling_{mt}")


def rotary_module(config):
    mod = modeling(config)
    names = [n for n in dir(mod) if n.endswith("RotaryEmbedding") and "Vision" not in n]
    return getattr(mod, names[0])(config)


def table(cfg, seq_len, layer_type):
    """transformers' inv_freq buffer and attention_scaling for this config."""
    config = text_config(transformers_config(cfg))
    if config.model_type in ("gptj", "codegen"):
        # GPTJRotaryEmbedding keeps only the sin/cos table: this is create_sinusoidal_positions'
        # own inv_freq expression, run here.
        dim = config.rotary_dim
        return (1.0 / (10000 ** (torch.arange(0, dim, 2, dtype=torch.int64) / dim))).numpy(), 1.0
    module = rotary_module(config)
    prefix = "" if layer_type is None else layer_type + "_"
    if seq_len is not None:  # the runtime update (dynamic, longrope) sees max(position_ids) + 1
        x = torch.zeros(1, dtype=torch.float32)
        positions = torch.arange(seq_len)[None]
        if config.model_type.startswith(("qwen2_vl", "qwen2_5_vl", "qwen3_vl")):
            positions = positions[None].expand(3, 1, -1)
        module(x, positions) if layer_type is None else module(x, positions, layer_type)
    inv_freq = getattr(module, prefix + "inv_freq")
    scaling = module.attention_scaling if layer_type is None else getattr(module, prefix + "attention_scaling")
    return inv_freq.numpy().copy(), float(scaling)


def attention_calls_interleave(mod, config):
    """Whether the module's attention rotates q and k with apply_rotary_pos_emb_interleave, read from
    its forward's source: DeepSeek-V3 and its copies branch on `if self.config.rope_interleave:`,
    DeepSeek-V3.2, LongCat-Flash and the DSA families call it unconditionally (their DSA indexers,
    whose keys are a cache apart, may call the rotate-half one: they are not read)."""
    for name, cls in vars(mod).items():
        if not (inspect.isclass(cls) and name.endswith(("Attention", "MLA"))) or "Vision" in name:
            continue
        try:
            source = inspect.getsource(cls.forward)
        except (TypeError, OSError, AttributeError):
            continue
        if "apply_rotary_pos_emb_interleave(q" in source:
            return bool(getattr(config, "rope_interleave", False)) if "config.rope_interleave" in source else True
    return False


def rotate(name, cfg, positions, gen, layer_type=None):
    """Run the model's own rotation on seeded random q [T, Hq, D], k [T, Hk, D]."""
    config = text_config(transformers_config(cfg))
    mt = config.model_type
    mod = modeling(config)
    sized = config.per_layer_config[layer_type] if layer_type is not None else config  # Gemma 4's head_dim
    head_dim = getattr(sized, "qk_rope_head_dim", None) or getattr(sized, "head_dim", None) or (
        sized.hidden_size // sized.num_attention_heads)
    T, Hq, Hk = positions.shape[-1], 2, 1
    q = torch.randn(T, Hq, head_dim, generator=gen)
    k = torch.randn(T, Hk, head_dim, generator=gen)
    pos = torch.as_tensor(positions, dtype=torch.int64)
    with torch.no_grad():
        if mt == "gptj":
            embed = mod.GPTJRotaryEmbedding(config)
            sin, cos = embed(q, pos[None])
            R = config.rotary_dim

            def apply(x):  # GPTJAttention.forward's partial path, on [B, T, H, D]
                x = x[None]
                out = torch.cat([mod.apply_rotary_pos_emb(x[..., :R], sin, cos), x[..., R:]], dim=-1)
                return out[0]

            q_rot, k_rot = apply(q), apply(k)
        else:
            module = rotary_module(config)
            pid = pos[None] if pos.ndim == 1 else pos[:, None, :]  # [1, T] or mRoPE's [3, 1, T]
            cos, sin = module(q, pid) if layer_type is None else module(q, pid, layer_type)
            qb, kb = q.transpose(0, 1)[None], k.transpose(0, 1)[None]  # [1, H, T, D]
            if attention_calls_interleave(mod, config):
                qr, kr = mod.apply_rotary_pos_emb_interleave(qb, kb, cos, sin)
            else:
                qr, kr = mod.apply_rotary_pos_emb(qb, kb, cos, sin)
            q_rot, k_rot = qr[0].transpose(0, 1), kr[0].transpose(0, 1)
    return {f"{name}/{key}": value.numpy() for key, value in
            dict(positions=pos, q=q, k=k, q_rot=q_rot, k_rot=k_rot).items()}




def _family(model_type, **extra):
    return dict(model_type=model_type, hidden_size=2048, num_attention_heads=16, max_position_embeddings=4096,
                **extra)


# One config per model type of ropepool's style table that transformers ships (chatglm is remote
# code), with only the fields every config.json has: what the config classes fill in (theta,
# partial rotary) is what this checks.
FAMILIES = [_family(mt) for mt in (
    "llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen2_vl", "qwen2_vl_text", "qwen2_5_vl",
    "qwen2_5_vl_text", "phi", "phi3", "gpt_neox", "starcoder2", "olmo", "granite", "stablelm", "falcon",
    "glm4_moe", "codegen", "cohere", "cohere2", "gpt_oss", "olmo2", "smollm3", "seed_oss", "exaone4",
    "hunyuan_v1_dense", "apertus", "arcee", "granitemoe", "ernie4_5", "helium")] + [
    _family("qwen3", head_dim=128), _family("qwen3_moe", head_dim=128), _family("qwen3_vl_text", head_dim=128),
    dict(model_type="qwen3_vl", text_config=_family("qwen3_vl_text", head_dim=128)),
    _family("gemma", head_dim=256), _family("gemma2", head_dim=256), _family("gptj", rotary_dim=64),
    _family("glm", head_dim=128), _family("glm4", head_dim=128),
    _family("deepseek_v2", qk_rope_head_dim=64, num_hidden_layers=1),
    _family("deepseek_v3", qk_rope_head_dim=64, num_hidden_layers=1),
    # the other MLA families of transformers 5.25 (config.json always names qk_rope_head_dim)
    *(_family(mt, qk_rope_head_dim=64, num_hidden_layers=1) for mt in (
        "glm4_moe_lite", "mistral4", "axk1", "youtu", "deepseek_v32", "glm_moe_dsa", "hy_v4", "axk2",
        "bailing_hybrid")),
    _family("minicpm3", qk_rope_head_dim=32, num_hidden_layers=1),
    _family("longcat_flash", qk_rope_head_dim=64, num_layers=1),
]

# (name, config, positions[, layer_type]): one per style and feature. Positions stay small where the style has
# nothing to do with them: transformers forms the angle in float32, so its error grows with it.
ROTATIONS = [
    ("llama3.1-8b", _LLAMA31, np.array([0, 1, 17, 300])),
    ("qwen2.5-7b-yarn", _QWEN25_YARN, np.array([0, 5, 77, 1000])),
    ("phi3-mini-128k-long", _PHI3, np.array([0, 9, 4100])),
    ("gpt-j-6b", _GPTJ, np.array([0, 3, 64, 511])),
    ("gpt-neox-20b", _NEOX20B, np.array([0, 2, 40, 700])),
    ("glm-4-9b", _GLM4, np.array([0, 1, 33, 250])),
    ("deepseek-v3", _DEEPSEEK_V3, np.array([0, 7, 99, 2048])),
    ("qwen2-vl-7b", _QWEN2_VL, np.array([[0, 4, 4, 9], [0, 4, 5, 10], [0, 5, 6, 11]])),
    ("qwen3-vl-8b", _QWEN3_VL, np.array([[0, 4, 4, 9], [0, 4, 5, 10], [0, 5, 6, 11]])),
    ("lfm3-full", _LFM3, np.array([0, 3, 50, 900]), "full_attention"),  # proportional: half the pairs unrotated
    # MLA beside DeepSeek-V3: adjacent pairs always (LongCat-Flash), by rope_interleave (Mistral 4,
    # with its class's YaRN, and turned off on GLM-4.7-Flash), halves (MiniCPM3)
    ("longcat-flash", _LONGCAT_FLASH, np.array([0, 6, 90, 3000])),
    ("mistral4", _MISTRAL4, np.array([0, 5, 120, 9000])),
    ("glm4-moe-lite-halves", _GLM4_MOE_LITE_HALVES, np.array([0, 2, 48, 700])),
    ("minicpm3", _MINICPM3, np.array([0, 3, 64, 1500])),
]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(pathlib.Path(__file__).resolve().parents[1] / "tests" / "fixtures"))
    out = pathlib.Path(parser.parse_args().out)
    out.mkdir(parents=True, exist_ok=True)
    cases = []
    for name, cfg, seq_lens, layer_types in TABLES:
        for layer_type in layer_types:
            for seq_len in seq_lens:
                inv_freq, scaling = table(cfg, seq_len, layer_type)
                cases.append(dict(name=name, config=cfg, seq_len=seq_len, layer_type=layer_type,
                                  inv_freq=[float(x) for x in inv_freq.astype(np.float64)],
                                  attention_scaling=scaling))
    families = []
    for cfg in FAMILIES:
        inv_freq, scaling = table(cfg, None, None)
        families.append(dict(config=cfg, inv_freq=[float(x) for x in inv_freq.astype(np.float64)],
                             attention_scaling=scaling))
    record = dict(transformers=transformers.__version__, torch=torch.__version__,
                  cpu=f"{platform.machine()} {torch.backends.cpu.get_cpu_capability()}", cases=cases,
                  families=families, rotations=[dict(name=r[0], config=r[1], **({"layer_type": r[3]} if len(r) > 3 else {}))
                                                for r in ROTATIONS])
    (out / "hf_rope.json").write_text(json.dumps(record, indent=1) + "\n")
    gen = torch.Generator().manual_seed(20261203)
    arrays = {}
    for name, cfg, positions, *layer_type in ROTATIONS:
        arrays.update(rotate(name, cfg, positions, gen, *layer_type))
    np.savez_compressed(out / "hf_rope_rotations.npz", **arrays)
    print(f"{len(cases)} tables, {len(families)} families, {len(ROTATIONS)} rotations -> {out}")


if __name__ == "__main__":
    main()
