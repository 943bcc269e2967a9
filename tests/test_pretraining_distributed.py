"""Multi-replica pre-training: the same update as one device with the same global batch.

- MultiWorkerMirroredStrategy: two worker processes on 127.0.0.1 (TF_CONFIG), on CPU.
- MirroredStrategy over two logical CPUs, with the forward/backward XLA-compiled (the
  TPU-readiness proxy; full-step XLA across replicas fails in TF, keras-team/keras#19005).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import textwrap

import numpy as np
import pytest
import tensorflow as tf

import run_pretraining
from tests.pretraining_helpers import run_flags, write_config, write_records

STEPS = 4


@pytest.fixture(scope="module")
def setup(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("distributed")
    data = write_records(root / "train.tfrecord", 96)
    config = write_config(root / "bert_config.json", dropout=0.0)  # replicas draw their own dropout masks
    single = str(root / "single")
    flags = run_flags(data, single, config, num_train_steps=STEPS, save_checkpoints_steps=STEPS)
    assert run_pretraining.main(["x", *flags]) == 0
    return {"root": str(root), "data": data, "config": config, "single": single}


def model_weights(output_dir: str) -> dict[str, np.ndarray]:
    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(output_dir))
    return {n: reader.get_tensor(n) for n in reader.get_variable_to_shape_map() if n.startswith("model/")}


def assert_same_weights(got: dict[str, np.ndarray], want: dict[str, np.ndarray], atol: float) -> None:
    assert sorted(got) == sorted(want)
    for name, value in want.items():
        np.testing.assert_allclose(got[name], value, atol=atol, err_msg=name)


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def test_two_workers_take_the_same_steps_as_one(setup, project):
    output = os.path.join(setup["root"], "two_workers")
    flags = run_flags(setup["data"], output, setup["config"], num_train_steps=STEPS, save_checkpoints_steps=2,
                      distribution_strategy="multi_worker_mirrored")  # fmt: skip
    cluster = {"worker": [f"127.0.0.1:{port}" for port in free_ports(2)]}
    workers = []
    for index in range(2):
        tf_config = json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})
        workers.append(
            project.start(
                "run_pretraining.py", *flags, env={"TF_CONFIG": tf_config}, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )  # fmt: skip
        )
    results = [worker.communicate(timeout=300) for worker in workers]
    for worker, (_, stderr) in zip(workers, results):
        assert worker.returncode == 0, stderr[-3000:]
    assert results[0][0].count("step ") == 2 and "step" not in results[1][0]  # only the chief reports
    assert tf.train.get_checkpoint_state(output).all_model_checkpoint_paths[-2:] == [
        os.path.join(output, "ckpt-2"), os.path.join(output, "ckpt-4")
    ]  # fmt: skip
    assert not [name for name in os.listdir(output) if name.startswith(".worker")]  # scratch removed
    assert_same_weights(model_weights(output), model_weights(setup["single"]), atol=1e-5)


MIRRORED_SCRIPT = textwrap.dedent(
    """
    import sys
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    import run_pretraining
    from bert_tf.training import PretrainingRun

    run_pretraining.FLAGS(["x", *sys.argv[1:]])
    options = run_pretraining.options_from_flags(run_pretraining.FLAGS)
    run = PretrainingRun(options, tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]))
    run.restore()
    run.train()
    print("replicas", run.strategy.num_replicas_in_sync)
    gradients = run.trainer._gradients  # the forward/backward, alone under XLA
    print("compiled", gradients._jit_compile and gradients.experimental_get_tracing_count() > 0)
    """
)


def test_mirrored_replicas_with_xla_forward_backward_match_one_device(setup, project):
    output = os.path.join(setup["root"], "mirrored")
    flags = run_flags(setup["data"], output, setup["config"], num_train_steps=STEPS, save_checkpoints_steps=STEPS,
                      jit_compile=True)  # fmt: skip
    result = project.run("-c", MIRRORED_SCRIPT, *flags, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "replicas 2" in result.stdout
    assert "compiled True" in result.stdout
    assert_same_weights(model_weights(output), model_weights(setup["single"]), atol=1e-4)
