"""A run killed with SIGKILL and restarted ends like a run never interrupted."""

from __future__ import annotations

import signal
import subprocess

import numpy as np
import tensorflow as tf

import run_pretraining
from tests.pretraining_helpers import run_flags, write_config, write_records

STEPS = 30
KILL_AFTER = "step 6/"


def final_state(output_dir: str) -> dict[str, np.ndarray]:
    """Model weights, step, examples and optimiser state of the latest checkpoint."""
    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(output_dir))
    names = reader.get_variable_to_shape_map()
    kept = [n for n in names if n.startswith(("model/", "optimizer/", "global_step", "examples"))]
    return {name: reader.get_tensor(name) for name in kept}


def test_resume_after_sigkill_ends_at_the_same_step_examples_and_weights(tmp_path, project):
    data = write_records(tmp_path / "train.tfrecord", 160)
    config = write_config(tmp_path / "bert_config.json")  # with dropout: its RNG state is checkpointed too
    common = dict(num_train_steps=STEPS, num_warmup_steps=3, save_checkpoints_steps=3, iterations_per_loop=3)

    uninterrupted = str(tmp_path / "uninterrupted")
    assert run_pretraining.main(["x", *run_flags(data, uninterrupted, config, **common)]) == 0

    killed = str(tmp_path / "killed")
    flags = run_flags(data, killed, config, **common)
    process = project.start(
        "run_pretraining.py", *flags, env={"PYTHONUNBUFFERED": "1"}, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    for line in process.stdout:
        if line.startswith(KILL_AFTER):
            process.send_signal(signal.SIGKILL)
            break
    process.wait(timeout=60)
    assert process.returncode == -signal.SIGKILL
    at_kill = tf.train.latest_checkpoint(killed)
    assert at_kill is not None and not at_kill.endswith(f"ckpt-{STEPS}"), at_kill

    assert run_pretraining.main(["x", *flags]) == 0  # the same command, again
    resumed, reference = final_state(killed), final_state(uninterrupted)
    assert sorted(resumed) == sorted(reference)
    assert int(resumed["global_step/.ATTRIBUTES/VARIABLE_VALUE"]) == STEPS
    assert int(resumed["examples/.ATTRIBUTES/VARIABLE_VALUE"]) == STEPS * 8
    assert int(reference["examples/.ATTRIBUTES/VARIABLE_VALUE"]) == STEPS * 8
    for name, value in reference.items():
        np.testing.assert_allclose(resumed[name], value, rtol=1e-5, atol=1e-6, err_msg=name)
