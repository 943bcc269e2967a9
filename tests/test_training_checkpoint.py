"""A run_pretraining.py-style object checkpoint loads through bert_tf.checkpoints like any format."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from bert_tf import BertConfig, BertEncoder, BertPretrainer, BertTfError, checkpoints

CONFIG = BertConfig.from_preset("tiny", vocab_size=60, num_hidden_layers=1)


def batch():
    ids = np.array([[2, 7, 9, 3, 0, 0]], "int32")
    return {"input_word_ids": ids, "input_mask": (ids > 0).astype("int32"), "input_type_ids": np.zeros_like(ids)}


def write_training_checkpoint(directory, config=CONFIG) -> BertPretrainer:
    model = BertPretrainer(BertEncoder(config))
    step = tf.Variable(7, dtype=tf.int64)
    tf.train.CheckpointManager(tf.train.Checkpoint(model=model, global_step=step), str(directory), 2).save()
    config.to_json_file(directory / "bert_config.json")
    return model


def test_training_checkpoint_loads_as_encoder_and_pretrainer(tmp_path):
    original = write_training_checkpoint(tmp_path)
    assert checkpoints.detect_format(tmp_path) == "training"
    encoder = checkpoints.load_encoder(tmp_path)
    np.testing.assert_array_equal(
        np.asarray(encoder(batch())["sequence_output"]), np.asarray(original.encoder(batch())["sequence_output"])
    )
    pretrainer = checkpoints.load_pretrainer(tmp_path)
    inputs = {**batch(), "masked_lm_positions": np.array([[1, 2]], "int32")}
    np.testing.assert_array_equal(
        np.asarray(pretrainer(inputs)["masked_lm_logits"]), np.asarray(original(inputs)["masked_lm_logits"])
    )


def test_training_checkpoint_of_another_size_is_one_sentence(tmp_path):
    write_training_checkpoint(tmp_path, BertConfig.from_preset("tiny", vocab_size=60, num_hidden_layers=2))
    CONFIG.to_json_file(tmp_path / "bert_config.json")  # the config lies about the layer count
    with pytest.raises(BertTfError, match="does not hold a BERT pre-training model of the config"):
        checkpoints.load_encoder(tmp_path)


def test_an_incomplete_training_checkpoint_is_one_sentence(tmp_path):
    """A killed copy or a full disk: the variables' data file is gone or cut short."""
    write_training_checkpoint(tmp_path)
    (data,) = tmp_path.glob("ckpt-1.data-*")
    for damage in ("cut short", "missing"):
        if damage == "missing":
            data.unlink()
        else:
            data.write_bytes(data.read_bytes()[:100])
        with pytest.raises(BertTfError, match=r"^The training checkpoint \S+ckpt-1 is incomplete or damaged \(.+\); "
                                              r"pass another checkpoint"):
            checkpoints.load_encoder(tmp_path)
    with pytest.raises(BertTfError, match=r"^--init_checkpoint \S+nothing does not exist\.$"):
        checkpoints.load_into(BertEncoder(CONFIG), tmp_path / "nothing", flag="--init_checkpoint")
