"""The run core of both training loops: pre-training (`bert_tf.training.pretraining`)
and fine-tuning (`fine_tune.trainer`).

Each loop brings only its step function (a `tf.function` that runs some steps in one
host call and sums their metrics); everything around it is here, the same for both:

- `HostLoop`: runs the step function `iterations_per_loop` steps at a time, never
  across a checkpoint (or evaluation) point; after each host call it stops on a NaN or
  infinite loss, keeping the last good checkpoint, logs a progress line, writes the
  TensorBoard scalars and saves the checkpoint when one is due;
- `RunCheckpoint`: the one checkpoint layout (model, optimiser, dropout RNG state, loss
  scale, plus the loop's own counters), its `CheckpointManager`, and resuming;
- `OutputDir`: who writes where under multi-worker strategies (only the chief's
  checkpoints are kept);
- `write_results`: `eval_results.txt` ("key = value" lines, as the original) and its
  JSON twin, written under a temporary name and renamed;
- `PRECISIONS` / `dtype_policy` / `in_precision`: the `--mixed_precision` values, their Keras
  policies and the dtype of the projections' matmuls.

Example: four steps, three per host call at most, a checkpoint every two.
>>> import tempfile
>>> model = keras.Sequential([keras.layers.Dense(1)])
>>> model.build((None, 2))
>>> optimizer = keras.optimizers.SGD(0.1)
>>> updater = Updater(tf.distribute.get_strategy(), optimizer, model.trainable_variables, False)
>>> run_checkpoint = RunCheckpoint(model, updater, tempfile.mkdtemp(), max_to_keep=5)
>>> loop = HostLoop(run_checkpoint, iterations_per_loop=3, save_checkpoints_steps=2, total_steps=4,
...                 log_dir=None, log=lambda line: print(line.split("  ")[:2]))
>>> def steps(first_step, count):  # a loop's step function; here it trains nothing
...     return LoopResult({"loss": 0.5}, "loss 0.5000", examples=8.0 * count, tokens=64.0 * count)
>>> loop.run(0, 4, steps)
['step 2/4', 'loss 0.5000']
['step 4/4', 'loss 0.5000']
4
>>> [os.path.basename(path) for path in run_checkpoint.manager.checkpoints]
['ckpt-2', 'ckpt-4']
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time
from collections.abc import Callable

import keras
import tensorflow as tf

from bert_tf.atomic import incomplete_path
from bert_tf.checkpoints.base import first_line
from bert_tf.errors import BertTfError
from bert_tf.layers import compute_projections_in
from bert_tf.training.distribution import is_chief, worker_index
from bert_tf.training.update import Updater

# A `--mixed_precision` value: (the model's Keras dtype policy, the dtype of its projections'
# matmuls). bf16 is computed as `torch.autocast` does: float32 variables and activations, the
# encoder's projections and the masked-LM output projection in bfloat16
# (`bert_tf.layers.compute_projections_in`). Not the `mixed_bfloat16` policy, whose residual
# stream and LayerNorm outputs are bfloat16: it ran slower on a CPU (its casts and bf16
# element-wise ops; bench/README.md), and HF's bf16 is autocast's. It learns as the policy
# did: BERT-tiny pre-training, the same seed and records, masked-LM loss 6.124 vs 6.164
# (accuracy 0.159 vs 0.160) at step 2,700 of 5,000.
PRECISIONS = {"none": ("float32", None), "bf16": ("float32", "bfloat16"), "fp16": ("mixed_float16", None)}
CHECKPOINT_NAME = "ckpt"
RESULTS_NAME = "eval_results"


# === Precision ===
def dtype_policy(mixed_precision: str) -> str:
    """The Keras dtype policy of a `--mixed_precision` value ("none", "bf16" or "fp16")."""
    if mixed_precision not in PRECISIONS:
        raise BertTfError(f"Unknown --mixed_precision {mixed_precision!r}; use one of {', '.join(PRECISIONS)}.")
    return PRECISIONS[mixed_precision][0]


def in_precision(model: keras.Layer, mixed_precision: str) -> keras.Layer:
    """`model`, built under `dtype_policy(mixed_precision)`, with its projections' matmuls in
    the value's dtype (bf16: bfloat16; see `PRECISIONS`)."""
    matmul_dtype = PRECISIONS[mixed_precision][1]
    if matmul_dtype is not None:
        compute_projections_in(model, matmul_dtype)
    return model


# === Output directory ===
class OutputDir:
    """`output_dir` for the chief; a scratch directory for the other workers.

    Under MultiWorkerMirroredStrategy every worker takes part in saving a checkpoint,
    but only the chief's copy is kept.
    """

    def __init__(self, path: str, strategy: tf.distribute.Strategy):
        self.path = path
        self.chief = is_chief(strategy)
        self.worker = worker_index(strategy)
        self.write_path = path if self.chief else os.path.join(path, f".worker-{self.worker}-scratch")
        self.made = not tf.io.gfile.exists(path)
        for directory in {path, self.write_path}:
            _ensure_writable(directory)

    def remove_if_unused(self) -> None:
        """Removes `output_dir` if this run made it and wrote nothing there (a run refused at its start)."""
        if self.made and tf.io.gfile.isdir(self.path) and not tf.io.gfile.listdir(self.path):
            tf.io.gfile.rmtree(self.path)

    def discard_scratch(self) -> None:
        if not self.chief:
            shutil.rmtree(self.write_path, ignore_errors=True)


def _ensure_writable(directory: str) -> None:
    probe = os.path.join(directory, f".write-test-{os.getpid()}")
    try:
        tf.io.gfile.makedirs(directory)
        with tf.io.gfile.GFile(probe, "w") as handle:
            handle.write("ok")
        tf.io.gfile.remove(probe)
    except (OSError, tf.errors.OpError) as error:
        raise BertTfError(f"Cannot write to --output_dir {directory} ({_reason(error)}).") from None


def _reason(error: BaseException) -> str:
    reason = getattr(error, "strerror", None) or getattr(error, "message", None) or str(error)
    return reason.strip().splitlines()[0]


# === Checkpoints ===
def dropout_seeds(model: keras.Model) -> list[keras.Variable]:
    """The RNG states of the model's dropout layers.

    Keras keeps them in `SeedGenerator`s, which `tf.train.Checkpoint` does not reach
    through the model: saved explicitly, so a resumed run draws the same masks.
    """
    return [variable for variable in model.variables if variable.path.endswith("seed_generator_state")]


class RunCheckpoint:
    """The checkpoint of a training run and the manager that keeps the latest ones.

    Holds the model, the optimiser, the dropout RNG state and the (fp16) loss scale of
    `updater`, plus `counters` (e.g. pre-training's `global_step` and `examples`).

    Args:
        model: the model being trained.
        updater: the run's `Updater` (its optimiser and loss scale are saved).
        directory: where checkpoints are written (`ckpt-<step>`).
        max_to_keep: how many recent checkpoints to keep.
        resume_from: where a restart looks for the latest checkpoint (default: `directory`;
            a multi-worker run's other workers write aside but resume from the chief's).
        **counters: more variables to save and restore.
    """

    def __init__(self, model: keras.Model, updater: Updater, directory: str, max_to_keep: int,
                 resume_from: str | None = None, **counters: tf.Variable):  # fmt: skip
        self.updater = updater
        self.objects = {
            "model": model,
            "optimizer": updater.optimizer,
            "dropout_seeds": dropout_seeds(model),
            "loss_scale": updater.loss_scale,
            "loss_scale_good_steps": updater.good_steps,
            **counters,
        }
        self.checkpoint = tf.train.Checkpoint(**self.objects)
        self.manager = tf.train.CheckpointManager(
            self.checkpoint, directory, max_to_keep=max_to_keep, checkpoint_name=CHECKPOINT_NAME
        )
        self.resume_from = resume_from or directory

    @property
    def latest(self) -> str | None:
        return tf.train.latest_checkpoint(self.resume_from)

    def restore(
        self, log: Callable[[str], None], step: Callable[[], int], purpose: str = "Resuming from"
    ) -> str | None:
        """Restores the latest checkpoint, if any, logs it with the `step()` it restored
        ("`purpose` ckpt-N at step N."), and returns its path."""
        latest = self.latest
        if latest is None:
            return None
        try:
            # The save counter is made on the first save: nothing to restore it into yet.
            self.checkpoint.restore(latest).assert_existing_objects_matched().expect_partial()
        except (ValueError, AssertionError, tf.errors.OpError) as error:
            raise BertTfError(
                f"The checkpoint {latest} in --output_dir does not fit this run ({first_line(error)}); "
                "use the config it was trained with or another --output_dir."
            ) from None
        log(f"{purpose} {latest} at step {step()}.")
        return latest

    def read(self, prefix: str, *names: str) -> None:
        """Restores only the objects `names` (keys of `objects`, e.g. "optimizer") from
        the checkpoint at `prefix`, one of another run of the same layout; raises
        `AssertionError` or `ValueError` where it lacks them or their shapes differ."""
        part = tf.train.Checkpoint(**{name: self.objects[name] for name in names})
        part.read(prefix).assert_existing_objects_matched().expect_partial()

    def save(self, step: int) -> None:
        self.manager.save(checkpoint_number=step)

    def kept(self) -> str:
        """What a failed run leaves behind, for its error message."""
        latest = self.latest
        return f"the last good checkpoint {latest} is kept" if latest else "no checkpoint had been written yet"


# === The host loop ===
@dataclasses.dataclass(frozen=True)
class LoopResult:
    """What one host call of a loop's step function reports.

    Attributes:
        scalars: the loop's own metrics, for TensorBoard (e.g. `loss`).
        summary: the loop's part of the progress line (e.g. "loss 0.6931").
        examples: the examples trained on, over all replicas.
        tokens: their non-padding tokens.
        first_bad_step: the first step whose loss was NaN or infinite; 0 if none was.
    """

    scalars: dict[str, float]
    summary: str
    examples: float
    tokens: float
    first_bad_step: int = 0


class HostLoop:
    """Runs a loop's step function host call by host call; in between, what every run does.

    Args:
        checkpoint: the run's `RunCheckpoint`.
        iterations_per_loop: the most steps in one host call.
        save_checkpoints_steps: a checkpoint after every this many steps (and at `total_steps`).
        total_steps: the step at which training ends.
        log_dir: where TensorBoard scalars go (None: nowhere, e.g. on a worker that is not the chief).
        log: prints a progress line.
        save: writes the checkpoint of a step (default: `checkpoint.save`).
    """

    def __init__(self, checkpoint: RunCheckpoint, iterations_per_loop: int, save_checkpoints_steps: int,
                 total_steps: int, log_dir: str | None, log: Callable[[str], None],
                 save: Callable[[int], None] | None = None):  # fmt: skip
        self.checkpoint = checkpoint
        self.iterations_per_loop = iterations_per_loop
        self.save_checkpoints_steps = save_checkpoints_steps
        self.total_steps = total_steps
        self.log = log
        self.save = save or checkpoint.save
        self.writer = tf.summary.create_file_writer(log_dir) if log_dir else None
        # (examples, seconds) of every host call: the first one includes tracing.
        self.loop_times: list[tuple[float, float]] = []

    def run(self, step: int, stop: int, train: Callable[[int, int], LoopResult], every: int = 0,
            at_every: Callable[[int], None] | None = None) -> int:  # fmt: skip
        """Trains from `step` to `stop` with `train(first_step, steps)`; returns `stop`.

        With `every`, host calls also end at each multiple of `every`, where
        `at_every(step)` runs (after the checkpoint), e.g. an evaluation.
        """
        while step < stop:
            steps = self._steps(step, stop, every)
            start = time.perf_counter()
            result = train(step, steps)
            seconds = time.perf_counter() - start
            if result.first_bad_step:
                raise BertTfError(
                    f"The loss is NaN or infinite at step {result.first_bad_step}; training stopped and "
                    f"{self.checkpoint.kept()} (lower --learning_rate or check the data)."
                )
            step += steps
            self.loop_times.append((result.examples, seconds))
            self._report(step, result, seconds)
            if step % self.save_checkpoints_steps == 0 or step == self.total_steps:
                self.save(step)
            if every and at_every is not None and step % every == 0:
                at_every(step)
        return step

    def _steps(self, step: int, stop: int, every: int) -> int:
        """The length of the next host call: up to the next checkpoint, evaluation or `stop`."""
        limits = [self.iterations_per_loop, stop - step]
        for period in (self.save_checkpoints_steps, every):
            if period:
                limits.append(period - step % period)
        return min(limits)

    def _report(self, step: int, result: LoopResult, seconds: float) -> None:
        learning_rate = float(self.checkpoint.updater.optimizer.learning_rate)  # that of the next step
        examples_per_second, tokens_per_second = result.examples / seconds, result.tokens / seconds
        self.log(
            f"step {step}/{self.total_steps}  {result.summary}  lr {learning_rate:.3g}  "
            f"{examples_per_second:.1f} examples/s  {tokens_per_second:.0f} tokens/s"
        )
        if self.writer is not None:
            scalars = {
                **result.scalars,
                "learning_rate": learning_rate,
                "examples_per_second": examples_per_second,
                "tokens_per_second": tokens_per_second,
                "loss_scale": float(self.checkpoint.updater.loss_scale.numpy()),
            }
            write_scalars(self.writer, step, scalars)


def write_scalars(writer: tf.summary.SummaryWriter, step: int, scalars: dict[str, float]) -> None:
    """TensorBoard scalars of one step, flushed (a killed run keeps them)."""
    with writer.as_default():
        for name, value in scalars.items():
            tf.summary.scalar(name, value, step=step)
    writer.flush()


# === Results files ===
def write_results(directory: str, results: dict[str, object], name: str = RESULTS_NAME,
                  with_json: bool = True) -> str:  # fmt: skip
    """`name.txt` as the original (sorted "key = value" lines, values as `str` gives
    them) and, `with_json`, `name.json`; each complete or absent. Returns the txt path.

    Example:
    >>> import tempfile
    >>> path = write_results(tempfile.mkdtemp(), {"loss": 0.25, "global_step": 6}, with_json=False)
    >>> print(open(path).read(), end="")
    global_step = 6
    loss = 0.25
    """
    tf.io.gfile.makedirs(directory)
    path = os.path.join(directory, f"{name}.txt")
    write_atomically(path, "".join(f"{key} = {value}\n" for key, value in sorted(results.items())))
    if with_json:
        write_atomically(os.path.join(directory, f"{name}.json"), json.dumps(results, indent=2, sort_keys=True))
    return path


def write_atomically(path: str, text: str) -> None:
    """`bert_tf.atomic.write_text` on any file system TensorFlow reaches (gs://, hdfs://)."""
    temporary = incomplete_path(path)
    with tf.io.gfile.GFile(temporary, "w") as handle:
        handle.write(text)
    tf.io.gfile.rename(temporary, path, overwrite=True)
