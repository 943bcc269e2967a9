"""A pre-training --output_dir belongs to one run: a restart goes on only with the settings
that trained its checkpoint, and a run that cannot work says so before it makes or trains
anything."""

from __future__ import annotations

import json
import os
import pathlib
import shutil

import pytest

from bert_tf.training import cli as run_pretraining
from tests.pretraining_helpers import fails_with, run_flags, write_config, write_records


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("pretraining_run_dir")
    return {
        "root": str(root),
        "data": write_records(root / "train.tfrecord", 96),
        "other": write_records(root / "other.tfrecord", 64, seed=3),
        "config": write_config(root / "bert_config.json"),
    }


def test_a_restart_with_other_settings_is_refused(files, tmp_path, capsys):
    out = tmp_path / "run"
    # A warm-up as long as the run: the peak is never reached, which the log says.
    assert run_pretraining.main(run_flags(files["data"], str(out), files["config"], num_warmup_steps=6)) == 0
    assert ("Warning: --num_warmup_steps=6 is not below --num_train_steps=6: the learning rate never reaches "
            "--learning_rate.") in capsys.readouterr().out
    saved_config = (out / "bert_config.json").read_text()
    relu = pathlib.Path(files["root"]) / "relu.json"
    relu.write_text(json.dumps({**json.loads(saved_config), "hidden_act": "relu"}))
    for overrides, change in [
        ({"train_batch_size": 16}, "train_batch_size was 8, now 16"),
        ({"learning_rate": 1e-2}, "learning_rate was 0.001, now 0.01"),
        ({"num_train_steps": 12}, "num_train_steps was 6, now 12"),
        ({"optimizer": "lamb", "random_seed": 7}, "optimizer was adamw, now lamb, seed was 12345, now 7"),
        ({"bert_config_file": str(relu)}, "bert_config.hidden_act was gelu, now relu"),
        ({"input_file": files["other"]}, "input_files differ in names or sizes"),
    ]:
        flags = run_flags(files["data"], str(out), files["config"], num_warmup_steps=6)
        flags += [f"--{name}={value}" for name, value in overrides.items()]
        fails_with(capsys, flags, f"--output_dir {out} holds the checkpoint of a run with other settings ({change}), "
                                  "which this run would resume; repeat that run's settings")
    assert (out / "bert_config.json").read_text() == saved_config  # not rewritten by a refused run
    # The same corpus elsewhere (moved, or copied to a faster disk) is the same input.
    moved = tmp_path / "moved" / "train.tfrecord"
    moved.parent.mkdir()
    shutil.copyfile(files["data"], moved)
    assert run_pretraining.main(run_flags(str(moved), str(out), files["config"], num_warmup_steps=6)) == 0
    assert "Training already reached step 6 of 6." in capsys.readouterr().out
    # Evaluating it says so (it said "Resuming from").
    assert run_pretraining.main(run_flags(files["data"], str(out), files["config"], do_train=False, do_eval=True)) == 0
    assert f"Evaluating {out / 'ckpt-6'} at step 6." in capsys.readouterr().out


def test_an_evaluation_without_a_checkpoint_is_refused(files, tmp_path, capsys):
    out = tmp_path / "typo"
    fails_with(capsys, run_flags(files["data"], str(out), files["config"], do_train=False, do_eval=True),
               f"error: --output_dir {out} holds no checkpoint to evaluate; give the --output_dir of a "
               "run_pretraining.py run, or --init_checkpoint.")
    assert not out.exists()


def test_flags_that_cannot_work_are_refused_before_training_and_leave_nothing(files, tmp_path, capsys):
    out = tmp_path / "out"
    fails_with(capsys, run_flags(files["data"], str(out), files["config"], do_eval=True, eval_batch_size=1000),
               "error: --input_file holds fewer than --eval_batch_size=1000 records to evaluate on.")
    fails_with(capsys, run_flags(files["data"], str(out), files["config"], gradient_accumulation_steps=3),
               "batch size 8 must be a multiple of 3")
    assert not os.path.exists(out)


def test_positions_of_checkpoints_no_longer_kept_go_whatever_input_they_were_of(tmp_path):
    """An output dir restarted on another input (its fingerprint changes with the worker count) kept the
    first input's positions, 6.5 MB each at BERT's shuffle buffer, for ever."""
    import tensorflow as tf

    from bert_tf.training.input_state import InputPositions
    from bert_tf.training.runloop import OutputDir

    output = OutputDir(str(tmp_path), tf.distribute.get_strategy())
    state = tf.train.Checkpoint(value=tf.Variable(1.0))
    first = InputPositions(output, "first-input", keep_steps=20)
    for step in (10, 20):
        first.save(state, step)
    second = InputPositions(output, "second-input", keep_steps=20)

    def positions() -> list[str]:
        return sorted(str(path.relative_to(tmp_path / "input_state")) for path in tmp_path.glob("input_state/**/*.index"))

    second.save(state, 30)  # ckpt-10 is no longer kept; ckpt-20 is, with the first input's position
    assert positions() == ["first-input/worker-0/input-20.index", "second-input/worker-0/input-30.index"]
    second.save(state, 40)
    assert positions() == ["second-input/worker-0/input-30.index", "second-input/worker-0/input-40.index"]
    assert sorted(path.name for path in (tmp_path / "input_state").iterdir()) == ["second-input"]
    assert second.restore(state, 40) and not first.restore(state, 20)
