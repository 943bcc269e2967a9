"""Task heads on top of `BertEncoder`, and their losses.

As the original `run_classifier.py`: dropout (the encoder's `hidden_dropout_prob`) on
the pooled [CLS] vector, then one dense layer initialised from a truncated normal of
the encoder's `initializer_range` with zero bias. The tagging head is the same dense
layer applied to every position of `sequence_output` (the paper's NER set-up, no CRF).
Head outputs are float32 even under a mixed-precision policy, so losses and softmaxes
never run in bfloat16/float16.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import keras
import numpy as np
import tensorflow as tf

from bert_tf.encoder import BertEncoder, encoder_inputs
from fine_tune.features import PairExample
from fine_tune.task import Features


def _dense(encoder: BertEncoder, units: int) -> keras.layers.Dense:
    return keras.layers.Dense(
        units,
        kernel_initializer=keras.initializers.TruncatedNormal(stddev=encoder.bert_config.initializer_range),
        dtype="float32",
        name="logits",
    )


def _head_model(encoder: BertEncoder, output: str, units: int, dropout: float, name: str) -> keras.Model:
    inputs = encoder_inputs()
    hidden = encoder(inputs)[output]
    logits = _dense(encoder, units)(keras.layers.Dropout(dropout, name="head_dropout")(hidden))
    return keras.Model(inputs, logits, name=name)


def softmax(logits: np.ndarray) -> np.ndarray:
    shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return shifted / shifted.sum(axis=-1, keepdims=True)


class Prediction(NamedTuple):
    """A class prediction with the probabilities of every label (the original's test_results.tsv)."""

    label: str
    probabilities: np.ndarray


# === Sentence-level heads ===
class ClassificationHead:
    """dropout + dense(num_labels) on `pooled_output`; decodes to `Prediction`s."""

    per_token = False

    def build(self, encoder: BertEncoder, num_labels: int, dropout: float) -> keras.Model:
        return _head_model(encoder, "pooled_output", num_labels, dropout, "classifier")

    def decode(
        self, examples: Sequence[PairExample], features: Features, outputs: list[np.ndarray], labels: Sequence[str]
    ) -> list[Prediction]:
        probabilities = softmax(np.stack(outputs))
        return [Prediction(labels[int(np.argmax(row))], row) for row in probabilities]


class RegressionHead:
    """dropout + dense(1) on `pooled_output` (STS-B); decodes to floats."""

    per_token = False

    def build(self, encoder: BertEncoder, num_labels: int, dropout: float) -> keras.Model:
        return _head_model(encoder, "pooled_output", 1, dropout, "regressor")

    def decode(
        self, examples: Sequence[PairExample], features: Features, outputs: list[np.ndarray], labels: Sequence[str]
    ) -> list[float]:
        return [float(row[0]) for row in outputs]


class TokenClassificationHead:
    """dropout + dense(num_labels) on every position of `sequence_output`.

    Decoding is the tagging task's job (`fine_tune.tagging`), since it depends on how
    words were cut into windows and WordPieces.
    """

    per_token = True

    def build(self, encoder: BertEncoder, num_labels: int, dropout: float) -> keras.Model:
        return _head_model(encoder, "sequence_output", num_labels, dropout, "tagger")


# === Losses: (sum, count) of a batch, so the loop can average across replicas ===
def classification_loss(targets: dict[str, tf.Tensor], logits: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """Softmax cross-entropy of `label_ids`."""
    losses = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=targets["label_ids"], logits=logits)
    return tf.reduce_sum(losses), tf.cast(tf.size(losses), tf.float32)


def regression_loss(targets: dict[str, tf.Tensor], outputs: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """Squared error of the float `label` (mean over the batch = MSE, as HF's STS-B head)."""
    errors = tf.square(outputs[:, 0] - targets["label"])
    return tf.reduce_sum(errors), tf.cast(tf.size(errors), tf.float32)


def token_classification_loss(targets: dict[str, tf.Tensor], logits: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """Cross-entropy of `label_ids` on the positions whose `label_weights` is 1.

    Only the first WordPiece of each word carries a label; the other pieces, [CLS],
    [SEP], document context and padding have weight 0.
    """
    losses = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=targets["label_ids"], logits=logits)
    weights = tf.cast(targets["label_weights"], tf.float32)
    return tf.reduce_sum(losses * weights), tf.reduce_sum(weights)
