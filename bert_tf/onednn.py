"""oneDNN's bf16 math mode: a float32 model whose matmuls run in bfloat16.

With `TF_SET_ONEDNN_FPMATH_MODE=BF16`, TensorFlow's oneDNN matmuls round their float32
inputs to bfloat16 and accumulate in float32 (on AMX where the CPU has it), while
LayerNorm, softmax, GELU and everything else stay float32: no casts in the graph, which
is what keeps the `mixed_bfloat16` policy at 1.1-1.3x float32 on a CPU (its casts and
bf16 element-wise ops cost what the matmuls gain; bench/README.md). Measured on an Intel
Xeon with AMX, MiniLM-L6 shape, forward of 32 x 64 tokens: float32 197 ms, bf16 math mode
108 ms, `mixed_bfloat16` 124 ms. The encoder's projections are written so that the mode
reaches them (`bert_tf.layers.PositionwiseDense`).

Two things to know, both TensorFlow's:
- the mode is process-wide: every float32 matmul of the process runs so, whatever model
  it belongs to;
- TensorFlow reads the variable once, when the process creates its first oneDNN matmul;
  set later, it is ignored. `enable_bf16_math` therefore checks that the mode took.

`bert-predict --mixed_precision=bf16` (one model a process) uses it where it takes and
casts the projections to bfloat16 elsewhere (`bert_tf.layers.compute_projections_in`: the
mode did not take on an AMD EPYC with AVX512-BF16); a server of a `bert-export` SavedModel gets it by
starting with the variable set. TensorFlow-only: not a model module.
"""

from __future__ import annotations

import os

ENVIRONMENT_VARIABLE = "TF_SET_ONEDNN_FPMATH_MODE"


def enable_bf16_math() -> bool:
    """Asks for the bf16 math mode and returns whether this process's float32 matmuls now
    run in it: False where the CPU or TensorFlow build does not take it, where the process
    already ran a matmul, or where the environment names another mode (kept). The variable
    is set only for the check, whose matmul is when TensorFlow reads it: child processes
    do not inherit it."""
    if ENVIRONMENT_VARIABLE in os.environ:
        return bf16_math_active()
    os.environ[ENVIRONMENT_VARIABLE] = "BF16"
    try:
        return bf16_math_active()
    finally:
        del os.environ[ENVIRONMENT_VARIABLE]


def bf16_math_active() -> bool:
    """Whether a float32 batch matmul of this process rounds its inputs to bfloat16:
    1 + 2^-10 survives float32 (24 significant bits), not bfloat16 (8)."""
    import tensorflow as tf

    ones = tf.fill([1, 16, 16], 1.0 + 2.0**-10)
    product = tf.function(tf.linalg.matmul)(ones, tf.eye(16, batch_shape=[1]))
    return float(product[0, 0, 0]) == 1.0
