"""The span head of run_squad.py and its loss.

As the original `create_model`: one dense layer (2 units, truncated-normal init of the
encoder's `initializer_range`, zero bias, no dropout) on every position of
`sequence_output`; its two outputs are the start and end logits. The loss is the mean
of the start and end softmax cross-entropies over the row's positions.

One departure: the softmax runs over real tokens only (padding positions get -10000),
so the loss does not depend on how a batch is padded (`--padding`); the original
padded every row to `max_seq_length` and left padding in the softmax.
"""

from __future__ import annotations

from collections.abc import Sequence

import keras
import numpy as np
import tensorflow as tf

from bert_tf.encoder import BertEncoder, encoder_inputs
from fine_tune.squad.postprocess import PostprocessConfig, SpanPrediction, predict_examples
from fine_tune.squad.reader import SquadExample
from fine_tune.task import Features

OUTPUT_KEYS = ("start_logits", "end_logits")
# Added to the logits of padding positions: exp(-10000) is 0 in float32.
PADDING_LOGIT = -10000.0


class SpanHead:
    """dense(2) on `sequence_output` -> {"start_logits", "end_logits"} [batch, seq], float32."""

    per_token = True

    def __init__(self, config: PostprocessConfig):
        self.config = config

    def build(self, encoder: BertEncoder, num_labels: int, dropout: float) -> keras.Model:
        """The model (`num_labels` and `dropout` are unused: two outputs, no dropout, as the original)."""
        inputs = encoder_inputs()
        logits = keras.layers.Dense(
            2,
            kernel_initializer=keras.initializers.TruncatedNormal(stddev=encoder.bert_config.initializer_range),
            dtype="float32",
            name="span_logits",
        )(encoder(inputs)["sequence_output"])
        outputs = {key: logits[..., index] for index, key in enumerate(OUTPUT_KEYS)}
        return keras.Model(inputs, outputs, name="span_extractor")

    def decode(
        self, examples: Sequence[SquadExample], features: Features, outputs: list[dict[str, np.ndarray]],
        labels: Sequence[str],
    ) -> list[SpanPrediction]:
        return predict_examples(examples, features.example_index, features.extras, outputs, self.config)


def span_loss(targets: dict[str, tf.Tensor], outputs: dict[str, tf.Tensor]) -> tuple[tf.Tensor, tf.Tensor]:
    """(sum over rows of (start CE + end CE) / 2, number of rows) of a batch."""
    padding = (1.0 - tf.cast(targets["input_mask"], tf.float32)) * PADDING_LOGIT

    def cross_entropy(logits: tf.Tensor, positions: tf.Tensor) -> tf.Tensor:
        return tf.nn.sparse_softmax_cross_entropy_with_logits(labels=positions, logits=logits + padding)

    losses = (
        cross_entropy(outputs["start_logits"], targets["start_positions"])
        + cross_entropy(outputs["end_logits"], targets["end_positions"])
    ) / 2.0
    return tf.reduce_sum(losses), tf.cast(tf.size(losses), tf.float32)
