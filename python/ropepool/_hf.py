"""transformers configs -> ropepool's RoPE keywords.

``hf_rope_parameters`` reads a model's config (config.json as a dict, or a transformers
``PretrainedConfig``) the way transformers 5 does (``modeling_rope_utils.py`` and the config
classes' defaults), and hands the numbers to libropepool's ``rp_hf_rope_frequencies``, which repeats
transformers' float32 arithmetic: the one implementation of the formulas, shared with C callers.
``hf_rope_kwargs`` adds the pair style (libropepool's ``rp_hf_rope_style`` table) and mRoPE.
"""

import copy
import math
from collections.abc import Mapping

import numpy as np

from . import _ropepool
from ._names import refusal as _error

__all__ = ["hf_rope_kwargs", "hf_rope_parameters"]

_ROPE_TYPES = {"default": 0, "linear": 1, "dynamic": 2, "yarn": 3, "longrope": 4, "llama3": 5, "proportional": 6}

# What transformers' config classes fill in when config.json leaves a field out (their
# `default_theta` and `partial_rotary_factor` defaults); everything else defaults to theta 10000
# and full rotary.
_DEFAULT_THETA = {
    "mixtral": 1e6,
    "qwen2_vl": 1e6, "qwen2_vl_text": 1e6, "qwen2_5_vl": 1e6, "qwen2_5_vl_text": 1e6,
    "qwen3_vl": 5e5, "qwen3_vl_text": 5e5, "qwen3_vl_moe": 5e5, "qwen3_vl_moe_text": 5e5,
    "cohere": 5e5,
    "gpt_oss": 1.5e5, "smollm3": 2e6, "apertus": 1.2e7, "ernie4_5": 5e5, "helium": 1e5,
    "longcat_flash": 1e7, "bailing_hybrid": 6e6,
}
# Gemma 4 and its derivatives: a head_dim per layer type (transformers' per_layer_config).
_GEMMA4 = frozenset(("gemma4", "gemma4_text", "gemma4_unified", "gemma4_unified_text", "diffusion_gemma",
                     "diffusion_gemma_text"))
# A rope the config class fills in when config.json gives none (GptOssConfig: YaRN; ApertusConfig:
# llama3 with its own theta; Gemma 4's and Lfm3Config: one rope per layer type, proportional on full
# attention).
_DEFAULT_ROPE = {
    "gpt_oss": {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False,
                "original_max_position_embeddings": 4096},
    "apertus": {"rope_type": "llama3", "rope_theta": 1.2e7, "factor": 8.0, "original_max_position_embeddings": 8192,
                "low_freq_factor": 1.0, "high_freq_factor": 4.0},
    # Mistral4Config's YaRN (its llama_4_scaling_beta scales the query, not the rotary: see hf_rope_kwargs)
    "mistral4": {"rope_type": "yarn", "rope_theta": 1e4, "factor": 128.0, "original_max_position_embeddings": 8192,
                 "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0},
    "lfm3": {"sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
             "full_attention": {"rope_type": "proportional", "rope_theta": 1e6, "partial_rotary_factor": 0.5}},
    **dict.fromkeys(_GEMMA4, {
        "sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
        "full_attention": {"rope_type": "proportional", "rope_theta": 1e6, "partial_rotary_factor": 0.25}}),
}
# head_dim where the config class's default is not hidden_size // num_attention_heads, and
# qk_rope_head_dim of the MLA classes (transformers 5.25): a dict read as written (transformers
# not installed) that leaves them out gets what the class would give it.
_DEFAULT_HEAD_DIM = {
    "qwen3": 128, "qwen3_vl": 128, "qwen3_vl_text": 128, "qwen3_vl_moe": 128,
    "gemma": 256, "gemma2": 256, "gemma3": 256, "gemma3_text": 256, "gpt_oss": 64, "seed_oss": 128,
    "lfm3": 128, "glm": 128, "glm4": 128, "ernie4_5": 128, "helium": 128,
}
_DEFAULT_QK_ROPE_HEAD_DIM = {
    **dict.fromkeys(("deepseek_v2", "deepseek_v3", "kimi_k2", "sarvam_mla", "glm4_moe_lite", "mistral4", "axk1",
                     "youtu", "longcat_flash", "deepseek_v32", "glm_moe_dsa", "hy_v4", "bailing_hybrid"), 64),
    "axk2": 32, "minicpm3": 32,
}
_DEFAULT_PARTIAL = {
    "phi": 0.5, "stablelm": 0.25, "gpt_neox": 0.25, "glm": 0.5, "glm4": 0.5, "glm4_moe": 0.5,
    "chatglm": 0.5,  # THUDM's remote code: RotaryEmbedding(kv_channels // 2)
}
# Families whose modeling code computes the default rope over the whole head, whatever
# partial_rotary_factor says (their compute_default_rope_parameters does not read it; the other rope
# types' functions in modeling_rope_utils.py do, for every family).
_DEFAULT_ROPE_IGNORES_PARTIAL = frozenset((
    "llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "qwen2_vl", "qwen2_vl_text",
    "qwen2_5_vl", "qwen2_5_vl_text", "qwen3_vl", "qwen3_vl_text", "qwen3_vl_moe", "qwen3_vl_moe_text",
    "gemma", "gemma2", "gemma3", "gemma3_text",
    "starcoder2", "olmo", "granite", "falcon", "cohere", "cohere2", "gpt_oss", "olmo2", "smollm3", "seed_oss",
    "exaone4", "hunyuan_v1_dense", "apertus", "arcee", "granitemoe", "ernie4_5", "helium",
    "gemma4", "gemma4_text", "gemma4_unified", "gemma4_unified_text", "diffusion_gemma", "diffusion_gemma_text",
    "lfm3"))
# mRoPE as transformers' Qwen-VL text rotary embeddings apply it: (default mrope_section,
# interleaved). Qwen2-VL / Qwen2.5-VL take consecutive chunks; Qwen3-VL always interleaves.
_MROPE = {
    "qwen2_vl": ((16, 24, 24), False), "qwen2_vl_text": ((16, 24, 24), False),
    "qwen2_5_vl": ((16, 24, 24), False), "qwen2_5_vl_text": ((16, 24, 24), False),
    "qwen3_vl": ((24, 20, 20), True), "qwen3_vl_text": ((24, 20, 20), True),
    "qwen3_vl_moe": ((24, 20, 20), True), "qwen3_vl_moe_text": ((24, 20, 20), True),
}
# Gemma 3's two ropes (transformers' Gemma3TextConfig.convert_rope_params_to_dict).
_GEMMA3 = ("gemma3", "gemma3_text")
# HunYuan's rotary classes read a "dynamic" rope with an alpha (its checkpoints' rope_scaling) as a
# fixed NTK stretch of the base, their compute_ntk_alpha_rope_parameters: the default table over
# head_dim with base rope_theta * alpha ** (head_dim / (head_dim - 2)), whatever the sequence length.
_NTK_ALPHA = frozenset(("hunyuan_v1_dense", "hunyuan_v1_moe", "hunyuan_vl", "hunyuan_vl_text"))

def _is_bool(value):
    return isinstance(value, (bool, np.bool_))


def _refuse_bool(value, name, kind):
    # float(True) is 1.0: a flag where a number belongs is a mistaken config, not rope_theta 1
    if _is_bool(value):
        raise _error(f"config {name} must be {kind}, got {value!r}")


def _integer(value, name, lowest=0):
    """A config field as an int in [lowest, 2^62] (config.json may hold 4096.0), or RopePoolError
    naming the field: int() of a NaN, a string or 2**70 would raise Python's bare errors."""
    _refuse_bool(value, name, "an integer")
    try:
        result = int(value)
    except (TypeError, ValueError, OverflowError):
        raise _error(f"config {name} must be an integer, got {value!r}") from None
    if not lowest <= result <= 2**62:
        raise _error(f"config {name} must be an integer in [{lowest}, 2^62], got {value!r}")
    return result


def _number(value, name):
    """A config field as a finite float, or RopePoolError naming the field."""
    _refuse_bool(value, name, "a number")
    try:
        result = float(value)
    except (TypeError, ValueError, OverflowError):
        raise _error(f"config {name} must be a number, got {value!r}") from None
    if not math.isfinite(result):
        raise _error(f"config {name} must be finite, got {value!r}")
    return result


def _field(config, name, default=None):
    """config[name] or config.name; None counts as absent, as transformers' `or` defaults do."""
    if isinstance(config, Mapping):
        value = config.get(name, None)
    else:
        try:
            value = getattr(config, name, None)
        except Exception as e:  # a property that refuses (Gemma 4's per-layer head_dim: a RuntimeError)
            raise _error(f"config {name} could not be read: {type(e).__name__}: {e}") from None
    return default if value is None else value


def _text_config(config):
    text = _field(config, "text_config")
    return config if text is None else text


def _model_type(config, text):
    return _field(text, "model_type") or _field(config, "model_type")


def _as_dict(value, name):
    if value is None:
        return {}
    if isinstance(value, Mapping):
        return dict(value)
    raise _error(f"config {name} must be a dict, got {type(value).__name__}")


def _is_nested(params):
    """Per-layer-type ropes ({"full_attention": {...}, "sliding_attention": {...}})."""
    return bool(params) and all(isinstance(v, Mapping) or v is None for v in params.values())


def _rope_parameters(text, model_type, layer_type):
    """The one rope dict transformers would read, with rope_type, rope_theta and
    partial_rotary_factor filled in as its config standardisation does."""
    params = _as_dict(_field(text, "rope_scaling"), "rope_scaling") or _as_dict(
        _field(text, "rope_parameters"), "rope_parameters")
    theta = _field(text, "rope_theta")
    if not params and model_type in _DEFAULT_ROPE:
        params = dict(_DEFAULT_ROPE[model_type])
    if model_type in _GEMMA3:
        params = _gemma3_ropes(text, theta)
    if _is_nested(params):
        if layer_type is None or layer_type not in params:
            raise _error(
                f"this config has one rope per layer type ({', '.join(sorted(params))}): pass "
                f"layer_type= one of them, got {layer_type!r}")
        params = dict(params[layer_type] or {})
    elif layer_type is not None:
        raise _error(f"layer_type={layer_type!r} was given, but this config has one rope for all "
                     "layers: leave layer_type None")
    rope_type = params.get("rope_type", params.get("type", "default"))
    if model_type == "phi3" and rope_type in ("su", "yarn"):
        rope_type = "longrope"  # Phi3Config's own renaming
    if model_type in _NTK_ALPHA and rope_type == "dynamic" and params.get("alpha"):
        rope_type = "ntk_alpha"
    if rope_type == "mrope":
        params["mrope"] = True  # hf_rope_kwargs serves it for the Qwen-VL family only
        rope_type = "default"  # Qwen2-VL's old spelling: the table is the default one
    params["rope_type"] = rope_type
    if model_type == "chatglm":
        theta = 10000.0 * _field(text, "rope_ratio", 1.0)
    elif model_type in ("gptj", "codegen"):
        theta = 10000.0  # create_sinusoidal_positions: a fixed base
    elif model_type == "gpt_neox":  # GPTNeoXConfig reads rotary_emb_base, never a top-level rope_theta
        theta = _field(text, "rotary_emb_base")
    if theta is None:
        theta = _DEFAULT_THETA.get(model_type, 10000.0)
    params.setdefault("rope_theta", theta)
    # GPTNeoXConfig reads rotary_pct, never a top-level partial_rotary_factor
    partial = _field(text, "rotary_pct" if model_type == "gpt_neox" else "partial_rotary_factor")
    if partial is None:
        partial = _DEFAULT_PARTIAL.get(model_type)
    if partial is not None:
        params.setdefault("partial_rotary_factor", partial)
    return params


def _gemma3_ropes(text, theta):
    """Gemma 3's two ropes as Gemma3TextConfig.convert_rope_params_to_dict builds them: each layer
    type's own dict from rope_parameters (default where absent), the older rope_scaling merged
    into full attention's, theta from rope_theta (1e6) and rope_local_base_freq (1e4) where the
    dicts have none. A flat rope_parameters (no layer types) is refused: transformers keeps its
    keys beside the two ropes it builds and reads none of them, so its full-attention layers run
    the default rope at rope_theta, whatever the flat dict asks for."""
    ropes = _as_dict(_field(text, "rope_parameters"), "rope_parameters")
    stray = sorted(k for k in ropes if k not in ("full_attention", "sliding_attention"))
    if stray:
        raise _error(f"this {_field(text, 'model_type', 'gemma3')} config's rope_parameters has keys outside its layer "
                     f"types ({', '.join(map(str, stray))}), which transformers' Gemma3TextConfig ignores: nest them "
                     "under 'full_attention' or 'sliding_attention' (or spell them as rope_scaling, which it "
                     "applies to full attention)")
    layers = {}
    for layer_type, base in (("full_attention", 1e6 if theta is None else theta),
                             ("sliding_attention", _field(text, "rope_local_base_freq", 1e4))):
        rope = dict(_as_dict(ropes.get(layer_type), f"rope_parameters['{layer_type}']") or {"rope_type": "default"})
        if layer_type == "full_attention":
            rope.update(_as_dict(_field(text, "rope_scaling"), "rope_scaling"))
        rope.setdefault("rope_theta", base)
        layers[layer_type] = rope
    return layers


def _head_and_rotary_dim(text, model_type, params):
    rope_head_dim = _field(text, "qk_rope_head_dim", _DEFAULT_QK_ROPE_HEAD_DIM.get(model_type))
    if rope_head_dim is not None:  # DeepSeek MLA: only the qk_rope_head_dim part is rotated
        rope_head_dim = _integer(rope_head_dim, "qk_rope_head_dim")
        if params["rope_type"] not in ("default", "proportional"):
            # transformers' scaled ropes build int(head_dim * partial_rotary_factor) / 2 frequencies
            # (head_dim is qk_rope_head_dim in DeepSeek-V3's config, the whole q head in Mistral 4's,
            # whose factor takes it back to qk_rope_head_dim); any other width is a table its MLA
            # attention cannot apply to the qk_rope_head_dim dims it rotates
            head_dim = _integer(_field(text, "head_dim", rope_head_dim), "head_dim")
            factor = _number(params.get("partial_rotary_factor", 1.0), "partial_rotary_factor")
            if int(head_dim * factor) != rope_head_dim:
                raise _error(f"config partial_rotary_factor {factor} of head_dim {head_dim} gives int({head_dim} * "
                             f"{factor}) = {int(head_dim * factor)} rotary dims for rope type '{params['rope_type']}', "
                             f"but multi-head latent attention rotates qk_rope_head_dim = {rope_head_dim}")
        return rope_head_dim, rope_head_dim
    head_dim = _field(text, "kv_channels") if model_type == "chatglm" else _field(text, "head_dim")
    if head_dim is None:
        head_dim = _DEFAULT_HEAD_DIM.get(model_type)
    if head_dim is None:
        hidden = _field(text, "hidden_size", _field(text, "n_embd"))
        heads = _field(text, "num_attention_heads", _field(text, "n_head"))
        if hidden is None or heads is None:
            raise _error("the config has neither head_dim nor hidden_size and num_attention_heads "
                         "(n_embd and n_head)")
        head_dim = _integer(hidden, "hidden_size") // _integer(heads, "num_attention_heads", lowest=1)
    head_dim = _integer(head_dim, "head_dim")
    if params["rope_type"] == "proportional":  # a table over the whole head, zeros past the rotated pairs
        return head_dim, head_dim
    if model_type in ("gptj", "codegen"):  # an absolute rotary_dim; GPTJConfig's default is 64
        rotary_dim = _field(text, "rotary_dim")
        if rotary_dim is None:  # an explicit null: the whole head
            rotary_dim = head_dim if _has_key(text, "rotary_dim") else 64
        return head_dim, _integer(rotary_dim, "rotary_dim")
    factor = _number(params.get("partial_rotary_factor", 1.0), "partial_rotary_factor")
    if (params["rope_type"] == "default" and model_type in _DEFAULT_ROPE_IGNORES_PARTIAL) or \
            params["rope_type"] == "ntk_alpha":
        factor = 1.0
    rotary_dim = _integer(head_dim * factor, "head_dim * partial_rotary_factor")
    if rotary_dim % 2 and factor != 1.0:
        # transformers' table then has (R + 1) / 2 frequencies over the denominator R and rotates
        # R + 1 dims: a width the fused call's frequencies (over rotary_dim) cannot express
        raise _error(f"config head_dim {head_dim} * partial_rotary_factor {factor} gives {rotary_dim} rotary dims, "
                     "an odd number, which ropepool does not serve (transformers rotates "
                     f"{rotary_dim + 1} dims with frequencies over {rotary_dim})")
    return head_dim, rotary_dim


def _as_transformers_config(config):
    """A config.json dict as transformers' config class reads it, where transformers is installed
    and knows its model_type: every default the dict leaves out is then the class's (Qwen3's and
    Gemma's head_dim, Qwen3-Next's and Nemotron's partial_rotary_factor, gpt-oss's YaRN). The dict
    itself otherwise (not installed, a model type it does not know), or an object as given.

    Returns (config, refusal): refusal is the class's error where it refuses the dict (a short
    factor list of the wrong length, heads that do not divide hidden_size...); _read raises it
    unless it refuses the config itself first: transformers cannot load such a checkpoint, so no
    table of ropepool's can be the one it runs."""
    if not isinstance(config, Mapping) or not isinstance(config.get("model_type"), str):
        return config, None
    try:
        from transformers import AutoConfig
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    except Exception:  # not installed, or one too old to have this layout
        return config, None
    if config["model_type"] not in CONFIG_MAPPING:
        return config, None
    try:
        # a deep copy: the class fills rope_theta, rope_type and more into the rope dicts it is given,
        # which are the caller's
        return AutoConfig.for_model(**copy.deepcopy(config)), None
    except Exception as e:
        message = " ".join(str(e).split())
        return config, f"transformers' {CONFIG_MAPPING[config['model_type']].__name__} refuses this config: {message}"


def _layer_config(text, model_type, layer_type):
    """The config of layer_type's layers where transformers keeps per-layer sizes (its
    per_layer_config: Gemma 4's full-attention layers have head_dim global_head_dim, 512 by default,
    against 256); text itself elsewhere. A config as written (a dict transformers did not read, or
    an object that is not its class) with per-layer sizes is refused: only the config class knows
    which layers they apply to."""
    if getattr(text, "is_heterogeneous", False):
        try:
            return text.per_layer_config[layer_type]
        except ValueError:
            # The layers of this type differ among themselves (NeoMME's sliding_window): the global
            # config, whose per-layer attributes transformers refuses to read, naming them.
            return text
    if not hasattr(text, "is_heterogeneous") and (
            model_type in _GEMMA4 or _field(text, "global_head_dim") is not None or _field(text, "per_layer_config")):
        raise _error(f"this {model_type} config sizes its attention per layer type (Gemma 4's full-attention "
                     "layers: global_head_dim, by default 512, through transformers' per_layer_config), which "
                     "ropepool reads through transformers' config class: install a transformers that knows model "
                     f"type '{model_type}', or pass its config object")
    return text


def _has_key(config, name):
    return name in config if isinstance(config, Mapping) else hasattr(config, name)


def _scaling_factor(value, rope_type):
    """A yarn or longrope factor given in the config: > 0. (The library reads 0 as "derive it from
    the lengths", which transformers does only for a factor that is absent or None: an explicit 0
    gives it infinite frequencies for yarn and a different attention scaling for longrope.)"""
    factor = _number(value, "rope_parameters['factor']")
    if not factor > 0:
        raise _error(f"rope_parameters['factor'] must be > 0 for rope type '{rope_type}' (or absent: derived "
                     f"from max_position_embeddings / original_max_position_embeddings), got {factor}")
    return factor


def _required(params, rope_type, name):
    if params.get(name) is None:
        raise _error(f"rope type '{rope_type}' needs rope_parameters['{name}'], which the config "
                     "does not have")
    return params[name]


def _seq_len(seq_len):
    if seq_len is None:
        return 0
    if isinstance(seq_len, bool) or not isinstance(seq_len, (int, np.integer)) or seq_len < 0:
        raise _error(f"seq_len must be None or an integer >= 0, got {seq_len!r}")
    return int(seq_len)


def _sub_configs(config):
    """The names of a composite config's sub-configs (encoder/decoder, thinker/talker...)."""
    if isinstance(config, Mapping):
        return sorted(k for k, v in config.items() if isinstance(v, Mapping) and "model_type" in v)
    return sorted(_field(config, "sub_configs", None) or ())


def _read(config, seq_len, layer_type):
    # an object whose fields would all read as absent: "the config has neither head_dim nor ..."
    # would blame a config that was never passed
    if config is None or isinstance(config, (str, bytes, bool, int, float, list, tuple, np.ndarray)):
        raise _error("config must be a model's config.json as a dict or a transformers PretrainedConfig, got "
                     f"{type(config).__name__}")
    config, refusal = _as_transformers_config(config)
    text = _text_config(config)
    model_type = _model_type(config, text)
    if model_type == "falcon" and _field(text, "alibi", False):
        raise _error("this falcon config uses ALiBi (alibi: true), not RoPE")
    if text is config and _sub_configs(config) and all(
            _field(config, name) is None for name in ("head_dim", "hidden_size", "n_embd", "qk_rope_head_dim")):
        # a top-level config read as a text one would be its defaults: theta 10000, no head size
        raise _error(f"this {model_type} config holds sub-configs ({', '.join(_sub_configs(config))}) and no "
                     "text_config: pass the sub-config of the attention you serve")
    params = _rope_parameters(text, model_type, layer_type)
    if layer_type is not None:
        text = _layer_config(text, model_type, layer_type)
    _, rotary_dim = _head_and_rotary_dim(text, model_type, params)
    if params["rope_type"] == "ntk_alpha":
        alpha = _number(params["alpha"], "rope_parameters['alpha']")
        if not alpha > 0 or rotary_dim <= 2:
            raise _error(f"HunYuan's fixed-alpha NTK rope needs alpha > 0 and head_dim > 2, got alpha {alpha} "
                         f"and head_dim {rotary_dim}")
        theta = _number(params["rope_theta"], "rope_theta")
        params = dict(params, rope_type="default", rope_theta=theta * alpha ** (rotary_dim / (rotary_dim - 2)))
    if layer_type is not None and params["rope_type"] == "yarn" and not params.get("truncate", True):
        raise _error(f"rope_parameters['{layer_type}'] sets YaRN truncate false, which transformers 5 ignores "
                     "with one rope per layer type (it reads truncate from the top level of rope_parameters, so "
                     "truncates): the checkpoint's table and transformers' differ, ropepool picks neither")
    rope_type = params["rope_type"]
    if rope_type not in _ROPE_TYPES:
        raise _error(f"rope type '{rope_type}' is not supported: ropepool reads "
                     f"{', '.join(_ROPE_TYPES)}")
    fields = {"rope_type": _ROPE_TYPES[rope_type], "rotary_dim": rotary_dim,
              "rope_theta": _number(params["rope_theta"], "rope_theta"), "seq_len": _seq_len(seq_len)}
    max_pos = _field(text, "max_position_embeddings", _field(text, "n_positions"))
    if max_pos is not None:
        fields["max_position_embeddings"] = _integer(max_pos, "max_position_embeddings")
    if rope_type in ("linear", "dynamic", "llama3"):
        fields["factor"] = _number(_required(params, rope_type, "factor"), "rope_parameters['factor']")
    if rope_type == "proportional":  # read from the rope's own dict, transformers' defaults 1
        fields["factor"] = _number(params.get("factor", 1.0), "rope_parameters['factor']")
        fields["partial_rotary_factor"] = _number(params.get("partial_rotary_factor", 1.0),
                                                  "rope_parameters['partial_rotary_factor']")
    if rope_type == "dynamic" and max_pos is None:
        raise _error("rope type 'dynamic' needs max_position_embeddings, which the config does not have")
    if rope_type in ("yarn", "longrope", "llama3"):
        # transformers' standardisation: a top-level original_max_position_embeddings wins (Phi-3),
        # then the rope's own, then max_position_embeddings; with one rope per layer type the
        # top-level one is never read (its nested branch only defaults each rope's to max_pos).
        orig = params.get("original_max_position_embeddings", max_pos)
        if layer_type is None:
            orig = _field(text, "original_max_position_embeddings", orig)
        if orig is None:
            raise _error(f"rope type '{rope_type}' needs original_max_position_embeddings (or "
                         "max_position_embeddings), which the config does not have")
        fields["original_max_position_embeddings"] = _integer(orig, "original_max_position_embeddings")
    if rope_type == "yarn":
        if "factor" not in params:
            raise _error("rope type 'yarn' needs rope_parameters['factor'], which the config does not have")
        if params["factor"] is not None:  # None: derived from the lengths, as transformers does
            fields["factor"] = _scaling_factor(params["factor"], rope_type)
        for name in ("beta_fast", "beta_slow", "mscale", "mscale_all_dim"):
            if params.get(name):  # None or 0: transformers defaults it
                fields[name] = _number(params[name], f"rope_parameters['{name}']")
        truncate = params.get("truncate", True)
        # transformers tests its truth (None false, the string "false" true): only a bool or None is read
        if truncate is not None and not _is_bool(truncate):
            raise _error(f"config rope_parameters['truncate'] must be true or false, got {truncate!r}")
        fields["truncate"] = bool(truncate)
    if rope_type == "longrope":
        fields["short_factor"] = _required(params, rope_type, "short_factor")
        fields["long_factor"] = _required(params, rope_type, "long_factor")
        if params.get("factor") is not None:
            fields["factor"] = _scaling_factor(params["factor"], rope_type)
    if rope_type in ("yarn", "longrope") and params.get("attention_factor") is not None:
        attention_factor = _number(params["attention_factor"], "rope_parameters['attention_factor']")
        if not attention_factor > 0:
            raise _error(f"rope_parameters['attention_factor'] must be > 0, got {attention_factor}")
        fields["attention_factor"] = attention_factor
    if rope_type == "llama3":
        fields["low_freq_factor"] = _number(_required(params, rope_type, "low_freq_factor"),
                                            "rope_parameters['low_freq_factor']")
        fields["high_freq_factor"] = _number(_required(params, rope_type, "high_freq_factor"),
                                             "rope_parameters['high_freq_factor']")
    if refusal is not None:
        _rope_interleave(text)  # ropepool's own message first, naming the field, where it refuses one
        raise _error(refusal)
    return text, model_type, params, fields


def hf_rope_parameters(config, *, seq_len=None, layer_type=None):
    """The inverse frequencies and attention scaling transformers uses for a model.

    config: a model's config.json as a dict, or a transformers ``PretrainedConfig`` (any object
    with those attributes); a multimodal config's ``text_config``, where present, is the one read.
    A dict is read as transformers' config class reads it where transformers is installed and
    knows its model_type (the class's defaults for what it leaves out: Qwen3's head_dim 128,
    Qwen3-Next's partial_rotary_factor, gpt-oss's YaRN), and a dict the class refuses is refused
    with its message; else as written, head_dim defaulting to hidden_size // num_attention_heads.
    seq_len: the sequence length served, for rope types that depend on it (dynamic: past
    max_position_embeddings the base grows, as transformers' runtime update does; longrope: long
    factors past original_max_position_embeddings). layer_type: for configs with one rope per layer
    type (Gemma 3, Gemma 4, LFM3: "full_attention" or "sliding_attention"); where transformers sizes
    layers per type (Gemma 4's per_layer_config: head_dim 512 on full attention), that layer type's
    config is read, and a config as written (a dict transformers cannot read, a plain object) is
    refused.

    Returns ``(inv_freq, attention_scaling)``: a float64 array of rotary_dim/2 frequencies holding
    transformers' float32 values (within 1 float32 ulp of its CPU buffers on the committed
    fixtures but SmolLM3's, 2 at one entry; 99% bit-identical; the one difference is pow, correctly rounded here, within 1 ulp in
    torch's CPU powf, which later operations such as 1/x can widen to 3 ulps on unlucky configs,
    and llama3's smoothing by up to about factor * low_freq_factor / (high_freq_factor -
    low_freq_factor): ~120 ulps on random configs, none on the published Llama 3.1/3.2 ones),
    and a float, ready for
    ``rope_pool_fused(..., inv_freq=inv_freq, attention_scaling=attention_scaling)``.

    Reads rope_parameters (transformers 5) or rope_theta + rope_scaling ("type" meaning
    "rope_type"); rope types default, linear, dynamic, yarn, longrope, llama3, proportional
    (rotary_dim is head_dim; the first int(partial_rotary_factor * head_dim // 2) frequencies are
    the default table / factor, both read from the rope's own dict, and the rest 0, pairs
    rope_pool_fused leaves unrotated). Any other type, or a missing required field, raises
    RopePoolError naming it. DeepSeek's rotary_dim is
    qk_rope_head_dim, and its softmax scale (mscale_all_dim squared) is the attention's business,
    not the rotary's: attention_scaling is transformers' rotary one.

    Checked against transformers 5.25's rotary classes for every model type it ships (stop 45):
    the model types of hf_rope_kwargs' table agree in every rope type. Others are read by the
    same rules, which some families' own code departs from: a default rope that ignores
    partial_rotary_factor (most families outside the table: their configs do not set it),
    Ernie 4.5 VL's table reordered for its 3-D rope. There, compare with the model's
    ``rotary_emb.inv_freq``. With one rope per layer type, a layer's YaRN ``truncate: false`` is
    refused: transformers 5.25 reads ``truncate`` from the top level there, so it always truncates.
    HunYuan's "dynamic" rope with an ``alpha`` is read as its modeling code does (a fixed base
    rope_theta * alpha ** (head_dim / (head_dim - 2)), not dynamic NTK).
    """
    _, _, _, fields = _read(config, seq_len, layer_type)
    inv_freq, attention_scaling = _ropepool._hf_rope_frequencies(**fields)
    return np.array(inv_freq, dtype=np.float64), attention_scaling


def hf_rope_kwargs(config, *, seq_len=None, layer_type=None):
    """Every RoPE keyword of ``rope_pool_fused`` for a transformers config, as a dict.

    ``inv_freq`` and ``attention_scaling`` (as :func:`hf_rope_parameters`), ``rotary_dim``,
    ``is_neox`` (from the style table in libropepool, which follows each model's modeling code in
    transformers), and for the Qwen-VL family ``mrope_section`` and ``mrope_interleaved`` (Qwen3-VL's
    section as an equal one summing to rotary_dim / 2 where the config's does not). A model
    type not in the table raises RopePoolError: pass is_neox yourself, a style is never guessed.
    Multi-head latent attention (a config with qk_rope_head_dim) rotates qk_rope_head_dim dims.
    DeepSeek-V3 and the families whose attention copies it (kimi_k2, sarvam_mla, glm4_moe_lite,
    mistral4, axk1, youtu) rotate adjacent pairs while rope_interleave is true (their default),
    halves when it is false or null; deepseek_v32, longcat_flash, glm_moe_dsa, hy_v4, axk2 and
    bailing_hybrid always rotate adjacent pairs (their config classes drop rope_interleave);
    minicpm3 rotates halves. Where transformers rotates adjacent pairs it writes them de-interleaved
    (pair (2j, 2j+1) to (j, j + R/2)), ropepool in place: attention scores agree because q and k
    share the layout. What these attentions do beside the rotary stays the caller's: the softmax
    scale (mscale_all_dim), Mistral 4's scale of the whole query after it (1 + llama_4_scaling_beta
    * log(1 + floor(position / original_max_position_embeddings)), 1 within that length),
    LongCat-Flash's LoRA scales of q and the latent before it, the DSA indexers' own keys.
    """
    text, model_type, params, fields = _read(config, seq_len, layer_type)
    if model_type is None:
        raise _error("the config has no model_type: pass the style explicitly, calling rope_pool_fused with "
                     "hf_rope_parameters(config)'s inv_freq and attention_scaling and your is_neox (True or False)")
    # before the style: a family outside the table that asks for mRoPE hears about mRoPE
    if model_type not in _MROPE and (params.get("mrope") or params.get("mrope_section") is not None):
        raise _error(f"this config asks for multimodal RoPE (rope type 'mrope' or an mrope_section), which "
                     f"ropepool reads for {', '.join(sorted(_MROPE))} only, not model type '{model_type}': "
                     "pass mrope_section yourself")
    try:
        is_neox = _ropepool._hf_rope_style(str(model_type), _rope_interleave(text))
    except _ropepool.RopePoolError as e:
        raise _error(f"{e}; hf_rope_kwargs does not guess it: call rope_pool_fused with hf_rope_parameters(config)'s "
                     "inv_freq and attention_scaling and your is_neox") from None
    inv_freq, attention_scaling = _ropepool._hf_rope_frequencies(**fields)
    kwargs = {"inv_freq": np.array(inv_freq, dtype=np.float64),
              "attention_scaling": attention_scaling,
              "rotary_dim": fields["rotary_dim"], "is_neox": is_neox}
    if model_type in _MROPE:
        default_section, interleaved = _MROPE[model_type]
        section = _mrope_section(params.get("mrope_section", default_section))
        kwargs["mrope_section"] = _interleaved_section(section, fields["rotary_dim"] // 2) if interleaved else section
        kwargs["mrope_interleaved"] = interleaved
    return kwargs


def _rope_interleave(text):
    """The config's rope_interleave as rp_hf_rope_style takes it: -1 where the config has none (the
    class's default, True), else 1 or 0. transformers asks `if config.rope_interleave:`, so a key
    holding None (null) rotates halves rather than taking the default; a value that is no bool is
    refused, as truncate is: transformers would read it by its truth ("false" as true)."""
    if not _has_key(text, "rope_interleave"):
        return -1
    interleave = _field(text, "rope_interleave")
    if interleave is not None and not _is_bool(interleave):
        raise _error(f"config rope_interleave must be true or false, got {interleave!r}")
    return int(bool(interleave))


def _interleaved_section(section, half):
    """Qwen3-VL's section as the call takes it: summing to rotary_dim / 2 (half).

    transformers' interleaved rule never reads t and clips h and w to the table (frequency j takes h
    where j % 3 == 1 and j < 3h, w where j % 3 == 2 and j < 3w), so it runs any section, such as its
    default [24, 20, 20] under a head_dim of 64; the call, which checks that t + h + w = half, would
    refuse that one. Of the half frequencies, (half + 1) // 3 have j % 3 == 1 and half // 3 have
    j % 3 == 2: h and w clipped to those counts, and t the rest, take every frequency to the same row.
    A section that already sums to half (every real checkpoint's) is returned as it is; a negative
    entry is left for the call to refuse.
    """
    t, h, w = section
    if t + h + w == half or min(section) < 0:
        return section
    h, w = min(h, (half + 1) // 3), min(w, half // 3)
    return [half - h - w, h, w]


def _mrope_section(section):
    """The config's mrope_section as three ints, or RopePoolError naming it (transformers splits
    the table by it, so a float or bool entry is a broken config, not one to round)."""
    try:
        entries = list(section)
    except TypeError:
        entries = None
    if entries is None or len(entries) != 3 or any(
            isinstance(s, (bool, np.bool_)) or not isinstance(s, (int, np.integer)) for s in entries):
        raise _error(f"config rope_parameters['mrope_section'] must be three ints, got {section!r}")
    return [int(s) for s in entries]
