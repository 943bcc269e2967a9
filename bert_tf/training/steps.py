"""The distributed training and evaluation steps of BERT pre-training.

One optimiser step = one *global batch*, whatever the number of replicas and of
gradient-accumulation micro-batches it is cut into. The losses are normalised by the
global batch (the masked-LM loss by the sum of `masked_lm_weights` over all replicas
and micro-batches, plus the original's 1e-5; the next-sentence loss by the global batch
size), so the summed gradient is exactly the gradient of the original loss of the
whole batch: N workers, or K accumulated micro-batches, take the same step as one
device with the same global batch.

A step, on each replica: forward/backward over the micro-batches (a `tf.while_loop`),
then `bert_tf.training.update.Updater`: one all-reduce of the gradients, unscaling,
the non-finite check (a bad step is reported and the run stops at the end of the loop,
before the next checkpoint), clipping and the update, the same on every replica.

Several steps run in one `tf.function` call (`--iterations_per_loop`); their metrics
add up in a replica-local (`ON_READ`, summed) vector read once per loop.
"""

from __future__ import annotations

import dataclasses

import keras
import tensorflow as tf

from bert_tf.losses import WEIGHT_EPSILON
from bert_tf.training.inputs import MODEL_INPUTS, BatchPlan, split_per_replica
from bert_tf.training.runloop import LoopResult
from bert_tf.training.update import Updater

# Summed over replicas: each replica adds its own part.
REPLICA_STATS = (
    "masked_lm_loss_sum",
    "masked_lm_weight",
    "masked_lm_hits",
    "next_sentence_loss_sum",
    "next_sentence_hits",
    "examples",
    "tokens",
)
# Properties of the whole step, added by replica 0 only.
GLOBAL_STATS = ("loss_sum", "gradient_norm_sum", "steps", "applied_steps", "bad_steps", "first_bad_step")
STATS = REPLICA_STATS + GLOBAL_STATS
EVAL_STATS = REPLICA_STATS[:6] + ("loss_sum", "batches")


@dataclasses.dataclass(frozen=True)
class StepOptions:
    """How a `PretrainingTrainer` computes a step.

    Args:
        plan: the batch sizes (global, per replica, per micro-batch).
        loss_scaling: dynamic loss scaling (for float16 compute).
        jit_compile: XLA-compile the step: all of it on one device, the
            forward/backward only under multi-replica strategies (the all-reduce and the
            update stay outside: whole-step XLA across replicas fails in TF, see
            keras-team/keras#19005). A TPU compiles everything anyway.
    """

    plan: BatchPlan
    loss_scaling: bool = False
    jit_compile: bool = False


def pretraining_sums(batch: dict[str, tf.Tensor], outputs: dict[str, tf.Tensor]) -> tf.Tensor:
    """The first five `REPLICA_STATS` of a batch: sums, not means, so they add up
    across micro-batches and replicas."""
    ids = tf.cast(batch["masked_lm_ids"], tf.int32)
    weights = tf.cast(batch["masked_lm_weights"], tf.float32)
    mlm_logits = tf.cast(outputs["masked_lm_logits"], tf.float32)
    mlm_loss = tf.nn.sparse_softmax_cross_entropy_with_logits(ids, mlm_logits)
    mlm_hits = tf.cast(tf.equal(tf.argmax(mlm_logits, -1, output_type=tf.int32), ids), tf.float32)
    labels = tf.reshape(tf.cast(batch["next_sentence_labels"], tf.int32), [-1])
    nsp_logits = tf.cast(outputs["next_sentence_logits"], tf.float32)
    nsp_loss = tf.nn.sparse_softmax_cross_entropy_with_logits(labels, nsp_logits)
    nsp_hits = tf.cast(tf.equal(tf.argmax(nsp_logits, -1, output_type=tf.int32), labels), tf.float32)
    return tf.stack(
        [
            tf.reduce_sum(mlm_loss * weights),
            tf.reduce_sum(weights),
            tf.reduce_sum(mlm_hits * weights),
            tf.reduce_sum(nsp_loss),
            tf.reduce_sum(nsp_hits),
        ]
    )


def _batch_stats(batch: dict[str, tf.Tensor], outputs: dict[str, tf.Tensor]) -> tf.Tensor:
    """All of `REPLICA_STATS` for a batch."""
    examples = tf.cast(tf.shape(batch["input_mask"])[0], tf.float32)
    tokens = tf.reduce_sum(tf.cast(batch["input_mask"], tf.float32))
    return tf.concat([pretraining_sums(batch, outputs), [examples, tokens]], 0)


def _sync_on_read(name: str, size: int) -> tf.Variable:
    return tf.Variable(
        tf.zeros([size]),
        trainable=False,
        name=name,
        synchronization=tf.VariableSynchronization.ON_READ,
        aggregation=tf.VariableAggregation.SUM,
    )


class PretrainingTrainer:
    """The pre-training step functions: train and eval loops of a `BertPretrainer`
    under a `tf.distribute` strategy (the host loop around them: `runloop.HostLoop`).

    Build it in `strategy.scope()`. `train(iterator, first_step, steps)` runs `steps`
    optimiser steps in one call and returns their summed `STATS`.

    Example:
    >>> import numpy as np
    >>> from bert_tf import BertConfig, BertEncoder, BertPretrainer
    >>> from bert_tf.optimization import create_optimizer
    >>> strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    >>> with strategy.scope():
    ...     model = BertPretrainer(BertEncoder(BertConfig.from_preset("tiny", vocab_size=50)), 2)
    ...     trainer = PretrainingTrainer(strategy, model, create_optimizer("adamw", 1e-3, 10, 0),
    ...                       StepOptions(BatchPlan(global_batch_size=4)))
    >>> ones = np.ones((4, 8), "int32")
    >>> batch = {"input_word_ids": ones, "input_mask": ones, "input_type_ids": 0 * ones,
    ...          "masked_lm_positions": ones[:, :2], "masked_lm_ids": ones[:, :2],
    ...          "masked_lm_weights": np.ones((4, 2), "float32"),
    ...          "next_sentence_labels": ones[:, :1]}
    >>> data = tf.data.Dataset.from_tensors(batch).repeat()
    >>> stats = trainer.train(iter(data), 0, 3)
    >>> stats["steps"], stats["examples"], int(trainer.optimizer.iterations.numpy())
    (3.0, 12.0, 3)
    """

    def __init__(
        self,
        strategy: tf.distribute.Strategy,
        model: keras.Model,
        optimizer: keras.optimizers.Optimizer,
        options: StepOptions,
        distributed_input: bool = False,
    ):
        self.strategy = strategy
        self.model = model
        self.optimizer = optimizer
        self.options = options
        self.distributed_input = distributed_input
        self._variables = model.trainable_variables
        self.stats = _sync_on_read("train_stats", len(STATS))
        self.eval_stats = _sync_on_read("eval_stats", len(EVAL_STATS))
        self.updater = Updater(strategy, optimizer, self._variables, options.loss_scaling)
        self.loss_scale = self.updater.loss_scale
        self.good_steps = self.updater.good_steps

        self._replica_step = self._step
        if options.jit_compile and isinstance(strategy, tf.distribute.OneDeviceStrategy):
            self._replica_step = tf.function(self._step, jit_compile=True)
        self._gradients = self._accumulated_gradients
        if options.jit_compile and not isinstance(strategy, tf.distribute.OneDeviceStrategy):
            self._gradients = tf.function(self._accumulated_gradients, jit_compile=True)
        self._train_loop = tf.function(self._train_loop_fn)
        self._eval_loop = tf.function(self._eval_loop_fn)

    # === Host API ===
    def train(self, iterator, first_step: int, steps: int) -> dict[str, float]:
        """Runs `steps` steps numbered `first_step + 1`...; returns their summed stats."""
        self.stats.assign(tf.zeros([len(STATS)]))
        self._train_loop(iterator, tf.constant(first_step, tf.int64), tf.constant(steps, tf.int64))
        return dict(zip(STATS, self.stats.numpy().tolist()))

    def evaluate(self, iterator, steps: int) -> dict[str, float]:
        """Runs `steps` evaluation batches; returns their summed stats."""
        self.eval_stats.assign(tf.zeros([len(EVAL_STATS)]))
        self._eval_loop(iterator, tf.constant(steps, tf.int64))
        return dict(zip(EVAL_STATS, self.eval_stats.numpy().tolist()))

    # === Loops (one host call) ===
    def _next(self, iterator):
        batch = next(iterator)
        return batch if self.distributed_input else split_per_replica(self.strategy, batch)

    def _train_loop_fn(self, iterator, first_step, steps):
        for i in tf.range(steps):
            self.strategy.run(self._replica_step, args=(self._next(iterator), first_step + i + 1))

    def _eval_loop_fn(self, iterator, steps):
        for _ in tf.range(steps):
            self.strategy.run(self._eval_step, args=(self._next(iterator),))

    # === Replica steps ===
    def _step(self, batch, step_number):
        context = tf.distribute.get_replica_context()
        global_batch = float(self.options.plan.global_batch_size)
        weight_total = context.all_reduce(tf.distribute.ReduceOp.SUM, tf.reduce_sum(batch["masked_lm_weights"]))
        grads, stats, loss = self._gradients(batch, weight_total, global_batch)
        result = self.updater(grads, self._variables, loss)
        self._record(context, stats, result, step_number)

    def _accumulated_gradients(self, batch, weight_total, global_batch):
        """Sums of the gradients, stats and loss over the micro-batches of `batch`."""
        steps = self.options.plan.accumulation_steps
        if steps == 1:
            return self._micro_gradients(batch, weight_total, global_batch)
        micro = {name: tf.reshape(value, [steps, -1, *value.shape[1:]]) for name, value in batch.items()}

        def body(i, grads, stats, loss):
            g, s, l = self._micro_gradients({n: v[i] for n, v in micro.items()}, weight_total, global_batch)
            return i + 1, [a + b for a, b in zip(grads, g)], stats + s, loss + l

        start = (
            tf.constant(0),
            [tf.zeros(v.shape, v.dtype) for v in self._variables],
            tf.zeros([len(REPLICA_STATS)]),
            tf.constant(0.0),
        )
        _, grads, stats, loss = tf.while_loop(lambda i, *_: i < steps, body, start)
        return grads, stats, loss

    def _micro_gradients(self, batch, weight_total, global_batch):
        with tf.GradientTape() as tape:
            outputs = self.model({name: batch[name] for name in MODEL_INPUTS}, training=True)
            stats = _batch_stats(batch, outputs)
            # This micro-batch's share of the global batch's loss (see the module doc).
            loss = stats[0] / (weight_total + WEIGHT_EPSILON) + stats[3] / global_batch
            scaled = self.updater.scale(loss)
        grads = tape.gradient(scaled, self._variables)
        # Embedding gradients come as IndexedSlices; the sums and the all-reduce want tensors.
        return [tf.convert_to_tensor(g) for g in grads], stats, loss

    def _record(self, context, stats, result, step_number):
        first_replica = tf.cast(tf.equal(context.replica_id_in_sync_group, 0), tf.float32)
        seen_bad = self.stats[STATS.index("bad_steps")] > 0  # this replica's (replica 0's) count
        first_bad = tf.where(result.bad & tf.logical_not(seen_bad), tf.cast(step_number, tf.float32), 0.0)
        whole_step = tf.stack(
            [
                tf.where(tf.math.is_finite(result.loss), result.loss, 0.0),
                tf.where(result.applied, result.gradient_norm, 0.0),
                1.0,
                tf.cast(result.applied, tf.float32),
                tf.cast(result.bad, tf.float32),
                first_bad,
            ]
        )
        self.stats.assign_add(tf.concat([stats, whole_step * first_replica], 0))

    def _eval_step(self, batch):
        context = tf.distribute.get_replica_context()
        outputs = self.model({name: batch[name] for name in MODEL_INPUTS}, training=False)
        stats = _batch_stats(batch, outputs)[:6]
        # The original reports the mean over batches of each batch's total loss.
        totals = context.all_reduce(tf.distribute.ReduceOp.SUM, stats)
        batch_loss = totals[0] / (totals[1] + WEIGHT_EPSILON) + totals[3] / totals[5]
        first_replica = tf.cast(tf.equal(context.replica_id_in_sync_group, 0), tf.float32)
        self.eval_stats.assign_add(tf.concat([stats, tf.stack([batch_loss, 1.0]) * first_replica], 0))


# === Metrics of the summed stats ===
def summarize(stats: dict[str, float]) -> LoopResult:
    """What `runloop.HostLoop` reports of one `PretrainingTrainer.train` call."""
    weight = max(stats["masked_lm_weight"], 1e-5)
    examples = max(stats["examples"], 1.0)
    scalars = {
        "loss": stats["loss_sum"] / max(stats["steps"] - stats["bad_steps"], 1.0),
        "masked_lm_loss": stats["masked_lm_loss_sum"] / weight,
        "masked_lm_accuracy": stats["masked_lm_hits"] / weight,
        "next_sentence_loss": stats["next_sentence_loss_sum"] / examples,
        "next_sentence_accuracy": stats["next_sentence_hits"] / examples,
        "gradient_norm": stats["gradient_norm_sum"] / max(stats["applied_steps"], 1.0),
    }
    summary = (
        f"loss {scalars['loss']:.4f}  "
        f"mlm {scalars['masked_lm_loss']:.4f} (acc {scalars['masked_lm_accuracy']:.4f})  "
        f"nsp {scalars['next_sentence_loss']:.4f} (acc {scalars['next_sentence_accuracy']:.4f})  "
        f"|g| {scalars['gradient_norm']:.3g}"
    )
    first_bad_step = int(stats["first_bad_step"]) if stats["bad_steps"] else 0
    return LoopResult(scalars, summary, stats["examples"], stats["tokens"], first_bad_step)


def eval_results(stats: dict[str, float], global_step: int) -> dict[str, float]:
    """The original's evaluation metrics (weighted MLM means, NSP means, mean batch loss)."""
    weight = max(stats["masked_lm_weight"], 1e-5)
    examples = max(stats["examples"], 1.0)
    return {
        "global_step": global_step,
        "loss": stats["loss_sum"] / max(stats["batches"], 1.0),
        "masked_lm_accuracy": stats["masked_lm_hits"] / weight,
        "masked_lm_loss": stats["masked_lm_loss_sum"] / weight,
        "next_sentence_accuracy": stats["next_sentence_hits"] / examples,
        "next_sentence_loss": stats["next_sentence_loss_sum"] / examples,
    }
