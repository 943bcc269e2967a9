"""One optimiser update under `tf.distribute`, shared by pre-training and fine-tuning.

Called in each replica with that replica's gradients (of its share of the global
batch's loss), it does what the original does on one device with the whole batch:

1. one all-reduce (sum) of the gradients and the loss over the replicas;
2. unscale (fp16 dynamic loss scaling), then the global norm;
3. skip the update when the loss or the gradients are not finite (fp16: the loss scale
   halves; otherwise the caller reports the step as bad);
4. clip to the optimiser's `global_clipnorm` (1.0 for BERT's optimisers);
5. `optimizer.update_step` for every variable, through `strategy.extended.update`, and
   `optimizer.iterations` + 1.

Keras' `optimizer.apply` is not used because under `tf.distribute` it clips each
replica's gradients *before* its own all-reduce: the clipped norm would be a
per-replica one (each replica's share is smaller than the batch's gradient, so less
is clipped), and an all-reduce of our own before it would be summed twice.
"""

from __future__ import annotations

from typing import NamedTuple

import keras
import tensorflow as tf

INITIAL_LOSS_SCALE = 2.0**15
LOSS_SCALE_GROWTH_STEPS = 2000  # Keras' and tf.keras' dynamic loss scale default


class UpdateResult(NamedTuple):
    """What one update did, the same on every replica."""

    loss: tf.Tensor  # the loss summed over the replicas
    gradient_norm: tf.Tensor  # before clipping
    applied: tf.Tensor  # bool: the weights were updated
    bad: tf.Tensor  # bool: a divergence (not an fp16 overflow, which the loss scale absorbs)


def _step_state(name: str, value, dtype) -> tf.Variable:
    # Every replica computes the same value: keep the first replica's.
    return tf.Variable(
        tf.constant(value, dtype), trainable=False, name=name, aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA
    )


class Updater:
    """Applies the replicas' gradients with `optimizer`, as one device would.

    Build it in `strategy.scope()`; call it in replica context (inside `strategy.run`).

    Args:
        strategy: the `tf.distribute` strategy.
        optimizer: a Keras optimizer (`update_step` and `global_clipnorm` are used).
        variables: the variables it updates (it builds the optimizer's slots for them).
        loss_scaling: fp16 dynamic loss scaling; `scale(loss)` is what to differentiate.

    Example:
    >>> import keras
    >>> strategy = tf.distribute.get_strategy()
    >>> w = keras.Variable([3.0, 4.0], name="kernel")
    >>> updater = Updater(strategy, keras.optimizers.SGD(1.0, global_clipnorm=1.0), [w], loss_scaling=False)
    >>> result = updater([tf.constant([3.0, 4.0])], [w], tf.constant(1.0))  # norm 5, clipped to 1
    >>> float(result.gradient_norm), [round(x, 4) for x in w.numpy().tolist()]
    (5.0, [2.4, 3.2])
    """

    def __init__(
        self,
        strategy: tf.distribute.Strategy,
        optimizer: keras.optimizers.Optimizer,
        variables: list,
        loss_scaling: bool,
    ):
        self.strategy = strategy
        self.optimizer = optimizer
        self.loss_scaling = loss_scaling
        self.loss_scale = _step_state("loss_scale", INITIAL_LOSS_SCALE if loss_scaling else 1.0, tf.float32)
        self.good_steps = _step_state("good_steps", 0, tf.int64)
        optimizer.build(variables)

    def scale(self, loss: tf.Tensor) -> tf.Tensor:
        """The loss to differentiate: times the loss scale with fp16."""
        return loss * self.loss_scale if self.loss_scaling else loss

    def __call__(self, grads: list[tf.Tensor], variables: list, loss: tf.Tensor) -> UpdateResult:
        """Reduces, checks, clips and applies this replica's `grads` (dense tensors) of `variables`."""
        context = tf.distribute.get_replica_context()
        reduced = context.all_reduce(tf.distribute.ReduceOp.SUM, [*grads, loss])
        grads, loss = reduced[:-1], reduced[-1]
        if self.loss_scaling:
            grads = [g / self.loss_scale for g in grads]
        norm = tf.linalg.global_norm(grads)
        finite_loss = tf.math.is_finite(loss)
        applied = finite_loss & tf.math.is_finite(norm)
        # With fp16, overflowing gradients are routine (the loss scale adapts); a
        # non-finite loss is not. Without loss scaling, either means divergence.
        bad = tf.logical_not(finite_loss if self.loss_scaling else applied)
        clip = self.optimizer.global_clipnorm
        if clip:
            grads, _ = tf.clip_by_global_norm(grads, clip, use_norm=norm)
        tf.__internal__.distribute.interim.maybe_merge_call(self._apply, self.strategy, grads, variables, applied)
        return UpdateResult(loss, norm, applied, bad)

    def _apply(self, strategy, grads, variables, applied):
        # Cross-replica context (or replica context on strategies without merge_call):
        # `applied` is the same on every replica, computed from all-reduced values.
        applied = strategy.experimental_local_results(applied)[0]
        tf.cond(applied, lambda: self._update(strategy, grads, variables), lambda: None)
        if self.loss_scaling:
            self._adjust_loss_scale(applied)

    def _update(self, strategy, grads, variables) -> None:
        learning_rate = self.optimizer.learning_rate
        for grad, variable in zip(grads, variables):
            strategy.extended.update(variable.value, self._update_variable, args=(grad, learning_rate), group=False)
        self.optimizer.iterations.assign_add(1)

    def _update_variable(self, variable, grad, learning_rate):
        self.optimizer.update_step(grad, variable, learning_rate)

    def _adjust_loss_scale(self, finite):
        """Halve on overflow; double after `LOSS_SCALE_GROWTH_STEPS` good steps."""
        grow = finite & (self.good_steps + 1 >= LOSS_SCALE_GROWTH_STEPS)
        scale = tf.where(grow, self.loss_scale * 2.0, self.loss_scale)
        self.loss_scale.assign(tf.where(finite, scale, tf.maximum(self.loss_scale / 2.0, 1.0)))
        self.good_steps.assign(tf.where(finite & tf.logical_not(grow), self.good_steps + 1, 0))
