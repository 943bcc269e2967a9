"""Variable names: our Keras variables <-> the original TF1 names <-> HuggingFace keys.

The hub of every conversion is the original TF1 name (`bert/encoder/layer_0/...`,
see shared REFERENCE.md) with the original TF1 layout (kernels [in, out]). Each of
our models maps those names to its `keras.Variable`s (a "slot map"); each file
format maps them to its own names (a `Naming`). Reading is then one lookup per
variable, and a mismatch is reported in the file's own vocabulary.

Example:
>>> hf_name("bert/encoder/layer_3/attention/self/query/kernel")
('encoder.layer.3.attention.self.query.weight', True)
>>> HF_NAMING.scope("cls.predictions.bias"), TF1_NAMING.scope("bert/pooler/dense/bias")
('heads', 'encoder')
"""

from __future__ import annotations

import dataclasses
import re
from typing import Callable

import keras
import numpy as np

from bert_tf.encoder import BertEncoder
from bert_tf.pretrainer import BertPretrainer

# A variable and whether it is stored transposed relative to the TF1 layout.
Slot = tuple[keras.Variable, bool]

ENCODER = "encoder"
HEADS = "heads"


# === Naming of the file formats ===
@dataclasses.dataclass(frozen=True)
class Naming:
    """How a file format names the TF1 variables.

    Attributes:
        native: TF1 name -> (the format's name, whether the format stores it
            transposed relative to TF1).
        scope: the format's name -> `ENCODER`, `HEADS` (pre-training heads) or None
            (something else, e.g. a fine-tuned classifier).
    """

    native: Callable[[str], tuple[str, bool]]
    scope: Callable[[str], str | None]


def _tf1_scope(name: str) -> str | None:
    if name.startswith("bert/"):
        return ENCODER
    return HEADS if name.startswith("cls/") else None


TF1_NAMING = Naming(native=lambda name: (name, False), scope=_tf1_scope)

# HF names whose TF1 counterpart does not follow the generic rule in `hf_name`.
_HF_SPECIAL = {
    "cls/predictions/output_bias": ("cls.predictions.bias", False),
    # torch keeps Linear weights [out, in] = [2, H], which is the TF1 layout already.
    "cls/seq_relationship/output_weights": ("cls.seq_relationship.weight", False),
    "cls/seq_relationship/output_bias": ("cls.seq_relationship.bias", False),
}
# TF1 leaf -> (torch leaf, transposed): torch Linear weights are [out, in].
_HF_LEAVES = {"kernel": ("weight", True), "bias": ("bias", False), "gamma": ("weight", False), "beta": ("bias", False)}


def hf_name(tf1_name: str) -> tuple[str, bool]:
    """The key of a TF1 variable in HF's `BertModel` / `BertForPreTraining` state dict.

    Encoder keys are given without the `bert.` prefix that `BertForPreTraining` adds.
    """
    if tf1_name in _HF_SPECIAL:
        return _HF_SPECIAL[tf1_name]
    name = re.sub(r"layer_(\d+)", r"layer.\1", tf1_name.removeprefix("bert/")).replace("/", ".")
    if name.endswith("_embeddings"):  # TF1 stores embedding tables without a leaf name
        return f"{name}.weight", False
    scope, leaf = name.rsplit(".", 1)
    torch_leaf, transposed = _HF_LEAVES[leaf]
    return f"{scope}.{torch_leaf}", transposed


def _hf_scope(name: str) -> str | None:
    if name.startswith(("embeddings.", "encoder.", "pooler.")):
        return ENCODER
    return HEADS if name.startswith("cls.") else None


HF_NAMING = Naming(native=hf_name, scope=_hf_scope)


# === Slot maps of our models ===
def _dense(scope: str, layer: keras.layers.Dense) -> dict[str, Slot]:
    return {f"{scope}/kernel": (layer.kernel, False), f"{scope}/bias": (layer.bias, False)}


def _layer_norm(scope: str, layer: keras.layers.LayerNormalization) -> dict[str, Slot]:
    return {f"{scope}/gamma": (layer.gamma, False), f"{scope}/beta": (layer.beta, False)}


def encoder_slots(encoder: BertEncoder) -> dict[str, Slot]:
    """TF1 name -> variable of a `BertEncoder`, in the order of the original graph."""
    slots: dict[str, Slot] = {
        "bert/embeddings/word_embeddings": (encoder.word_embeddings.embeddings, False),
        "bert/embeddings/token_type_embeddings": (encoder.token_type_embeddings.embeddings, False),
        "bert/embeddings/position_embeddings": (encoder.position_embeddings.embeddings, False),
        **_layer_norm("bert/embeddings/LayerNorm", encoder.embeddings_layer_norm),
    }
    for i, block in enumerate(encoder.transformer_layers):
        scope = f"bert/encoder/layer_{i}"
        slots.update(_dense(f"{scope}/attention/self/query", block.query))
        slots.update(_dense(f"{scope}/attention/self/key", block.key))
        slots.update(_dense(f"{scope}/attention/self/value", block.value))
        slots.update(_dense(f"{scope}/attention/output/dense", block.attention_output))
        slots.update(_layer_norm(f"{scope}/attention/output/LayerNorm", block.attention_layer_norm))
        slots.update(_dense(f"{scope}/intermediate/dense", block.intermediate))
        slots.update(_dense(f"{scope}/output/dense", block.output_dense))
        slots.update(_layer_norm(f"{scope}/output/LayerNorm", block.output_layer_norm))
    slots.update(_dense("bert/pooler/dense", encoder.pooler_dense))
    return slots


def head_slots(pretrainer: BertPretrainer) -> dict[str, Slot]:
    """TF1 name -> variable of a `BertPretrainer`'s masked-LM and next-sentence heads.

    The MLM decoder has no variable of its own: it is tied to the word embeddings.
    """
    return {
        **_dense("cls/predictions/transform/dense", pretrainer.mlm_dense),
        **_layer_norm("cls/predictions/transform/LayerNorm", pretrainer.mlm_layer_norm),
        "cls/predictions/output_bias": (pretrainer.mlm_output_bias.bias, False),
        # Keras keeps the kernel [H, 2]; the original stores output_weights [2, H].
        "cls/seq_relationship/output_weights": (pretrainer.nsp_dense.kernel, True),
        "cls/seq_relationship/output_bias": (pretrainer.nsp_dense.bias, False),
    }


# Parts a checkpoint may lack as a whole, TF1 name prefix -> why: they then keep their
# initialisation. HF's BertForMaskedLM has neither; BertModel(add_pooling_layer=False)
# has no pooler. Half of one is a broken checkpoint, as anything else missing.
OPTIONAL_PARTS = {"bert/pooler/": "pooler", "cls/seq_relationship/": "next-sentence head"}


def model_slots(model: BertEncoder | BertPretrainer) -> dict[str, Slot]:
    """TF1 name -> variable of either of our models."""
    if isinstance(model, BertPretrainer):
        return encoder_slots(model.encoder) | head_slots(model)
    if isinstance(model, BertEncoder):
        return encoder_slots(model)
    raise TypeError(f"Expected a BertEncoder or BertPretrainer, got {type(model).__name__}.")


def collect(slots: dict[str, Slot]) -> dict[str, np.ndarray]:
    """TF1 name -> numpy value in the TF1 layout."""
    values = {}
    for name, (variable, transposed) in slots.items():
        value = np.asarray(variable.numpy())
        values[name] = value.T if transposed else value
    return values


# === Copying weights into slots ===
@dataclasses.dataclass
class Mismatch:
    """What keeps a checkpoint from fitting a model, in the checkpoint's own names."""

    missing: list[str]
    unexpected: list[str]
    wrongly_shaped: list[str]

    def __bool__(self) -> bool:
        return bool(self.missing or self.unexpected or self.wrongly_shaped)

    def describe(self) -> str:
        """One clause per kind of problem, e.g. "missing 2 variables (a, b)"."""
        parts = [
            _listing(kind, names)
            for kind, names in (
                ("missing", self.missing),
                ("unexpected", self.unexpected),
                ("wrongly shaped", self.wrongly_shaped),
            )
            if names
        ]
        return "; ".join(parts)


def _listing(kind: str, names: list[str], shown: int = 4) -> str:
    listed = ", ".join(names[:shown]) + (f" and {len(names) - shown} more" if len(names) > shown else "")
    noun = "variable" if len(names) == 1 else "variables"
    return f"{kind} {len(names)} {noun} ({listed})"


def _shape(shape) -> str:
    return "[" + ", ".join(str(int(dim)) for dim in shape) + "]"


def plan(
    slots: dict[str, Slot], weights: dict[str, np.ndarray], naming: Naming, scopes: tuple[str, ...]
) -> tuple[list[tuple[keras.Variable, np.ndarray, bool]], Mismatch]:
    """Matches slots to a checkpoint's weights.

    Returns (variable, value, transpose) for every slot that fits, and the mismatch:
    slots without a weight, weights in `scopes` without a slot, and shape conflicts.
    """
    assignments, missing, wrong, used = [], [], [], set()
    for tf1_name, (variable, transposed) in slots.items():
        name, native_transposed = naming.native(tf1_name)
        flip = transposed != native_transposed
        if name not in weights:
            missing.append(name)
            continue
        used.add(name)
        value = weights[name]
        expected = tuple(variable.shape)[::-1] if flip else tuple(variable.shape)
        if tuple(value.shape) != expected:
            wrong.append(f"{name} {_shape(value.shape)} where the model has {_shape(expected)}")
            continue
        assignments.append((variable, value, flip))
    unexpected = [name for name in weights if name not in used and naming.scope(name) in scopes]
    return assignments, Mismatch(missing, unexpected, wrong)


def assign(assignments: list[tuple[keras.Variable, np.ndarray, bool]]) -> None:
    """Copies the values planned by `plan` into their variables."""
    for variable, value, flip in assignments:
        value = np.asarray(value.T if flip else value, dtype=variable.dtype)
        variable.assign(value)
