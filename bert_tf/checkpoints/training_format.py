"""Our pre-training checkpoints: `tf.train.Checkpoint(model=BertPretrainer, optimizer=...)`.

`run_pretraining.py` saves object-based checkpoints (`ckpt-N.index` / `.data-*`, the
model under the key `model`, plus optimizer, step and input state) with
`bert_config.json` beside them. Reading one builds a `BertPretrainer` of that config,
restores only the model from it, and hands its weights on under TF1 names, so every
loader (fine-tuning, conversion) accepts a pre-training output directory as it is;
`restore_into` fills an existing model in place instead (`checkpoints.load_into`,
pre-training's `--init_checkpoint`).
"""

from __future__ import annotations

import glob
import os

import keras
import tensorflow as tf
from tensorflow.core.protobuf import trackable_object_graph_pb2

from bert_tf.checkpoints import names
from bert_tf.checkpoints.base import Checkpoint, first_line, vocab_beside
from bert_tf.checkpoints.tf1 import CONFIG_NAME, find_prefix
from bert_tf.config import BertConfig
from bert_tf.encoder import BertEncoder
from bert_tf.errors import BertTfError
from bert_tf.pretrainer import BertPretrainer

MODEL_KEY = "model"


def find_training_prefix(path: str) -> str | None:
    """The prefix of an object-based checkpoint holding a `model`, or None."""
    prefix = find_prefix(path)
    if prefix is None:
        return None
    try:
        variables = tf.train.list_variables(prefix)
    except (tf.errors.OpError, ValueError):
        return None
    return prefix if any(name.startswith(f"{MODEL_KEY}/") for name, _ in variables) else None


def _variable_count(prefix: str, scope: tuple[str, ...]) -> int:
    """How many variables the checkpoint holds under the object path `scope` (e.g.
    `("model", "encoder")`), walking its object graph.

    Restoring checks that every variable of our model is in the checkpoint; this count
    catches the converse (a checkpoint with more layers than the config says).
    """
    graph = trackable_object_graph_pb2.TrackableObjectGraph()
    graph.ParseFromString(tf.train.load_checkpoint(prefix).get_tensor("_CHECKPOINTABLE_OBJECT_GRAPH"))
    roots = [0]
    for name in scope:
        roots = [child.node_id for node in roots for child in graph.nodes[node].children if child.local_name == name]
    seen: set[int] = set()
    while roots:
        node = roots.pop()
        if node not in seen:
            seen.add(node)
            roots.extend(child.node_id for child in graph.nodes[node].children)
    return sum(any(a.name == "VARIABLE_VALUE" for a in graph.nodes[n].attributes) for n in seen)


def read_config(path: str, config_file: str | None = None) -> tuple[str, BertConfig, str]:
    """(prefix, config, config file) of the pre-training checkpoint at `path`: the config
    of `config_file`, else the `bert_config.json` that run_pretraining.py writes beside it."""
    prefix = find_training_prefix(path)
    if prefix is None:
        raise BertTfError(f"{path} is not a bert_tf training checkpoint (no object-based checkpoint with a model).")
    if keras.backend.backend() != "tensorflow":  # tf.train.Checkpoint restores TensorFlow variables only
        raise BertTfError(f"The training checkpoint {prefix} loads with KERAS_BACKEND=tensorflow only (this is "
                          f"{keras.backend.backend()}); convert it first: bert-convert --input {path} --output OUT "
                          "--output_format keras.")
    if config_file is None:
        config_file = os.path.join(os.path.dirname(prefix), CONFIG_NAME)
        if not os.path.isfile(config_file):
            raise BertTfError(f"The training checkpoint {prefix} has no {CONFIG_NAME} beside it ({config_file} does "
                              "not exist); pass --bert_config_file, the config the run was trained with.")
    return prefix, BertConfig.from_json_file(config_file), config_file


def restore_into(model: BertEncoder | BertPretrainer, prefix: str, config_file: str) -> None:
    """Restores `model` in place from the checkpoint at `prefix`: a `BertPretrainer`
    whole, a `BertEncoder` from the checkpoint's encoder."""
    if isinstance(model, BertPretrainer):
        root, scope = model, (MODEL_KEY,)
    else:  # the pre-trainer tracks its encoder as `encoder`
        root, scope = tf.train.Checkpoint(encoder=model), (MODEL_KEY, "encoder")
    missing = missing_data_files(prefix)
    if missing:  # TF's own error for this is an UNKNOWN-coded OpError, like a mismatch's
        raise damaged(prefix, f"{os.path.basename(missing[0])} is missing")
    try:
        # Counted first: a checkpoint with fewer layers than the config fails the restore
        # with pages of unmatched objects, which say less than the two counts.
        found = _variable_count(prefix, scope)
        if found != len(model.weights):
            raise ValueError(f"it holds {found} model variables where the config gives {len(model.weights)}")
        status = tf.train.Checkpoint(**{MODEL_KEY: root}).read(prefix)
        status.expect_partial().assert_existing_objects_matched()
    except (tf.errors.DataLossError, IndexError) as error:  # a file cut short
        raise damaged(prefix, first_line(error)) from None
    except (AssertionError, ValueError, tf.errors.OpError) as error:
        raise BertTfError(
            f"The training checkpoint {prefix} does not hold a BERT pre-training model of the config in "
            f"{config_file} ({first_line(error)})."
        ) from None


def damaged(prefix: str, reason: str) -> BertTfError:
    return BertTfError(f"The training checkpoint {prefix} is incomplete or damaged ({reason}); pass another "
                       "checkpoint, or the output dir of a run that finished writing it.")


def missing_data_files(prefix: str) -> list[str]:
    """The `prefix.data-NNNNN-of-MMMMM` shards that are not there (all of them: one name, the first)."""
    shards = sorted(glob.glob(f"{glob.escape(prefix)}.data-?????-of-?????"))
    if not shards:
        return [f"{prefix}.data-00000-of-00001"]
    total = int(shards[0].rsplit("-of-", 1)[1])
    expected = [f"{prefix}.data-{index:05d}-of-{total:05d}" for index in range(total)]
    return [path for path in expected if not os.path.exists(path)]


def read(path: str, config_file: str | None = None) -> Checkpoint:
    """Restores the model of a pre-training checkpoint and returns its weights under TF1 names."""
    prefix, config, config_file = read_config(path, config_file)
    model = BertPretrainer(BertEncoder(config))
    restore_into(model, prefix, config_file)
    weights = names.collect(names.model_slots(model))
    return Checkpoint("training", prefix, config, config_file, weights, names.TF1_NAMING, vocab_beside(os.path.dirname(prefix)))
