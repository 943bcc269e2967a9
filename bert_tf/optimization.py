"""BERT's optimiser and learning-rate schedule, as Keras 3 optimizers (any backend).

`AdamWeightDecay` is the original `optimization.py` update, to the letter:

    m <- beta_1 m + (1 - beta_1) g
    v <- beta_2 v + (1 - beta_2) g^2
    w <- w - lr (m / (sqrt(v) + epsilon) + weight_decay_rate w)

with **no bias correction** of `m` and `v`, `epsilon` 1e-6, and the decay term left out
for LayerNorm and bias variables. `bias_correction=True` divides `m` and `v` by
`1 - beta^t` (Adam's correction, as `torch.optim.AdamW`, HF's Trainer and Model Garden's
AdamWeightDecay): without it, `v` is underestimated for the first ~1/(1 - beta_2) = 1000
steps, so early updates are up to ~3x larger than the learning rate says. Measured on
the quickstart corpus: BERT-tiny at learning rate 1e-3 collapses (every position gives
the same vector; masked-LM accuracy stays at the most frequent token's) with the
original update, in our code and in HF's BertForPreTraining alike, and learns with the
correction. Gradients are clipped to a global norm of 1.0 first,
and the learning rate warms up linearly, then decays linearly to 0
(`WarmupLinearDecay`). `Lamb` is the large-batch alternative (You et al. 2019).

Example (one update, by hand: with m = 0.1 g and v = 0.001 g^2 the step is
lr (0.1 / sqrt(0.001)) sign(g), plus lr * 0.01 * w for decayed variables):
>>> import numpy as np, keras
>>> kernel = keras.Variable(np.ones((2,), "float32"), name="kernel")
>>> optimizer = AdamWeightDecay(learning_rate=0.1)
>>> optimizer.apply([np.array([0.1, -0.1], "float32")], [kernel])
>>> np.round(np.asarray(kernel), 4)
array([0.6829, 1.3151], dtype=float32)
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import keras
from keras import ops

from bert_tf.errors import BertTfError

# The original `exclude_from_weight_decay`, searched (as regular expressions) in a
# variable's path. Our LayerNorm variables live under `*layer_norm/{gamma,beta}`, the
# original's and HF's under `LayerNorm/`; every bias ends in `bias`.
DEFAULT_EXCLUDE_FROM_WEIGHT_DECAY = ("LayerNorm", "layer_norm", "bias")
OPTIMIZERS = ("adamw", "lamb")
# How the rate decays after warm-up: "original" counts the linear decay from step 0 (the
# original's `polynomial_decay`, also Model Garden's), so it falls from the peak to
# (1 - warmup/total) of it when warm-up ends; "from_peak" decays from the peak at the end
# of warm-up to 0 (HF's `get_linear_schedule_with_warmup`): a rate 1/(1 - warmup/total)
# higher over the whole decay, 11% with the usual 10% warm-up.
LR_DECAYS = ("original", "from_peak")


# === Learning rate ===
@keras.saving.register_keras_serializable(package="bert_tf")
class WarmupLinearDecay(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warm-up to `learning_rate`, then linear decay to `end_learning_rate`.

    As the original (`decay="original"`): `polynomial_decay(lr, step, num_train_steps,
    end, power=1)`, replaced by `lr * step / num_warmup_steps` while `step <
    num_warmup_steps`. With `decay="from_peak"` the decay starts at the end of warm-up
    instead, from `learning_rate` (see `LR_DECAYS`). The step is the number of updates
    already applied, so the very first update of a run with warm-up has learning rate
    0, as in the original.

    Example:
    >>> schedule = WarmupLinearDecay(1e-4, num_train_steps=100, num_warmup_steps=10)
    >>> [round(float(schedule(step)), 8) for step in (0, 5, 10, 55, 100, 150)]
    [0.0, 5e-05, 9e-05, 4.5e-05, 0.0, 0.0]
    >>> schedule = WarmupLinearDecay(1e-4, num_train_steps=100, num_warmup_steps=10, decay="from_peak")
    >>> [round(float(schedule(step)), 8) for step in (0, 5, 10, 55, 100, 150)]
    [0.0, 5e-05, 0.0001, 5e-05, 0.0, 0.0]
    """

    def __init__(
        self,
        learning_rate: float,
        num_train_steps: int,
        num_warmup_steps: int = 0,
        end_learning_rate: float = 0.0,
        power: float = 1.0,
        decay: str = "original",
    ):
        if decay not in LR_DECAYS:
            raise BertTfError(f"Unknown learning-rate decay {decay!r}; use one of {', '.join(LR_DECAYS)}.")
        if num_train_steps < 1:
            raise BertTfError(f"num_train_steps must be at least 1, got {num_train_steps}.")
        if num_warmup_steps < 0:
            raise BertTfError(f"num_warmup_steps must not be negative, got {num_warmup_steps}.")
        self.learning_rate = learning_rate
        self.num_train_steps = num_train_steps
        self.num_warmup_steps = num_warmup_steps
        self.end_learning_rate = end_learning_rate
        self.power = power
        self.decay = decay

    def __call__(self, step):
        step = ops.cast(step, "float32")
        start = float(self.num_warmup_steps) if self.decay == "from_peak" else 0.0
        length = max(float(self.num_train_steps) - start, 1.0)
        done = ops.clip(step - start, 0.0, length) / length
        decayed = (self.learning_rate - self.end_learning_rate) * ops.power(1.0 - done, self.power)
        decayed = decayed + self.end_learning_rate
        if not self.num_warmup_steps:
            return decayed
        warmup = self.learning_rate * step / float(self.num_warmup_steps)
        return ops.where(step < float(self.num_warmup_steps), warmup, decayed)

    def get_config(self) -> dict[str, Any]:
        return {
            "learning_rate": self.learning_rate,
            "num_train_steps": self.num_train_steps,
            "num_warmup_steps": self.num_warmup_steps,
            "end_learning_rate": self.end_learning_rate,
            "power": self.power,
            "decay": self.decay,
        }


# === Optimizers ===
@keras.saving.register_keras_serializable(package="bert_tf")
class AdamWeightDecay(keras.optimizers.Optimizer):
    """Adam with decoupled weight decay and without bias correction (the original BERT's).

    Args:
        learning_rate: a float or a schedule such as `WarmupLinearDecay`.
        weight_decay_rate: decay added to the update as `weight_decay_rate * w`.
        beta_1, beta_2, epsilon: Adam's; epsilon is added to sqrt(v), as the original.
        exclude_from_weight_decay: regular expressions searched in each variable's path
            (`variable.path`, e.g. "transformer_layer_0/attention_layer_norm/gamma");
            a match is not decayed.
        global_clipnorm: gradients are scaled down to this global norm (1.0, as the
            original) before the update; None turns clipping off.
        bias_correction: Adam's bias correction of `m` and `v` (off in the original).

    Example:
    >>> import keras
    >>> optimizer = AdamWeightDecay()
    >>> optimizer.decays(keras.Variable([1.0], name="bias"))
    False
    """

    def __init__(
        self,
        learning_rate: float | keras.optimizers.schedules.LearningRateSchedule = 1e-4,
        weight_decay_rate: float = 0.01,
        beta_1: float = 0.9,
        beta_2: float = 0.999,
        epsilon: float = 1e-6,
        exclude_from_weight_decay: Sequence[str] = DEFAULT_EXCLUDE_FROM_WEIGHT_DECAY,
        global_clipnorm: float | None = 1.0,
        bias_correction: bool = False,
        name: str = "adam_weight_decay",
        **kwargs: Any,
    ):
        # Keras' own `weight_decay` is applied by the base class and matched on the
        # short variable name; ours is part of `update_step` and matched on the path.
        super().__init__(learning_rate=learning_rate, global_clipnorm=global_clipnorm, name=name, **kwargs)
        self.weight_decay_rate = weight_decay_rate
        self.beta_1 = beta_1
        self.beta_2 = beta_2
        self.epsilon = epsilon
        self.bias_correction = bias_correction
        self.exclude_from_weight_decay_patterns = tuple(exclude_from_weight_decay)
        self._exclude_pattern = _compile(self.exclude_from_weight_decay_patterns)

    def decays(self, variable) -> bool:
        """Whether `variable` gets weight decay (its path matches no exclusion)."""
        return bool(self.weight_decay_rate) and not _matches(self._exclude_pattern, variable)

    def build(self, var_list):
        if self.built:
            return
        super().build(var_list)
        self._m = [self.add_variable_from_reference(v, name="m") for v in var_list]
        self._v = [self.add_variable_from_reference(v, name="v") for v in var_list]
        # Decided here, on the Keras variables: under tf.distribute `update_step` gets
        # the per-device tf.Variable, whose name has lost the layer path.
        self._decayed = [self.decays(v) for v in var_list]

    def _moments(self, gradient, variable):
        """Updates the two moment slots of `variable`; returns them and its index."""
        index = self._get_variable_index(variable)
        m, v = self._m[index], self._v[index]
        gradient = ops.cast(gradient, variable.dtype)
        self.assign(m, self.beta_1 * m + (1.0 - self.beta_1) * gradient)
        self.assign(v, self.beta_2 * v + (1.0 - self.beta_2) * ops.square(gradient))
        return m, v, index

    def _corrected(self, m, v, variable):
        """`m` and `v` divided by Adam's `1 - beta^t`."""
        step = ops.cast(self.iterations + 1, variable.dtype)
        m_hat = m / (1.0 - ops.power(ops.cast(self.beta_1, variable.dtype), step))
        v_hat = v / (1.0 - ops.power(ops.cast(self.beta_2, variable.dtype), step))
        return m_hat, v_hat

    def _direction(self, gradient, variable):
        """`m / (sqrt(v) + epsilon)` (bias corrected if asked), plus the decay term; and
        the variable's index."""
        m, v, index = self._moments(gradient, variable)
        if self.bias_correction:
            m, v = self._corrected(m, v, variable)
        update = m / (ops.sqrt(v) + self.epsilon)
        if self._decayed[index]:
            update = update + self.weight_decay_rate * variable
        return update, index

    def update_step(self, gradient, variable, learning_rate):
        update, _ = self._direction(gradient, variable)
        self.assign_sub(variable, ops.cast(learning_rate, variable.dtype) * update)

    def get_config(self) -> dict[str, Any]:
        return {
            **super().get_config(),
            "weight_decay_rate": self.weight_decay_rate,
            "beta_1": self.beta_1,
            "beta_2": self.beta_2,
            "epsilon": self.epsilon,
            "bias_correction": self.bias_correction,
            "exclude_from_weight_decay": list(self.exclude_from_weight_decay_patterns),
        }


@keras.saving.register_keras_serializable(package="bert_tf")
class Lamb(AdamWeightDecay):
    """LAMB (You et al. 2019): Adam with decay, rescaled per variable by a trust ratio.

    The update `u = m_hat / (sqrt(v_hat) + epsilon) + weight_decay_rate * w` (bias
    corrected by default, as in the paper and NVIDIA's BERT) is multiplied by
    `||w|| / ||u||` (1 when either norm is 0), except for variables matching
    `exclude_from_layer_adaptation` (by default the weight-decay exclusions).

    Example:
    >>> import numpy as np, keras
    >>> w = keras.Variable(np.full((4,), 2.0, "float32"), name="kernel")
    >>> Lamb(learning_rate=0.1, weight_decay_rate=0.0).apply([np.ones(4, "float32")], [w])
    >>> np.round(np.asarray(w), 4)  # trust ratio ||w|| / ||u|| = 4 / 2: a step of 0.2
    array([1.8, 1.8, 1.8, 1.8], dtype=float32)
    """

    def __init__(
        self,
        learning_rate: float | keras.optimizers.schedules.LearningRateSchedule = 1e-3,
        exclude_from_layer_adaptation: Sequence[str] | None = None,
        bias_correction: bool = True,
        name: str = "lamb",
        **kwargs: Any,
    ):
        super().__init__(learning_rate=learning_rate, bias_correction=bias_correction, name=name, **kwargs)
        if exclude_from_layer_adaptation is None:
            exclude_from_layer_adaptation = self.exclude_from_weight_decay_patterns
        self.exclude_from_layer_adaptation_patterns = tuple(exclude_from_layer_adaptation)
        self._adaptation_exclude_pattern = _compile(self.exclude_from_layer_adaptation_patterns)

    def build(self, var_list):
        if self.built:
            return
        super().build(var_list)
        self._adapted = [not _matches(self._adaptation_exclude_pattern, v) for v in var_list]

    def update_step(self, gradient, variable, learning_rate):
        update, index = self._direction(gradient, variable)
        if self._adapted[index]:
            w_norm = ops.sqrt(ops.sum(ops.square(variable)))
            u_norm = ops.sqrt(ops.sum(ops.square(update)))
            ratio = ops.where((w_norm > 0) & (u_norm > 0), w_norm / ops.maximum(u_norm, 1e-30), 1.0)
            update = ratio * update
        self.assign_sub(variable, ops.cast(learning_rate, variable.dtype) * update)

    def get_config(self) -> dict[str, Any]:
        return {
            **super().get_config(),
            "exclude_from_layer_adaptation": list(self.exclude_from_layer_adaptation_patterns),
        }


def create_optimizer(
    name: str,
    learning_rate: float,
    num_train_steps: int,
    num_warmup_steps: int,
    weight_decay_rate: float = 0.01,
    global_clipnorm: float | None = 1.0,
    bias_correction: bool = False,
    lr_decay: str = "original",
) -> AdamWeightDecay:
    """The original `create_optimizer`: `adamw` (BERT's) or `lamb`, with its schedule.

    `bias_correction` is AdamW's (off in the original); LAMB always corrects, as the
    paper does. `lr_decay` is the schedule's `decay` (`LR_DECAYS`).

    Example:
    >>> optimizer = create_optimizer("adamw", 1e-4, num_train_steps=1000, num_warmup_steps=100)
    >>> type(optimizer).__name__, optimizer.epsilon, optimizer.global_clipnorm
    ('AdamWeightDecay', 1e-06, 1.0)
    """
    schedule = WarmupLinearDecay(learning_rate, num_train_steps, num_warmup_steps, decay=lr_decay)
    kwargs = dict(learning_rate=schedule, weight_decay_rate=weight_decay_rate, global_clipnorm=global_clipnorm)
    if name == "adamw":
        return AdamWeightDecay(bias_correction=bias_correction, **kwargs)
    if name == "lamb":
        return Lamb(**kwargs)
    raise BertTfError(f"Unknown optimizer {name!r}; use one of {', '.join(OPTIMIZERS)}.")


def _compile(patterns: Sequence[str]) -> re.Pattern | None:
    return re.compile("|".join(f"(?:{p})" for p in patterns)) if patterns else None


def _matches(pattern: re.Pattern | None, variable) -> bool:
    # Keras 3 variables know their path ("layer/sub_layer/name"); a bare backend
    # variable (tf.Variable) only its name, which then holds the scopes.
    path = getattr(variable, "path", None) or variable.name
    return pattern is not None and pattern.search(path) is not None
