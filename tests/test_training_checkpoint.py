"""A run_pretraining.py-style object checkpoint loads through bert_tf.checkpoints like any format."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from bert_tf import BertConfig, BertEncoder, BertPretrainer, BertTfError, checkpoints
from bert_tf.checkpoints import convert

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


@pytest.mark.parametrize(("checkpoint_layers", "config_layers"), [(2, 1), (1, 2)])
def test_training_checkpoint_of_another_size_is_one_sentence(tmp_path, checkpoint_layers, config_layers):
    write_training_checkpoint(tmp_path, BertConfig.from_preset("tiny", vocab_size=60,
                                                               num_hidden_layers=checkpoint_layers))
    # The config lies about the layer count. A pre-trainer has 5 embedding, 16 a layer, 2 pooler, 7 head variables.
    BertConfig.from_preset("tiny", vocab_size=60, num_hidden_layers=config_layers).to_json_file(
        tmp_path / "bert_config.json")
    with pytest.raises(BertTfError) as error:
        checkpoints.load_encoder(tmp_path)
    assert str(error.value).endswith(
        f"does not hold a BERT pre-training model of the config in {tmp_path / 'bert_config.json'} (it holds "
        f"{14 + 16 * checkpoint_layers} model variables where the config gives {14 + 16 * config_layers})."
    )


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


def test_bert_convert_writes_a_pre_training_run_in_every_format(tmp_path, capsys):
    original = write_training_checkpoint(tmp_path / "run")
    for fmt in checkpoints.FORMATS:
        output = tmp_path / fmt
        assert convert.main(["--input", str(tmp_path / "run"), "--output", str(output), "--output_format", fmt]) == 0
        assert capsys.readouterr().out == (f"Wrote the BertPretrainer (1 layers, hidden size 128) of the "
                                           f"run_pretraining.py checkpoint {tmp_path / 'run' / 'ckpt-1'} as a "
                                           f"{convert._FORMAT_NAMES[fmt]} checkpoint to {output}.\n")
        converted = checkpoints.load_encoder(output)
        np.testing.assert_array_equal(np.asarray(converted(batch())["sequence_output"]),
                                      np.asarray(original.encoder(batch())["sequence_output"]))


def test_a_run_without_its_config_takes_bert_config_file(tmp_path, capsys):
    write_training_checkpoint(tmp_path / "run")
    (tmp_path / "run" / "bert_config.json").rename(tmp_path / "config.json")
    argv = ["--input", str(tmp_path / "run"), "--output", str(tmp_path / "out"), "--output_format", "hf"]
    assert convert.main(argv) == 1
    assert capsys.readouterr().err.endswith("does not exist); pass --bert_config_file, the config the run was trained "
                                            "with.\n")
    assert convert.main([*argv, "--bert_config_file", str(tmp_path / "config.json")]) == 0
    assert checkpoints.read_checkpoint(tmp_path / "out").config == CONFIG


JAX_LOAD = """
import sys
from bert_tf import BertTfError, checkpoints
try:
    checkpoints.load_encoder(sys.argv[1])
except BertTfError as error:
    print(error)
"""


def test_under_jax_a_training_checkpoint_says_to_convert_it(tmp_path, project):
    pytest.importorskip("jax", reason="the JAX backend needs jax installed")
    write_training_checkpoint(tmp_path)
    result = project.run("-c", JAX_LOAD, str(tmp_path), env={"KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu"},
                         check=True, timeout=120)
    assert result.stdout.strip() == (f"The training checkpoint {tmp_path / 'ckpt-1'} loads with "
                                     "KERAS_BACKEND=tensorflow only (this is jax); convert it first: bert-convert "
                                     f"--input {tmp_path} --output OUT --output_format keras.")
