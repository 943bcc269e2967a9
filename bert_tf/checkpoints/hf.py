"""HuggingFace BERT directories: `config.json` + `model.safetensors` (or `pytorch_model.bin`).

Reads `BertModel` keys (`embeddings.*`, `encoder.layer.N.*`, `pooler.*`) and
`BertForPreTraining` keys (the same under `bert.`, plus `cls.predictions.*` and
`cls.seq_relationship.*`). Writes `BertForPreTraining` keys when the model has its
pre-training heads and `BertModel` keys otherwise; `transformers` loads either into
either class.

Example:
>>> import tempfile
>>> import numpy as np
>>> from bert_tf import BertConfig
>>> directory = tempfile.mkdtemp()
>>> _ = write(directory, {"bert/pooler/dense/kernel": np.eye(128, dtype=np.float32)},
...           BertConfig.from_preset("tiny"))
>>> list(read(directory).weights)
['pooler.dense.weight']
"""

from __future__ import annotations

import json
import os
import pickle
import re

import numpy as np

from bert_tf.checkpoints import safetensors_io
from bert_tf.checkpoints.base import Checkpoint, first_line, vocab_beside
from bert_tf.checkpoints.names import HF_NAMING, HEADS, hf_name
from bert_tf.config import BertConfig
from bert_tf.errors import BertTfError

CONFIG_NAME = "config.json"
SAFETENSORS_NAME = "model.safetensors"
TORCH_NAME = "pytorch_model.bin"
# In order of preference; the index files list the shards of a sharded checkpoint.
WEIGHT_NAMES = (SAFETENSORS_NAME, f"{SAFETENSORS_NAME}.index.json", TORCH_NAME, f"{TORCH_NAME}.index.json")
# Non-persistent buffers that old transformers versions saved; they are not weights.
_BUFFERS = ("embeddings.position_ids", "embeddings.token_type_ids")
_DECODER_WEIGHT = "cls.predictions.decoder.weight"
_DECODER_BIAS = "cls.predictions.decoder.bias"


def directory_of(path: str) -> str:
    """`path`, or its directory when it names a weights or config file of an HF directory."""
    if os.path.isfile(path) and os.path.basename(path) in (CONFIG_NAME, *WEIGHT_NAMES):
        return os.path.dirname(path) or "."
    return path


def weights_file(directory: str) -> str | None:
    """The weights file of an HF directory, or None if `directory` is not one."""
    if not os.path.isfile(os.path.join(directory, CONFIG_NAME)):
        return None
    for name in WEIGHT_NAMES:
        if os.path.isfile(os.path.join(directory, name)):
            return os.path.join(directory, name)
    return None


# === Reading ===
def _read_config(directory: str) -> tuple[BertConfig, str]:
    config_file = os.path.join(directory, CONFIG_NAME)
    config = BertConfig.from_json_file(config_file)
    with open(config_file, encoding="utf-8") as handle:
        values = json.load(handle)
    # Our BERT is the original: absolute positions and LayerNorm epsilon 1e-12.
    if values.get("model_type", "bert") != "bert":
        raise BertTfError(f"{config_file} describes a {values['model_type']!r} model, not a BERT.")
    if values.get("position_embedding_type", "absolute") != "absolute":
        raise BertTfError(
            f"{config_file} asks for {values['position_embedding_type']} position embeddings; "
            "only absolute ones are supported."
        )
    if not np.isclose(values.get("layer_norm_eps", 1e-12), 1e-12, rtol=1e-3, atol=0):
        raise BertTfError(f"{config_file} has layer_norm_eps={values['layer_norm_eps']}, but BERT uses 1e-12.")
    return config, config_file


def _read_torch(path: str) -> dict[str, np.ndarray]:
    try:
        import torch  # only pytorch_model.bin needs it: a lazy import keeps torch optional.
    except ImportError:
        raise BertTfError(
            f"Reading {path} needs PyTorch (pip install torch); a model.safetensors file does not."
        ) from None
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except (RuntimeError, pickle.UnpicklingError, EOFError, OSError, ValueError) as error:
        raise BertTfError(f"{path} is not a readable PyTorch checkpoint ({first_line(error)}).") from None
    if not isinstance(state, dict):
        raise BertTfError(f"{path} holds a {type(state).__name__}, not a PyTorch state dict.")
    return {
        name: (tensor.float() if tensor.is_floating_point() else tensor).numpy()
        for name, tensor in state.items()
        if isinstance(tensor, torch.Tensor)
    }


def _read_file(path: str) -> dict[str, np.ndarray]:
    return safetensors_io.read(path) if path.endswith(".safetensors") else _read_torch(path)


def _read_shards(index_file: str) -> dict[str, np.ndarray]:
    try:
        with open(index_file, encoding="utf-8") as handle:
            shards = sorted(set(json.load(handle)["weight_map"].values()))
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, AttributeError):
        raise BertTfError(f"{index_file} is not a valid shard index (a JSON object with a weight_map).") from None
    weights: dict[str, np.ndarray] = {}
    for shard in shards:
        path = os.path.join(os.path.dirname(index_file), shard)
        if not os.path.isfile(path):
            raise BertTfError(f"Shard {path} listed in {index_file} does not exist.")
        weights.update(_read_file(path))
    return weights


def _untie_decoder(weights: dict[str, np.ndarray], path: str) -> None:
    """Drops the MLM decoder's copies of tied weights, checking that they are copies.

    Old checkpoints store `cls.predictions.decoder.weight` (= the word embeddings) and
    `cls.predictions.decoder.bias` (= `cls.predictions.bias`); our decoder is tied.
    """
    bias = weights.pop(_DECODER_BIAS, None)
    if bias is not None:
        own = weights.setdefault("cls.predictions.bias", bias)
        if not np.array_equal(own, bias):
            raise BertTfError(f"{path} has a {_DECODER_BIAS} that differs from cls.predictions.bias; BERT ties them.")
    decoder = weights.pop(_DECODER_WEIGHT, None)
    embeddings = weights.get("embeddings.word_embeddings.weight")
    if decoder is not None and embeddings is not None and not np.array_equal(decoder, embeddings):
        raise BertTfError(f"{path} has an MLM decoder that differs from the word embeddings; BERT ties them.")


def _normalise(raw: dict[str, np.ndarray], path: str) -> dict[str, np.ndarray]:
    weights = {}
    for key, value in raw.items():
        # BertForPreTraining's `bert.` prefix goes; pytorch-pretrained-bert's LayerNorm gamma/beta are weight/bias.
        key = re.sub(r"LayerNorm\.gamma$", "LayerNorm.weight", key.removeprefix("bert."))
        key = re.sub(r"LayerNorm\.beta$", "LayerNorm.bias", key)
        if key not in _BUFFERS:
            weights[key] = value
    _untie_decoder(weights, path)
    return weights


def read(directory: str) -> Checkpoint:
    """Reads an HF BERT directory; keys come back without the `bert.` prefix."""
    path = weights_file(directory)
    if path is None:
        raise BertTfError(
            f"{directory} is not a HuggingFace directory (it needs {CONFIG_NAME} and {SAFETENSORS_NAME} "
            f"or {TORCH_NAME})."
        )
    config, config_file = _read_config(directory)
    raw = _read_shards(path) if path.endswith(".index.json") else _read_file(path)
    weights = _normalise(raw, path)
    return Checkpoint("hf", directory, config, config_file, weights, HF_NAMING, vocab_beside(directory))


# === Writing ===
def write(directory: str, weights: dict[str, np.ndarray], config: BertConfig,
          task_tensors: dict[str, np.ndarray] | None = None, task_config: dict | None = None) -> str:
    """Writes `model.safetensors` (from TF1 names -> values) and `config.json`; returns the weights file.

    `task_tensors` (HF names -> values) and `task_config` (`config.json` entries: its
    `architectures`, `id2label`, ...) make it a task model such as
    `BertForSequenceClassification`.
    """
    has_heads = any(HF_NAMING.scope(hf_name(name)[0]) == HEADS for name in weights)
    tensors = {}
    for tf1_name, value in weights.items():
        name, transposed = hf_name(tf1_name)
        if (has_heads or task_tensors) and not name.startswith("cls."):
            name = f"bert.{name}"  # BertForPreTraining and the task models keep the encoder under `bert`
        tensors[name] = value.T if transposed else value
    tensors.update(task_tensors or {})
    path = os.path.join(directory, SAFETENSORS_NAME)
    safetensors_io.write(path, tensors, {"format": "pt"})
    hf_config = config.to_hf_dict()
    hf_config["architectures"] = ["BertForPreTraining" if has_heads else "BertModel"]
    hf_config.update(task_config or {})
    with open(os.path.join(directory, CONFIG_NAME), "w", encoding="utf-8") as handle:
        json.dump(hf_config, handle, indent=2, sort_keys=True)
        handle.write("\n")
    return path
