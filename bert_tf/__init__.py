"""bert-tf: a faithful BERT (Devlin et al. 2018) in TensorFlow 2 and Keras 3.

The model modules (`layers`, `encoder`, `pretrainer`, `losses`) use `keras.ops` only,
so they also run with `KERAS_BACKEND=jax`; `tokenization` is pure Python; TF-only code
(tf.data, TFRecords, tensorflow-text, checkpoints) lives in its own modules.

The names below are imported on first use, so `import bert_tf.tokenization` (used by
the data generator's worker processes) does not pay for importing Keras.
"""

from __future__ import annotations

import importlib
import os

# TensorFlow's C++ start-up chatter (CUDA probes on CPU hosts, oneDNN notes) would bury
# the commands' one-line messages; set before TensorFlow is imported (it reads it then).
# TF_CPP_MIN_LOG_LEVEL=0 brings it back for debugging.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# TensorFlow runs its oneDNN kernels by default only on CPUs with AVX512-VNNI/BF16 or AMX;
# on an AVX2-only AMD EPYC it ran Eigen's instead: a MiniLM fine-tuning step (batch 32 x
# 256) took 13.9 s against 7.1 s with oneDNN, an inference forward 650 ms against 456
# (HF's PyTorch step: 8 s). TF_ENABLE_ONEDNN_OPTS=0 gives TensorFlow its own choice back.
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")

_EXPORTS = {
    "PRESETS": "bert_tf.config",
    "BertConfig": "bert_tf.config",
    "BertConfigError": "bert_tf.config",
    "BertTfError": "bert_tf.errors",
    "BertEncoder": "bert_tf.encoder",
    "BertPretrainer": "bert_tf.pretrainer",
    # The one name from outside bert_tf: a finished fine-tuning run's model (fine_tune
    # builds on bert_tf, so it is imported only when asked for).
    "load_task_model": "fine_tune.predictor",
}
__all__ = list(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'bert_tf' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value
