"""Our own format: a Keras 3 `.keras` file of a `BertEncoder` or `BertPretrainer`.

`save(..., format="keras")` writes a directory holding `model.keras`,
`bert_config.json` (for people and other tools; the `.keras` file carries its own
config) and `vocab.txt`; reading accepts that directory or any `.keras` file.

Example:
>>> import tempfile
>>> from bert_tf import BertConfig, BertEncoder
>>> directory = tempfile.mkdtemp()
>>> encoder = BertEncoder(BertConfig.from_preset("tiny", vocab_size=100))
>>> _ = write(directory, encoder)
>>> read(directory).config.hidden_size
128
"""

from __future__ import annotations

import os

import keras

from bert_tf.checkpoints import names
from bert_tf.checkpoints.base import Checkpoint, first_line, vocab_beside
from bert_tf.checkpoints.tf1 import CONFIG_NAME
from bert_tf.encoder import BertEncoder
from bert_tf.errors import BertTfError
from bert_tf.pretrainer import BertPretrainer, encoder_of

MODEL_NAME = "model.keras"


def model_file(path: str) -> str | None:
    """The `.keras` file that `path` names (itself, or `model.keras` in it), or None."""
    if path.endswith(".keras") and os.path.isfile(path):
        return path
    inside = os.path.join(path, MODEL_NAME)
    return inside if os.path.isfile(inside) else None


def read(path: str) -> Checkpoint:
    """Loads a `.keras` file and returns its weights under TF1 names."""
    file = model_file(path)
    if file is None:
        raise BertTfError(f"{path} is neither a .keras file nor a directory holding {MODEL_NAME}.")
    try:
        model = keras.saving.load_model(file, compile=False)
    # Keras raises many kinds of error for a damaged archive (zip, HDF5, JSON, config).
    except Exception as error:  # noqa: BLE001 - reported as a user error naming the file
        raise BertTfError(f"{file} cannot be loaded as a Keras model ({first_line(error)}).") from None
    if not isinstance(model, (BertEncoder, BertPretrainer)):
        raise BertTfError(f"{file} holds a {type(model).__name__}, not a bert_tf BertEncoder or BertPretrainer.")
    encoder = encoder_of(model)
    weights = names.collect(names.model_slots(model))
    vocab_file = vocab_beside(os.path.dirname(file))
    return Checkpoint("keras", file, encoder.bert_config, file, weights, names.TF1_NAMING, vocab_file)


def write(directory: str, model: BertEncoder | BertPretrainer) -> str:
    """Saves `model` as `model.keras` plus `bert_config.json`; returns the `.keras` path."""
    path = os.path.join(directory, MODEL_NAME)
    model.save(path)
    encoder = encoder_of(model)
    encoder.bert_config.to_json_file(os.path.join(directory, CONFIG_NAME))
    return path
