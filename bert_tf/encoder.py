"""`BertEncoder`: the BERT transformer encoder as a Keras 3 functional model."""

from __future__ import annotations

from typing import Any

import keras
from keras import ops

from bert_tf.config import BertConfig
from bert_tf.layers import (
    AttentionMaskAdder,
    PositionEmbedding,
    TiedEmbedding,
    TransformerBlock,
    layer_norm,
    truncated_normal,
)

INPUT_NAMES = ("input_word_ids", "input_mask", "input_type_ids")


def encoder_inputs(sequence_length: int | None = None) -> dict[str, keras.KerasTensor]:
    """The three int32 inputs of `BertEncoder`, keyed by Model Garden's names."""
    return {name: keras.Input(shape=(sequence_length,), dtype="int32", name=name) for name in INPUT_NAMES}


@keras.saving.register_keras_serializable(package="bert_tf")
class BertEncoder(keras.Model):
    """The BERT encoder (Devlin et al. 2018): embeddings, L post-LN blocks, pooler.

    Inputs (dict): `input_word_ids`, `input_mask` (1 real, 0 padding) and
    `input_type_ids` (segment ids), each int [batch, seq].
    Outputs (dict): `sequence_output` [batch, seq, H], `pooled_output` [batch, H]
    (tanh dense on the [CLS] vector) and `encoder_outputs` (the list of every
    block's output; the last one is `sequence_output`).

    Args:
        config: a `BertConfig` (or its dict).
        sequence_length: fixed input length, or None for any length up to
            `max_position_embeddings`.
        dtype: a Keras dtype policy, e.g. "mixed_bfloat16"; LayerNorm and the
            attention softmax always run in float32.

    Example:
    >>> import numpy as np
    >>> from bert_tf import BertConfig, BertEncoder
    >>> encoder = BertEncoder(BertConfig.from_preset("tiny", vocab_size=100))
    >>> ids = np.array([[2, 7, 9, 3, 0]])
    >>> outputs = encoder({"input_word_ids": ids, "input_mask": ids > 0,
    ...                    "input_type_ids": np.zeros_like(ids)})
    >>> tuple(outputs["sequence_output"].shape), tuple(outputs["pooled_output"].shape)
    ((1, 5, 128), (1, 128))
    >>> len(outputs["encoder_outputs"])
    2
    """

    def __init__(
        self,
        config: BertConfig | dict[str, Any],
        sequence_length: int | None = None,
        dtype: Any = None,
        **kwargs: Any,
    ):
        config = config if isinstance(config, BertConfig) else BertConfig(**config)
        policy = keras.dtype_policies.get(dtype) if dtype is not None else keras.config.dtype_policy()

        # === Layers ===
        init = truncated_normal(config.initializer_range)
        self.word_embeddings = TiedEmbedding(
            config.vocab_size, config.hidden_size, embeddings_initializer=init, dtype=policy, name="word_embeddings"
        )
        self.position_embeddings = PositionEmbedding(
            config.max_position_embeddings,
            config.hidden_size,
            config.initializer_range,
            dtype=policy,
            name="position_embeddings",
        )
        self.token_type_embeddings = keras.layers.Embedding(
            config.type_vocab_size,
            config.hidden_size,
            embeddings_initializer=init,
            dtype=policy,
            name="token_type_embeddings",
        )
        self.embeddings_layer_norm = layer_norm("embeddings_layer_norm")
        self.embeddings_dropout = keras.layers.Dropout(
            config.hidden_dropout_prob, dtype=policy, name="embeddings_dropout"
        )
        self.mask_adder = AttentionMaskAdder(name="attention_mask")
        self.transformer_layers = [
            TransformerBlock(
                num_heads=config.num_attention_heads,
                hidden_size=config.hidden_size,
                intermediate_size=config.intermediate_size,
                hidden_act=config.hidden_act,
                hidden_dropout=config.hidden_dropout_prob,
                attention_dropout=config.attention_probs_dropout_prob,
                initializer_range=config.initializer_range,
                dtype=policy,
                name=f"transformer_layer_{i}",
            )
            for i in range(config.num_hidden_layers)
        ]
        self.pooler_dense = keras.layers.Dense(
            config.hidden_size, activation="tanh", kernel_initializer=init, dtype=policy, name="pooler_dense"
        )

        # === Functional Model ===
        inputs = encoder_inputs(sequence_length)
        word = self.word_embeddings(inputs["input_word_ids"])
        embeddings = word + self.position_embeddings(word) + self.token_type_embeddings(inputs["input_type_ids"])
        hidden = self.embeddings_dropout(self.embeddings_layer_norm(embeddings))
        mask_adder = self.mask_adder(inputs["input_mask"])
        encoder_outputs = []
        for block in self.transformer_layers:
            hidden = block(hidden, mask_adder)
            encoder_outputs.append(hidden)
        pooled = self.pooler_dense(hidden[:, 0, :])
        outputs = {
            "sequence_output": hidden,
            "pooled_output": pooled,
            "encoder_outputs": encoder_outputs,
        }
        super().__init__(inputs=inputs, outputs=outputs, dtype=policy, **kwargs)

        # === Config ===
        self.bert_config = config
        self.sequence_length = sequence_length

    def get_config(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "trainable": self.trainable,
            "config": self.bert_config.to_dict(),
            "sequence_length": self.sequence_length,
            "dtype": keras.dtype_policies.serialize(self.dtype_policy),
        }

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> "BertEncoder":
        config = dict(config)
        if isinstance(config.get("dtype"), dict):
            config["dtype"] = keras.dtype_policies.deserialize(config["dtype"])
        return cls(**config)

    def dummy_inputs(self, batch_size: int = 2, sequence_length: int = 8) -> dict[str, Any]:
        """All-ones inputs of the given shape: handy to build or time the model."""
        ones = ops.ones((batch_size, sequence_length), dtype="int32")
        return {"input_word_ids": ones, "input_mask": ones, "input_type_ids": ops.zeros_like(ones)}
