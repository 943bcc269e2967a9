"""oneDNN's bf16 math mode (`bert_tf.onednn`) and the projections it reaches
(`bert_tf.layers.PositionwiseDense`), each in a fresh process: TensorFlow takes the mode
once, at a process's first matmul."""

from __future__ import annotations

import json

import pytest

from tests.conftest import ProjectProcesses


# A projection of a fresh process: our layer and Keras' Dense on the same weights, against
# float64 NumPy, with the mode asked for before any matmul (or after one, with "late").
PROJECTIONS = r"""
import json, os, sys
import numpy as np
import keras
from bert_tf import onednn
from bert_tf.layers import PositionwiseDense

rng = np.random.default_rng(0)
x = rng.standard_normal((4, 16, 64)).astype("float32")
ours, dense = PositionwiseDense(48), keras.layers.Dense(48)
ours.build(x.shape), dense.build(x.shape)
dense.set_weights(ours.get_weights())
if sys.argv[1] == "late":
    keras.ops.convert_to_numpy(ours(x))
active = onednn.enable_bf16_math()
kernel, bias = (w.astype("float64") for w in ours.get_weights())
exact = x.astype("float64") @ kernel + bias
error = lambda layer: float(np.abs(keras.ops.convert_to_numpy(layer(x)) - exact).max() / np.abs(exact).max())
print(json.dumps({"active": active, "ours": error(ours), "dense": error(dense),
                  "left_in_environment": onednn.ENVIRONMENT_VARIABLE in os.environ}))
"""


def projections(project: ProjectProcesses, when: str) -> dict:
    done = project.run("-c", PROJECTIONS, when)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.usefixtures("bf16_math_cpu")
def test_the_mode_rounds_our_projections_to_bf16_and_not_dense(project):
    """In the mode our projections are float32 products of bf16-rounded inputs (relative error
    ~1e-3, where float32 gives ~1e-7); Keras' Dense, a 2-D MatMul on oneDNN's sgemm API,
    is not reached by it (why the encoder uses PositionwiseDense). The variable is not left
    for child processes."""
    result = projections(project, "first")
    assert result["active"] is True
    assert 1e-4 < result["ours"] < 2e-2
    assert result["dense"] < 1e-5
    assert result["left_in_environment"] is False


@pytest.mark.usefixtures("bf16_math_cpu")
def test_the_mode_is_refused_after_a_matmul(project):
    """TensorFlow reads the mode at a process's first matmul: asked for later, it does not take,
    `enable_bf16_math` says so, and the projections stay float32."""
    result = projections(project, "late")
    assert result["active"] is False
    assert result["ours"] < 1e-5
    assert result["left_in_environment"] is False
