"""Pre-training input for the training loop: checked files, sharded per worker, split per replica.

The records are read by `bert_tf.data.reader.pretraining_dataset` (static or dynamic masking,
original or v2 feature names, gzip or not). Here we decide who reads what:

- Each worker's pipeline yields *worker batches* (`global batch / workers`); inside
  the step the batch is cut into one slice per local replica
  (`split_per_replica`). A plain `tf.data` iterator per worker can be checkpointed,
  which is how a restart resumes at the exact input position.
- With at least as many files as workers, each worker reads its own files (scales to
  any corpus). With fewer, every worker reads the same stream and keeps every W-th
  worker batch, so W workers see exactly the examples one worker would see in the same
  global batch, in the same order.
- TPU: `distribute_datasets_from_function` feeds the replicas through infeed; its
  iterator cannot be checkpointed, so a restart skips the batches already consumed.

Example:
>>> plan = BatchPlan(global_batch_size=32, num_workers=2, num_replicas=4, accumulation_steps=2)
>>> plan.worker_batch_size, plan.replica_batch_size, plan.micro_batch_size
(16, 8, 4)
"""

from __future__ import annotations

import dataclasses
import hashlib

import numpy as np
import tensorflow as tf

from bert_tf.data.reader import detect_format, list_files, pretraining_dataset
from bert_tf.data.schema import (
    GOOGLE_SPECIAL_IDS,
    INPUT_MASK,
    MASKED_LM_POSITIONS,
    SPECIAL_TOKENS,
    V2_NAMES,
    special_ids,
)
from bert_tf.errors import BertTfError
from bert_tf.tokenization import load_vocab

MODEL_INPUTS = (V2_NAMES.input_ids, INPUT_MASK, V2_NAMES.segment_ids, MASKED_LM_POSITIONS)


@dataclasses.dataclass(frozen=True)
class BatchPlan:
    """How a global batch is divided between workers, replicas and micro-batches."""

    global_batch_size: int
    num_workers: int = 1
    num_replicas: int = 1
    accumulation_steps: int = 1

    def __post_init__(self) -> None:
        parts = self.num_replicas * self.accumulation_steps
        if self.global_batch_size % parts:
            raise BertTfError(
                f"The batch size {self.global_batch_size} must be a multiple of {parts} "
                f"({self.num_replicas} replica(s) x {self.accumulation_steps} accumulation step(s))."
            )

    @property
    def worker_batch_size(self) -> int:
        return self.global_batch_size // self.num_workers

    @property
    def replica_batch_size(self) -> int:
        return self.global_batch_size // self.num_replicas

    @property
    def micro_batch_size(self) -> int:
        return self.replica_batch_size // self.accumulation_steps


# === Checks ===
def check_input_files(
    file_patterns: str,
    max_seq_length: int,
    max_predictions_per_seq: int,
    vocab_size: int,
    dynamic_masking: bool,
) -> list[str]:
    """The files of `file_patterns`, after reading the first record of each.

    Raises `BertTfError` for a pattern that matches nothing, a file that is not a
    TFRecord of BERT pre-training data, records whose lengths differ from the flags
    (naming both), unmasked records without `--dynamic_masking`, or token ids beyond
    the model's vocabulary.
    """
    files = list_files(file_patterns)
    for path in files:
        _check_first_record(path, max_seq_length, max_predictions_per_seq, vocab_size, dynamic_masking)
    return files


def _check_first_record(
    path: str, max_seq_length: int, max_predictions_per_seq: int, vocab_size: int, dynamic_masking: bool
) -> None:
    fmt = detect_format(path)
    record = next(iter(tf.data.TFRecordDataset(path, compression_type=fmt.compression).take(1)))
    features = tf.train.Example.FromString(record.numpy()).features.feature
    ids = np.array(features[fmt.names.input_ids].int64_list.value)
    predictions = len(features[MASKED_LM_POSITIONS].int64_list.value) if fmt.masked else None
    if len(ids) != max_seq_length or predictions not in (None, max_predictions_per_seq):
        shown = f"max_seq_length {len(ids)}" + (f" and max_predictions_per_seq {predictions}" if fmt.masked else "")
        raise BertTfError(
            f"{path} holds records of {shown}, but --max_seq_length={max_seq_length} and "
            f"--max_predictions_per_seq={max_predictions_per_seq}; pass the values the data was written with."
        )
    if not fmt.masked and not dynamic_masking:
        raise BertTfError(f"{path} holds unmasked instances (written with --dynamic_masking); pass --dynamic_masking.")
    if ids.size and ids.max() >= vocab_size:
        raise BertTfError(
            f"{path} holds token id {ids.max()}, but the model's vocab_size is {vocab_size}; "
            "the data was written with another vocabulary than the BERT config's."
        )


# === Datasets ===
@dataclasses.dataclass(frozen=True)
class DataSpec:
    """What every pipeline of a run reads, and how (see `bert_tf.data.reader.pretraining_dataset`)."""

    files: tuple[str, ...]
    max_seq_length: int
    max_predictions_per_seq: int
    vocab_size: int
    dynamic_masking: bool = False
    seed: int = 12345
    special_ids: tuple[tuple[str, int], ...] = ()  # mask_id, cls_id, sep_id when not Google's

    def read(self, batch_size: int, is_training: bool, **kwargs) -> tf.data.Dataset:
        # Files written with --dynamic_masking --do_whole_word_mask carry word boundaries:
        # then whole words are masked, as the data's author asked for.
        whole_word = self.dynamic_masking and detect_format(self.files[0]).word_continuation
        return pretraining_dataset(
            list(self.files),
            batch_size,
            self.max_seq_length,
            self.max_predictions_per_seq,
            is_training=is_training,
            dynamic_masking=self.dynamic_masking,
            vocab_size=self.vocab_size,
            whole_word_mask=whole_word,
            seed=self.seed,
            **dict(self.special_ids),
            **kwargs,
        )

    def fingerprint(self, plan: BatchPlan) -> str:
        """Names the stream a worker reads: a saved input position is only valid for it.

        >>> spec, plan = DataSpec(("a.tfrecord",), 128, 20, 30522), BatchPlan(32)
        >>> spec.fingerprint(plan) == dataclasses.replace(spec, seed=1).fingerprint(plan)
        False
        """
        key = repr((self, plan.global_batch_size, plan.num_workers))
        return hashlib.sha1(key.encode()).hexdigest()[:12]


def special_token_ids(vocab_file: str) -> tuple[tuple[str, int], ...]:
    """The ids of [MASK], [CLS] and [SEP] in `vocab_file` (one token a line)."""
    vocab = load_vocab(vocab_file)
    missing = [token for token in SPECIAL_TOKENS.values() if token not in vocab]
    if missing:
        raise BertTfError(f"--vocab_file {vocab_file} lacks {', '.join(missing)}.")
    return tuple(special_ids(vocab).items())


def check_special_ids(token_ids: tuple[tuple[str, int], ...], vocab_size: int) -> None:
    """Dynamic masking writes these ids: they must exist in the model's vocabulary."""
    ids = {**GOOGLE_SPECIAL_IDS, **dict(token_ids)}
    if max(ids.values()) >= vocab_size:
        raise BertTfError(
            f"Dynamic masking uses [MASK] id {ids['mask_id']}, [CLS] id {ids['cls_id']} and [SEP] id {ids['sep_id']}, "
            f"beyond the model's vocab_size {vocab_size}; pass the data's --vocab_file."
        )


def training_dataset(spec: DataSpec, plan: BatchPlan, worker: int, skip_batches: int = 0) -> tf.data.Dataset:
    """This worker's endless stream of worker batches, `skip_batches` of them skipped."""
    by_file = plan.num_workers > 1 and len(spec.files) >= plan.num_workers
    context = tf.distribute.InputContext(plan.num_workers, worker, plan.num_replicas) if by_file else None
    dataset = spec.read(plan.worker_batch_size, is_training=True, input_context=context)
    if plan.num_workers > 1 and not by_file:
        dataset = dataset.shard(plan.num_workers, worker)
    return dataset.skip(skip_batches) if skip_batches else dataset


def evaluation_dataset(spec: DataSpec, plan: BatchPlan, worker: int) -> tf.data.Dataset:
    """The records in order, once, as worker batches (every W-th one for worker W)."""
    dataset = spec.read(plan.worker_batch_size, is_training=False, drop_remainder=True)
    return dataset.shard(plan.num_workers, worker) if plan.num_workers > 1 else dataset


def tpu_dataset_fn(spec: DataSpec, global_batch_size: int, skip_batches: int = 0):
    """For `TPUStrategy.distribute_datasets_from_function`: per-replica batches per host."""

    def dataset_fn(context: tf.distribute.InputContext) -> tf.data.Dataset:
        by_file = len(spec.files) >= context.num_input_pipelines
        batch_size = context.get_per_replica_batch_size(global_batch_size)
        dataset = spec.read(batch_size, is_training=True, input_context=context if by_file else None)
        if not by_file and context.num_input_pipelines > 1:
            dataset = dataset.shard(context.num_input_pipelines, context.input_pipeline_id)
        # A host feeds its replicas in turn: a global step takes one batch per local replica.
        local_replicas = context.num_replicas_in_sync // context.num_input_pipelines
        return dataset.skip(skip_batches * local_replicas) if skip_batches else dataset

    return dataset_fn


def count_full_batches(files: list[str], global_batch_size: int, limit: int) -> int:
    """How many full global batches the files hold, counting at most `limit` of them."""
    compression = detect_format(files[0]).compression
    records = tf.data.TFRecordDataset(files, compression_type=compression).take(limit * global_batch_size)
    return int(records.reduce(np.int64(0), lambda count, _: count + 1)) // global_batch_size


def split_per_replica(strategy: tf.distribute.Strategy, batch: dict[str, tf.Tensor]):
    """A worker batch -> what `strategy.run` takes: one contiguous slice per local replica."""
    local = len(strategy.extended.worker_devices)
    if local == 1:
        return batch

    def slice_for(context: tf.distribute.ValueContext) -> dict[str, tf.Tensor]:
        index = context.replica_id_in_sync_group % local
        return {name: tf.split(value, local)[index] for name, value in batch.items()}

    return strategy.experimental_distribute_values_from_function(slice_for)
