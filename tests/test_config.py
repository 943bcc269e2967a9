"""BertConfig reads and writes Google's bert_config.json exactly, and refuses bad values."""

from __future__ import annotations

import json

import pytest

from bert_tf import BertConfig, BertConfigError, BertTfError

# Google's BERT-Base uncased bert_config.json, as released (uncased_L-12_H-768_A-12.zip).
GOOGLE_BASE_JSON = """{
  "attention_probs_dropout_prob": 0.1,
  "hidden_act": "gelu",
  "hidden_dropout_prob": 0.1,
  "hidden_size": 768,
  "initializer_range": 0.02,
  "intermediate_size": 3072,
  "max_position_embeddings": 512,
  "num_attention_heads": 12,
  "num_hidden_layers": 12,
  "type_vocab_size": 2,
  "vocab_size": 30522
}
"""


def test_reads_and_rewrites_google_file_byte_for_byte(tmp_path):
    source = tmp_path / "bert_config.json"
    source.write_text(GOOGLE_BASE_JSON)
    config = BertConfig.from_json_file(source)
    assert config == BertConfig.from_preset("base")
    assert config.hidden_act == "gelu"  # Google's "gelu" is the original tanh form
    config.to_json_file(tmp_path / "out.json")
    assert (tmp_path / "out.json").read_text() == GOOGLE_BASE_JSON


@pytest.mark.parametrize(
    "name,layers,hidden,heads",
    [("tiny", 2, 128, 2), ("mini", 4, 256, 4), ("small", 4, 512, 8), ("medium", 8, 512, 8), ("base", 12, 768, 12), ("large", 24, 1024, 16)],
)
def test_presets_follow_the_paper(name, layers, hidden, heads):
    config = BertConfig.from_preset(name)
    assert (config.num_hidden_layers, config.hidden_size, config.num_attention_heads) == (layers, hidden, heads)
    assert config.intermediate_size == 4 * hidden


def test_hf_config_maps_activation_names():
    hf = json.loads(GOOGLE_BASE_JSON) | {"model_type": "bert", "layer_norm_eps": 1e-12}
    assert BertConfig.from_dict(hf).hidden_act == "gelu_exact"  # HF "gelu" is erf
    assert BertConfig.from_dict(hf | {"hidden_act": "gelu_new"}).hidden_act == "gelu"
    exported = BertConfig(hidden_act="gelu").to_hf_dict()
    assert exported["hidden_act"] == "gelu_pytorch_tanh" and exported["model_type"] == "bert"


@pytest.mark.parametrize(
    "overrides,message",
    [
        ({"hidden_size": 100, "num_attention_heads": 12}, r"hidden_size \(100\) must be divisible by num_attention_heads \(12\)"),
        ({"hidden_act": "swish2"}, r"hidden_act 'swish2' is unknown; use one of gelu, gelu_exact"),
        ({"num_hidden_layers": 0}, r"num_hidden_layers must be a positive integer, got 0"),
        ({"hidden_dropout_prob": 1.5}, r"hidden_dropout_prob must be in \[0, 1\)"),
    ],
)
def test_bad_values_are_one_clear_sentence(overrides, message):
    with pytest.raises(BertConfigError, match=message) as error:
        BertConfig(**overrides)
    assert isinstance(error.value, BertTfError)
    assert str(error.value).count("\n") == 0


def test_file_errors_name_the_file(tmp_path):
    with pytest.raises(BertConfigError, match="does not exist"):
        BertConfig.from_json_file(tmp_path / "missing.json")
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    with pytest.raises(BertConfigError, match=f"{broken} is not valid JSON"):
        BertConfig.from_json_file(broken)
    partial = tmp_path / "partial.json"
    partial.write_text('{"hidden_size": 8}')
    with pytest.raises(BertConfigError, match="lacks the BERT config keys: attention_probs_dropout_prob"):
        BertConfig.from_json_file(partial)
    with pytest.raises(BertConfigError, match="Unknown BERT preset 'huge'"):
        BertConfig.from_preset("huge")
