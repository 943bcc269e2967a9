"""Turns the encoder's per-layer hidden states into features: sentence or token vectors.

This is the feature-based use of BERT (paper, section 5.3 and Table 7): pick some
layers of `BertEncoder`'s `encoder_outputs` (the best NER result concatenates the
last four), then keep every token or pool them into one vector per sentence.

Signature (shared by `extract_features.py` and the encoder's `embed()`):

    pool(hidden_states, input_mask, pooling="cls", layers=(-1,), first_subword_mask=None)

- `hidden_states`: a sequence of arrays [batch, seq, H], one per layer, indexed as
  the original's `get_all_encoder_layers()`: `encoder_outputs` of `BertEncoder`
  (block outputs only; -1 is the last block). HF's `hidden_states` has the
  embeddings output first, so pass `hidden_states[1:]` to match.
- `input_mask`: int or bool [batch, seq], 1 for real tokens, 0 for padding.
- `pooling`: one of `POOLINGS`:
  - "cls": the [CLS] (first) vector, [batch, F];
  - "mean": the mean over the real tokens ([CLS] and [SEP] included, as
    sentence-transformers' mean pooling does), [batch, F];
  - "first_subword": the vector of the first WordPiece of every word, packed to
    the front in word order, [batch, seq, F]; slots past a row's word count are
    zero (the count is `first_subword_mask.sum(-1)`);
  - "none": every token, [batch, seq, F], padding positions zero.
- `layers`: indices into `hidden_states` (negative from the end), concatenated in
  the given order along the feature axis: F = len(layers) * H.
- `first_subword_mask`: [batch, seq], 1 at the first piece of each word; needed
  only by "first_subword" (`word_start_mask` builds it from the tokens).

Returns a float32 backend tensor (`numpy.asarray` turns it into numpy). Only
`keras.ops` is used, so it runs eagerly, inside a `tf.function` or under JAX.

Example: a batch of one sentence of three real tokens and one pad, two layers, H=2.
>>> import numpy as np
>>> states = [np.arange(8, dtype="float32").reshape(1, 4, 2),
...           np.ones((1, 4, 2), dtype="float32")]
>>> mask = np.array([[1, 1, 1, 0]])
>>> np.asarray(pool(states, mask, "cls", layers=(-1, -2))).tolist()
[[1.0, 1.0, 0.0, 1.0]]
>>> np.asarray(pool(states, mask, "mean", layers=(0,))).tolist()
[[2.0, 3.0]]
>>> np.asarray(pool(states, mask, "first_subword", layers=(0,),
...                 first_subword_mask=[[0, 1, 0, 0]])).tolist()
[[[2.0, 3.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0]]]
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
from keras import ops

from bert_tf.errors import BertTfError

POOLINGS = ("cls", "mean", "first_subword", "none")
# Tokens that are not (pieces of) words of the input text.
SPECIAL_TOKENS = frozenset({"[CLS]", "[SEP]", "[PAD]"})


# === Validation ===
def check_layers(layers: Sequence[int], num_layers: int, what: str = "layers") -> list[int]:
    """`layers` as non-negative indices, or a `BertTfError` naming `what` (e.g. a flag).

    >>> check_layers([-1, -2], 6)
    [5, 4]
    >>> check_layers([6], 6, "--layers")
    Traceback (most recent call last):
    ...
    bert_tf.errors.BertTfError: --layers value 6 is out of range for a model of 6 layers; use indices from -6 to 5 (-1 is the last layer).
    """
    if not layers:
        raise BertTfError(f"{what} is empty; give at least one layer index, e.g. -1 for the last layer.")
    for index in layers:
        if not isinstance(index, (int, np.integer)) or isinstance(index, bool):
            raise BertTfError(f"{what} value {index!r} is not a layer index; give integers, e.g. (-1, -2).")
        if not -num_layers <= index < num_layers:
            raise BertTfError(
                f"{what} value {index} is out of range for a model of {num_layers} layers; use indices "
                f"from {-num_layers} to {num_layers - 1} (-1 is the last layer)."
            )
    return [index % num_layers for index in layers]


def check_pooling(pooling: str, what: str = "pooling") -> str:
    if pooling not in POOLINGS:
        raise BertTfError(f"{what} {pooling!r} is not one of {', '.join(POOLINGS)}.")
    return pooling


# === Pooling ===
def word_start_mask(tokens: Sequence[Sequence[str]], seq_length: int) -> np.ndarray:
    """[batch, seq_length] int32: 1 at every token that starts a word.

    A word starts at any WordPiece that is not a `##` continuation and not
    [CLS]/[SEP]/[PAD]; an [UNK] is a word of its own.

    >>> word_start_mask([["[CLS]", "un", "##aff", "##able", "[SEP]", "b"]], 7).tolist()
    [[0, 1, 0, 0, 0, 1, 0]]
    """
    mask = np.zeros((len(tokens), seq_length), dtype="int32")
    for row, row_tokens in enumerate(tokens):
        for column, token in enumerate(row_tokens[:seq_length]):
            mask[row, column] = not token.startswith("##") and token not in SPECIAL_TOKENS
    return mask


def _first_subwords(features: Any, first_subword_mask: Any) -> Any:
    """Packs the rows of `features` [batch, seq, F] where the mask is 1 to the front."""
    mask = ops.cast(first_subword_mask, "int32")
    seq_length = ops.shape(mask)[1]
    # The w-th word (from 0) starts at the number of positions whose running word
    # count is <= w: an O(seq^2) comparison of ints, cheaper than any [seq, seq, F]
    # one-hot product, and keras.ops has no boolean gather.
    words_so_far = ops.cumsum(mask, axis=1)  # [batch, seq]
    slots = ops.arange(seq_length, dtype="int32")
    positions = ops.sum(ops.cast(words_so_far[:, None, :] <= slots[None, :, None], "int32"), axis=2)
    in_range = slots[None, :] < ops.sum(mask, axis=1, keepdims=True)  # [batch, seq]
    positions = ops.minimum(positions, seq_length - 1)
    gathered = ops.take_along_axis(features, positions[:, :, None], axis=1)
    return gathered * ops.cast(in_range, features.dtype)[:, :, None]


def pool(
    hidden_states: Sequence[Any],
    input_mask: Any,
    pooling: str = "cls",
    layers: Sequence[int] = (-1,),
    first_subword_mask: Any = None,
) -> Any:
    """Features from the chosen `layers` of `hidden_states`; see the module docstring."""
    check_pooling(pooling)
    indices = check_layers(layers, len(hidden_states))
    features = ops.concatenate([ops.cast(hidden_states[i], "float32") for i in indices], axis=-1)
    mask = ops.cast(input_mask, "float32")  # [batch, seq]
    if pooling == "cls":
        return features[:, 0, :]
    if pooling == "mean":
        total = ops.sum(features * mask[:, :, None], axis=1)
        # An all-padding row (never produced by the tokenizer) gives zeros, not NaN.
        return total / ops.maximum(ops.sum(mask, axis=1, keepdims=True), 1.0)
    if pooling == "first_subword":
        if first_subword_mask is None:
            raise BertTfError('pooling="first_subword" needs first_subword_mask (see word_start_mask).')
        return _first_subwords(features, ops.cast(first_subword_mask, "float32") * mask)
    return features * mask[:, :, None]
