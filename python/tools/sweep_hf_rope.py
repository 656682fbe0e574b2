"""Sweep ropepool's transformers reading over every model type transformers ships with a rotary.

Run where transformers (5.x), torch and a built ropepool are importable:

    PYTHONPATH=b/python python python/tools/sweep_hf_rope.py [--only llama,qwen2] [--verbose]

For every model type of transformers' CONFIG_MAPPING whose modeling module defines a
``*RotaryEmbedding`` class (vision / audio ones skipped), it builds the config class with its
defaults, takes its text config, instantiates each rotary class that accepts it, and compares
with ``ropepool.hf_rope_parameters`` and ``ropepool.hf_rope_kwargs`` (given the whole config, as a
user would, and its text config):

* the inv_freq buffer (1 float32 ulp, 2 for dynamic NTK; proportional's zeros included), attention_scaling,
  rotary dim (a per-layer head_dim read from the layer type's config, Gemma 4's);
* the cos/sin the module returns: from inv_freq and attention_scaling, in NeoX (cat) or GPT-J
  (repeat_interleave) layout, or something else;
* the pair style, by running the module's own ``apply_rotary_pos_emb`` on random q, k and
  comparing with a NeoX and a GPT-J rotation of the first rotary_dim dims.

Then it varies the rope type on a few base models (every type of ROPE_INIT_FUNCTIONS, dynamic and
longrope at several seq_len) and per-layer-type ropes. Each line printed is one check; lines
starting "DIFF" or "REFUSED" or "SILENT" are findings, "OK" agreement, "SKIP" not applicable.
"""

import argparse
import importlib
import inspect
import math
import re
import traceback
import warnings

import numpy as np
import torch
import transformers
from transformers import AutoConfig
from transformers.models.auto.configuration_auto import CONFIG_MAPPING, CONFIG_MAPPING_NAMES, model_type_to_module_name

import ropepool
from record_hf_fixtures import attention_calls_interleave  # python/tools/, the script's own folder

warnings.filterwarnings("ignore")
transformers.logging.set_verbosity_error()

NON_TEXT = ("Vision", "Visual", "Audio", "Image", "Video", "Speech", "Encoder2D", "Patch", "Pixel", "Spatial",
            "Conformer", "Wav", "Mimi", "Depth", "Code2Wav", "Acoustic")
RESULTS = []


def report(kind, model_type, what, detail=""):
    RESULTS.append((kind, model_type, what, detail))
    print(f"{kind:8s} {model_type:28s} {what}  {detail}", flush=True)


def ulps(a, b):
    a = np.asarray(a, np.float32).view(np.int32).astype(np.int64)
    b = np.asarray(b, np.float32).view(np.int32).astype(np.int64)
    return np.abs(a - b)


def modeling_module(model_type):
    name = model_type_to_module_name(model_type)
    try:
        return importlib.import_module(f"transformers.models.{name}.modeling_{name}")
    except Exception:
        return None


def rotary_classes(mod):
    out = []
    for name, obj in vars(mod).items():
        if inspect.isclass(obj) and name.endswith("RotaryEmbedding") and not any(t in name for t in NON_TEXT):
            out.append((name, obj))
    return out


def text_of(config):
    try:
        text = config.get_text_config(decoder=True)
    except Exception:
        text = getattr(config, "text_config", None)
    return text if text is not None else config


def layer_types_of(text, module=None):
    if module is not None and isinstance(getattr(module, "rope_type", None), dict):
        return list(module.rope_type)
    params = getattr(text, "rope_parameters", None)
    if isinstance(params, dict) and params and all(isinstance(v, dict) for v in params.values()):
        return list(params)
    return [None]


def call_module(module, seq_len, layer_type, head_dim):
    """Run the rotary forward over positions 0..seq_len-1; returns (cos, sin, positions) or raises."""
    x = torch.zeros(1, seq_len, head_dim, dtype=torch.float32)
    pos = torch.arange(seq_len)[None]
    errors = []
    for pid in (pos, pos[None].expand(3, 1, -1), pos[None].expand(4, 1, -1)):
        for args in ((x, pid, layer_type), (x, pid)) if layer_type is not None else ((x, pid),):
            try:
                with torch.no_grad():
                    out = module(*args)
                if isinstance(out, tuple) and len(out) == 2:
                    return out[0], out[1], pid
                if torch.is_tensor(out) and out.is_complex():  # DeepSeek-V2's freqs_cis
                    return out.real, out.imag, pid
                errors.append(f"forward returned {type(out).__name__}")
            except Exception as e:
                errors.append(f"{type(e).__name__}: {str(e)[:80]}")
    raise RuntimeError("; ".join(errors[-2:]))


def buffers(module, layer_type):
    prefix = "" if layer_type is None else layer_type + "_"
    inv = getattr(module, prefix + "inv_freq", None)
    if inv is None and layer_type is not None:
        sub = getattr(module, layer_type, None)
        if sub is not None:
            inv = getattr(sub, "inv_freq", None)
    scaling = getattr(module, prefix + "attention_scaling", getattr(module, "attention_scaling", None))
    if isinstance(scaling, dict):
        scaling = scaling.get(layer_type)
    return inv, scaling


def cos_layout(cos, inv_freq, scaling, pos):
    """'neox' / 'gptj' / a description: what the module's cos is made of."""
    c = cos.detach().float()
    if c.ndim >= 3 and c.shape[0] != 1 and pos.ndim == 3:
        c = c[0]
    c = c.reshape(-1, c.shape[-1]) if c.ndim >= 2 else c
    p = torch.arange(c.shape[0], dtype=torch.float32)[:, None]
    freqs = p * inv_freq.float()[None]
    if c.shape[-1] == 2 * inv_freq.numel():
        for name, emb in (("neox", torch.cat((freqs, freqs), -1)), ("gptj", freqs.repeat_interleave(2, -1))):
            if torch.allclose(c, emb.cos() * scaling, atol=2e-5, rtol=2e-5):
                return name
    if c.shape[-1] == inv_freq.numel() and torch.allclose(c, freqs.cos() * scaling, atol=2e-5, rtol=2e-5):
        return "half"
    return f"other (cos shape {tuple(cos.shape)}, inv_freq {inv_freq.numel()})"


def rotate_np(x, inv_freq, scaling, positions, neox):
    """x [H, T, D] float64: ropepool's rotation of the first R = 2 * len(inv_freq) dims."""
    R = 2 * len(inv_freq)
    out = x.copy()
    ang = positions[:, None].astype(np.float64) * inv_freq[None]
    c, s = np.cos(ang) * scaling, np.sin(ang) * scaling
    if neox:
        a, b = x[..., : R // 2], x[..., R // 2: R]
        out[..., : R // 2] = a * c - b * s
        out[..., R // 2: R] = b * c + a * s
    else:
        a, b = x[..., 0:R:2], x[..., 1:R:2]
        out[..., 0:R:2] = a * c - b * s
        out[..., 1:R:2] = b * c + a * s
    return out


def apply_style(mod, cos, sin, inv_freq, scaling, head_dim, pos_len, text=None):
    """Run the rotation the modeling module's attention runs (apply_rotary_pos_emb, or DeepSeek's
    _interleave one where the attention calls it); 'neox', 'gptj' or a description."""
    fn = getattr(mod, "apply_rotary_pos_emb", None) or getattr(mod, "apply_rotary_emb", None)
    if hasattr(mod, "apply_rotary_pos_emb_interleave") and attention_calls_interleave(mod, text):
        fn = mod.apply_rotary_pos_emb_interleave
    if fn is None:
        return "no apply_rotary_pos_emb"
    gen = torch.Generator().manual_seed(5)
    T, H, D = pos_len, 2, head_dim
    R = 2 * inv_freq.numel()
    q = torch.randn(1, H, T, D, generator=gen)
    k = torch.randn(1, 1, T, D, generator=gen)
    c, s = cos, sin
    if c.ndim == 3 and c.shape[0] in (3, 4) and c.shape[1] == 1:  # mRoPE-shaped: module handles
        pass
    tried = []
    outs = None
    for qq, kk, note in ((q, k, ""), (q[..., :R], k[..., :R], " (q sliced to R by the caller)")):
        for kwargs in ({}, {"unsqueeze_dim": 1}):
            try:
                with torch.no_grad():
                    sig = inspect.signature(fn)
                    if "mrope_section" in sig.parameters:
                        return "mrope apply (" + ", ".join(sig.parameters) + ")"
                    if next(iter(sig.parameters)) == "x":  # Gemma 4's (x, cos, sin, unsqueeze_dim): one tensor
                        outs = (fn(qq, c, s, **kwargs), fn(kk, c, s, **kwargs))
                    elif len(sig.parameters) == 3:  # (q, k, freqs_cis), [B, T, H, D] or [B, H, T, D]
                        if kwargs:
                            outs = fn(qq, kk, torch.complex(c, s))
                        else:
                            outs = fn(qq.transpose(1, 2), kk.transpose(1, 2), torch.complex(c, s))
                            outs = tuple(o.transpose(1, 2) for o in outs)
                    else:
                        outs = fn(qq, kk, c, s, **kwargs)
                break
            except Exception as e:
                tried.append(f"{type(e).__name__}: {str(e)[:60]}")
        if outs is not None:
            break
    if outs is None:
        return "apply failed: " + "; ".join(tried[:2])
    qr = outs[0].detach().double().numpy()[0]
    sliced = qr.shape[-1] == R and D > R
    x = (q[..., :R] if sliced else q).double().numpy()[0]
    positions = np.arange(T)
    inv = inv_freq.double().numpy()
    for name, neox in (("neox", True), ("gptj", False)):
        want = rotate_np(x, inv, scaling, positions, neox)
        if np.allclose(qr, want, atol=1e-4, rtol=1e-4):
            return name + (note if sliced else "")
    # DeepSeek-style: GPT-J pairs written de-interleaved
    want = rotate_np(x, inv, scaling, positions, False)
    order = np.concatenate([np.arange(0, R, 2), np.arange(1, R, 2), np.arange(R, x.shape[-1])])
    if np.allclose(qr, want[..., order], atol=1e-4, rtol=1e-4):
        return "gptj-deinterleaved"
    return "other"


def ropepool_side(config, layer_type, seq_len):
    try:
        inv, scaling = ropepool.hf_rope_parameters(config, layer_type=layer_type, seq_len=seq_len)
    except ropepool.RopePoolError as e:
        return None, None, None, f"refused: {e}"
    except Exception as e:  # not a RopePoolError: unclear
        return None, None, None, f"CRASH {type(e).__name__}: {e}"
    try:
        kw = ropepool.hf_rope_kwargs(config, layer_type=layer_type, seq_len=seq_len)
        style = "neox" if kw["is_neox"] else "gptj"
        if "mrope_section" in kw:
            style += f" mrope{kw['mrope_section']}{'i' if kw.get('mrope_interleaved') else ''}"
    except ropepool.RopePoolError as e:
        style = f"refused: {str(e)[:90]}"
    except Exception as e:
        style = f"CRASH {type(e).__name__}: {e}"
    return inv, scaling, style, None


def compare(label, mod, module, config, layer_type=None, seq_len=None, head_dim=None, dynamic=False):
    """One rotary module against ropepool on `config` (object or dict)."""
    if seq_len is not None:
        try:
            call_module(module, seq_len, layer_type, head_dim or 8)
        except Exception as e:
            report("SKIP", label, f"forward at seq_len {seq_len} failed: {e}")
            return
    inv_t, scaling_t = buffers(module, layer_type)
    if inv_t is None and hasattr(module, "embed_positions"):  # GPT-J, CodeGen: cat(sin, cos) table only
        inv_r, _, style_r, refusal = ropepool_side(config, layer_type, seq_len)
        if refusal is not None:
            report("REFUSED", label, "sin/cos table", refusal)
            return
        sin1 = module.embed_positions[1, : module.embed_positions.shape[-1] // 2].double().numpy()
        ok = len(inv_r) == len(sin1) and np.allclose(np.sin(inv_r), sin1, rtol=1e-6, atol=1e-7)
        report("OK" if ok and style_r == "gptj" else "DIFF", label,
               f"R_hf={2 * len(sin1)} sin table (GPT-J apply) | ropepool R={2 * len(inv_r)} style={style_r}")
        return
    if inv_t is None:
        report("SKIP", label, "module has no inv_freq buffer")
        return
    inv_t = inv_t.detach().float().clone()  # longrope's update copies into the buffer in place
    scaling_t = float(scaling_t if scaling_t is not None else 1.0)
    try:
        if seq_len is not None:  # layout and style are checked on the run without seq_len
            raise LookupError
        cos, sin, pid = call_module(module, 6, layer_type, head_dim or 2 * inv_t.numel())
        layout = cos_layout(cos, inv_t, scaling_t, pid)
        style_t = apply_style(mod, cos, sin, inv_t, scaling_t, head_dim or 2 * inv_t.numel(), 6, getattr(module, "config", None)) \
            if layout in ("neox", "gptj", "half") else layout
    except LookupError:
        layout, style_t = "neox", "(seq_len run)"
    except Exception as e:
        layout, style_t = f"forward failed: {e}", "?"
    inv_r, scaling_r, style_r, refusal = ropepool_side(config, layer_type, seq_len)
    what = f"{label}{'' if layer_type is None else ' ' + layer_type}{'' if seq_len is None else f' seq_len={seq_len}'}"
    nonzero = int((inv_t != 0).sum())
    facts = f"R_hf={2 * inv_t.numel()} scale_hf={scaling_t:.6g} cos={layout} apply={style_t}"
    if layout.startswith("other") and inv_r is not None and len(inv_r) == inv_t.numel():
        try:
            cos, _, pid = call_module(module, 6, layer_type, head_dim or 2 * inv_t.numel())
            eff = cos_layout(cos, torch.tensor(inv_r, dtype=torch.float32), scaling_t, pid)
            facts += f" (cos from ropepool's table: {eff})"
        except Exception:
            pass
    if refusal is not None:
        kind = "CRASH" if refusal.startswith("CRASH") else "REFUSED"
        report(kind, what, facts, refusal)
        return
    problems = []
    if len(inv_r) != inv_t.numel():
        problems.append(f"R {2 * len(inv_r)} vs {2 * inv_t.numel()}")
    else:
        worst = int(ulps(inv_r, inv_t.numpy()).max())
        if worst > (2 if dynamic else 1):
            problems.append(f"inv_freq {worst} ulps (first bad j={int(np.argmax(ulps(inv_r, inv_t.numpy()) > 1))})")
    if not math.isclose(scaling_r, scaling_t, rel_tol=1e-6):
        problems.append(f"scaling {scaling_r!r} vs {scaling_t!r}")
    if nonzero != inv_t.numel():  # proportional's unrotated pairs: ropepool's table must hold them too
        facts += f" zeros={inv_t.numel() - nonzero}"
    if not style_r.startswith("refused"):
        base = style_r.split()[0]
        if layout not in ("neox", "gptj", "half"):
            problems.append(f"cos/sin not from inv_freq ({layout}) but kwargs say {style_r}")
        elif style_t != "(seq_len run)" and not style_t.startswith(base) and not (base == "gptj" and style_t == "gptj-deinterleaved") and "mrope" not in style_r and not style_t.startswith("mrope"):
            problems.append(f"style {style_r} vs {style_t}")
    elif layout not in ("neox", "gptj", "half") and not problems:
        problems.append(f"table given silently, cos/sin {layout}")
    if problems:
        report("DIFF", what, facts + f" | ropepool style={style_r}", "; ".join(problems))
    else:
        report("OK", what, facts + f" | ropepool style={style_r}")


def instantiate(cls, text):
    try:
        return cls(text), None
    except TypeError:
        try:
            return cls(config=text), None
        except Exception as e:
            return None, f"{type(e).__name__}: {str(e)[:80]}"
    except Exception as e:
        return None, f"{type(e).__name__}: {str(e)[:80]}"


def head_dim_of(text, layer_type=None):
    if layer_type is not None and getattr(text, "is_heterogeneous", False):  # Gemma 4: head_dim per layer type
        try:
            text = text.per_layer_config[layer_type]
        except ValueError:  # the layers of this type differ among themselves
            return None
    for name in ("qk_rope_head_dim", "head_dim"):
        try:
            v = getattr(text, name, None)
        except Exception:
            v = None
        if isinstance(v, int):
            return v
    try:
        return text.hidden_size // text.num_attention_heads
    except Exception:
        return None


def sweep_model_types(only):
    count = 0
    for mt in CONFIG_MAPPING_NAMES:
        if only and mt not in only:
            continue
        mod = modeling_module(mt)
        if mod is None:
            continue
        classes = rotary_classes(mod)
        if not classes:
            continue
        count += 1
        try:
            sweep_one(mt, mod, classes)
        except Exception as e:
            report("CRASH", mt, "sweep itself failed", f"{type(e).__name__}: {str(e)[:150]}")
    return count


def sweep_one(mt, mod, classes):
    if True:
        try:
            config = CONFIG_MAPPING[mt]()
        except Exception as e:
            report("SKIP", mt, f"config class refuses its defaults: {type(e).__name__}: {str(e)[:80]}")
            return
        text = text_of(config)
        served = False
        for name, cls in classes:
            module, err = instantiate(cls, text)
            if module is None:
                continue
            served = True
            for layer_type in layer_types_of(text, module):
                compare(f"{mt}[{name}]", mod, module, config, layer_type, head_dim=head_dim_of(text, layer_type))
        if not served:
            report("SKIP", mt, f"no rotary class takes its text config ({', '.join(n for n, _ in classes)})")


# ---- rope types on base models ---------------------------------------------------------------------

BASES = {
    "llama": dict(hidden_size=1024, num_attention_heads=8, head_dim=128, max_position_embeddings=4096),
    "qwen2": dict(hidden_size=896, num_attention_heads=14, max_position_embeddings=32768),
    "phi": dict(hidden_size=2048, num_attention_heads=32, max_position_embeddings=2048),  # partial 0.5
    "gpt_neox": dict(hidden_size=512, num_attention_heads=8, max_position_embeddings=2048),
    "deepseek_v3": dict(hidden_size=1024, num_attention_heads=8, qk_rope_head_dim=64, num_hidden_layers=1,
                        max_position_embeddings=163840),
    "glm4": dict(hidden_size=1024, num_attention_heads=8, head_dim=128, max_position_embeddings=32768),
    # MLA whose head_dim is not qk_rope_head_dim: Mistral 4's is q_nope + q_rope with partial_rotary_factor
    # rope / head_dim, LongCat-Flash's its own field (64)
    "mistral4": dict(hidden_size=1024, num_attention_heads=8, qk_rope_head_dim=64, qk_nope_head_dim=64,
                     num_hidden_layers=1, max_position_embeddings=65536),
    "longcat_flash": dict(hidden_size=1024, num_attention_heads=8, qk_rope_head_dim=64, num_layers=1,
                          max_position_embeddings=65536),
}


def rope_variants(orig):
    half = 64  # filled per model
    yield "linear", dict(rope_type="linear", factor=4.0), [None]
    yield "dynamic", dict(rope_type="dynamic", factor=2.0), [None, 100, "max", "max+1", "3max+7"]
    yield "yarn", dict(rope_type="yarn", factor=4.0, original_max_position_embeddings=orig), [None]
    yield "yarn-mscale", dict(rope_type="yarn", factor=40.0, mscale=0.707, original_max_position_embeddings=orig), [None]
    yield "yarn-mscale-both", dict(rope_type="yarn", factor=40.0, mscale=1.0, mscale_all_dim=0.8,
                                   original_max_position_embeddings=orig), [None]
    yield "yarn-attn", dict(rope_type="yarn", factor=8.0, attention_factor=1.3, original_max_position_embeddings=orig), [None]
    yield "yarn-notrunc", dict(rope_type="yarn", factor=32.0, truncate=False, beta_fast=16.0, beta_slow=2.0,
                               original_max_position_embeddings=orig), [None]
    yield "yarn-nofactor", dict(rope_type="yarn", factor=None, original_max_position_embeddings=orig // 2), [None]
    yield "longrope", dict(rope_type="longrope", short_factor="S", long_factor="L",
                           original_max_position_embeddings=orig), [None, "orig", "orig+1"]
    yield "longrope-factor", dict(rope_type="longrope", short_factor="S", long_factor="L", factor=16.0,
                                  original_max_position_embeddings=orig), [None, "orig+1"]
    yield "llama3", dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                         original_max_position_embeddings=orig // 4), [None]
    yield "proportional", dict(rope_type="proportional", partial_rotary_factor=0.25), [None]
    yield "proportional-factor", dict(rope_type="proportional", factor=8.0), [None]


def sweep_rope_types(only):
    for mt, fields in BASES.items():
        if only and mt not in only:
            continue
        mod = modeling_module(mt)
        name, cls = rotary_classes(mod)[0]
        max_pos = fields["max_position_embeddings"]
        orig = 4096 if max_pos > 4096 else max_pos // 2
        for vname, rope, seq_lens in rope_variants(orig):
            probe = AutoConfig.for_model(mt, **fields)
            theta = probe.rope_parameters.get("rope_theta", 10000.0)
            rope = dict(rope, rope_theta=theta)
            hd = head_dim_of(probe)
            pf = probe.rope_parameters.get("partial_rotary_factor", 1.0)
            half = int(hd * (pf if rope["rope_type"] != "proportional" else 1.0)) // 2
            if rope.get("short_factor") == "S":
                rng = np.random.default_rng(7)
                rope["short_factor"] = [round(float(x), 5) for x in 1 + np.sort(rng.random(half)) * 0.1]
                rope["long_factor"] = [round(float(x), 5) for x in np.geomspace(1.0, 40.0, half)]
            cfg = dict(fields, rope_parameters=rope)
            for seq_len in seq_lens:
                if isinstance(seq_len, str):
                    base_len = orig if seq_len.startswith("orig") else max_pos
                    seq_len = {"max": base_len, "max+1": base_len + 1, "3max+7": 3 * base_len + 7,
                               "orig": base_len, "orig+1": base_len + 1}[seq_len]
                try:
                    config = AutoConfig.for_model(mt, **_copy(cfg))
                    module = cls(config)
                except Exception as e:
                    report("SKIP", f"{mt}/{vname}", f"transformers refuses: {type(e).__name__}: {str(e)[:100]}")
                    break
                for form, given in (("obj", config), ("dict", dict(_copy(cfg), model_type=mt))):
                    compare(f"{mt}/{vname}/{form}", mod, module, given, seq_len=seq_len, head_dim=hd,
                            dynamic=vname == "dynamic")


def _copy(d):
    import copy
    return copy.deepcopy(d)


# Specific configs: a family's own rope reading (HunYuan's fixed-alpha NTK, labelled "dynamic").
SPECIFIC = [
    ("hunyuan_v1_dense", dict(hidden_size=4096, num_attention_heads=32, head_dim=128, max_position_embeddings=32768,
                              rope_theta=10000.0, rope_scaling=dict(type="dynamic", alpha=1000.0, factor=1.0,
                                                                    beta_fast=32, beta_slow=1, mscale=1.0,
                                                                    mscale_all_dim=1.0)), [None, 40000]),
    ("hunyuan_v1_moe", dict(hidden_size=4096, num_attention_heads=32, head_dim=128, max_position_embeddings=32768,
                            rope_theta=10000.0, rope_scaling=dict(type="dynamic", alpha=1000.0, factor=1.0)),
     [None, 40000]),
    ("hunyuan_v1_dense", dict(hidden_size=4096, num_attention_heads=32, head_dim=128, max_position_embeddings=4096,
                              rope_theta=10000.0, rope_scaling=dict(type="dynamic", factor=2.0)), [None, 9000]),
]


# MLA families' rope_interleave: read by DeepSeek-V3's copies, ignored by those that always interleave.
INTERLEAVE = [(mt, flag) for mt in ("deepseek_v3", "glm4_moe_lite", "mistral4", "axk1", "youtu")
              for flag in (False, None)] + [(mt, False) for mt in ("deepseek_v32", "longcat_flash", "glm_moe_dsa",
                                                                   "hy_v4", "axk2", "bailing_hybrid")]


def sweep_interleave(only):
    for mt, flag in INTERLEAVE:
        if only and mt not in only:
            continue
        mod = modeling_module(mt)
        name, cls = rotary_classes(mod)[0]
        cfg = dict(hidden_size=1024, num_attention_heads=8, qk_rope_head_dim=64, max_position_embeddings=4096,
                   rope_interleave=flag)
        try:
            config = AutoConfig.for_model(mt, **_copy(cfg))
        except Exception as e:  # Glm4MoeLiteConfig's rope_interleave is a bool, never None
            report("SKIP", f"{mt}/rope_interleave={flag}", f"transformers refuses: {type(e).__name__}: {str(e)[:100]}")
            continue
        module = cls(config)
        for form, given in (("obj", config), ("dict", dict(_copy(cfg), model_type=mt))):
            compare(f"{mt}/rope_interleave={flag}/{form}", mod, module, given, head_dim=64)


def sweep_specific(only):
    for mt, cfg, seq_lens in SPECIFIC:
        if only and mt not in only:
            continue
        mod = modeling_module(mt)
        name, cls = rotary_classes(mod)[0]
        for seq_len in seq_lens:
            config = AutoConfig.for_model(mt, **_copy(cfg))
            module = cls(config)
            for form, given in (("obj", config), ("dict", dict(_copy(cfg), model_type=mt))):
                compare(f"{mt}/specific/{form}", mod, module, given, seq_len=seq_len, head_dim=head_dim_of(config),
                        dynamic=True)


def sweep_per_layer(only):
    """Configs whose rope_parameters are keyed by layer type."""
    cases = [
        ("gemma3_text", dict(rope_parameters=dict(
            full_attention=dict(rope_type="linear", factor=8.0, rope_theta=1e6),
            sliding_attention=dict(rope_type="default", rope_theta=1e4)))),
        ("gemma3_text", dict(rope_parameters=dict(
            full_attention=dict(rope_type="yarn", factor=4.0, rope_theta=1e6, original_max_position_embeddings=32768,
                                truncate=False),
            sliding_attention=dict(rope_type="default", rope_theta=1e4)))),
        ("modernbert", dict(rope_parameters=dict(
            full_attention=dict(rope_type="default", rope_theta=160000.0),
            sliding_attention=dict(rope_type="default", rope_theta=10000.0)))),
        ("modernbert", {}),
    ]
    for mt, extra in cases:
        if only and mt not in only:
            continue
        mod = modeling_module(mt)
        if mod is None:
            continue
        try:
            config = AutoConfig.for_model(mt, **_copy(extra))
        except Exception as e:
            report("SKIP", mt, f"per-layer config refused: {e}")
            continue
        for name, cls in rotary_classes(mod):
            module, err = instantiate(cls, config)
            if module is None:
                continue
            for lt in layer_types_of(config, module):
                compare(f"{mt}[{name}]/per-layer", mod, module, config, lt, head_dim=head_dim_of(config))
                compare(f"{mt}[{name}]/per-layer/dict", mod, module, dict(_copy(extra), model_type=mt), lt,
                        head_dim=head_dim_of(config))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="", help="comma-separated model types")
    parser.add_argument("--part", default="all", choices=["all", "types", "ropes", "layers"])
    args = parser.parse_args()
    only = set(filter(None, args.only.split(",")))
    print(f"transformers {transformers.__version__}, torch {torch.__version__}; "
          f"ROPE_INIT_FUNCTIONS: {', '.join(transformers.modeling_rope_utils.ROPE_INIT_FUNCTIONS)}")
    n = 0
    if args.part in ("all", "types"):
        n = sweep_model_types(only)
    if args.part in ("all", "ropes"):
        sweep_rope_types(only)
    if args.part in ("all", "layers"):
        sweep_per_layer(only)
        sweep_specific(only)
        sweep_interleave(only)
    kinds = {}
    for kind, *_ in RESULTS:
        kinds[kind] = kinds.get(kind, 0) + 1
    print(f"model types with a text rotary class: {n}; checks: {kinds}")


if __name__ == "__main__":
    main()
