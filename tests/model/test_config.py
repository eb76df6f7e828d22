"""BertConfig: what is read from config.json, defaults, and what is refused (unit level; the same errors
through Encoder and the CLI are in test_weights.py)."""

from __future__ import annotations

import pytest

from bertfeat.model.config import FAMILIES, SUPPORTED_ACTS, BertConfig
from bertfeat.errors import ConfigError


def test_minilm_config(minilm_dir):
    c = BertConfig.from_file(minilm_dir / "config.json")
    assert (c.vocab_size, c.hidden_size, c.num_hidden_layers, c.num_attention_heads, c.intermediate_size) == (
        30522, 384, 6, 12, 1536)
    assert (c.hidden_act, c.layer_norm_eps, c.max_position_embeddings, c.type_vocab_size, c.head_size) == (
        "gelu", 1e-12, 512, 2, 32)


def test_fields_defaults_and_extra_keys():
    c = BertConfig.from_dict({"hidden_size": 128, "num_attention_heads": 2, "layer_norm_eps": 1e-5,
                              "max_position_embeddings": 128, "type_vocab_size": 1, "vocab_size": 21128,
                              "hidden_act": "gelu_new", "initializer_range": 0.02, "architectures": ["BertForMaskedLM"],
                              "position_embedding_type": "absolute", "is_decoder": False, "pad_token_id": None})
    assert (c.hidden_size, c.head_size, c.layer_norm_eps, c.max_position_embeddings, c.type_vocab_size) == (
        128, 64, 1e-5, 128, 1)
    assert c.pad_token_id == 0  # null in the file -> the default
    assert c.num_hidden_layers == 12 and c.intermediate_size == 3072  # BERT-base defaults when absent
    assert BertConfig.from_dict({}) == BertConfig()
    assert c.to_dict()["hidden_act"] == "gelu_new"
    with pytest.raises(ConfigError) as e:  # read as 768 before; transformers 5 refuses it (test_integer_settings...)
        BertConfig.from_dict({"hidden_size": 768.0, "num_hidden_layers": 2.0})
    assert e.value.message == ("config.json: hidden_size must be a positive integer, not 768.0 - write it as 768, "
                               "without the decimal point (transformers refuses 768.0 there too)")


@pytest.mark.parametrize("act", SUPPORTED_ACTS)
def test_supported_acts(act):
    assert BertConfig.from_dict({"hidden_act": act}).hidden_act == act


@pytest.mark.parametrize("d,words", [
    ({"model_type": "deberta-v2"}, ["model_type 'deberta-v2' is not supported", "'bert', 'roberta', 'xlm-roberta', "
                                    "'camembert', 'electra', 'distilbert'", "'mpnet'"]),
    ({"model_type": "albert"}, ["model_type 'albert'"]),
    ({"model_type": "distilbert", "dim": 100, "n_heads": 12}, ["dim 100 is not a multiple of n_heads 12"]),
    ({"model_type": "distilbert", "n_layers": 0}, ["n_layers must be a positive integer, not 0"]),
    ({"model_type": "distilbert", "activation": "silu"}, ["activation 'silu' is not supported"]),
    ({"model_type": "electra", "embedding_size": 0}, ["embedding_size must be a positive integer, not 0"]),
    ({"position_embedding_type": "relative_key"}, ["position_embedding_type 'relative_key'", "absolute"]),
    ({"position_embedding_type": "relative_key_query"}, ["relative_key_query"]),
    ({"is_decoder": True}, ["decoder models", "encoder-only"]),
    ({"add_cross_attention": True}, ["decoder models"]),
    ({"hidden_act": "silu"}, ["hidden_act 'silu' is not supported", "supported: gelu"]),
    ({"hidden_act": "quick_gelu"}, ["hidden_act 'quick_gelu'"]),
    ({"hidden_act": ["gelu"]}, ["is not supported"]),
    ({"hidden_size": 100, "num_attention_heads": 12}, ["hidden_size 100 is not a multiple of num_attention_heads 12"]),
    # malformed values: a clear error, not a TypeError / ZeroDivisionError traceback
    ({"hidden_size": "768"}, ["hidden_size must be a positive integer, not '768'", "restore config.json"]),
    ({"num_attention_heads": 0}, ["num_attention_heads must be a positive integer, not 0"]),
    ({"num_hidden_layers": -1}, ["num_hidden_layers must be a positive integer"]),
    ({"model_type": "roberta", "pad_token_id": "1"}, ["pad_token_id must be an integer of at least 0, not '1'"]),
    ({"pad_token_id": -1}, ["pad_token_id -1 is not a token of the vocabulary (vocab_size 30522: ids 0 .. 30521)"]),
    ({"pad_token_id": 1.5}, ["pad_token_id must be an integer of at least 0, not 1.5"]),
    ({"vocab_size": True}, ["vocab_size must be a positive integer, not True"]),
    ({"intermediate_size": 3072.5}, ["intermediate_size must be a positive integer"]),
    ({"layer_norm_eps": "1e-12"}, ["layer_norm_eps must be a positive number"]),
    ({"layer_norm_eps": 0}, ["layer_norm_eps must be a positive number"]),
    ({"layer_norm_eps": -1e-5}, ["layer_norm_eps must be a positive number"]),
    ({"layer_norm_eps": float("inf")}, ["layer_norm_eps must be a positive number"]),
])
def test_unsupported_configs(d, words):
    with pytest.raises(ConfigError) as e:
        BertConfig.from_dict(d, source="x/config.json")
    msg = e.value.message
    assert msg.startswith("x/config.json: ") and " - " in msg and "\n" not in msg
    for w in words:
        assert w in msg


#: (family, config.json without the key, the key under BertConfig's name, transformers 5's default)
FAMILY_DEFAULTS = [("electra", "num_attention_heads", "num_attention_heads", 4),
                   ("electra", "hidden_size", "hidden_size", 256),
                   ("electra", "intermediate_size", "intermediate_size", 1024),
                   ("electra", "embedding_size", "embedding_size", 128),
                   ("distilbert", "n_layers", "num_hidden_layers", 6),
                   ("roberta", "vocab_size", "vocab_size", 50265),
                   ("xlm-roberta", "vocab_size", "vocab_size", 30522),
                   ("mpnet", "vocab_size", "vocab_size", 30527),
                   ("modernbert", "num_hidden_layers", "num_hidden_layers", 22),
                   ("modernbert", "intermediate_size", "intermediate_size", 1152),
                   ("modernbert", "norm_eps", "layer_norm_eps", 1e-5),
                   ("modernbert", "max_position_embeddings", "max_position_embeddings", 8192),
                   ("modernbert", "vocab_size", "vocab_size", 50368)]


@pytest.mark.parametrize("family,key,ours,default", FAMILY_DEFAULTS, ids=[f"{f}-{k}" for f, k, _, _ in FAMILY_DEFAULTS])
def test_a_key_left_out_is_the_familys_transformers_default(family, key, ours, default):
    """A config.json without a key is read as transformers 5 reads it: the family's config class default, not BERT's
    (ELECTRA without num_attention_heads ran 12 heads where transformers runs 4: every vector wrong, no shape
    refused). The table is checked against transformers' own classes in test_family_defaults_are_transformers."""
    d = {"model_type": family, **FAMILY_CONFIGS[family]}
    d.pop(key, None)
    if family == "modernbert":
        d["pad_token_id"] = 0  # (its transformers default, 50283, is past this small vocabulary)
        d["global_attn_every_n_layers"] = 1
    assert getattr(BertConfig.from_dict(d), ours) == default
    if family == "modernbert" and key == "num_hidden_layers":  # its layer types were made for 22 layers, then 12 ran
        assert len(BertConfig.from_dict(d).layer_types) == 22


def test_family_defaults_are_transformers():
    """bertfeat's defaults for a key config.json leaves out, for every family and every setting it reads, against
    transformers' config classes (the table transformers is not imported for at run time)."""
    transformers = pytest.importorskip("transformers", reason="transformers is the reference for the defaults")
    classes = {"bert": "BertConfig", "roberta": "RobertaConfig", "xlm-roberta": "XLMRobertaConfig",
               "camembert": "CamembertConfig", "electra": "ElectraConfig", "distilbert": "DistilBertConfig",
               "mpnet": "MPNetConfig", "modernbert": "ModernBertConfig"}
    keys = {"vocab_size": "vocab_size", "hidden_size": "hidden_size", "num_hidden_layers": "num_hidden_layers",
            "num_attention_heads": "num_attention_heads", "intermediate_size": "intermediate_size",
            "max_position_embeddings": "max_position_embeddings", "layer_norm_eps": "layer_norm_eps",
            "embedding_size": "embedding_size", "hidden_act": "hidden_act"}
    theirs_names = {"distilbert": {"intermediate_size": "hidden_dim", "hidden_act": "activation"},
                    "modernbert": {"layer_norm_eps": "norm_eps", "hidden_act": "hidden_activation"}}
    for family, name in classes.items():
        ref = getattr(transformers, name)()
        ours = BertConfig.from_dict({"model_type": family, "pad_token_id": 0})
        for k in keys:
            theirs = getattr(ref, theirs_names.get(family, {}).get(k, k), None)
            if theirs is None or (family == "distilbert" and k == "layer_norm_eps"):
                continue  # not a setting of the family (DistilBERT's modules fix eps at 1e-12)
            assert getattr(ours, k) == theirs, (family, k)


def test_position_embedding_type_is_read_where_the_family_has_it():
    """DistilBERT, MPNet and ModernBERT have no position_embedding_type (transformers leaves it unread): a stray one
    is no reason to refuse the model. null in a BERT config.json is absolute positions, as transformers 5 runs it.
    A layer_norm_eps of 1 or more is legal and runs (transformers takes it)."""
    for family in ("distilbert", "mpnet", "modernbert"):
        d = {"model_type": family, **FAMILY_CONFIGS[family], "position_embedding_type": "relative_key"}
        assert BertConfig.from_dict(d).model_type == family
    assert BertConfig.from_dict({"position_embedding_type": None}) == BertConfig()
    assert BertConfig.from_dict({"layer_norm_eps": 2.0}).layer_norm_eps == 2.0
    with pytest.raises(ConfigError, match="position_embedding_type 'relative_key' is not supported"):
        BertConfig.from_dict({"model_type": "electra", "position_embedding_type": "relative_key"})


_BERT = {"vocab_size": 100, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
         "intermediate_size": 128, "max_position_embeddings": 130, "type_vocab_size": 2, "pad_token_id": 1}
#: a valid config.json of each family, under its own names: each of its keys is an integer setting the family reads
FAMILY_CONFIGS = {
    "bert": _BERT,
    "roberta": {**_BERT, "type_vocab_size": 1},
    "xlm-roberta": {**_BERT, "type_vocab_size": 1},
    "camembert": {**_BERT, "type_vocab_size": 1},
    "electra": {**_BERT, "embedding_size": 32},
    "distilbert": {"vocab_size": 100, "dim": 64, "n_layers": 2, "n_heads": 4, "hidden_dim": 128,
                   "max_position_embeddings": 130, "pad_token_id": 1},
    "mpnet": {**{k: v for k, v in _BERT.items() if k != "type_vocab_size"}, "relative_attention_num_buckets": 32},
    "modernbert": {**{k: v for k, v in _BERT.items() if k != "type_vocab_size"}, "num_hidden_layers": 3,
                   "global_attn_every_n_layers": 3, "local_attention": 64},
}
#: (family, key, its least value): every integer setting of every family, and ModernBERT's sliding_window (which wins
#: over local_attention, so it is set alone)
INTEGER_SETTINGS = [(f, k, {"pad_token_id": 0, "local_attention": 2}.get(k, 1)) for f, c in FAMILY_CONFIGS.items()
                    for k in c] + [("modernbert", "sliding_window", 1)]


def _family_config(family: str, key: str, value) -> dict:
    return {"model_type": family, **FAMILY_CONFIGS[family], key: value}


@pytest.mark.parametrize("family,key,least", INTEGER_SETTINGS, ids=[f"{f}-{k}" for f, k, _ in INTEGER_SETTINGS])
def test_integer_settings_given_as_a_float_true_or_a_string_are_refused(family, key, least):
    """num_hidden_layers 6.0, hidden_size 384.0 ... loaded as 6, 384 (and pad_token_id 1.0 was refused by another
    rule): transformers 5 refuses each (its configs are strict dataclasses: "expected int, got float"), so bertfeat
    does too, for every family, naming the file, the key and the value; true and "6" as before."""
    good = FAMILY_CONFIGS[family].get(key, 32)
    assert BertConfig.from_dict(_family_config(family, key, good))  # the config loads with the integer
    kind = "a positive integer" if least == 1 else f"an integer of at least {least}"
    restore = "restore config.json from the checkpoint"
    for bad, fix in ((float(good), f"write it as {good}, without the decimal point (transformers refuses {float(good)} "
                                   "there too)"), (True, restore), (str(good), restore)):
        with pytest.raises(ConfigError) as e:
            BertConfig.from_dict(_family_config(family, key, bad), source="DIR/config.json")
        assert e.value.message == f"DIR/config.json: {key} must be {kind}, not {bad!r} - {fix}"


@pytest.mark.live
@pytest.mark.parametrize("family,key,least", INTEGER_SETTINGS, ids=[f"{f}-{k}" for f, k, _ in INTEGER_SETTINGS])
def test_transformers_refuses_the_integer_settings_bertfeat_refuses(family, key, least):
    """The other side of the test above: transformers' own config class refuses 6.0, true and "6" for the same keys,
    but for ModernBERT's global_attn_every_n_layers (3.0, true) and sliding_window (true), which its strict fields
    leave unchecked: taken there, and refused by bertfeat (a layer count of true is no setting a model is saved with)."""
    from conftest import need_live

    need_live("transformers")
    from huggingface_hub.errors import StrictDataclassError
    from transformers import CONFIG_MAPPING

    good = FAMILY_CONFIGS[family].get(key, 32)
    CONFIG_MAPPING[family].from_dict({**FAMILY_CONFIGS[family], key: good})
    lenient = {("modernbert", "global_attn_every_n_layers"): ("3.0", "True"), ("modernbert", "sliding_window"): ("True",)}
    for bad in (float(good), True, str(good)):
        if repr(bad) in lenient.get((family, key), ()):
            CONFIG_MAPPING[family].from_dict({**FAMILY_CONFIGS[family], key: bad})  # taken: bertfeat is stricter here
            continue
        with pytest.raises((StrictDataclassError, TypeError)):
            CONFIG_MAPPING[family].from_dict({**FAMILY_CONFIGS[family], key: bad})


@pytest.mark.parametrize("family", list(FAMILY_CONFIGS))
@pytest.mark.parametrize("pad", [100, 10**6, -1])
def test_pad_token_id_outside_the_vocabulary_is_refused(family, pad):
    """pad_token_id 100 of a vocabulary of 100 ids loaded (a negative one was refused without naming vocab_size):
    transformers refuses it (nn.Embedding: "Padding_idx must be within num_embeddings"; MPNet's model alone ignores
    it). The last id loads."""
    with pytest.raises(ConfigError) as e:
        BertConfig.from_dict(_family_config(family, "pad_token_id", pad), source="DIR/config.json")
    assert e.value.message == (f"DIR/config.json: pad_token_id {pad} is not a token of the vocabulary (vocab_size 100: "
                               "ids 0 .. 99) - restore config.json from the checkpoint")
    assert BertConfig.from_dict(_family_config(family, "pad_token_id", 99)).pad_token_id == 99


def test_mpnet_takes_no_type_vocab_size():
    """MPNetConfig has no type_vocab_size and transformers ignores one: bertfeat does too (it was checked as a setting)."""
    for v in (2, 2.0, "2", True):
        assert BertConfig.from_dict({"model_type": "mpnet", "type_vocab_size": v}).type_vocab_size == 1


def test_gelu_python_is_the_exact_gelu():
    """transformers' ACT2FN["gelu_python"] is the erf GELU written out in torch (refused before): it runs as "gelu",
    and config.json's name is kept in the record. ModernBERT's hidden_activation / classifier_activation too."""
    c = BertConfig.from_dict({"hidden_act": "gelu_python"})
    assert (c.hidden_act, c.act, c.to_dict()["hidden_act"]) == ("gelu_python", "gelu", "gelu_python")
    m = BertConfig.from_dict({"model_type": "modernbert", "num_hidden_layers": 3, "hidden_activation": "gelu_python",
                              "classifier_activation": "gelu_python"})
    assert (m.act, m.classifier_act) == ("gelu", "gelu")
    assert BertConfig.from_dict({"hidden_act": "gelu_new"}).act == "gelu_new"


@pytest.mark.parametrize("arch,model_type", [("RobertaModel", "roberta"), ("XLMRobertaForMaskedLM", "xlm-roberta"),
                                             ("CamembertForSequenceClassification", "camembert"),
                                             ("ElectraForPreTraining", "electra"), ("MPNetForMaskedLM", "mpnet")])
def test_no_model_type_with_another_familys_architecture_is_refused(arch, model_type):
    """Read as BERT's (the default without model_type), a RobertaModel's weights loaded (BERT's tensor names) and gave
    other vectors than transformers' (positions from 0, not pad_token_id + 1), silently."""
    d = {"architectures": [arch], "pad_token_id": 1, "type_vocab_size": 1, "max_position_embeddings": 514}
    with pytest.raises(ConfigError) as e:
        BertConfig.from_dict(d, source="x/config.json")
    family = FAMILIES[model_type]
    assert e.value.message == (
        f"x/config.json has no model_type, and its architectures name {arch} ({family}, model_type '{model_type}') - "
        f'add "model_type": "{model_type}" to config.json (without it bertfeat reads the model as a BERT, which it is '
        "not; transformers refuses a config.json without model_type too)")
    assert BertConfig.from_dict({**d, "model_type": model_type}).model_type == model_type  # named: it loads


@pytest.mark.parametrize("archs", [["BertModel"], ["BertForMaskedLM", "BertForPreTraining"], [], None, "RobertaModel",
                                   ["RobertaPreLayerNormModel"], ["XLMRobertaXLModel"], [3]])
def test_no_model_type_is_still_bert_unless_the_architectures_name_another_family(archs):
    assert BertConfig.from_dict({"architectures": archs}).model_type == "bert"


@pytest.mark.parametrize("hidden,heads", [(30, 6), (36, 4), (9, 1)])
def test_a_modernbert_head_size_rotary_positions_cannot_turn_is_refused(hidden, heads):
    """An odd head size loaded, then every text failed in the forward pass with NumPy's broadcasting error (the CLI:
    'unexpected ValueError ... this is a bug in bertfeat'); transformers fails at the first text too."""
    d = {"model_type": "modernbert", "hidden_size": hidden, "num_attention_heads": heads, "num_hidden_layers": 2}
    with pytest.raises(ConfigError) as e:
        BertConfig.from_dict(d, source="x/config.json")
    assert e.value.message == (
        f"x/config.json: hidden_size {hidden} / num_attention_heads {heads} gives an odd head size {hidden // heads}, "
        "which ModernBERT's rotary positions cannot turn (they rotate features in pairs) - restore config.json from "
        "the checkpoint (a ModernBERT's head size is even)")
    assert BertConfig.from_dict({**d, "hidden_size": 2 * hidden}).head_size == 2 * hidden // heads  # even: it loads
    assert BertConfig.from_dict({**d, "model_type": "bert"}).head_size == hidden // heads  # no rotary: any size


def test_missing_and_unreadable_files(tmp_path):
    with pytest.raises(ConfigError, match="config.json not found - a model directory needs config.json"):
        BertConfig.from_file(tmp_path / "config.json")
    (tmp_path / "config.json").write_bytes(b"\xff\xfe{")
    with pytest.raises(ConfigError, match="is not valid JSON"):
        BertConfig.from_file(tmp_path / "config.json")


def test_position_ids_only_when_a_real_token_is_the_padding_id():
    """RoBERTa-style positions: None (offset + arange) for ordinary right-padded batches; transformers' cumsum rule
    when a real token is the padding id (a literal <pad>): it gets padding_idx, later tokens count on from there."""
    import numpy as np

    rob = BertConfig.from_dict({"model_type": "roberta", "pad_token_id": 1})
    padded = np.array([[0, 5, 6, 2, 1, 1], [0, 7, 2, 1, 1, 1], [0, 5, 6, 7, 8, 2]])
    assert rob.position_ids(padded) is None
    assert BertConfig.from_dict({"model_type": "bert"}).position_ids(np.array([[101, 0, 5, 102]])) is None
    literal = np.array([[0, 5, 1, 6, 2, 1], [0, 7, 2, 1, 1, 1]])
    np.testing.assert_array_equal(rob.position_ids(literal), [[2, 3, 1, 4, 5, 1], [2, 3, 4, 1, 1, 1]])


@pytest.mark.parametrize("value,types,message", [
    ("abc", int, 'f.json: k is "abc", not an integer'),
    (True, int, "f.json: k is true, not an integer"),
    ([1], dict, "f.json: k is a JSON list, not a JSON object"),
    ("3", (int, float), 'f.json: k is "3", not a number'),
    (3, (str, list), "f.json: k is 3, not a string or list"),
])
def test_typed_refuses_with_one_line(value, types, message):
    from bertfeat.model.config import typed

    with pytest.raises(ConfigError) as e:
        typed(value, types, "f.json: k")
    assert e.value.what == message and "\n" not in e.value.message
    assert typed(None, int, "x", 7) == 7 and typed(2, (int, float), "x") == 2 and typed(2.5, float, "x") == 2.5


@pytest.mark.parametrize("d, shown", [
    ({"num_attention_heads": None}, "num_attention_heads"),
    ({"layer_norm_eps": None}, "layer_norm_eps"),
    ({"type_vocab_size": None}, "type_vocab_size"),
    ({"model_type": "distilbert", "n_heads": None}, "n_heads"),
    ({"model_type": "distilbert", "activation": None}, "activation"),
    ({"model_type": "electra", "embedding_size": None}, "embedding_size"),
    ({"model_type": "roberta", "layer_norm_eps": None}, "layer_norm_eps"),
    ({"model_type": "modernbert", "norm_eps": None}, "norm_eps"),
    ({"model_type": "mpnet", "relative_attention_num_buckets": None}, "relative_attention_num_buckets"),
])
def test_a_null_setting_is_refused_not_replaced_by_the_default(d, shown):
    """Found by the hostile-model audit (round seven): a config.json setting given as null was read as absent, so
    bertfeat ran its default in its place (num_attention_heads 12 for a 4-head model whose hidden size 12 divides:
    other vectors, silently), where transformers 5 refuses the file ("expected int, got NoneType")."""
    with pytest.raises(ConfigError) as e:
        BertConfig.from_dict(d, source="config.json")
    assert str(e.value) == (f"config.json: {shown} is null, not a value (transformers refuses it too) - restore "
                            "config.json from the checkpoint: bertfeat does not put a default in place of a setting "
                            "the model's config.json gives as null")


@pytest.mark.parametrize("d", [
    {"pad_token_id": None},  # transformers takes a null pad_token_id
    {"model_type": "distilbert", "layer_norm_eps": None, "type_vocab_size": None},  # settings DistilBERT has not
    {"model_type": "mpnet", "type_vocab_size": None},
    {"embedding_size": None, "relative_attention_num_buckets": None, "global_rope_theta": None},  # not BERT's
])
def test_a_null_setting_the_family_does_not_read_still_loads(d):
    BertConfig.from_dict(d)


@pytest.mark.live
@pytest.mark.parametrize("model_type, key, refused", [
    ("bert", "num_attention_heads", True), ("bert", "type_vocab_size", True), ("roberta", "layer_norm_eps", True),
    ("distilbert", "n_heads", True), ("electra", "embedding_size", True), ("modernbert", "norm_eps", True),
    ("mpnet", "relative_attention_num_buckets", True), ("bert", "pad_token_id", False),
    ("distilbert", "layer_norm_eps", False), ("mpnet", "type_vocab_size", False), ("bert", "embedding_size", False),
])
def test_a_null_setting_is_refused_where_transformers_refuses_it(model_type, key, refused):
    transformers = pytest.importorskip("transformers")
    cls = transformers.AutoConfig.for_model(model_type).__class__
    try:
        cls.from_dict({key: None})
        theirs = False
    except Exception:  # transformers 5's StrictDataclassFieldValidationError
        theirs = True
    try:
        BertConfig.from_dict({"model_type": model_type, key: None})
        ours = False
    except ConfigError:
        ours = True
    assert theirs == ours == refused
