"""The `tf.data` input pipeline of pre-training: reads the TFRecords of
`create_pretraining_data.py` (ours or the original's / Model Garden's), with static or
dynamic masking.

- Static: the files hold masked instances (`masked_lm_*` features); they are read as
  they are, like Model Garden's `BertPretrainDataLoader`.
- Dynamic (`dynamic_masking=True`): every batch is masked anew, with the original's
  rates (`masked_lm_prob` of the tokens, at most `max_predictions_per_seq`; 80% [MASK],
  10% kept, 10% random id), so every epoch sees other masks (RoBERTa's dynamic masking).
  Files written with `--dynamic_masking` hold unmasked instances; statically masked
  files work too (the masking is undone first with `masked_lm_ids`).

The feature names (original `input_ids`/`segment_ids` or v2 `input_word_ids`/
`input_type_ids`) and GZIP compression are detected from the first file
(`bert_tf.data.schema` says what to look for).

Example:
>>> dataset = pretraining_dataset("out/train.tfrecord-*", batch_size=32, max_seq_length=128,
...     max_predictions_per_seq=20, dynamic_masking=True, vocab_size=30522)  # doctest: +SKIP
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

import tensorflow as tf

from bert_tf.checkpoints.base import first_line
from bert_tf.data.schema import (
    GOOGLE_CLS_ID,
    GOOGLE_MASK_ID,
    GOOGLE_SEP_ID,
    INPUT_MASK,
    KEEP_PROB,
    MASK_PROB,
    MASKED_LM_IDS,
    MASKED_LM_POSITIONS,
    MASKED_LM_PROB,
    MASKED_LM_WEIGHTS,
    NEXT_SENTENCE_LABELS,
    V2_NAMES,
    WORD_CONTINUATION,
    FileFormat,
    compression_of,
    file_format,
    model_name,
)
from bert_tf.errors import BertTfError

INPUT_WORD_IDS = V2_NAMES.input_ids  # the parsed batches carry the model's names


@dataclass(frozen=True)
class DynamicMasking:
    """How `pretraining_dataset` masks when `dynamic_masking=True`."""

    vocab_size: int
    masked_lm_prob: float = MASKED_LM_PROB
    mask_id: int = GOOGLE_MASK_ID
    cls_id: int = GOOGLE_CLS_ID
    sep_id: int = GOOGLE_SEP_ID
    whole_word: bool = False


def list_files(file_patterns: str | Sequence[str]) -> list[str]:
    """Sorted files of comma-separated (or listed) glob patterns; `BertTfError` if none.

    As Python's glob (and unlike TensorFlow's), a wildcard does not match a hidden name:
    `data/*` leaves out the settings that create_pretraining_data.py keeps beside its
    shards (`.NAME.settings.json`) and the temporary file of a shard being written.
    """
    patterns = file_patterns.split(",") if isinstance(file_patterns, str) else list(file_patterns)
    files: set[str] = set()
    for pattern in (p.strip() for p in patterns if p.strip()):
        matches = [path for path in tf.io.gfile.glob(pattern) if not _hidden(path) or _hidden(pattern)]
        if not matches:
            raise BertTfError(f"Pre-training data pattern {pattern!r} matches no file.")
        files.update(matches)
    if not files:
        raise BertTfError("No pre-training data files given.")
    return sorted(files)


def _hidden(path: str) -> bool:
    return os.path.basename(path).startswith(".")


def detect_format(path: str) -> FileFormat:
    """Reads the first record of `path` to learn the feature names and compression."""
    with tf.io.gfile.GFile(path, "rb") as file:
        compression = compression_of(file.read(12))
    try:
        first = next(iter(tf.data.TFRecordDataset(path, compression_type=compression).take(1)), None)
    except tf.errors.OpError as error:
        raise BertTfError(f"{path} is not a TFRecord file ({first_line(error)}).") from None
    if first is None:
        raise BertTfError(f"{path} holds no record (create_pretraining_data.py leaves a shard empty when the corpus "
                          "has too few documents for its number of shards); leave it out of the input files, or make "
                          "the data again with fewer --num_output_shards.")
    keys = set(tf.train.Example.FromString(first.numpy()).features.feature.keys())
    return file_format(path, keys, compression)


def _feature_spec(fmt: FileFormat, seq_length: int, predictions: int) -> dict[str, tf.io.FixedLenFeature]:
    spec = {
        fmt.names.input_ids: tf.io.FixedLenFeature([seq_length], tf.int64),
        fmt.names.segment_ids: tf.io.FixedLenFeature([seq_length], tf.int64),
        INPUT_MASK: tf.io.FixedLenFeature([seq_length], tf.int64),
        NEXT_SENTENCE_LABELS: tf.io.FixedLenFeature([1], tf.int64),
    }
    if fmt.masked:
        spec[MASKED_LM_POSITIONS] = tf.io.FixedLenFeature([predictions], tf.int64)
        spec[MASKED_LM_IDS] = tf.io.FixedLenFeature([predictions], tf.int64)
        spec[MASKED_LM_WEIGHTS] = tf.io.FixedLenFeature([predictions], tf.float32)
    if fmt.word_continuation:
        spec[WORD_CONTINUATION] = tf.io.FixedLenFeature([seq_length], tf.int64)
    return spec


def _parse_batch(records: tf.Tensor, fmt: FileFormat, seq_length: int, predictions: int) -> dict[str, tf.Tensor]:
    """A batch of serialized examples -> the model's feature names, int32 (TPU-friendly)."""
    parsed = tf.io.parse_example(records, _feature_spec(fmt, seq_length, predictions))
    return {
        model_name(name): tf.cast(value, tf.int32) if value.dtype == tf.int64 else value
        for name, value in parsed.items()
    }


def _undo_static_masking(features: dict[str, tf.Tensor]) -> tf.Tensor:
    """The unmasked ids of statically masked instances (put `masked_lm_ids` back)."""
    ids = features[INPUT_WORD_IDS]
    real = features[MASKED_LM_WEIGHTS] > 0
    rows = tf.broadcast_to(tf.range(tf.shape(ids)[0])[:, None], tf.shape(features[MASKED_LM_POSITIONS]))
    indices = tf.stack([rows, features[MASKED_LM_POSITIONS]], axis=-1)
    current = tf.gather_nd(ids, indices)
    return tf.tensor_scatter_nd_update(ids, indices, tf.where(real, features[MASKED_LM_IDS], current))


def _choose_tokens(candidates: tf.Tensor, budget: tf.Tensor, predictions: int, seed: tf.Tensor) -> tf.Tensor:
    """Per row, `budget` random candidate positions (or all candidates, if fewer), as a
    boolean mask: the original's shuffle-and-take."""
    keys = tf.where(candidates, tf.random.stateless_uniform(tf.shape(candidates), seed), 2.0)
    _, order = tf.math.top_k(-keys, k=predictions)  # smallest keys first
    take = tf.range(predictions)[None, :] < tf.minimum(budget, tf.reduce_sum(tf.cast(candidates, tf.int32), 1))[:, None]
    rows = tf.broadcast_to(tf.range(tf.shape(order)[0])[:, None], tf.shape(order))
    indices = tf.boolean_mask(tf.stack([rows, order], -1), take)
    return tf.scatter_nd(indices, tf.ones(tf.shape(indices)[:1], tf.int32), tf.shape(candidates)) > 0


def _choose_whole_words(
    candidates: tf.Tensor, continuation: tf.Tensor, budget: tf.Tensor, seed: tf.Tensor
) -> tf.Tensor:
    """Per row, random whole words while they fit in `budget` tokens (skipping a word
    that would overflow), as a boolean mask of their tokens."""
    batch, length = tf.shape(candidates)[0], tf.shape(candidates)[1]
    position = tf.range(length)[None, :]
    # As in the original, only the first candidate always starts a word.
    starts = candidates & (~continuation | tf.equal(position, 1))
    word = tf.maximum(tf.cumsum(tf.cast(starts, tf.int32), axis=1) - 1, 0)
    num_words = tf.reduce_sum(tf.cast(starts, tf.int32), axis=1)
    segment = tf.range(batch)[:, None] * length + word
    word_length = tf.reshape(
        tf.math.unsorted_segment_sum(tf.cast(candidates, tf.int32), segment, batch * length), [batch, length]
    )
    keys = tf.where(position < num_words[:, None], tf.random.stateless_uniform([batch, length], seed), 2.0)
    order = tf.argsort(keys, axis=1)  # word ids in random order
    ranked_length = tf.gather(word_length, order, batch_dims=1)

    def take_word(taken: tf.Tensor, size: tf.Tensor) -> tf.Tensor:
        fits = (taken < budget) & (size > 0) & (taken + size <= budget)
        return taken + tf.where(fits, size, 0)

    taken_after = tf.scan(take_word, tf.transpose(ranked_length), initializer=tf.zeros([batch], tf.int32))
    taken_before = tf.concat([tf.zeros([1, batch], tf.int32), taken_after[:-1]], axis=0)
    accepted = tf.transpose(taken_after > taken_before)  # [batch, rank]
    word_chosen = tf.gather(accepted, tf.argsort(order, axis=1), batch_dims=1)
    return candidates & tf.gather(word_chosen, word, batch_dims=1)


def _mask_dynamically(
    features: dict[str, tf.Tensor], seed: tf.Tensor, masking: DynamicMasking, predictions: int
) -> dict[str, tf.Tensor]:
    """Fresh masked-LM predictions for a batch (see the module docstring)."""
    ids = _undo_static_masking(features) if MASKED_LM_IDS in features else features[INPUT_WORD_IDS]
    real_token = features[INPUT_MASK] > 0
    candidates = real_token & tf.not_equal(ids, masking.cls_id) & tf.not_equal(ids, masking.sep_id)
    lengths = tf.reduce_sum(tf.cast(real_token, tf.float32), axis=1)
    budget = tf.cast(tf.clip_by_value(tf.round(lengths * masking.masked_lm_prob), 1, predictions), tf.int32)
    seeds = tf.random.experimental.stateless_split(seed, 3)
    if masking.whole_word:
        chosen = _choose_whole_words(candidates, features[WORD_CONTINUATION] > 0, budget, seeds[0])
    else:
        chosen = _choose_tokens(candidates, budget, predictions, seeds[0])
    length = tf.shape(ids)[1]
    # The chosen positions, sorted: the smallest keys of (position, or past the end).
    keys = tf.where(chosen, tf.range(length)[None, :], length + tf.range(length)[None, :])
    positions = -tf.math.top_k(-keys, k=predictions).values
    real = positions < length
    positions = tf.where(real, positions, 0)
    original = tf.gather(ids, positions, batch_dims=1)
    draw = tf.random.stateless_uniform(tf.shape(positions), seeds[1])
    random_ids = tf.random.stateless_uniform(tf.shape(positions), seeds[2], 0, masking.vocab_size, tf.int32)
    replacement = tf.where(
        draw < MASK_PROB, masking.mask_id, tf.where(draw < MASK_PROB + KEEP_PROB, original, random_ids)
    )
    rows = tf.broadcast_to(tf.range(tf.shape(ids)[0])[:, None], tf.shape(positions))
    indices = tf.stack([rows, positions], axis=-1)
    # Padding entries point at [CLS] (position 0) and write it back unchanged.
    masked_ids = tf.tensor_scatter_nd_update(ids, indices, tf.where(real, replacement, original))
    out = {name: value for name, value in features.items() if name != WORD_CONTINUATION}
    out.update({
        INPUT_WORD_IDS: masked_ids,
        MASKED_LM_POSITIONS: positions,
        MASKED_LM_IDS: tf.where(real, original, 0),
        MASKED_LM_WEIGHTS: tf.cast(real, tf.float32),
    })
    return out


def pretraining_dataset(
    file_patterns: str | Sequence[str],
    batch_size: int,
    max_seq_length: int,
    max_predictions_per_seq: int,
    *,
    is_training: bool = True,
    dynamic_masking: bool = False,
    vocab_size: int | None = None,
    masked_lm_prob: float = MASKED_LM_PROB,
    mask_id: int = GOOGLE_MASK_ID,
    cls_id: int = GOOGLE_CLS_ID,
    sep_id: int = GOOGLE_SEP_ID,
    whole_word_mask: bool = False,
    seed: int | None = None,
    shuffle_buffer_size: int = 10_000,
    cycle_length: int = 8,
    drop_remainder: bool | None = None,
    input_context: tf.distribute.InputContext | None = None,
) -> tf.data.Dataset:
    """Batches of pre-training features, as the model takes them.

    Yields dicts of `input_word_ids`, `input_mask`, `input_type_ids` (int32,
    `[batch, max_seq_length]`), `masked_lm_positions`, `masked_lm_ids` (int32) and
    `masked_lm_weights` (float32, `[batch, max_predictions_per_seq]`), and
    `next_sentence_labels` (int32, `[batch, 1]`; 1 = NotNext).

    Training reads the files in a shuffled order, forever, interleaving `cycle_length`
    of them and shuffling records in a `shuffle_buffer_size` buffer; evaluation
    (`is_training=False`) reads each record once, in order. `seed` makes the order and
    the dynamic masks reproducible. Dynamic masking needs `vocab_size` (the range of
    random replacement ids) and the ids of [MASK], [CLS], [SEP] (Google's by default);
    with `whole_word_mask`, the files must hold `word_continuation` (written by
    `create_pretraining_data.py --dynamic_masking --do_whole_word_mask` or
    `--zh_whole_word_mask`). `input_context` shards the files between input pipelines.
    """
    if max_predictions_per_seq > max_seq_length:
        raise BertTfError(
            f"max_predictions_per_seq ({max_predictions_per_seq}) must not exceed max_seq_length ({max_seq_length})."
        )
    files = list_files(file_patterns)
    fmt = detect_format(files[0])
    masking = None
    if dynamic_masking:
        if not vocab_size:
            raise BertTfError("Dynamic masking needs vocab_size (the number of lines of vocab.txt).")
        if whole_word_mask and not fmt.word_continuation:
            raise BertTfError(
                f"{files[0]} has no word_continuation feature; write it with create_pretraining_data.py "
                "--dynamic_masking --do_whole_word_mask to mask whole words dynamically."
            )
        masking = DynamicMasking(vocab_size, masked_lm_prob, mask_id, cls_id, sep_id, whole_word_mask)
    elif not fmt.masked:
        raise BertTfError(
            f"{files[0]} holds unmasked instances (written with --dynamic_masking); pass dynamic_masking=True."
        )
    deterministic = seed is not None or not is_training
    dataset = tf.data.Dataset.from_tensor_slices(files)
    if input_context is not None and input_context.num_input_pipelines > 1:
        if len(files) < input_context.num_input_pipelines:
            raise BertTfError(
                f"{len(files)} data file(s) cannot be shared between {input_context.num_input_pipelines} input "
                "pipelines; write more shards (--num_output_shards)."
            )
        dataset = dataset.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
    if is_training:
        dataset = dataset.shuffle(len(files), seed=seed).repeat()
    dataset = dataset.interleave(
        lambda path: tf.data.TFRecordDataset(path, compression_type=fmt.compression),
        cycle_length=min(cycle_length, len(files)),
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=deterministic,
    )
    if is_training:
        dataset = dataset.shuffle(shuffle_buffer_size, seed=seed)
    dataset = dataset.batch(batch_size, drop_remainder=is_training if drop_remainder is None else drop_remainder)
    dataset = dataset.map(
        lambda records: _parse_batch(records, fmt, max_seq_length, max_predictions_per_seq),
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=deterministic,
    )
    if masking is not None:
        seeds = tf.data.Dataset.random(seed=seed).batch(2)
        dataset = tf.data.Dataset.zip(dataset, seeds).map(
            lambda features, pair: _mask_dynamically(features, pair, masking, max_predictions_per_seq),
            num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=deterministic,
        )
    return dataset.prefetch(tf.data.AUTOTUNE)
