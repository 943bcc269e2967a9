"""`FineTuningTrainer`: one training loop for every task: tf.distribute, mixed precision,
BERT's optimiser, resumable checkpoints, TensorBoard, and the best checkpoint by the dev
metric.

- Its own part is the step function; around it runs the run core shared with
  pre-training (`bert_tf.training.runloop`): steps run `iterations_per_loop` at a time
  inside one `tf.function` (one host call per loop, as the original's TPUEstimator);
  logs, checkpoints and TensorBoard scalars are written between loops.
- The loss of a batch is the task's (sum, count) averaged on each replica and divided by
  the number of replicas, so the gradient is the global mean whatever the strategy.
- The update is pre-training's (`bert_tf.training.update.Updater`): the replicas'
  gradients are summed before the global norm is clipped, as on one device; fp16 has
  dynamic loss scaling; a non-finite loss skips the update and stops the run, naming the
  step and keeping the last good checkpoint.
- Batches come from `fine_tune.batching` with shapes [batch, None]: one traced step
  serves every padded length.
- `output_dir/checkpoints` holds the model, optimiser, dropout RNG state and loss scale
  every `save_checkpoints_steps` and at the end; a rerun with the same flags resumes from
  the last one, in the same epoch and at the same batch (the batch order of an epoch is
  a function of the seed).
- With a dev set, the model is evaluated after every epoch (and every `eval_steps`
  steps if set); the best weights by the task's primary metric are kept in
  `output_dir/best/`.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Callable
from typing import Any

import h5py
import keras
import numpy as np
import tensorflow as tf

from bert_tf import by_length
from bert_tf.errors import BertTfError
from bert_tf.optimization import create_optimizer
from bert_tf.training.runloop import HostLoop, LoopResult, RunCheckpoint
from bert_tf.training.update import Updater
from fine_tune import batching
from fine_tune.task import INPUT_KEYS, Features

ENCODER_INPUTS = (*INPUT_KEYS, "input_mask")
WEIGHTS_NAME = "model.weights.h5"
BEST_DIR = "best"
# The h5 attribute naming the task model a weights file belongs to ("classifier",
# "tagger", "span_extractor", ...): a classifier's dense(2) and a span head's dense(2)
# have the same shapes, so without it one loads into the other and predicts nonsense.
MODEL_NAME_ATTRIBUTE = "bert_tf_model"
CHECKPOINTS_DIR = "checkpoints"
TRAIN_LOGS_DIR = os.path.join("logs", "train")


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
    predict_jit_compile: bool = False  # predictions through XLA (`bert_tf.by_length`); not the train step's


# === Weights on disk ===
def save_weights(model: keras.Model, directory: str) -> str:
    """Writes `directory/model.weights.h5` atomically (never half a file)."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, WEIGHTS_NAME)
    temporary = os.path.join(directory, f"tmp-{os.getpid()}.weights.h5")
    model.save_weights(temporary)
    with h5py.File(temporary, "a") as file:
        file.attrs[MODEL_NAME_ATTRIBUTE] = model.name
    os.replace(temporary, path)
    return path


def load_fine_tuned(model: keras.Model, path: str, model_source: str, remedy: str) -> None:
    """Loads the weights file `path` into `model` (built from `model_source`, e.g. "this
    command's flags"); a `BertTfError` ending in `remedy` when they do not belong together."""
    try:
        with h5py.File(path, "r") as file:
            saved_model = file.attrs.get(MODEL_NAME_ATTRIBUTE)  # None: written before the attribute existed
    except OSError as error:
        raise BertTfError(f"{path} is not a readable weights file ({error}); {remedy}") from None
    if saved_model is not None and saved_model != model.name:
        raise BertTfError(f"{path} holds the weights of a {saved_model} model, but {model_source} make a "
                          f"{model.name}; {remedy}")
    try:
        model.load_weights(path)
    except (ValueError, OSError) as error:
        raise BertTfError(f"{path} does not fit the model of {model_source} ({str(error).splitlines()[0]}); "
                          f"{remedy}") from None


def fine_tuned_weights(output_dir: str, prefer_best: bool = True) -> str | None:
    """The fine-tuned weights of a run: `best/` if kept (and preferred), else the final ones."""
    candidates = [os.path.join(output_dir, BEST_DIR, WEIGHTS_NAME), os.path.join(output_dir, WEIGHTS_NAME)]
    if not prefer_best:
        candidates.reverse()
    return next((path for path in candidates if os.path.isfile(path)), None)


class FineTuningTrainer:
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
    >>> trainer = FineTuningTrainer(model, classification_loss, False, TrainingConfig(tempfile.mkdtemp()),
    ...                             tf.distribute.get_strategy())
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
        self._host_loop: HostLoop | None = None
        self.resumed_at = 0  # the step `train` started from: > 0 when it resumed a checkpoint

    @property
    def loop_times(self) -> list[tuple[float, float]]:
        """(rows, seconds) of every training loop: the first one includes tracing."""
        return self._host_loop.loop_times if self._host_loop else []

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
            # (seed, epoch), not seed + epoch: that gave seed s at epoch e the order of seed
            # s + 1 at epoch e - 1, so the runs of neighbouring seeds shared most epochs.
            seed=(config.seed, epoch),
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
        self.build_optimizer(total_steps)
        checkpoint = RunCheckpoint(
            self.model, self.updater, os.path.join(config.output_dir, CHECKPOINTS_DIR), config.keep_checkpoint_max
        )
        log = functools.partial(print, flush=True)
        checkpoint.restore(log, lambda: self.completed_steps)
        self.resumed_at = self.completed_steps
        self._host_loop = HostLoop(
            checkpoint, config.iterations_per_loop, config.save_checkpoints_steps, total_steps,
            log_dir=os.path.join(config.output_dir, TRAIN_LOGS_DIR), log=log,
        )  # fmt: skip
        # Grappler's arithmetic optimiser rewrites an add chain of the looped step into
        # AccumulateNV2 with a per-step TemporaryVariable which, with MiniLM's 6 layers, the
        # next host call finds still there (AlreadyExistsError at the second call; not with
        # 2-layer models). Its other rewrites gain nothing measurable here: off for the process.
        tf.config.optimizer.set_experimental_options({"arithmetic_optimization": False})
        loop = tf.function(self._loop, jit_compile=config.jit_compile or None)
        evaluated_at = [-1]

        def evaluate_once(step: int) -> None:
            if evaluate is not None and step != evaluated_at[0]:
                evaluated_at[0] = step
                evaluate(step)

        step = self.completed_steps
        while step < total_steps:
            epoch, done_in_epoch = divmod(step, steps_per_epoch)
            stop = min(total_steps, (epoch + 1) * steps_per_epoch)
            plan = self._plan(features, epoch)[done_in_epoch : done_in_epoch + stop - step]
            batches = iter(self.distribute(features, plan, endless=True))
            train_steps = functools.partial(self._train_steps, loop, batches, features.lengths, plan, step)
            step = self._host_loop.run(step, stop, train_steps, config.eval_steps, evaluate_once)
            evaluate_once(step)
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
        # One traced function per batch layout, reused by every evaluation of the run. Called
        # as the concrete function: a tf.function matches each call's inputs against its
        # traces first, about 0.8 ms of the 15 a batch of one takes (MiniLM-L6, SST-2).
        key = tuple(sorted(spec))
        if key not in self._predict_functions:
            self._predict_functions[key] = tf.function(self._predict_step).get_concrete_function(spec)
        predict_step = self._predict_functions[key]
        rows: list[Any] = [None] * len(features)
        lengths = features.lengths
        iterator = iter(data)
        for _ in plan:
            outputs, indices = predict_step(next(iterator))
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
            data = self.distribute(features, plan, endless=True)
            return data, data.element_spec
        config = self.config
        batches = batching.padded_batches(
            features, plan, config.max_seq_length, config.padding, config.pad_to_multiple_of
        )
        return batches, batching.batch_signature(features)

    def _predict_step(self, batch):
        def forward(replica_batch):
            inputs = {key: replica_batch[key] for key in ENCODER_INPUTS}
            return run_model(inputs), replica_batch["feature_index"]

        # A batch's rows run 8 at a time, each group cut to its own longest (`bert_tf.by_length`:
        # SST-2 dev in batches of 32, 1.47x); not on a TPU, whose shapes must be static.
        model = by_length.xla(self.model) if self.config.predict_jit_compile else self.model
        if self.config.padding == "fixed" or self.drop_remainder:
            run_model = functools.partial(model, training=False)
        else:
            run_model = functools.partial(by_length.call_by_length, model, output_spec=self._output_spec,
                                          multiple_of=self.config.pad_to_multiple_of)
        return self.strategy.run(forward, args=(batch,))

    @functools.cached_property
    def _output_spec(self) -> Any:
        """The shapes and dtypes of the model's outputs, per-token ones with an open positions axis."""
        return self.model.compute_output_spec({key: keras.KerasTensor((None, None), "int32") for key in ENCODER_INPUTS})

    def _row(self, array: np.ndarray, position: int, length: int) -> np.ndarray:
        return array[position, :length] if self.per_token else array[position]

    def distribute(self, features: Features, plan: list[np.ndarray], endless: bool = False):
        """The padded batches of `plan`, split across the strategy's replicas.

        `endless` repeats them, for callers that take `len(plan)` batches: the distributed
        iterator's prefetching then never runs into the end of the data, which TensorFlow
        logs (`OUT_OF_RANGE ... MultiDeviceIteratorGetNextFromShard`) at every epoch's end
        and after every evaluation.
        """
        config = self.config
        data = batching.dataset(features, plan, config.max_seq_length, config.padding, config.pad_to_multiple_of)
        return self.strategy.experimental_distribute_dataset(data.repeat() if endless else data)

    # === The step function (the host loop around it: `runloop.HostLoop`) ===
    def _train_steps(self, loop, iterator, lengths: np.ndarray, plan: list[np.ndarray], plan_start: int,
                     step: int, steps: int) -> LoopResult:  # fmt: skip
        """Steps `step + 1`... `step + steps`, the next batches of `plan` (which begins
        after step `plan_start`), in one host call."""
        loss_sum, good_steps, first_bad = loop(iterator, tf.constant(step, tf.int64), tf.constant(steps, tf.int64))
        loss = float(loss_sum) / max(float(good_steps), 1.0)
        batches = plan[step - plan_start : step - plan_start + steps]
        examples = sum(len(rows) for rows in batches)
        tokens = int(sum(lengths[rows].sum() for rows in batches))
        return LoopResult({"loss": loss}, f"loss {loss:.4f}", examples, tokens, int(first_bad))

    def _step(self, batch: dict[str, tf.Tensor]) -> tuple[tf.Tensor, tf.Tensor]:
        """One step on this replica's share of the batch; the batch's loss (all replicas)
        and whether the step diverged."""
        model, updater = self.model, self.updater
        replicas = self.strategy.num_replicas_in_sync
        with tf.GradientTape() as tape:
            outputs = model({key: batch[key] for key in ENCODER_INPUTS}, training=True)
            total, count = self.loss(batch, outputs)
            loss = total / tf.maximum(count, 1.0) / replicas
            scaled = updater.scale(loss)
        variables = model.trainable_variables
        # A head that ignores part of the encoder (the pooler, for tagging) leaves it without
        # gradient. Embedding gradients come as IndexedSlices with one row per token, repeats
        # included: made dense, so the global norm adds the repeats up before squaring.
        gradients = tape.gradient(scaled, variables)
        pairs = [(tf.convert_to_tensor(g), v) for g, v in zip(gradients, variables) if g is not None]
        result = updater([g for g, _ in pairs], [v for _, v in pairs], loss)
        return result.loss, tf.cast(result.bad, tf.float32)

    def _loop(self, iterator, first_step: tf.Tensor, steps: tf.Tensor):
        """`steps` training steps in one host call: the sum of their finite losses, how
        many there were, and the first step whose loss was not (0 if none)."""
        strategy = self.strategy
        loss_sum, good_steps, first_bad = tf.constant(0.0), tf.constant(0.0), tf.constant(0, tf.int64)
        for i in tf.range(steps):
            losses, bad = strategy.run(self._step, args=(next(iterator),))
            # Every replica holds the same, already summed, loss and verdict.
            loss = strategy.reduce(tf.distribute.ReduceOp.MEAN, losses, axis=None)
            bad = strategy.reduce(tf.distribute.ReduceOp.MEAN, bad, axis=None) > 0
            loss_sum += tf.where(bad, 0.0, loss)
            good_steps += tf.where(bad, 0.0, 1.0)
            first_bad = tf.where(bad & tf.equal(first_bad, 0), first_step + i + 1, first_bad)
        return loss_sum, good_steps, first_bad
