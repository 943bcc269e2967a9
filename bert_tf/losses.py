"""BERT's pre-training losses and metrics, in `keras.ops` (any backend).

They follow the original `run_pretraining.py`:
- masked-LM loss: sum over positions of cross-entropy × `masked_lm_weights`, divided by
  (sum of weights + 1e-5), so padding predictions (weight 0) count for nothing;
- next-sentence loss: mean cross-entropy over the batch (label 0 = IsNext, 1 = NotNext).

Example:
>>> import numpy as np
>>> logits = np.log(np.array([[[0.5, 0.5]]], "float32"))
>>> round(float(masked_lm_loss(np.array([[0]]), logits, np.array([[1.0]]))), 4)
0.6931
"""

from __future__ import annotations

from keras import ops

WEIGHT_EPSILON = 1e-5


def _per_example_cross_entropy(labels, logits):
    logits = ops.cast(logits, "float32")
    log_probs = ops.log_softmax(logits, axis=-1)
    labels = ops.cast(labels, "int32")
    picked = ops.take_along_axis(log_probs, ops.expand_dims(labels, -1), axis=-1)
    return -ops.squeeze(picked, -1)


def masked_lm_loss(masked_lm_ids, masked_lm_logits, masked_lm_weights):
    """Weighted mean cross-entropy of the masked positions ([batch, P] and [batch, P, V])."""
    weights = ops.cast(masked_lm_weights, "float32")
    per_position = _per_example_cross_entropy(masked_lm_ids, masked_lm_logits)
    return ops.sum(per_position * weights) / (ops.sum(weights) + WEIGHT_EPSILON)


def next_sentence_loss(next_sentence_labels, next_sentence_logits):
    """Mean cross-entropy of the next-sentence prediction ([batch] or [batch, 1] labels)."""
    labels = ops.reshape(next_sentence_labels, (-1,))
    return ops.mean(_per_example_cross_entropy(labels, next_sentence_logits))


def masked_lm_accuracy(masked_lm_ids, masked_lm_logits, masked_lm_weights):
    """Share of real (weight > 0) masked positions whose arg-max is the original id."""
    weights = ops.cast(masked_lm_weights, "float32")
    hits = ops.cast(ops.equal(ops.argmax(masked_lm_logits, axis=-1), ops.cast(masked_lm_ids, "int32")), "float32")
    return ops.sum(hits * weights) / ops.maximum(ops.sum(weights), WEIGHT_EPSILON)


def next_sentence_accuracy(next_sentence_labels, next_sentence_logits):
    labels = ops.cast(ops.reshape(next_sentence_labels, (-1,)), "int32")
    return ops.mean(ops.cast(ops.equal(ops.argmax(next_sentence_logits, axis=-1), labels), "float32"))


def pretraining_losses(batch, outputs) -> dict:
    """All four numbers for a batch dict (data names) and `BertPretrainer` outputs."""
    mlm = (batch["masked_lm_ids"], outputs["masked_lm_logits"], batch["masked_lm_weights"])
    nsp = (batch["next_sentence_labels"], outputs["next_sentence_logits"])
    mlm_loss = masked_lm_loss(*mlm)
    nsp_loss = next_sentence_loss(*nsp)
    return {
        "loss": mlm_loss + nsp_loss,
        "masked_lm_loss": mlm_loss,
        "next_sentence_loss": nsp_loss,
        "masked_lm_accuracy": masked_lm_accuracy(*mlm),
        "next_sentence_accuracy": next_sentence_accuracy(*nsp),
    }
