"""Batches of unpadded features: fixed, dynamic or length-bucketed padding.

The original pads every input to `max_seq_length`. Most GLUE sentences are far shorter
(SST-2's median is ~13 WordPieces), and the encoder's cost grows with the padded length,
so padding is done per batch here:

- `fixed`: every batch padded to `max_seq_length` (the original; static shapes for TPU/XLA);
- `dynamic`: each batch padded to its longest row (rounded up to `pad_to_multiple_of`);
- `bucket`: `dynamic`, plus rows of similar length batched together: the shuffled rows
  are cut into windows of `BUCKET_WINDOW` batches, each window sorted by length and cut
  into batches, and the batch order shuffled again. Training order stays random, and
  batches hold little padding.

Evaluation and prediction batches (no shuffling) are sorted by length in `dynamic` and
`bucket` modes; every batch carries `feature_index`, so outputs go back to their rows.

A plan (the row indices of each batch) is computed in NumPy, so the number of steps of
an epoch is known before it runs (the learning-rate schedule needs it) and a resumed run
can skip exactly the batches it already trained on.

Example:
>>> import numpy as np
>>> plan = batch_plan(np.array([5, 1, 4, 2, 3]), batch_size=2, mode="bucket")
>>> [batch.tolist() for batch in plan]  # evaluation order: sorted by length
[[1, 3], [4, 2], [0]]
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import tensorflow as tf

from bert_tf.by_length import round_up
from bert_tf.errors import BertTfError
from fine_tune.task import Features

PADDING_MODES = ("fixed", "dynamic", "bucket")
# Rows sorted together in `bucket` mode, in batches: large enough to find rows of
# similar length, small enough that the batches of an epoch stay well mixed.
BUCKET_WINDOW = 50


def batch_plan(
    lengths: np.ndarray,
    batch_size: int,
    mode: str,
    seed: int | tuple[int, ...] | None = None,
    drop_remainder: bool = False,
) -> list[np.ndarray]:
    """The row indices of each batch.

    Args:
        lengths: the length of every row.
        batch_size: rows per batch (the global batch, across replicas).
        mode: one of `PADDING_MODES`.
        seed: shuffles the rows (training) when given, an int or a tuple of ints (NumPy's
            `SeedSequence` mixes them: training passes (seed, epoch)); evaluation passes None.
        drop_remainder: drop the last, smaller batch (static shapes for TPU).
    """
    if mode not in PADDING_MODES:
        raise BertTfError(f"Unknown padding mode {mode!r}; use one of {', '.join(PADDING_MODES)}.")
    rng = np.random.default_rng(seed) if seed is not None else None
    order = rng.permutation(len(lengths)) if rng is not None else np.arange(len(lengths))
    if mode == "bucket" or (mode == "dynamic" and rng is None):
        order = _length_sorted(order, lengths, batch_size, shuffled=rng is not None)
    batches = [order[start : start + batch_size] for start in range(0, len(order), batch_size)]
    if drop_remainder and batches and len(batches[-1]) < batch_size:
        batches.pop()
    if rng is not None and mode == "bucket":
        batches = [batches[i] for i in rng.permutation(len(batches))]
    return batches


def _length_sorted(order: np.ndarray, lengths: np.ndarray, batch_size: int, shuffled: bool) -> np.ndarray:
    """`order` sorted by length: as a whole for evaluation, within windows for training."""
    if not shuffled:
        return order[np.argsort(lengths[order], kind="stable")]
    window = batch_size * BUCKET_WINDOW
    pieces = [order[start : start + window] for start in range(0, len(order), window)]
    return np.concatenate([piece[np.argsort(lengths[piece], kind="stable")] for piece in pieces])


def padded_length(longest: int, max_seq_length: int, mode: str, multiple_of: int) -> int:
    """The length a batch is padded to.

    >>> padded_length(13, 128, "dynamic", 8), padded_length(13, 128, "fixed", 8)
    (16, 128)
    """
    if mode == "fixed":
        return max_seq_length
    return min(max_seq_length, round_up(longest, multiple_of))


def pad_batch(features: Features, lengths: np.ndarray, rows: np.ndarray, length: int) -> dict[str, np.ndarray]:
    """The padded arrays of `rows` (`lengths`: every row's length): inputs with
    `input_mask`, targets and `feature_index`."""
    batch: dict[str, np.ndarray] = {}
    for key, sequences in features.sequences.items():
        first = sequences[rows[0]]
        padded = np.zeros((len(rows), length), dtype=first.dtype)
        for out, row in zip(padded, rows):
            out[: len(sequences[row])] = sequences[row]
        batch[key] = padded
    batch["input_mask"] = (np.arange(length)[None, :] < lengths[rows][:, None]).astype(np.int32)
    for key, values in features.scalars.items():
        batch[key] = values[rows]
    batch["feature_index"] = rows.astype(np.int64)
    return batch


def dataset(
    features: Features, plan: Sequence[np.ndarray], max_seq_length: int, mode: str, multiple_of: int = 8
) -> tf.data.Dataset:
    """A `tf.data.Dataset` of the padded batches of `plan`, padded on a background thread.

    Shapes are [batch, None]: one traced step serves every batch length.
    """
    def batches() -> Iterator[dict[str, np.ndarray]]:
        return padded_batches(features, plan, max_seq_length, mode, multiple_of)

    return tf.data.Dataset.from_generator(batches, output_signature=batch_signature(features)).prefetch(4)


def padded_batches(
    features: Features, plan: Sequence[np.ndarray], max_seq_length: int, mode: str, multiple_of: int = 8
) -> Iterator[dict[str, np.ndarray]]:
    """The padded NumPy batches of `plan`, one at a time (what `dataset` holds)."""
    lengths = features.lengths
    for rows in plan:
        length = padded_length(int(lengths[rows].max()), max_seq_length, mode, multiple_of)
        yield pad_batch(features, lengths, rows, length)


def batch_signature(features: Features) -> dict[str, tf.TensorSpec]:
    """The `TensorSpec` of every array `pad_batch` returns."""
    spec = {key: tf.TensorSpec([None, None], tf.as_dtype(seqs[0].dtype)) for key, seqs in features.sequences.items()}
    spec["input_mask"] = tf.TensorSpec([None, None], tf.int32)
    spec.update({key: tf.TensorSpec([None], tf.as_dtype(values.dtype)) for key, values in features.scalars.items()})
    spec["feature_index"] = tf.TensorSpec([None], tf.int64)
    return spec
