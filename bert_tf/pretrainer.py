"""`BertPretrainer`: `BertEncoder` + the masked-LM and next-sentence heads."""

from __future__ import annotations

from typing import Any

import keras
from keras import ops

from bert_tf.config import BertConfig
from bert_tf.encoder import INPUT_NAMES, BertEncoder, encoder_inputs
from bert_tf.layers import activation, layer_norm, truncated_normal


# === Layers ===
@keras.saving.register_keras_serializable(package="bert_tf")
class GatherPositions(keras.layers.Layer):
    """[batch, seq, H] hidden states, [batch, P] positions -> [batch, P, H]."""

    def call(self, sequence, positions):
        index = ops.expand_dims(ops.cast(positions, "int32"), -1)
        return ops.take_along_axis(sequence, index, axis=1)

    def compute_output_spec(self, sequence, positions):
        shape = (sequence.shape[0], positions.shape[1], sequence.shape[2])
        return keras.KerasTensor(shape, dtype=sequence.dtype)


@keras.saving.register_keras_serializable(package="bert_tf")
class OutputBias(keras.layers.Layer):
    """Adds a learned bias of `width` (the original `cls/predictions/output_bias`)."""

    def __init__(self, width: int, **kwargs):
        super().__init__(**kwargs)
        self.width = width

    def build(self, input_shape):
        self.bias = self.add_weight(name="bias", shape=(self.width,), initializer="zeros")

    def call(self, inputs):
        return ops.cast(inputs, "float32") + ops.cast(self.bias, "float32")

    def compute_output_spec(self, inputs):
        return keras.KerasTensor(inputs.shape, dtype="float32")

    def get_config(self):
        return {**super().get_config(), "width": self.width}


# === Model ===
@keras.saving.register_keras_serializable(package="bert_tf")
class BertPretrainer(keras.Model):
    """BERT with its two pre-training heads, as in the original `run_pretraining.py`.

    Masked LM: the hidden states at `masked_lm_positions` go through dense(H, act) and
    LayerNorm, then are projected on the (tied) word embeddings plus an output bias.
    Next sentence: a [2]-way dense on the pooled output.

    Inputs: the encoder's three plus `masked_lm_positions` [batch, P].
    Outputs (dict): `masked_lm_logits` [batch, P, V] and `next_sentence_logits`
    [batch, 2], both float32, plus the encoder's `sequence_output` and `pooled_output`.

    Example:
    >>> import numpy as np
    >>> from bert_tf import BertConfig, BertEncoder, BertPretrainer
    >>> encoder = BertEncoder(BertConfig.from_preset("tiny", vocab_size=100))
    >>> pretrainer = BertPretrainer(encoder)
    >>> ids = np.array([[2, 7, 9, 3]])
    >>> out = pretrainer({"input_word_ids": ids, "input_mask": np.ones_like(ids),
    ...                   "input_type_ids": np.zeros_like(ids),
    ...                   "masked_lm_positions": np.array([[1, 2]])})
    >>> tuple(out["masked_lm_logits"].shape), tuple(out["next_sentence_logits"].shape)
    ((1, 2, 100), (1, 2))
    """

    def __init__(self, encoder: BertEncoder, max_predictions_per_seq: int | None = None, **kwargs: Any):
        config: BertConfig = encoder.bert_config
        policy = encoder.dtype_policy
        init = truncated_normal(config.initializer_range)

        # === Layers ===
        self.encoder = encoder
        self.gather = GatherPositions(name="gather_masked_positions")
        self.mlm_dense = keras.layers.Dense(
            config.hidden_size,
            activation=activation(config.hidden_act),
            kernel_initializer=init,
            dtype=policy,
            name="mlm_transform_dense",
        )
        self.mlm_layer_norm = layer_norm("mlm_transform_layer_norm")
        self.mlm_output_bias = OutputBias(config.vocab_size, dtype=policy, name="mlm_output_bias")
        self.nsp_dense = keras.layers.Dense(2, kernel_initializer=init, dtype=policy, name="next_sentence")

        # === Functional Model ===
        inputs = encoder_inputs(encoder.sequence_length)
        inputs["masked_lm_positions"] = keras.Input(
            shape=(max_predictions_per_seq,), dtype="int32", name="masked_lm_positions"
        )
        encoded = encoder({name: inputs[name] for name in INPUT_NAMES})
        masked = self.gather(encoded["sequence_output"], inputs["masked_lm_positions"])
        transformed = self.mlm_layer_norm(self.mlm_dense(masked))
        mlm_logits = self.mlm_output_bias(encoder.word_embeddings(transformed, reverse=True))
        nsp_logits = ops.cast(self.nsp_dense(encoded["pooled_output"]), "float32")
        outputs = {
            "masked_lm_logits": mlm_logits,
            "next_sentence_logits": nsp_logits,
            "sequence_output": encoded["sequence_output"],
            "pooled_output": encoded["pooled_output"],
        }
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)

        # === Config ===
        self.max_predictions_per_seq = max_predictions_per_seq

    def get_config(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "trainable": self.trainable,
            "encoder": keras.saving.serialize_keras_object(self.encoder),
            "max_predictions_per_seq": self.max_predictions_per_seq,
        }

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> "BertPretrainer":
        config = dict(config)
        config["encoder"] = keras.saving.deserialize_keras_object(config["encoder"])
        return cls(**config)


def encoder_of(model: BertEncoder | BertPretrainer) -> BertEncoder:
    """The encoder of a `BertPretrainer`, or `model` itself."""
    return model.encoder if isinstance(model, BertPretrainer) else model
