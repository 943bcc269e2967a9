"""Google's original TF1 checkpoints: `bert_model.ckpt.{index,data-*}` + `bert_config.json`.

Variables are stored by name (see shared REFERENCE.md), kernels [in, out]. Reading
skips optimizer state; writing produces the same name-based bundle that
`tf.compat.v1.train.Saver` writes, so the original code, `tf.train.load_checkpoint`
and Model Garden's converter read it (with its `bert_config.json`, unless the model's
activation is one the original has no name for, e.g. the erf GELU: a warning says so).

Example:
>>> import os, tempfile
>>> import numpy as np
>>> from bert_tf import BertConfig
>>> directory = tempfile.mkdtemp()
>>> _ = write(directory, {"bert/pooler/dense/bias": np.zeros(128, np.float32)},
...           BertConfig.from_preset("tiny"))
>>> sorted(os.listdir(directory))[:2]
['bert_config.json', 'bert_model.ckpt.data-00000-of-00001']
>>> list(read(directory).weights)
['bert/pooler/dense/bias']
"""

from __future__ import annotations

import glob
import os
import re
import warnings

import numpy as np
import tensorflow as tf

from bert_tf.checkpoints.base import Checkpoint, first_line, vocab_beside
from bert_tf.checkpoints.names import TF1_NAMING
from bert_tf.config import BertConfig
from bert_tf.errors import BertTfError

CHECKPOINT_NAME = "bert_model.ckpt"
CONFIG_NAME = "bert_config.json"

# Optimizer state, not weights: the original AdamWeightDecayOptimizer's slots
# (<var>/adam_m, <var>/adam_v), tf.compat.v1 Adam's (<var>/Adam, <var>/Adam_1,
# beta1_power, beta2_power) and the step counter.
_NOT_WEIGHTS = re.compile(r"/(adam_[mv]|Adam(_1)?)$|^(global_step|beta[12]_power)$")
# The activations the original modeling.py's get_activation knows.
_ORIGINAL_ACTIVATIONS = ("gelu", "relu", "tanh")
_SHARD_SUFFIX = re.compile(r"\.(index|data-\d{5}-of-\d{5})$")


def find_prefix(path: str) -> str | None:
    """The TF1 checkpoint prefix that `path` names, or None if it names none.

    `path` may be the prefix itself, one of its files, or a directory holding one
    checkpoint (or a `checkpoint` state file pointing at one).
    """
    if os.path.isfile(path) and _SHARD_SUFFIX.search(path):
        path = _SHARD_SUFFIX.sub("", path)
    if os.path.isfile(f"{path}.index"):
        return path
    if not os.path.isdir(path):
        return None
    latest = tf.train.latest_checkpoint(path)
    if latest and os.path.isfile(f"{latest}.index"):
        return latest
    prefixes = sorted(index[: -len(".index")] for index in glob.glob(os.path.join(path, "*.index")))
    if len(prefixes) > 1:
        raise BertTfError(
            f"Directory {path} holds {len(prefixes)} TF1 checkpoints; pass the prefix of one, e.g. {prefixes[-1]}."
        )
    return prefixes[0] if prefixes else None


def read(path: str, config_file: str | None = None) -> Checkpoint:
    """Reads the TF1 checkpoint at `path` and its config: `config_file`, else the
    `bert_config.json` beside it."""
    prefix = find_prefix(path)
    if prefix is None:
        raise BertTfError(f"{path} is not a TF1 checkpoint (no {path}.index).")
    directory = os.path.dirname(prefix)
    if config_file is None:
        config_file = os.path.join(directory, CONFIG_NAME)
        if not os.path.isfile(config_file):
            raise BertTfError(f"The TF1 checkpoint {prefix} has no {CONFIG_NAME} beside it ({config_file} does not "
                              "exist); pass --bert_config_file.")
    config = BertConfig.from_json_file(config_file)
    try:
        reader = tf.train.load_checkpoint(prefix)
        names = [name for name in reader.get_variable_to_shape_map() if not _NOT_WEIGHTS.search(name)]
        weights = {name: reader.get_tensor(name) for name in sorted(names)}
    # A damaged bundle surfaces as an OpError, or as a ValueError / IndexError from the reader.
    except (tf.errors.OpError, ValueError, IndexError) as error:
        raise BertTfError(f"TF1 checkpoint {prefix} cannot be read ({first_line(error)}).") from None
    return Checkpoint("tf1", prefix, config, config_file, weights, TF1_NAMING, vocab_beside(directory))


def write(directory: str, weights: dict[str, np.ndarray], config: BertConfig) -> str:
    """Writes `bert_model.ckpt` (TF1 names -> values) and `bert_config.json`; returns the prefix."""
    prefix = os.path.join(directory, CHECKPOINT_NAME)
    names = list(weights)
    # SaveV2 is the op behind tf.compat.v1.train.Saver: a name-based bundle, no object graph.
    tf.raw_ops.SaveV2(
        prefix=prefix,
        tensor_names=names,
        shape_and_slices=[""] * len(names),
        tensors=[np.asarray(weights[name]) for name in names],
    )
    # The state file lets tf.train.latest_checkpoint(directory) find the prefix.
    with open(os.path.join(directory, "checkpoint"), "w", encoding="utf-8") as handle:
        handle.write(f'model_checkpoint_path: "{CHECKPOINT_NAME}"\n')
        handle.write(f'all_model_checkpoint_paths: "{CHECKPOINT_NAME}"\n')
    config.to_json_file(os.path.join(directory, CONFIG_NAME))
    return prefix


def warn_unless_original_activation(config: BertConfig, directory: str) -> None:
    """Warns when the checkpoint written to `directory` names an activation the original cannot read."""
    if config.hidden_act not in _ORIGINAL_ACTIVATIONS:
        # Google's format has no name for it: the original's "gelu" is the tanh form.
        warnings.warn(f"{CONFIG_NAME} in {directory} says hidden_act={config.hidden_act!r}, which bert_tf reads but "
                      f"the original code and Model Garden do not (they know {', '.join(_ORIGINAL_ACTIVATIONS)}); "
                      "give them the HuggingFace format, or edit it to 'gelu' to run the tanh approximation.",
                      stacklevel=3)
