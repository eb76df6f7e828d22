"""BertConfig: what is read from config.json, defaults, and what is refused (unit level; the same errors
through Encoder and the CLI are in test_weights.py)."""

from __future__ import annotations

import pytest

from bertfeat.config import SUPPORTED_ACTS, BertConfig
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
    c = BertConfig.from_dict({"hidden_size": 768.0, "num_hidden_layers": 2.0})  # integral floats are integers
    assert (c.hidden_size, c.num_hidden_layers) == (768, 2) and isinstance(c.hidden_size, int)


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
    ({"vocab_size": True}, ["vocab_size must be a positive integer, not True"]),
    ({"intermediate_size": 3072.5}, ["intermediate_size must be a positive integer"]),
    ({"layer_norm_eps": "1e-12"}, ["layer_norm_eps must be a small positive number"]),
    ({"layer_norm_eps": 0}, ["layer_norm_eps must be a small positive number"]),
])
def test_unsupported_configs(d, words):
    with pytest.raises(ConfigError) as e:
        BertConfig.from_dict(d, source="x/config.json")
    msg = e.value.message
    assert msg.startswith("x/config.json: ") and " - " in msg and "\n" not in msg
    for w in words:
        assert w in msg


def test_missing_and_unreadable_files(tmp_path):
    with pytest.raises(ConfigError, match="config.json not found - a model directory needs config.json"):
        BertConfig.from_file(tmp_path / "config.json")
    (tmp_path / "config.json").write_bytes(b"\xff\xfe{")
    with pytest.raises(ConfigError, match="is not valid JSON"):
        BertConfig.from_file(tmp_path / "config.json")
