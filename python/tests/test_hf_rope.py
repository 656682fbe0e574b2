"""hf_rope_parameters and hf_rope_kwargs against what transformers itself computes.

The fixtures (fixtures/hf_rope.json, fixtures/hf_rope_rotations.npz) were recorded from
transformers' own rotary modules by python/tools/record_hf_fixtures.py; these tests need neither
transformers nor torch, but for the Gemma-4-like fixtures, whose per-layer head sizes are read
through transformers' config class.

Tolerance on the tables: at most 1 float32 ulp, 2 for dynamic NTK, on every entry. ropepool
repeats transformers' float32 operations in their order (measured once while writing it: a NumPy
float32 model of the same order with torch's own powf in place of ours reproduced transformers'
buffers bit for bit on 300 random configs of every type); the one difference is pow, correctly
rounded here and within 1 ulp in torch's CPU powf, and dynamic NTK raises to a power twice (its
grown base, then the table). Over random configs, later operations (1/x, ext * pow) widened that
to 3 ulps on a few entries; on these real configs the tables agree within 1 ulp and bit for bit
on 99% of entries, which test_tables_are_mostly_bit_identical holds.
"""

import json
import math
import pathlib
import re
import sys
import types

import numpy as np
import pytest

from helpers import readme_blocks

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
RECORD = json.loads((FIXTURES / "hf_rope.json").read_text())
CASES = RECORD["cases"]


def per_layer_sizes(config):
    """Gemma 4's per-layer head sizes: only transformers' config class reads them."""
    return "global_head_dim" in config


def case_id(case):
    return "-".join(str(x) for x in (case["name"], case["seq_len"], case["layer_type"]) if x is not None)


def ulps(a, b):
    a = np.asarray(a, np.float32).view(np.int32).astype(np.int64)
    b = np.asarray(b, np.float32).view(np.int32).astype(np.int64)
    return np.abs(a - b)


def as_object(config):
    """A config as attributes, like a transformers PretrainedConfig (text_config included)."""
    attrs = {k: as_object(v) if k == "text_config" else v for k, v in config.items()}
    return types.SimpleNamespace(**attrs)


@pytest.mark.parametrize("case", CASES, ids=case_id)
@pytest.mark.parametrize("form", ["dict", "object"])
def test_tables_match_transformers_buffers(ropepool, case, form):
    if per_layer_sizes(case["config"]):
        if form == "object":  # a namespace, not transformers' class: refused rather than read as one head size
            with pytest.raises(ropepool.RopePoolError, match="sizes its attention per layer type"):
                ropepool.hf_rope_parameters(as_object(case["config"]), layer_type=case["layer_type"])
            return
        pytest.importorskip("transformers")
    config = case["config"] if form == "dict" else as_object(case["config"])
    inv_freq, scaling = ropepool.hf_rope_parameters(config, seq_len=case["seq_len"],
                                                    layer_type=case["layer_type"])
    want = np.array(case["inv_freq"])
    assert inv_freq.dtype == np.float64 and inv_freq.shape == want.shape
    assert np.array_equal(inv_freq, inv_freq.astype(np.float32)), "not float32 values"
    rope = case["config"].get("rope_scaling", {})
    dynamic = rope.get("type") == "dynamic" and not rope.get("alpha")  # HunYuan's alpha: a fixed base, one pow
    worst = ulps(inv_freq, want).max()
    assert worst <= (2 if dynamic else 1), f"{worst} float32 ulps from transformers' buffer"
    assert scaling == pytest.approx(case["attention_scaling"], rel=1e-15, abs=0)


def test_tables_are_mostly_bit_identical(ropepool):
    """A wrong operation order moves most entries; torch's powf only a few."""
    exact = total = 0
    for case in CASES:
        if per_layer_sizes(case["config"]):
            continue
        inv_freq, _ = ropepool.hf_rope_parameters(case["config"], seq_len=case["seq_len"],
                                                  layer_type=case["layer_type"])
        u = ulps(inv_freq, case["inv_freq"])
        exact += int((u == 0).sum())
        total += u.size
    assert exact / total >= 0.95, f"only {exact} of {total} entries bit-identical"


def fixture_config(name):
    return next(c["config"] for c in CASES if c["name"] == name)


def test_float64_formula_is_not_what_transformers_uses(ropepool):
    """Why the float32 order matters: Llama-3.1's float64 table is several ulps off in places."""
    inv_freq, _ = ropepool.hf_rope_parameters(fixture_config("llama3.1-8b"))
    f64 = 500000.0 ** -(np.arange(0, 128, 2) / 128.0)
    assert np.array_equal(inv_freq[:20], np.array(CASES[0]["inv_freq"][:20]))
    assert ulps(f64[:20], inv_freq[:20]).max() >= 1


# ---- refusals ------------------------------------------------------------------------------------

LLAMA = dict(model_type="llama", hidden_size=4096, num_attention_heads=32, max_position_embeddings=4096,
             rope_theta=10000.0)


def with_rope(**rope):
    return dict(LLAMA, rope_scaling=rope)


@pytest.mark.parametrize("rope_type", ["axial", "su", "mrope_v9", "ntk"])
def test_unknown_rope_type_is_named(ropepool, rope_type):
    with pytest.raises(ropepool.RopePoolError, match=f"rope type '{rope_type}' is not supported") as info:
        ropepool.hf_rope_parameters(with_rope(rope_type=rope_type, factor=2.0))
    # a refusal raised in Python carries .status as the library's own do (it had none)
    assert info.value.status == "RP_ERR_INVALID_ARGUMENT"


@pytest.mark.parametrize("rope, field", [
    (dict(type="linear"), "factor"),
    (dict(type="dynamic"), "factor"),
    (dict(rope_type="yarn", original_max_position_embeddings=2048), "factor"),
    (dict(rope_type="llama3", factor=8.0, high_freq_factor=4.0), "low_freq_factor"),
    (dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0), "high_freq_factor"),
    (dict(rope_type="longrope", long_factor=[1.0] * 64), "short_factor"),
    (dict(rope_type="longrope", short_factor=[1.0] * 64), "long_factor"),
])
def test_missing_required_field_is_named(ropepool, rope, field):
    rope_type = rope.get("rope_type", rope.get("type"))
    with pytest.raises(ropepool.RopePoolError, match=rf"'{rope_type}' needs rope_parameters\['{field}'\]"):
        ropepool.hf_rope_parameters(with_rope(**rope))


# Read as written (an object: no config class fills in what it leaves out; a dict is read as its
# class where transformers is installed, whose defaults would supply these fields).
def test_missing_max_position_embeddings_is_named(ropepool):
    config = with_rope(type="dynamic", factor=2.0)
    del config["max_position_embeddings"]
    with pytest.raises(ropepool.RopePoolError, match="'dynamic' needs max_position_embeddings"):
        ropepool.hf_rope_parameters(as_object(config))
    config = with_rope(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0)
    del config["max_position_embeddings"]
    with pytest.raises(ropepool.RopePoolError, match="'llama3' needs original_max_position_embeddings"):
        ropepool.hf_rope_parameters(as_object(config))


def test_missing_head_dim_is_named(ropepool):
    with pytest.raises(ropepool.RopePoolError, match="neither head_dim nor hidden_size"):
        ropepool.hf_rope_parameters(as_object(dict(model_type="llama", rope_theta=1e4)))


@pytest.mark.parametrize("model_type", ["qwen3_next", "nemotron", "gpt_oss", "qwen3", "gemma2"])
def test_a_dict_gets_its_config_class_defaults(ropepool, model_type):
    """A minimal config.json dict is read as transformers' config class reads it: Qwen3-Next's
    (0.25) and Nemotron's (0.5) partial_rotary_factor, gpt-oss's YaRN, Qwen3's and Gemma's
    head_dim are class defaults the dict leaves out. Checked against the class's own rotary
    module: its inv_freq buffer (1 float32 ulp, as the fixtures) and attention_scaling."""
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    config = dict(model_type=model_type, hidden_size=1024, num_attention_heads=16, num_key_value_heads=8)
    try:
        cls_config = transformers.AutoConfig.for_model(**config)
        rope_init = transformers.modeling_rope_utils.ROPE_INIT_FUNCTIONS
    except (ValueError, AttributeError):
        pytest.skip(f"this transformers does not know {model_type}")
    text = cls_config.get_text_config()
    params = getattr(text, "rope_parameters", None) or {}
    rope_type = params.get("rope_type", "default")
    if rope_type == "default":
        base = params.get("rope_theta", getattr(text, "rope_theta", None))
        head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
        dim = int(head_dim * params.get("partial_rotary_factor", getattr(text, "partial_rotary_factor", 1.0)))
        want = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
        want_scaling = 1.0
    else:
        want, want_scaling = rope_init[rope_type](text, "cpu")
    inv_freq, scaling = ropepool.hf_rope_parameters(config)
    assert len(inv_freq) == len(want), f"{len(inv_freq)} frequencies, transformers {len(want)}"
    assert ulps(inv_freq, want.numpy()).max() <= 1
    assert scaling == pytest.approx(want_scaling, rel=1e-6)
    assert np.array_equal(inv_freq, ropepool.hf_rope_parameters(cls_config)[0])


def test_an_odd_partial_rotary_width_is_named_by_the_config_fields_that_make_it(ropepool):
    """head_dim 18 with rotary_pct 0.5: the message named `rotary_dim`, an argument the caller never
    set, as if it had been given as 9."""
    config = dict(model_type="gpt_neox", hidden_size=72, num_attention_heads=4, rotary_pct=0.5, rope_theta=1e4,
                  max_position_embeddings=128)
    for helper in (ropepool.hf_rope_parameters, ropepool.hf_rope_kwargs):
        for form in (config, as_object(config)):
            with pytest.raises(ropepool.RopePoolError, match=re.escape(
                    "config head_dim 18 * partial_rotary_factor 0.5 gives 9 rotary dims, an odd number, which "
                    "ropepool does not serve (transformers rotates 10 dims with frequencies over 9)")):
                helper(form)


def test_a_dict_read_as_written_gets_the_class_defaults_of_every_known_family(ropepool):
    """Without transformers, a dict is read as written, ropepool's own table standing in for the
    class defaults it leaves out: GLM's and Helium's head_dim 128 (not hidden_size // heads), the
    MLA classes' qk_rope_head_dim. They were missing for 19 families, whose tables came out
    full-head. Read as written (an object) against read through the class, for every model type
    of the style table that this transformers knows, a minimal config each."""
    pytest.importorskip("transformers")
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    checked, differ = 0, []
    for model_type in CONFIG_MAPPING:
        try:
            ropepool._ropepool._hf_rope_style(model_type, -1)
        except ropepool.RopePoolError:
            continue  # not in the style table
        config = dict(model_type=model_type, hidden_size=1024, num_attention_heads=4, num_key_value_heads=4,
                      max_position_embeddings=4096)
        try:
            by_class = ropepool.hf_rope_parameters(config)
        except ropepool.RopePoolError:
            continue  # needs more than this minimal config (a layer type, a vision part)
        as_written = ropepool.hf_rope_parameters(as_object(config))
        checked += 1
        if not (np.array_equal(by_class[0], as_written[0]) and by_class[1] == as_written[1]):
            differ.append(f"{model_type}: {len(as_written[0])} frequencies as written, {len(by_class[0])} by its class")
    assert checked >= 40, f"only {checked} model types were read"
    assert not differ, "; ".join(differ)


@pytest.mark.parametrize("config", [None, "meta-llama/Llama-3.1-8B", ["llama"], 4096])
def test_a_config_that_is_no_config_is_named(ropepool, config):
    """None, a model name or a list read as a config without fields: the message said it had
    neither head_dim nor hidden_size, as if a real config had lost them."""
    for helper in (ropepool.hf_rope_parameters, ropepool.hf_rope_kwargs):
        with pytest.raises(ropepool.RopePoolError, match="^config must be a model's config.json as a dict or a "
                           f"transformers PretrainedConfig, got {type(config).__name__}$"):
            helper(config)


@pytest.mark.parametrize("fields, message", [
    (dict(hidden_size=4096, num_attention_heads=0), "config num_attention_heads must be an integer in [1, 2^62], got 0"),
    # transformers 5's strict LlamaConfig refuses a string (it cannot load such a checkpoint)
    (dict(hidden_size="4096", num_attention_heads=32), "transformers' LlamaConfig refuses this config: "
     "Validation error for field 'hidden_size': TypeError: Field 'hidden_size' expected int, got str (value: '4096')"),
    (dict(hidden_size="big", num_attention_heads=32), "config hidden_size must be an integer, got 'big'"),
    (dict(head_dim=128, partial_rotary_factor=float("nan")), "config partial_rotary_factor must be finite, got nan"),
    (dict(head_dim=128, rope_theta="x"), "config rope_theta must be a number, got 'x'"),
    (dict(head_dim=128, max_position_embeddings=2**70, rope_scaling=dict(rope_type="dynamic", factor=2.0)),
     f"config max_position_embeddings must be an integer in [0, 2^62], got {2**70}"),
])
def test_unreadable_config_fields_are_named(ropepool, fields, message):
    """Python's bare ZeroDivisionError, ValueError or OverflowError said nothing about the config."""
    config = dict(model_type="llama", rope_theta=1e4, **fields) if "rope_theta" not in fields else \
        dict(model_type="llama", **fields)
    if message.startswith("transformers'"):
        pytest.importorskip("transformers")
    with pytest.raises(ropepool.RopePoolError) as info:
        ropepool.hf_rope_kwargs(config)
    assert str(info.value) == message


def test_library_refusal_reaches_python_with_its_message(ropepool):
    with pytest.raises(ropepool.RopePoolError, match="low_freq_factor < high_freq_factor") as info:
        ropepool.hf_rope_parameters(with_rope(rope_type="llama3", factor=8.0, low_freq_factor=4.0,
                                              high_freq_factor=1.0))
    assert info.value.status == "RP_ERR_INVALID_ARGUMENT"
    with pytest.raises(ropepool.RopePoolError, match=r"'short_factor'\] must have rotary_dim/2 = 64"):
        ropepool.hf_rope_parameters(with_rope(rope_type="longrope", short_factor=[1.0] * 3,
                                              long_factor=[1.0] * 64))


@pytest.mark.parametrize("seq_len", [-1, 2.5, "8192", True])
def test_bad_seq_len_is_named(ropepool, seq_len):
    with pytest.raises(ropepool.RopePoolError, match="seq_len must be None or an integer >= 0"):
        ropepool.hf_rope_parameters(with_rope(type="dynamic", factor=2.0), seq_len=seq_len)


@pytest.mark.parametrize("config, message", [
    (dict(LLAMA, rope_theta=True), r"config rope_theta must be a number, got True"),
    (dict(LLAMA, head_dim=np.True_), r"config head_dim must be an integer, got "),
    (with_rope(rope_type="yarn", factor=4.0, truncate="false"),
     r"config rope_parameters\['truncate'\] must be true or false, got 'false'"),
    (with_rope(rope_type="yarn", factor=4.0, truncate=0), r"must be true or false, got 0"),
])
def test_a_flag_for_a_number_or_a_word_for_a_flag_is_refused(ropepool, config, message):
    """float(True) is 1.0, and transformers reads truncate by its truth (a string "false" truncates):
    both are mistaken configs, refused, not read as rope_theta 1 or truncation."""
    with pytest.raises(ropepool.RopePoolError, match=message):
        ropepool.hf_rope_parameters(config)


def test_non_positive_attention_factor_is_named(ropepool):
    with pytest.raises(ropepool.RopePoolError, match="attention_factor'] must be > 0, got -1.0"):
        ropepool.hf_rope_parameters(with_rope(rope_type="yarn", factor=4.0, attention_factor=-1.0))


@pytest.mark.parametrize("rope", [
    dict(rope_type="yarn", factor=4.0, original_max_position_embeddings=1024),
    dict(rope_type="longrope", factor=4.0, original_max_position_embeddings=1024, short_factor=[1.0] * 64,
         long_factor=[2.0] * 64)], ids=["yarn", "longrope"])
def test_attention_factor_is_the_attention_scaling_and_leaves_the_table(ropepool, rope):
    """transformers: attention_scaling = attention_factor when the config gives it; the table is
    the one without it."""
    table, derived = ropepool.hf_rope_parameters(with_rope(**rope))
    given, scaling = ropepool.hf_rope_parameters(with_rope(**rope, attention_factor=1.2))
    assert scaling == 1.2 and derived != 1.2
    assert np.array_equal(given, table)
    assert ropepool.hf_rope_kwargs(with_rope(**rope, attention_factor=0.75))["attention_scaling"] == 0.75


@pytest.mark.parametrize("rope_type", ["yarn", "longrope"])
@pytest.mark.parametrize("factor", [0, 0.0, -2.0])
def test_an_explicit_yarn_or_longrope_factor_must_be_positive(ropepool, rope_type, factor):
    """Absent or None, the factor is derived from the lengths (as transformers does); an explicit
    0 is not (transformers' yarn table would be infinite), so it is refused, not derived."""
    rope = dict(rope_type=rope_type, factor=factor, original_max_position_embeddings=1024)
    if rope_type == "longrope":
        rope.update(short_factor=[1.0] * 64, long_factor=[2.0] * 64)
    with pytest.raises(ropepool.RopePoolError, match=r"rope_parameters\['factor'\] must be > 0 for rope type"):
        ropepool.hf_rope_parameters(with_rope(**rope))
    _, scaling = ropepool.hf_rope_parameters(with_rope(**dict(rope, factor=None)))
    assert scaling == pytest.approx(math.sqrt(1 + math.log(4) / math.log(1024)) if rope_type == "longrope"
                                    else 0.1 * math.log(4) + 1)


@pytest.mark.parametrize("model_type, head_dim", [("qwen3", 128), ("gemma2", 256), ("llama", 64)])
def test_a_dict_without_head_dim_gets_its_config_class_default(ropepool, model_type, head_dim):
    """Qwen3's and Gemma's config classes default head_dim (128, 256) rather than deriving it from
    hidden_size // num_attention_heads (64 here): a config.json dict that leaves it out gets what
    transformers gives it, the same as the config object."""
    transformers = pytest.importorskip("transformers")
    config = dict(model_type=model_type, hidden_size=1024, num_attention_heads=16, num_key_value_heads=8)
    got = ropepool.hf_rope_kwargs(config)
    assert got["rotary_dim"] == head_dim
    assert got["rotary_dim"] == ropepool.hf_rope_kwargs(transformers.AutoConfig.for_model(**config))["rotary_dim"]


def test_gpt_neox_reads_its_own_names_only(ropepool):
    """GPTNeoXConfig takes its base from rotary_emb_base and its partial factor from rotary_pct
    (default 10000 and 0.25); a top-level rope_theta or partial_rotary_factor does not count."""
    base = dict(model_type="gpt_neox", hidden_size=512, num_attention_heads=4)
    plain = ropepool.hf_rope_kwargs(base)
    assert plain["rotary_dim"] == 32 and plain["inv_freq"][1] == np.float32(10000.0 ** (-2 / 32))
    ignored = ropepool.hf_rope_kwargs(dict(base, rope_theta=1e6, partial_rotary_factor=0.5))
    assert ignored["rotary_dim"] == 32 and np.array_equal(ignored["inv_freq"], plain["inv_freq"])
    own = ropepool.hf_rope_kwargs(dict(base, rotary_emb_base=1e6, rotary_pct=0.5))
    assert own["rotary_dim"] == 64 and own["inv_freq"][1] == np.float32(1e6 ** (-2 / 64))


@pytest.mark.parametrize("model_type, rope, rotary_dim", [
    ("llama", None, 128), ("qwen3", None, 128),  # their default rope spans the head, whatever the factor
    ("llama", dict(rope_type="yarn", factor=4.0, original_max_position_embeddings=1024), 64),
    ("llama", dict(rope_type="linear", factor=4.0), 64), ("phi", None, 64), ("stablelm", None, 64)])
def test_partial_rotary_factor_counts_where_transformers_reads_it(ropepool, model_type, rope, rotary_dim):
    """transformers reads partial_rotary_factor in every non-default rope function, and in the
    default rope of the families whose modeling code does (Phi, StableLM, GPT-NeoX, GLM), not in
    Llama's or Qwen's (checked against their rotary modules while writing this)."""
    config = dict(model_type=model_type, hidden_size=512, num_attention_heads=4, num_key_value_heads=4,
                  head_dim=128, partial_rotary_factor=0.5, max_position_embeddings=4096, rope_theta=1e4)
    if rope is not None:
        config["rope_parameters"] = dict(rope, rope_theta=1e4)
    assert ropepool.hf_rope_kwargs(config)["rotary_dim"] == rotary_dim


def test_layer_type_must_match_the_config(ropepool):
    gemma3 = fixture_config("gemma3-4b")
    with pytest.raises(ropepool.RopePoolError, match="full_attention, sliding_attention.*got None"):
        ropepool.hf_rope_parameters(gemma3)
    with pytest.raises(ropepool.RopePoolError, match="got 'global'"):
        ropepool.hf_rope_parameters(gemma3, layer_type="global")
    with pytest.raises(ropepool.RopePoolError, match="one rope for all layers"):
        ropepool.hf_rope_parameters(LLAMA, layer_type="full_attention")


def test_a_per_layer_yarn_without_truncation_is_refused(ropepool):
    """transformers 5 reads YaRN's truncate from the top level of rope_parameters, so with one rope
    per layer type it always truncates, whatever the layer's rope says: the checkpoint's table and
    transformers' differ, and neither is given."""
    gemma3 = dict(fixture_config("gemma3-4b"), rope_scaling=None, rope_parameters=dict(
        full_attention=dict(rope_type="yarn", factor=4.0, rope_theta=1e6, original_max_position_embeddings=32768,
                            truncate=False),
        sliding_attention=dict(rope_type="default", rope_theta=1e4)))
    with pytest.raises(ropepool.RopePoolError, match=r"rope_parameters\['full_attention'\] sets YaRN truncate false"):
        ropepool.hf_rope_parameters(gemma3, layer_type="full_attention")
    assert ropepool.hf_rope_parameters(gemma3, layer_type="sliding_attention")[0][0] == 1.0
    gemma3["rope_parameters"]["full_attention"]["truncate"] = True
    assert ropepool.hf_rope_parameters(gemma3, layer_type="full_attention")[1] == pytest.approx(0.1 * math.log(4) + 1)


@pytest.mark.parametrize("form", ["dict", "object"])
def test_a_composite_config_without_text_config_names_its_sub_configs(ropepool, form):
    """T5Gemma's, Dia's, Qwen2.5-Omni's top-level configs hold encoder/decoder or thinker/talker
    configs, not a text_config: read as a text config it would have no head size (or, with one, be
    defaults); the message names the sub-configs to pass instead."""
    decoder = dict(model_type="t5gemma_module", hidden_size=2304, num_attention_heads=8, head_dim=256)
    config = dict(model_type="t5gemma", encoder=decoder, decoder=decoder)
    if form == "object":
        config = types.SimpleNamespace(model_type="t5gemma", sub_configs={"encoder": object, "decoder": object},
                                       encoder=as_object(decoder), decoder=as_object(decoder))
    with pytest.raises(ropepool.RopePoolError,
                       match=r"this t5gemma config holds sub-configs \(decoder, encoder\) and no text_config"):
        ropepool.hf_rope_parameters(config, layer_type="full_attention")
    assert len(ropepool.hf_rope_parameters(decoder)[0]) == 128


def test_alibi_falcon_is_refused(ropepool):
    with pytest.raises(ropepool.RopePoolError, match="ALiBi"):
        ropepool.hf_rope_parameters(dict(model_type="falcon", hidden_size=4544, num_attention_heads=71,
                                         alibi=True))


# ---- what the config reading gets right -----------------------------------------------------------

def test_new_and_old_spellings_agree(ropepool):
    old = with_rope(type="yarn", factor=4.0, original_max_position_embeddings=1024)
    new = dict(LLAMA, rope_parameters=dict(rope_type="yarn", rope_theta=10000.0, factor=4.0,
                                            original_max_position_embeddings=1024))
    del new["rope_theta"]
    a, sa = ropepool.hf_rope_parameters(old)
    b, sb = ropepool.hf_rope_parameters(new)
    assert np.array_equal(a, b) and sa == sb == pytest.approx(0.1 * math.log(4.0) + 1.0)


def test_longrope_picks_long_factors_past_the_original_length(ropepool):
    phi3 = fixture_config("phi3-mini-128k")
    short, scaling = ropepool.hf_rope_parameters(phi3, seq_len=4096)
    long, _ = ropepool.hf_rope_parameters(phi3, seq_len=4097)
    assert np.array_equal(short, ropepool.hf_rope_parameters(phi3)[0])
    assert long[-1] < short[-1] / 10  # long factors reach ~60
    assert scaling == pytest.approx(math.sqrt(1 + math.log(32) / math.log(4096)))


# ---- hf_rope_kwargs on every family of the style table -------------------------------------------

def family(model_type, **extra):
    return dict(model_type=model_type, hidden_size=2048, num_attention_heads=16, max_position_embeddings=4096,
                **extra)


# The pair style of each model type, read from its modeling code in transformers 5.24 (5.25 from
# gpt_oss on in NEOX, ernie4_5 and helium in GPTJ): rotate_half on halves is NeoX; even/odd pairs (rotate_every_two, repeat_interleave'd cos/sin, view_as_complex,
# DeepSeek's rope_interleave) are GPT-J. glm4_moe (GLM-4.5 to 4.7) rotates halves, unlike glm/glm4. The MLA
# families (minicpm3, and glm4_moe_lite on in GPTJ) from 5.25: the pairs their attention rotates.
NEOX = {"llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "qwen2_vl", "qwen2_vl_text",
        "qwen2_5_vl", "qwen2_5_vl_text", "qwen3_vl", "qwen3_vl_text", "phi", "phi3", "gpt_neox", "gemma",
        "gemma2", "gemma3", "gemma3_text", "starcoder2", "olmo", "granite", "stablelm", "falcon", "glm4_moe",
        "gpt_oss", "olmo2", "smollm3", "seed_oss", "exaone4", "hunyuan_v1_dense", "apertus", "arcee", "granitemoe",
        "gemma4", "gemma4_text", "gemma4_unified", "gemma4_unified_text", "diffusion_gemma", "diffusion_gemma_text",
        "lfm3", "minicpm3"}
GPTJ = {"gptj", "codegen", "glm", "glm4", "cohere", "cohere2", "chatglm", "deepseek_v2", "deepseek_v3", "ernie4_5",
        "helium", "glm4_moe_lite", "mistral4", "axk1", "youtu", "deepseek_v32", "glm_moe_dsa", "hy_v4", "axk2",
        "bailing_hybrid", "longcat_flash"}
FAMILIES = RECORD["families"]


@pytest.mark.parametrize("transformers", ["installed", "absent"])
@pytest.mark.parametrize("fam", FAMILIES, ids=[f["config"]["model_type"] for f in FAMILIES])
def test_kwargs_give_each_familys_transformers_table_and_style(ropepool, fam, transformers, monkeypatch):
    """Only the fields every config.json has: the config classes' defaults (theta, partial rotary,
    rotary_dim, gpt-oss's YaRN) are read as transformers fills them in, from its config classes
    where it is installed and from ropepool's own tables where it is not."""
    if transformers == "absent":
        monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers raises ImportError
    config = fam["config"]
    kw = ropepool.hf_rope_kwargs(config)
    model_type = config["model_type"]
    assert kw["is_neox"] is (model_type in NEOX) and model_type in NEOX | GPTJ
    assert kw["rotary_dim"] == 2 * len(fam["inv_freq"])
    # pow correctly rounded here, within 1 ulp in torch's powf; 1/x of it can widen that (the header's
    # 3 ulps): SmolLM3's base 2e6 gives 2 at one entry on the recording CPU
    assert ulps(kw["inv_freq"], fam["inv_freq"]).max() <= (2 if model_type == "smollm3" else 1)
    assert kw["attention_scaling"] == pytest.approx(fam["attention_scaling"], rel=1e-15)  # gpt_oss: YaRN
    assert np.array_equal(kw["inv_freq"], ropepool.hf_rope_parameters(config)[0])


def test_hunyuan_alpha_is_a_fixed_base_not_dynamic_ntk(ropepool):
    """Hunyuan-7B's rope_scaling says type dynamic with alpha 1000 and factor 1; HunYuan's rotary
    classes read it as a fixed base theta * alpha^(D/(D-2)) at every length (the fixtures hold
    transformers' buffers at init and past max_position_embeddings). Without alpha it stays
    dynamic NTK."""
    hunyuan = fixture_config("hunyuan-7b-alpha")
    table = ropepool.hf_rope_kwargs(hunyuan)
    assert table["is_neox"] and table["rotary_dim"] == 128
    assert table["inv_freq"][1] == np.float32(1 / np.float32(np.float32(1e4 * 1000.0 ** (128 / 126)) ** (2 / 128)))
    assert np.array_equal(ropepool.hf_rope_parameters(hunyuan, seq_len=10**6)[0], table["inv_freq"])
    for model_type in ("hunyuan_v1_moe", "hunyuan_vl_text"):
        assert np.array_equal(ropepool.hf_rope_parameters(dict(hunyuan, model_type=model_type))[0], table["inv_freq"])
    plain = dict(hunyuan, rope_scaling=dict(type="dynamic", factor=2.0))
    assert ropepool.hf_rope_parameters(plain)[0][1] == np.float32(1 / np.float32(1e4 ** np.float32(2 / 128)))
    with pytest.raises(ropepool.RopePoolError, match="needs alpha > 0"):
        ropepool.hf_rope_parameters(dict(hunyuan, rope_scaling=dict(type="dynamic", alpha=-2.0, factor=1.0)))


def test_every_style_table_entry_has_a_transformers_fixture(ropepool):
    recorded = {f["config"]["model_type"] for f in FAMILIES} | {c["config"]["model_type"] for c in CASES}
    # chatglm is remote code; the Gemma 4 derivatives share gemma4_text's rotary code (their
    # styles checked by python/tools/sweep_hf_rope.py)
    assert (NEOX | GPTJ) - recorded == {"gemma3", "chatglm", "gemma4", "gemma4_unified", "gemma4_unified_text",
                                        "diffusion_gemma", "diffusion_gemma_text"}


def test_chatglm_is_gptj_pairs_on_half_of_kv_channels(ropepool):
    """THUDM's remote code: RotaryEmbedding(kv_channels // 2), base 10000 * rope_ratio, adjacent pairs."""
    kw = ropepool.hf_rope_kwargs(family("chatglm", kv_channels=128, rope_ratio=500))
    assert kw["is_neox"] is False and kw["rotary_dim"] == 64
    assert kw["inv_freq"][1] == np.float32(1.0 / np.float32(5e6 ** np.float32(2 / 64)))


@pytest.mark.parametrize("interleave, is_neox", [(None, False), (True, False), (False, True)])
def test_deepseek_v3_style_follows_rope_interleave(ropepool, interleave, is_neox):
    config = family("deepseek_v3", qk_rope_head_dim=64)
    if interleave is not None:
        config["rope_interleave"] = interleave
    kw = ropepool.hf_rope_kwargs(config)
    assert kw["is_neox"] is is_neox and kw["rotary_dim"] == 64


@pytest.mark.parametrize("interleave, is_neox", [(None, False), (True, False), (False, True)])
@pytest.mark.parametrize("model_type", ["kimi_k2", "sarvam_mla", "glm4_moe_lite", "mistral4", "axk1", "youtu"])
def test_mla_families_copying_deepseek_v3_follow_rope_interleave(ropepool, model_type, interleave, is_neox):
    """Kimi-K2's config.json names its model type kimi_k2 (remote code); transformers reads it as
    deepseek_v3 (Kimi_K25Config renames it), and so does ropepool: the same table and style. The
    other families' attentions ask `if self.config.rope_interleave:` as DeepseekV3Attention does
    (sarvam_mla runs DeepseekV3Model): adjacent pairs by default, halves when it is false. They were
    refused as model types outside the style table, though transformers runs them."""
    config = {"model_type": model_type, "hidden_size": 7168, "num_attention_heads": 64, "qk_rope_head_dim": 64,
              "qk_nope_head_dim": 128, "kv_lora_rank": 512, "max_position_embeddings": 131072,
              "rope_theta": 50000.0, "num_hidden_layers": 1,
              "rope_scaling": {"type": "yarn", "factor": 32.0, "beta_fast": 1.0, "beta_slow": 1.0, "mscale": 1.0,
                               "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096}}
    if interleave is not None:
        config["rope_interleave"] = interleave
    want = ropepool.hf_rope_kwargs(dict(config, model_type="deepseek_v3"))
    if model_type == "mistral4":  # its head_dim is the whole q head: the factor takes it to the rope part
        config["rope_scaling"] = dict(config["rope_scaling"], partial_rotary_factor=64 / 192)
    kw = ropepool.hf_rope_kwargs(config)
    assert kw["is_neox"] is is_neox and want["is_neox"] is is_neox and kw["rotary_dim"] == 64
    assert np.array_equal(kw["inv_freq"], want["inv_freq"]) and kw["attention_scaling"] == want["attention_scaling"]


@pytest.mark.parametrize("interleave", [None, True, False])
@pytest.mark.parametrize("model_type", ["deepseek_v32", "longcat_flash", "glm_moe_dsa", "hy_v4", "axk2",
                                        "bailing_hybrid"])
def test_mla_families_that_always_interleave_ignore_rope_interleave(ropepool, model_type, interleave):
    """Their attentions call apply_rotary_pos_emb_interleave unconditionally (their config classes drop
    rope_interleave), so a config.json's rope_interleave false (DeepSeek-V3.2's may carry V3's key)
    still rotates adjacent pairs; MiniCPM3's MLA always rotates halves."""
    config = family(model_type, qk_rope_head_dim=64, num_hidden_layers=1)
    if interleave is not None:
        config["rope_interleave"] = interleave
    kw = ropepool.hf_rope_kwargs(config)
    assert kw["is_neox"] is False and kw["rotary_dim"] == 64
    minicpm3 = ropepool.hf_rope_kwargs(family("minicpm3", qk_rope_head_dim=32, num_hidden_layers=1))
    assert minicpm3["is_neox"] is True and minicpm3["rotary_dim"] == 32


def test_deepseek_v3_rope_interleave_null_rotates_halves_as_transformers_does(ropepool):
    """DeepseekV3Attention asks `if config.rope_interleave:`, so a config that sets it to null
    (None) takes rotate_half; only a config without the key takes the class's default, True. It
    was read as absent, GPT-J pairs: every q_pe and k_pe rotated with the wrong pairs, silently."""
    config = family("deepseek_v3", qk_rope_head_dim=64, rope_interleave=None)
    assert ropepool.hf_rope_kwargs(config)["is_neox"] is True

    class Config:  # a config object holding None, as DeepseekV3Config(rope_interleave=None) does
        model_type, hidden_size, num_attention_heads, qk_rope_head_dim = "deepseek_v3", 2048, 16, 64
        rope_theta, max_position_embeddings, rope_interleave = 10000.0, 4096, None

    assert ropepool.hf_rope_kwargs(Config())["is_neox"] is True


@pytest.mark.parametrize("interleave", ["false", "true", 0, 1, 2.0])
def test_deepseek_v3_rope_interleave_that_is_no_bool_is_refused(ropepool, interleave):
    """transformers reads rope_interleave by its truth, so the string "false" would rotate adjacent
    pairs; a config holding one is refused rather than read either way (as YaRN's truncate is)."""
    config = family("deepseek_v3", qk_rope_head_dim=64, rope_interleave=interleave)
    with pytest.raises(ropepool.RopePoolError,
                       match=rf"config rope_interleave must be true or false, got {re.escape(repr(interleave))}"):
        ropepool.hf_rope_kwargs(config)


def test_gemma3_kwargs_need_the_layer_type(ropepool):
    gemma3 = fixture_config("gemma3-4b")
    full = ropepool.hf_rope_kwargs(gemma3, layer_type="full_attention")
    local = ropepool.hf_rope_kwargs(gemma3, layer_type="sliding_attention")
    assert full["is_neox"] and local["rotary_dim"] == full["rotary_dim"] == 256
    assert full["inv_freq"][0] == 1.0 / 8 and local["inv_freq"][0] == 1.0


def test_proportional_spans_the_head_with_zeros_past_the_rotated_pairs(ropepool):
    """transformers' proportional rope (LFM3's full attention): rotary_dim is head_dim, the first
    int(partial_rotary_factor * head_dim // 2) pairs carry the default table / factor, the rest 0,
    partial_rotary_factor and factor read from the rope's own dict (defaults 1)."""
    lfm3 = fixture_config("lfm3")
    full = ropepool.hf_rope_kwargs(lfm3, layer_type="full_attention")
    assert full["is_neox"] and full["rotary_dim"] == 128 and full["attention_scaling"] == 1.0
    assert np.count_nonzero(full["inv_freq"]) == 32 and not full["inv_freq"][32:].any()

    def proportional(**rope):
        return ropepool.hf_rope_kwargs(dict(lfm3, rope_parameters=dict(
            lfm3["rope_parameters"], full_attention=dict(rope_type="proportional", rope_theta=1e6, **rope))),
            layer_type="full_attention")

    whole = proportional()  # both absent: every pair, the default table over the head
    assert whole["rotary_dim"] == 128 and np.array_equal(
        whole["inv_freq"], ropepool.hf_rope_parameters(dict(LLAMA, head_dim=128, rope_theta=1e6))[0])
    assert np.array_equal(proportional(partial_rotary_factor=0.5, factor=4.0)["inv_freq"], full["inv_freq"] / 4)
    assert np.count_nonzero(proportional(partial_rotary_factor=0.3)["inv_freq"]) == 19  # int(38.4 // 2)
    assert not proportional(partial_rotary_factor=0.0)["inv_freq"].any()
    # a top-level partial_rotary_factor reaches the rope's dict (transformers' standardisation)
    top = ropepool.hf_rope_kwargs(dict(LLAMA, head_dim=128, partial_rotary_factor=0.25,
                                       rope_parameters=dict(rope_type="proportional", rope_theta=1e4)))
    assert top["rotary_dim"] == 128 and np.count_nonzero(top["inv_freq"]) == 16


@pytest.mark.parametrize("rope, message", [
    (dict(partial_rotary_factor=1.5), r"partial_rotary_factor must be in \[0, 1\] for rope type 'proportional', got 1.5"),
    (dict(partial_rotary_factor=None), r"config rope_parameters\['partial_rotary_factor'\] must be a number, got None"),
    (dict(factor=0.0), "factor must be finite and > 0 for rope type 'proportional', got 0"),
    (dict(factor="x"), r"config rope_parameters\['factor'\] must be a number, got 'x'"),
])
def test_a_bad_proportional_field_is_named(ropepool, rope, message):
    config = dict(LLAMA, rope_parameters=dict(rope_type="proportional", rope_theta=1e4, **rope))
    with pytest.raises(ropepool.RopePoolError, match=message):
        ropepool.hf_rope_parameters(config)


def test_gemma4_full_attention_reads_its_layers_head_dim(ropepool, monkeypatch):
    """Gemma 4's full-attention layers have their own head_dim (global_head_dim: 512 against 256),
    which transformers keeps in per_layer_config: with layer_type, that layer's config is read.
    Written as config.json, without transformers' class to read it, it is refused, never read as
    the sliding layers' 256."""
    transformers = pytest.importorskip("transformers")
    gemma4 = fixture_config("gemma4-like")
    config = transformers.AutoConfig.for_model(**json.loads(json.dumps(gemma4)))
    full = ropepool.hf_rope_kwargs(config, layer_type="full_attention")
    local = ropepool.hf_rope_kwargs(config, layer_type="sliding_attention")
    assert full["is_neox"] and local["is_neox"] and full["rotary_dim"] == 512 and local["rotary_dim"] == 256
    want = next(c for c in CASES if c["name"] == "gemma4-like" and c["layer_type"] == "full_attention")
    assert ulps(full["inv_freq"], want["inv_freq"]).max() <= 1 and not full["inv_freq"][64:].any()
    with pytest.raises(ropepool.RopePoolError, match="full_attention, sliding_attention.*got None"):
        ropepool.hf_rope_kwargs(config)
    monkeypatch.setitem(sys.modules, "transformers", None)
    for cfg in (gemma4, {k: v for k, v in gemma4.items() if k != "global_head_dim"}):  # its class's default 512
        with pytest.raises(ropepool.RopePoolError, match="gemma4_text config sizes its attention per layer type"):
            ropepool.hf_rope_kwargs(cfg, layer_type="sliding_attention")
    with pytest.raises(ropepool.RopePoolError, match="full_attention, sliding_attention.*got None"):
        ropepool.hf_rope_kwargs({k: v for k, v in gemma4.items() if k != "rope_parameters"})  # its class's ropes


def test_lfm3_without_rope_parameters_gets_its_class_ropes(ropepool, monkeypatch):
    bare = {k: v for k, v in fixture_config("lfm3").items() if k != "rope_parameters"}
    want = [ropepool.hf_rope_kwargs(fixture_config("lfm3"), layer_type=lt) for lt in ("full_attention",
                                                                                         "sliding_attention")]
    monkeypatch.setitem(sys.modules, "transformers", None)
    for lt, kw in zip(("full_attention", "sliding_attention"), want):
        assert np.array_equal(ropepool.hf_rope_kwargs(bare, layer_type=lt)["inv_freq"], kw["inv_freq"])


def test_mrope_keywords_follow_transformers_qwen_vl_code(ropepool):
    kw = ropepool.hf_rope_kwargs(fixture_config("qwen2-vl-7b"))
    assert kw["mrope_section"] == [16, 24, 24] and kw["mrope_interleaved"] is False
    kw = ropepool.hf_rope_kwargs(fixture_config("qwen3-vl-8b"))
    assert kw["mrope_section"] == [24, 20, 20] and kw["mrope_interleaved"] is True
    assert kw["rotary_dim"] == 128 and kw["inv_freq"][1] == np.float32(1 / np.float32(5e6 ** np.float32(2 / 128)))
    # Without a section, transformers' defaults (and Qwen3-VL always interleaves).
    assert ropepool.hf_rope_kwargs(family("qwen2_5_vl"))["mrope_section"] == [16, 24, 24]
    assert ropepool.hf_rope_kwargs(family("qwen3_vl_text"))["mrope_interleaved"] is True
    assert "mrope_section" not in ropepool.hf_rope_kwargs(family("qwen2"))


@pytest.mark.parametrize("rope", [dict(type="mrope", mrope_section=[16, 24, 24]), dict(type="mrope"),
                                  dict(rope_type="default", mrope_section=[16, 24, 24])])
def test_mrope_outside_the_qwen_vl_family_is_refused(ropepool, rope):
    """Llama's rotary class raises KeyError on type mrope; a section the keywords would drop
    silently is refused instead. hf_rope_parameters (the table alone) still answers."""
    config = dict(model_type="llama", hidden_size=4096, num_attention_heads=32, rope_theta=5e5, rope_scaling=rope)
    with pytest.raises(ropepool.RopePoolError, match="multimodal RoPE .* not model type 'llama'"):
        ropepool.hf_rope_kwargs(config)
    plain = dict(config, rope_scaling=None)
    assert np.array_equal(ropepool.hf_rope_parameters(config)[0], ropepool.hf_rope_parameters(plain)[0])


def test_qwen3_vl_moe_is_served_like_qwen3_vl(ropepool):
    """Qwen3-VL-30B-A3B / 235B-A22B: transformers' Qwen3VLMoeTextRotaryEmbedding is Qwen3-VL's
    (interleaved sections, [24, 20, 20] by default, rotate-half), its head_dim hidden_size // heads."""
    text = dict(hidden_size=1024, num_attention_heads=16, rope_theta=5e6)
    want = ropepool.hf_rope_kwargs(dict(text, model_type="qwen3_vl_text", head_dim=64))
    for config in (dict(text, model_type="qwen3_vl_moe_text"),
                   dict(model_type="qwen3_vl_moe", text_config=dict(text, model_type="qwen3_vl_moe_text"))):
        kw = ropepool.hf_rope_kwargs(config)
        assert kw["is_neox"] is True and kw["rotary_dim"] == 64
        # the default [24, 20, 20] as the call takes it under head_dim 64 (test_mrope.py)
        assert kw["mrope_section"] == [11, 11, 10] and kw["mrope_interleaved"] is True
        assert np.array_equal(kw["inv_freq"], want["inv_freq"])
    transformers = pytest.importorskip("transformers")
    if not hasattr(transformers, "Qwen3VLMoeTextConfig"):
        return
    from transformers.models.qwen3_vl_moe import modeling_qwen3_vl_moe as m

    hf = transformers.Qwen3VLMoeTextConfig(hidden_size=1024, num_attention_heads=16,
                                           rope_parameters=dict(rope_type="default", rope_theta=5e6,
                                                                mrope_section=[8, 12, 12]))
    kw = ropepool.hf_rope_kwargs(hf)
    rotary = m.Qwen3VLMoeTextRotaryEmbedding(hf)
    assert kw["mrope_section"] == [8, 12, 12] == list(rotary.mrope_section)
    assert ulps(kw["inv_freq"], rotary.inv_freq.numpy()).max() <= 1


@pytest.mark.parametrize("section", [None, "abc", [16.7, 8.3, 8], [True, 15, 16], [16, 24], [8, 8, 8, 8]])
def test_a_broken_mrope_section_in_the_config_is_named(ropepool, section):
    config = dict(model_type="qwen2_vl", hidden_size=2048, num_attention_heads=16, rope_theta=1e6,
                  rope_scaling=dict(type="mrope", mrope_section=section))
    with pytest.raises(ropepool.RopePoolError,
                       match=r"config rope_parameters\['mrope_section'\] must be three ints, got "):
        ropepool.hf_rope_kwargs(config)


def test_mrope_of_a_family_outside_the_table_is_named_before_its_style(ropepool):
    config = dict(model_type="glm4v_text", hidden_size=2048, num_attention_heads=16,
                  rope_parameters=dict(rope_type="default", rope_theta=1e7, mrope_section=[16, 24, 24]))
    with pytest.raises(ropepool.RopePoolError, match="multimodal RoPE .* not model type 'glm4v_text'"):
        ropepool.hf_rope_kwargs(config)


def test_a_config_attribute_that_raises_is_named(ropepool):
    """transformers' Gemma 4 text config raises a RuntimeError for a per-layer head_dim."""
    class Config:
        model_type = "llama"
        hidden_size, num_attention_heads, rope_theta = 4096, 32, 5e5

        @property
        def head_dim(self):
            raise RuntimeError("head_dim differs per layer type")

    with pytest.raises(ropepool.RopePoolError,
                       match="config head_dim could not be read: RuntimeError: head_dim differs per layer type"):
        ropepool.hf_rope_kwargs(Config())


def test_deepseek_kwargs_are_mla_rope_part_with_yarn(ropepool):
    kw = ropepool.hf_rope_kwargs(fixture_config("deepseek-v3"))
    assert kw["rotary_dim"] == 64 and kw["is_neox"] is False and kw["attention_scaling"] == 1.0
    kw = ropepool.hf_rope_kwargs(fixture_config("deepseek-v2-lite-mscale"))
    assert kw["attention_scaling"] == pytest.approx(0.1 * math.log(40) + 1)


@pytest.mark.parametrize("config", [family("my_new_model"), dict(hidden_size=64, num_attention_heads=1)])
def test_unknown_model_type_says_to_pass_is_neox(ropepool, config):
    with pytest.raises(ropepool.RopePoolError, match="pass the style explicitly"):
        ropepool.hf_rope_kwargs(config)


# ---- rotating with the kwargs: parity with transformers' own apply_rotary_pos_emb ----------------

ROTATIONS = np.load(FIXTURES / "hf_rope_rotations.npz")
ROTATION_CONFIGS = {r["name"]: r["config"] for r in RECORD["rotations"]}
ROTATION_LAYERS = {r["name"]: r.get("layer_type") for r in RECORD["rotations"]}


def pair_partner(R, D, is_neox):
    """For each dim, the other member of its rotated pair (itself past R), and its pair index."""
    d = np.arange(D)
    if is_neox:
        partner = np.where(d < R // 2, d + R // 2, d - R // 2)
        pair = np.where(d < R // 2, d, d - R // 2)
    else:
        partner, pair = d ^ 1, d // 2
    return np.where(d < R, partner, d), np.where(d < R, pair, 0)


@pytest.mark.parametrize("name", sorted(ROTATION_CONFIGS))
def test_rotation_with_kwargs_matches_transformers(ropepool, name):
    config = ROTATION_CONFIGS[name]
    kw = ropepool.hf_rope_kwargs(config, seq_len=int(ROTATIONS[f"{name}/positions"].max()) + 1,
                                 layer_type=ROTATION_LAYERS[name])
    positions = ROTATIONS[f"{name}/positions"]
    q, k = ROTATIONS[f"{name}/q"], ROTATIONS[f"{name}/k"]
    T, Hq, D = q.shape
    Hk = k.shape[1]
    k_pool, v_pool = np.zeros((T, Hk, D), np.float32), np.zeros((T, Hk, D), np.float32)
    q_rot, k_rot, k_pool, _ = ropepool.rope_pool_fused(
        q, k, k, positions, np.arange(T), k_pool, v_pool, head_dim=D, num_qo_heads=Hq, num_kv_heads=Hk,
        rope_base=10000.0, **kw)
    assert np.array_equal(k_pool, k_rot)
    R, is_neox, s = kw["rotary_dim"], kw["is_neox"], kw["attention_scaling"]
    want_q, want_k = ROTATIONS[f"{name}/q_rot"], ROTATIONS[f"{name}/k_rot"]
    if "qk_rope_head_dim" in config and config["model_type"] != "deepseek_v2" and not is_neox:
        # transformers' MLA code from DeepSeek-V3 on (apply_rotary_pos_emb_interleave) writes the
        # rotated pairs de-interleaved: (2j, 2j+1) -> (j, j+R/2).
        order = np.concatenate([np.arange(0, R, 2), np.arange(1, R, 2), np.arange(R, D)])
        q_rot, k_rot = q_rot[..., order], k_rot[..., order]
        q, k = q[..., order], k[..., order]
        is_neox = True
    partner, pair = pair_partner(R, D, is_neox)
    # transformers forms angle = float32(position * f) and cos, sin, their products and sums in
    # float32: each rounding is 2^-24 relative, the angle's grows with the angle itself.
    angle = (positions.max(axis=0) if positions.ndim == 2 else positions)[:, None, None] * kw["inv_freq"][pair]
    for got, want, x in ((q_rot, want_q, q), (k_rot, want_k, k)):
        mag = np.abs(x) + np.abs(x[..., partner])
        bound = 2.0 ** -24 * (max(s, 1.0) * mag * (np.abs(angle) + 8) + np.abs(want))
        bound[..., R:] = 0  # passed-through dims are copied bit for bit
        err = np.abs(got.astype(np.float64) - want)
        assert np.all(err <= bound), f"{name}: worst error {(err - bound).max():.3g} over its bound"


def test_readme_serving_example_runs_as_written(ropepool):
    setup, serving = (readme_blocks(heading)[0] for heading in ("## Python", "### Serving a Llama-3.1 and a GPT-J model"))
    namespace = {}
    try:
        exec(compile(setup + serving, "README.md (serving)", "exec"), namespace)
    except ropepool.RopePoolError as error:
        if error.status != "RP_ERR_UNSUPPORTED":
            raise
        pytest.skip(f"this build cannot serve the variants yet: {error}")
    assert np.array_equal(namespace["k_pool"][namespace["slots"]], namespace["k_rot"])
    assert np.array_equal(namespace["gq_rot"][..., 64:], namespace["gq"][..., 64:])  # passed through
    assert not np.array_equal(namespace["gq_rot"][1:, :, :64], namespace["gq"][1:, :, :64])


# ---- found by a differential fuzzer against transformers 5.25's rotary modules --------------------

GEMMA3_TEXT = dict(model_type="gemma3_text", hidden_size=1024, num_attention_heads=8, head_dim=64,
                   max_position_embeddings=512)


def test_gemma3_flat_rope_parameters_are_refused_as_transformers_ignores_them(ropepool):
    """Gemma3TextConfig builds its two ropes beside a flat rope_parameters and reads none of its keys:
    full attention ran the default rope at theta 1e6, while ropepool served the flat dict's
    (3075409 here: every frequency but the first millions of ulps away)."""
    config = dict(GEMMA3_TEXT, rope_parameters={"rope_type": "default", "rope_theta": 3075409.0})
    for form in (config, as_object(config)):
        with pytest.raises(ropepool.RopePoolError, match=r"rope_parameters has keys outside its layer types "
                                                         r"\(rope_theta, rope_type\)"):
            ropepool.hf_rope_parameters(form, layer_type="full_attention")


def test_gemma3_nested_rope_without_theta_takes_gemma3s_defaults(ropepool):
    """Gemma3TextConfig gives a layer type's dict without rope_theta 1e6 (full) or
    rope_local_base_freq (sliding); ropepool gave both the generic 10000 to a config read as written."""
    config = dict(GEMMA3_TEXT, rope_parameters={"full_attention": {"rope_type": "linear", "factor": 2.0},
                                                "sliding_attention": {"rope_type": "default"}},
                  rope_local_base_freq=5e4)
    f32 = np.float32
    for form in (as_object(config), config):
        full, _ = ropepool.hf_rope_parameters(form, layer_type="full_attention")
        local, _ = ropepool.hf_rope_parameters(form, layer_type="sliding_attention")
        assert full[1] == f32(f32(1) / f32(1e6 ** float(f32(2) / f32(64)))) / f32(2)
        assert local[1] == f32(f32(1) / f32(5e4 ** float(f32(2) / f32(64))))


def test_per_layer_longrope_reads_its_own_original_length_not_the_top_level_one(ropepool):
    """With one rope per layer type transformers never reads a top-level
    original_max_position_embeddings (its nested standardisation defaults each rope's to
    max_position_embeddings): seq_len 4096 > 512 takes the long factors; ropepool took the top-level
    4096 and served the short ones."""
    short, long = [1.0] * 32, [float(4 + j) for j in range(32)]
    rope = {"rope_type": "longrope", "short_factor": short, "long_factor": long}
    config = dict(GEMMA3_TEXT, original_max_position_embeddings=4096,
                  rope_parameters={"full_attention": rope, "sliding_attention": {"rope_type": "default"}})
    inv_freq, scaling = ropepool.hf_rope_parameters(config, seq_len=4096, layer_type="full_attention")
    no_top = {k: v for k, v in config.items() if k != "original_max_position_embeddings"}
    want, want_scaling = ropepool.hf_rope_parameters(no_top, seq_len=4096, layer_type="full_attention")
    assert np.array_equal(inv_freq, want) and scaling == want_scaling
    assert inv_freq[1] < ropepool.hf_rope_parameters(no_top, seq_len=512, layer_type="full_attention")[0][1]


def test_a_config_transformers_refuses_is_refused_with_its_message(ropepool):
    """Phi3Config sizes short_factor by hidden_size // num_attention_heads (144 here, 72 factors),
    not head_dim: transformers cannot load this checkpoint, and ropepool served it, reading the
    dict as written."""
    pytest.importorskip("transformers")
    config = dict(model_type="phi3", hidden_size=288, num_attention_heads=2, head_dim=72,
                  max_position_embeddings=131072, rope_theta=1e4,
                  rope_scaling=dict(rope_type="longrope", short_factor=[1.0] * 36, long_factor=[2.0] * 36,
                                    original_max_position_embeddings=4096))
    with pytest.raises(ropepool.RopePoolError, match=r"transformers' Phi3Config refuses this config: .*short_factor "
                                                     r"field must have length 72, got 36"):
        ropepool.hf_rope_parameters(config)


@pytest.mark.parametrize("model_type, extra, width", [
    ("deepseek_v3", {"partial_rotary_factor": 0.5}, 32),
    # Mistral4Config's factor is set only without rope_scaling: with one, its YaRN table spans the
    # whole 192-dim q head, and its attention fails on the 64 dims of q_pe
    ("mistral4", {}, 192),
])
def test_mla_scaled_rope_narrower_or_wider_than_qk_rope_head_dim_is_refused(ropepool, model_type, extra, width):
    """transformers' scaled ropes build int(head_dim * partial_rotary_factor) / 2 frequencies; an MLA
    attention rotates qk_rope_head_dim dims and cannot apply another width. ropepool served a full
    qk_rope_head_dim table that transformers never builds."""
    config = dict(model_type=model_type, hidden_size=2048, num_attention_heads=16, qk_rope_head_dim=64,
                  qk_nope_head_dim=128, kv_lora_rank=512, max_position_embeddings=131072, rope_theta=1e4,
                  rope_scaling=dict(type="yarn", factor=32.0, original_max_position_embeddings=4096, **extra))
    with pytest.raises(ropepool.RopePoolError, match=rf"= {width} rotary dims for rope type 'yarn', but multi-head "
                                                     r"latent attention rotates qk_rope_head_dim = 64"):
        ropepool.hf_rope_kwargs(config)


def test_reading_a_config_dict_leaves_it_as_it_was(ropepool):
    """transformers' config class fills rope_theta, rope_type and original_max_position_embeddings
    into the rope dict it is handed: hf_rope_parameters wrote them into the caller's config."""
    pytest.importorskip("transformers")
    config = dict(LLAMA, rope_scaling={"type": "yarn", "factor": 4.0},
                  rope_parameters=None)
    config.pop("rope_parameters")
    before = json.dumps(config, sort_keys=True)
    ropepool.hf_rope_kwargs(config)
    ropepool.hf_rope_parameters(config)
    assert json.dumps(config, sort_keys=True) == before
