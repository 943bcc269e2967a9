"""One training loop for every task: tf.distribute, mixed precision, BERT's optimiser,
resumable checkpoints, TensorBoard, and the best checkpoint by the dev metric.

- Steps run `iterations_per_loop` at a time inside one `tf.function` (one host call per
  loop, as the original's TPUEstimator); logs, checkpoints and TensorBoard scalars are
  written between loops.
- The loss of a batch is the task's (sum, count) averaged on each replica and divided by
  the number of replicas, so the gradient is the global mean whatever the strategy.
- The update is pre-training's (`bert_tf.training.update.Updater`): the replicas'
  gradients are summed before the global norm is clipped, as on one device; fp16 has
  dynamic loss scaling; a non-finite loss skips the update and stops the run.
- Batches come from `fine_tune.batching` with shapes [batch, None]: one traced step
  serves every padded length.
- `output_dir/checkpoints` holds the model and optimiser every `save_checkpoints_steps`
  and at the end; a rerun with the same flags resumes from the last one, in the same
  epoch and at the same batch (the batch order of an epoch is a function of the seed).
- With a dev set, the model is evaluated after every epoch (and every `eval_steps`
  steps if set); the best weights by the task's primary metric are kept in
  `output_dir/best/`.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from collections.abc import Callable
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from bert_tf.errors import BertTfError
from bert_tf.optimization import create_optimizer
from bert_tf.training.update import Updater
from fine_tune import batching
from fine_tune.task import INPUT_KEYS, Features

ENCODER_INPUTS = (*INPUT_KEYS, "input_mask")
WEIGHTS_NAME = "model.weights.h5"
BEST_DIR = "best"
MIXED_PRECISION = {"none": None, "bf16": "mixed_bfloat16", "fp16": "mixed_float16"}


@dataclasses.dataclass
class TrainingConfig:
    """The hyper-parameters of a fine-tuning run (the original's flags and ours)."""

    output_dir: str
    max_seq_length: int = 128
    train_batch_size: int = 32
    eval_batch_size: int = 8
    predict_batch_size: int = 8
    learning_rate: float = 5e-5
    num_train_epochs: float = 3.0
    warmup_proportion: float = 0.1
    lr_decay: str = "original"
    optimizer: str = "adamw"
    adam_bias_correction: bool = False
    weight_decay_rate: float = 0.01
    save_checkpoints_steps: int = 1000
    iterations_per_loop: int = 100
    keep_checkpoint_max: int = 3
    eval_steps: int = 0
    padding: str = "dynamic"
    pad_to_multiple_of: int = 8
    seed: int = 12345
    jit_compile: bool = False
    mixed_precision: str = "none"


# === Precision ===
def dtype_policy(mixed_precision: str) -> str | None:
    """The Keras dtype policy of a `--mixed_precision` value (None: float32)."""
    if mixed_precision not in MIXED_PRECISION:
        raise BertTfError(f"Unknown --mixed_precision {mixed_precision!r}; use one of {', '.join(MIXED_PRECISION)}.")
    return MIXED_PRECISION[mixed_precision]


# === Weights on disk ===
def save_weights(model: keras.Model, directory: str) -> str:
    """Writes `directory/model.weights.h5` atomically (never half a file)."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, WEIGHTS_NAME)
    temporary = os.path.join(directory, f"tmp-{os.getpid()}.weights.h5")
    model.save_weights(temporary)
    os.replace(temporary, path)
    return path


def fine_tuned_weights(output_dir: str, prefer_best: bool = True) -> str | None:
    """The fine-tuned weights of a run: `best/` if kept (and preferred), else the final ones."""
    candidates = [os.path.join(output_dir, BEST_DIR, WEIGHTS_NAME), os.path.join(output_dir, WEIGHTS_NAME)]
    if not prefer_best:
        candidates.reverse()
    return next((path for path in candidates if os.path.isfile(path)), None)


class Trainer:
    """Trains, evaluates and runs a task model under a strategy.

    Args:
        model: the task model (built in `strategy.scope()`), from encoder inputs to head outputs.
        loss: the task's `Loss`.
        per_token: whether outputs have a token axis (tagging, spans) to trim to each row's length.
        config: the run's `TrainingConfig`.
        strategy: the `tf.distribute` strategy the model was built under.

    Example:
    >>> import tempfile
    >>> from bert_tf import BertConfig, BertEncoder
    >>> from fine_tune.heads import ClassificationHead, classification_loss
    >>> ids = [np.array([2, 5, 3], np.int32), np.array([2, 6, 7, 3], np.int32)]
    >>> features = Features({"input_word_ids": ids, "input_type_ids": [np.zeros_like(i) for i in ids]},
    ...                     {"label_ids": np.array([0, 1], np.int32)}, np.arange(2))
    >>> model = ClassificationHead().build(BertEncoder(BertConfig.from_preset("tiny", vocab_size=10)), 2, 0.1)
    >>> trainer = Trainer(model, classification_loss, False, TrainingConfig(tempfile.mkdtemp()),
    ...                   tf.distribute.get_strategy())
    >>> [row.shape for row in trainer.predict(features, batch_size=8)]
    [(2,), (2,)]
    """

    def __init__(
        self,
        model: keras.Model,
        loss: Callable[[dict[str, tf.Tensor], Any], tuple[tf.Tensor, tf.Tensor]],
        per_token: bool,
        config: TrainingConfig,
        strategy: tf.distribute.Strategy,
    ):
        self.model = model
        self.loss = loss
        self.per_token = per_token
        self.config = config
        self.strategy = strategy
        self.optimizer: keras.optimizers.Optimizer | None = None
        self.updater: Updater | None = None
        self._predict_functions: dict[tuple[str, ...], Any] = {}
        # (rows, seconds) of every training loop: the first one includes tracing.
        self.loop_times: list[tuple[int, float]] = []

    # === Training ===
    @property
    def drop_remainder(self) -> bool:
        """TPUs need every batch full (static shapes)."""
        return isinstance(self.strategy, tf.distribute.TPUStrategy)

    def _plan(self, features: Features, epoch: int) -> list[np.ndarray]:
        config = self.config
        return batching.batch_plan(
            features.lengths,
            config.train_batch_size,
            config.padding,
            seed=config.seed + epoch,
            drop_remainder=self.drop_remainder,
        )

    def steps_per_epoch(self, features: Features) -> int:
        return len(self._plan(features, epoch=0))

    def build_optimizer(self, total_steps: int) -> keras.optimizers.Optimizer:
        """BERT's optimiser with warm-up over `warmup_proportion` of `total_steps`, then linear
        decay, and the `Updater` that applies it."""
        config = self.config
        warmup = int(total_steps * config.warmup_proportion)
        with self.strategy.scope():
            optimizer = create_optimizer(
                config.optimizer,
                config.learning_rate,
                total_steps,
                warmup,
                weight_decay_rate=config.weight_decay_rate,
                bias_correction=config.adam_bias_correction,
                lr_decay=config.lr_decay,
            )
            # Built now (in the updater), so that no variable is created inside the looped tf.function.
            self.updater = Updater(
                self.strategy, optimizer, self.model.trainable_variables, config.mixed_precision == "fp16"
            )
        self.optimizer = optimizer
        return optimizer

    def train(self, features: Features, evaluate: Callable[[int], object] | None = None) -> int:
        """Trains for `num_train_epochs`; returns the number of steps run in total.

        `evaluate(step)` (if given) runs after every epoch and every `eval_steps` steps;
        the caller scores the model and keeps the best one.
        """
        config = self.config
        steps_per_epoch = self.steps_per_epoch(features)
        if steps_per_epoch == 0:
            raise BertTfError(
                f"The training set has {len(features)} rows, less than one full batch "
                f"(--train_batch_size {config.train_batch_size}), which a TPU needs."
            )
        total_steps = max(1, int(steps_per_epoch * config.num_train_epochs))
        optimizer = self.build_optimizer(total_steps)
        # Dropout's random state is a Keras variable that tf.train.Checkpoint does not
        # find by itself: saved explicitly, so a resumed run draws the same masks.
        seeds = [v for v in self.model.variables if v.path.endswith("seed_generator_state")]
        checkpoint = tf.train.Checkpoint(
            model=self.model,
            optimizer=optimizer,
            seeds=seeds,
            loss_scale=self.updater.loss_scale,
            loss_scale_good_steps=self.updater.good_steps,
        )
        manager = tf.train.CheckpointManager(
            checkpoint, os.path.join(config.output_dir, "checkpoints"), max_to_keep=config.keep_checkpoint_max
        )
        if manager.latest_checkpoint:
            checkpoint.restore(manager.latest_checkpoint).assert_existing_objects_matched()
            print(f"Resuming from {manager.latest_checkpoint} at step {self.completed_steps}.", flush=True)
        loop = _Loop(self, features, total_steps, manager, evaluate)
        step = self.completed_steps
        while step < total_steps:
            epoch, done_in_epoch = divmod(step, steps_per_epoch)
            plan = self._plan(features, epoch)[done_in_epoch : done_in_epoch + total_steps - step]
            step = loop.run(plan, step)
            loop.evaluate(step)
        if manager.latest_checkpoint is None or not manager.latest_checkpoint.endswith(f"-{step}"):
            manager.save(checkpoint_number=step)
        return step

    @property
    def completed_steps(self) -> int:
        """The optimiser steps applied so far (read from the first replica's copy)."""
        return int(self.strategy.experimental_local_results(self.optimizer.iterations.value)[0].numpy())

    # === Inference ===
    def predict(self, features: Features, batch_size: int) -> list[Any]:
        """The model's outputs for every row of `features`, in row order.

        Per-token outputs are cut to each row's length; a dict of outputs (e.g. start
        and end logits) gives a dict per row.
        """
        plan = batching.batch_plan(features.lengths, batch_size, self.config.padding)
        data, spec = self._prediction_batches(features, plan)
        # One traced function per batch layout, reused by every evaluation of the run.
        key = tuple(sorted(spec))
        if key not in self._predict_functions:
            self._predict_functions[key] = tf.function(self._predict_step, input_signature=[spec])
        predict_step = self._predict_functions[key]
        rows: list[Any] = [None] * len(features)
        lengths = features.lengths
        for batch in data:
            outputs, indices = predict_step(batch)
            local = zip(
                self.strategy.experimental_local_results(outputs), self.strategy.experimental_local_results(indices)
            )
            for replica_outputs, replica_indices in local:
                arrays = tf.nest.map_structure(np.asarray, replica_outputs)
                for position, row in enumerate(np.asarray(replica_indices)):
                    rows[row] = tf.nest.map_structure(lambda a: self._row(a, position, lengths[row]), arrays)
        return rows

    def _prediction_batches(self, features: Features, plan: list[np.ndarray]) -> tuple[Any, Any]:
        """The batches of `plan` and their spec: a distributed `tf.data` pipeline under a
        strategy; without one (the default strategy, as `fine_tune.predictor` runs), the
        NumPy batches themselves, since building a pipeline costs ~20 ms, more than the
        forward pass of a small batch."""
        if self.strategy is not tf.distribute.get_strategy():
            data = self.distribute(features, plan)
            return data, data.element_spec
        config = self.config
        batches = batching.padded_batches(
            features, plan, config.max_seq_length, config.padding, config.pad_to_multiple_of
        )
        return batches, batching.batch_signature(features)

    def _predict_step(self, batch):
        def forward(replica_batch):
            inputs = {key: replica_batch[key] for key in ENCODER_INPUTS}
            return self.model(inputs, training=False), replica_batch["feature_index"]

        return self.strategy.run(forward, args=(batch,))

    def _row(self, array: np.ndarray, position: int, length: int) -> np.ndarray:
        return array[position, :length] if self.per_token else array[position]

    def distribute(self, features: Features, plan: list[np.ndarray]):
        """The padded batches of `plan`, split across the strategy's replicas."""
        config = self.config
        data = batching.dataset(features, plan, config.max_seq_length, config.padding, config.pad_to_multiple_of)
        return self.strategy.experimental_distribute_dataset(data)


class _Loop:
    """The state of one `Trainer.train` call: the compiled loop, TensorBoard, checkpoints."""

    def __init__(self, trainer: Trainer, features: Features, total_steps: int, manager, evaluate):
        self.trainer = trainer
        self.features = features
        self.lengths = features.lengths
        self.total_steps = total_steps
        self.manager = manager
        self.evaluate_fn = evaluate
        self.evaluated_at = -1
        self.writer = tf.summary.create_file_writer(os.path.join(trainer.config.output_dir, "logs", "train"))
        self.function = tf.function(self._loop, jit_compile=trainer.config.jit_compile or None)

    def run(self, plan: list[np.ndarray], step: int) -> int:
        """Trains on the batches of `plan`, `iterations_per_loop` at a time; returns the new step."""
        config = self.trainer.config
        iterator = iter(self.trainer.distribute(self.features, plan))
        position = 0
        while position < len(plan):
            count = min(config.iterations_per_loop, len(plan) - position)
            if config.eval_steps:  # stop at the next evaluation point
                count = min(count, config.eval_steps - step % config.eval_steps)
            start = time.perf_counter()
            loss = float(self.function(iterator, tf.constant(count, tf.int32)))
            seconds = time.perf_counter() - start
            batches = plan[position : position + count]
            position, step = position + count, step + count
            if not math.isfinite(loss):
                raise BertTfError(
                    f"The training loss is {loss} at step {step}; lower --learning_rate or check the data "
                    f"(the last good checkpoint is in {self.manager.directory})."
                )
            examples = sum(len(rows) for rows in batches)
            self.trainer.loop_times.append((examples, seconds))
            tokens = int(sum(self.lengths[rows].sum() for rows in batches))
            self._log(step, loss, examples / seconds, tokens / seconds)
            if step % config.save_checkpoints_steps < count:
                self.manager.save(checkpoint_number=step)
            if config.eval_steps and step % config.eval_steps == 0:
                self.evaluate(step)
        return step

    def evaluate(self, step: int) -> None:
        if self.evaluate_fn is not None and step != self.evaluated_at:
            self.evaluated_at = step
            self.evaluate_fn(step)

    def _log(self, step: int, loss: float, examples_per_s: float, tokens_per_s: float) -> None:
        trainer = self.trainer
        learning_rate = float(trainer.optimizer.learning_rate)
        with self.writer.as_default(step=step):
            tf.summary.scalar("loss", loss)
            tf.summary.scalar("learning_rate", learning_rate)
            tf.summary.scalar("examples_per_second", examples_per_s)
            tf.summary.scalar("tokens_per_second", tokens_per_s)
            if trainer.updater.loss_scaling:
                tf.summary.scalar("loss_scale", float(trainer.updater.loss_scale.numpy()))
        self.writer.flush()
        print(
            f"step {step}/{self.total_steps} loss {loss:.4f} lr {learning_rate:.3g} "
            f"{examples_per_s:.1f} examples/s {tokens_per_s:.0f} tokens/s",
            flush=True,
        )

    def _step(self, batch: dict[str, tf.Tensor]) -> tf.Tensor:
        """One step on this replica's share of the batch; the batch's loss (all replicas)."""
        trainer = self.trainer
        model, updater = trainer.model, trainer.updater
        replicas = trainer.strategy.num_replicas_in_sync
        with tf.GradientTape() as tape:
            outputs = model({key: batch[key] for key in ENCODER_INPUTS}, training=True)
            total, count = trainer.loss(batch, outputs)
            loss = total / tf.maximum(count, 1.0) / replicas
            scaled = updater.scale(loss)
        variables = model.trainable_variables
        # A head that ignores part of the encoder (the pooler, for tagging) leaves it without
        # gradient. Embedding gradients come as IndexedSlices with one row per token, repeats
        # included: made dense, so the global norm adds the repeats up before squaring.
        gradients = tape.gradient(scaled, variables)
        pairs = [(tf.convert_to_tensor(g), v) for g, v in zip(gradients, variables) if g is not None]
        return updater([g for g, _ in pairs], [v for _, v in pairs], loss).loss

    def _loop(self, iterator, steps: tf.Tensor) -> tf.Tensor:
        """`steps` training steps in one host call; the mean loss (NaN once a step was not finite)."""
        strategy = self.trainer.strategy
        total = tf.constant(0.0)
        for _ in tf.range(steps):
            losses = strategy.run(self._step, args=(next(iterator),))
            # Every replica holds the same, already summed, loss.
            total += strategy.reduce(tf.distribute.ReduceOp.MEAN, losses, axis=None)
        return total / tf.cast(steps, tf.float32)


def write_results(output_dir: str, results: dict[str, float], name: str = "eval_results") -> str:
    """`name.txt` as the original ("key = value" lines) and `name.json`; returns the txt path."""
    os.makedirs(output_dir, exist_ok=True)
    path = os.path.join(output_dir, f"{name}.txt")
    with open(path, "w", encoding="utf-8") as handle:
        handle.writelines(f"{key} = {value}\n" for key, value in sorted(results.items()))
    with open(os.path.join(output_dir, f"{name}.json"), "w", encoding="utf-8") as handle:
        json.dump(results, handle, indent=2, sort_keys=True)
    return path
