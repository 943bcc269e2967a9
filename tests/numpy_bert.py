"""An independent NumPy BERT forward pass, written from the paper and the original
`modeling.py` math, used as the hand-checkable reference for our Keras layers.

Weights are given by their original TF1 names (see shared REFERENCE.md), so the same
dict also checks our checkpoint name mapping.
"""

from __future__ import annotations

import math

import numpy as np


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def gelu_erf(x: np.ndarray) -> np.ndarray:
    erf = np.vectorize(math.erf)
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def layer_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float = 1e-12) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def encoder_forward(w: dict, ids, mask, types, num_heads: int, act) -> dict:
    """float64 forward of the original BERT: returns sequence, pooled and every layer."""
    w = {k: np.asarray(v, np.float64) for k, v in w.items()}
    length = ids.shape[1]
    x = (
        w["bert/embeddings/word_embeddings"][ids]
        + w["bert/embeddings/token_type_embeddings"][types]
        + w["bert/embeddings/position_embeddings"][:length][None]
    )
    x = layer_norm(x, w["bert/embeddings/LayerNorm/gamma"], w["bert/embeddings/LayerNorm/beta"])
    adder = (1.0 - mask[:, None, None, :].astype(np.float64)) * -10000.0
    layers = []
    i = 0
    while f"bert/encoder/layer_{i}/attention/self/query/kernel" in w:
        p = f"bert/encoder/layer_{i}/"

        def dense(h, name):
            return h @ w[p + name + "/kernel"] + w[p + name + "/bias"]

        def heads(h):
            b, s, hidden = h.shape
            return h.reshape(b, s, num_heads, hidden // num_heads).transpose(0, 2, 1, 3)

        q, k, v = (heads(dense(x, f"attention/self/{n}")) for n in ("query", "key", "value"))
        scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(q.shape[-1]) + adder
        context = (softmax(scores) @ v).transpose(0, 2, 1, 3).reshape(x.shape)
        x = layer_norm(
            dense(context, "attention/output/dense") + x,
            w[p + "attention/output/LayerNorm/gamma"],
            w[p + "attention/output/LayerNorm/beta"],
        )
        ffn = dense(act(dense(x, "intermediate/dense")), "output/dense")
        x = layer_norm(ffn + x, w[p + "output/LayerNorm/gamma"], w[p + "output/LayerNorm/beta"])
        layers.append(x)
        i += 1
    pooled = np.tanh(x[:, 0] @ w["bert/pooler/dense/kernel"] + w["bert/pooler/dense/bias"])
    return {"sequence_output": x, "pooled_output": pooled, "encoder_outputs": layers}


def pretraining_heads(w: dict, sequence, pooled, positions, act) -> dict:
    """The original `get_masked_lm_output` and `get_next_sentence_output` logits."""
    w = {k: np.asarray(v, np.float64) for k, v in w.items()}
    gathered = np.take_along_axis(sequence, positions[..., None], axis=1)
    h = act(gathered @ w["cls/predictions/transform/dense/kernel"] + w["cls/predictions/transform/dense/bias"])
    h = layer_norm(h, w["cls/predictions/transform/LayerNorm/gamma"], w["cls/predictions/transform/LayerNorm/beta"])
    mlm = h @ w["bert/embeddings/word_embeddings"].T + w["cls/predictions/output_bias"]
    nsp = pooled @ w["cls/seq_relationship/output_weights"].T + w["cls/seq_relationship/output_bias"]
    return {"masked_lm_logits": mlm, "next_sentence_logits": nsp}
