"""BERT pre-training (masked LM + next sentence), as the original `run_pretraining.py`.

`run(PretrainingOptions(...))` trains and/or evaluates a `BertPretrainer` on the
TFRecords of `create_pretraining_data.py` under any `tf.distribute` strategy:

- `--iterations_per_loop` steps per host call, a progress line and TensorBoard
  scalars after each (in `output_dir`; evaluation in `output_dir/eval`);
- a checkpoint every `--save_checkpoints_steps` (model, optimiser, step, examples
  seen, loss scale, dropout RNG state) and, per worker, the position of its input
  pipeline, so a restart (after any kill) goes on exactly where the last checkpoint
  was written;
- `--init_checkpoint`: Google's TF1 checkpoints, HuggingFace directories, `.keras`
  files or our training checkpoints (a directory or prefix, e.g. phase 1 of the
  two-phase 128/512 recipe), all read by `bert_tf.checkpoints`;
- a NaN or infinite loss stops the run naming the step, before anything is saved;
- `--do_eval` writes `eval_results.txt` as the original does.

Example:
>>> options = PretrainingOptions(bert_config=BertConfig.from_preset("tiny"), input_file="x",
...                              output_dir="out", do_train=True, train_batch_size=32,
...                              gradient_accumulation_steps=4)
>>> options.validate()
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
import shutil
import sys
import time
from collections.abc import Callable

import keras
import numpy as np
import tensorflow as tf

from bert_tf.config import BertConfig
from bert_tf.encoder import BertEncoder
from bert_tf.errors import BertTfError
from bert_tf.optimization import OPTIMIZERS, create_optimizer
from bert_tf.pretrainer import BertPretrainer
from bert_tf.training import inputs
from bert_tf.training.distribution import STRATEGIES, create_strategy, is_chief, num_workers, worker_index
from bert_tf.training.steps import StepOptions, Trainer

PRECISIONS = {"none": "float32", "bf16": "mixed_bfloat16", "fp16": "mixed_float16"}
CONFIG_NAME = "bert_config.json"
EVAL_RESULTS_NAME = "eval_results.txt"
INPUT_STATE_DIR = "input_state"


@dataclasses.dataclass
class PretrainingOptions:
    """The flags of `run_pretraining.py`, with the original's defaults."""

    bert_config: BertConfig
    input_file: str
    output_dir: str
    init_checkpoint: str | None = None
    eval_input_file: str | None = None
    max_seq_length: int = 128
    max_predictions_per_seq: int = 20
    do_train: bool = False
    do_eval: bool = False
    train_batch_size: int = 32
    eval_batch_size: int = 8
    learning_rate: float = 5e-5
    num_train_steps: int = 100_000
    num_warmup_steps: int = 10_000
    save_checkpoints_steps: int = 1000
    iterations_per_loop: int = 1000
    max_eval_steps: int = 100
    distribution_strategy: str = "one_device"
    tpu_name: str | None = None
    tpu_zone: str | None = None
    gcp_project: str | None = None
    optimizer: str = "adamw"
    adam_bias_correction: bool = False
    lr_decay: str = "original"
    mixed_precision: str = "none"
    jit_compile: bool = False
    gradient_accumulation_steps: int = 1
    dynamic_masking: bool = False
    vocab_file: str | None = None
    num_tpu_cores: int | None = None
    seed: int = 12345
    keep_checkpoint_max: int = 5

    def validate(self) -> None:
        """Raises `BertTfError` naming the first flag that cannot work."""
        if not (self.do_train or self.do_eval):
            raise BertTfError("At least one of --do_train or --do_eval must be set.")
        for name in (
            "max_seq_length",
            "max_predictions_per_seq",
            "train_batch_size",
            "eval_batch_size",
            "num_train_steps",
            "save_checkpoints_steps",
            "iterations_per_loop",
            "max_eval_steps",
            "gradient_accumulation_steps",
            "keep_checkpoint_max",
        ):
            if getattr(self, name) < 1:
                raise BertTfError(f"--{name} must be at least 1, got {getattr(self, name)}.")
        if self.num_warmup_steps < 0:
            raise BertTfError(f"--num_warmup_steps must not be negative, got {self.num_warmup_steps}.")
        if not self.learning_rate > 0:
            raise BertTfError(f"--learning_rate must be positive, got {self.learning_rate}.")
        if self.max_predictions_per_seq > self.max_seq_length:
            raise BertTfError(
                f"--max_predictions_per_seq ({self.max_predictions_per_seq}) must not exceed "
                f"--max_seq_length ({self.max_seq_length})."
            )
        if self.max_seq_length > self.bert_config.max_position_embeddings:
            raise BertTfError(
                f"--max_seq_length ({self.max_seq_length}) exceeds the model's max_position_embeddings "
                f"({self.bert_config.max_position_embeddings})."
            )
        _check_choice("distribution_strategy", self.distribution_strategy, STRATEGIES)
        _check_choice("optimizer", self.optimizer, OPTIMIZERS)
        _check_choice("mixed_precision", self.mixed_precision, tuple(PRECISIONS))


def _check_choice(flag: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise BertTfError(f"Unknown --{flag} {value!r}; use one of {', '.join(choices)}.")


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
        for directory in {path, self.write_path}:
            _ensure_writable(directory)

    def input_state_path(self, fingerprint: str) -> str:
        return os.path.join(self.path, INPUT_STATE_DIR, fingerprint, f"worker-{self.worker}")

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
        reason = getattr(error, "strerror", None) or getattr(error, "message", None) or str(error)
        raise BertTfError(f"Cannot write to --output_dir {directory} ({reason.strip().splitlines()[0]}).") from None


# === Model and checkpoints ===
def describe(config: BertConfig) -> str:
    return (
        f"{config.num_hidden_layers} layers, hidden size {config.hidden_size}, {config.num_attention_heads} heads, "
        f"intermediate size {config.intermediate_size}, vocab {config.vocab_size}, "
        f"{config.max_position_embeddings} positions, {config.type_vocab_size} segment types"
    )


def _same_shapes(a: BertConfig, b: BertConfig) -> bool:
    fields = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
              "max_position_embeddings", "type_vocab_size")  # fmt: skip
    return all(getattr(a, name) == getattr(b, name) for name in fields)


def load_initial_weights(model: BertPretrainer, path: str) -> str:
    """Fills `model` from `--init_checkpoint` (any format `bert_tf.checkpoints` reads:
    Google's TF1, HuggingFace, `.keras`, our training checkpoints); returns what was
    loaded, for the log. Heads missing from the checkpoint keep their initialisation."""
    from bert_tf import checkpoints

    source = checkpoints.read_checkpoint(path)
    _check_same_size(path, source.config, model.encoder.bert_config)
    loaded = checkpoints.build_model(source, heads=True)
    weights = {variable.path: variable for variable in loaded.trainable_variables}
    for variable in model.trainable_variables:
        variable.assign(weights[variable.path])
    return f"{source.format} checkpoint {source.path}"


def _check_same_size(path: str, theirs: BertConfig, ours: BertConfig) -> None:
    if not _same_shapes(theirs, ours):
        raise BertTfError(
            f"--init_checkpoint {path} holds a BERT of {describe(theirs)}, but the config of this run describes "
            f"{describe(ours)}; use the bert_config.json that came with the checkpoint."
        )


def _read_input_state(state: tf.train.Checkpoint, path: str) -> bool:
    """Restores an input iterator; False if the saved state does not fit it."""
    try:
        state.read(path).assert_consumed()
    except (ValueError, AssertionError, tf.errors.OpError):
        return False
    return True


def _first_line(error: BaseException) -> str:
    """The gist of an error, without TensorFlow's decorations.

    A graph execution error reads "Graph execution error:", a "Detected at node" call
    stack (lines starting with spaces), the reason, then "[[{{node ...}}]] [Op:...]".
    """
    text = getattr(error, "message", None) or str(error) or type(error).__name__
    lines = [line for line in text.splitlines() if line.strip()]
    if lines and lines[0].startswith("Graph execution error"):
        lines = [line for line in lines[1:] if not line.startswith((" ", "Detected at node"))] or lines
    reason = re.sub(r"\{\{[^}]*\}\}", "", lines[0] if lines else text).strip()
    return re.split(r"\s*\[\[|\s*\[Op:", reason)[0].strip().rstrip(".")


# === The run ===
class PretrainingRun:
    """Everything one `run_pretraining.py` invocation holds: strategy, model, trainer,
    checkpoints and summary writers. `run()` wraps it."""

    def __init__(self, options: PretrainingOptions, strategy: tf.distribute.Strategy | None = None,
                 log: Callable[[str], None] = functools.partial(print, flush=True)):  # fmt: skip
        options.validate()
        self.options = options
        self.log = log
        self.strategy = strategy or create_strategy(
            options.distribution_strategy, options.tpu_name, options.tpu_zone, options.gcp_project
        )
        self.output = OutputDir(options.output_dir, self.strategy)
        if not self.output.chief:  # one voice per cluster: the chief's
            self.log = lambda message: None
        config = options.bert_config
        check = (options.max_seq_length, options.max_predictions_per_seq, config.vocab_size, options.dynamic_masking)
        self.files = inputs.check_input_files(options.input_file, *check)
        self.eval_files = inputs.check_input_files(options.eval_input_file, *check) if options.eval_input_file else self.files
        special_ids = inputs.special_token_ids(options.vocab_file) if options.vocab_file else ()
        if options.dynamic_masking:
            inputs.check_special_ids(special_ids, config.vocab_size)
        self.data = inputs.DataSpec(
            tuple(self.files), options.max_seq_length, options.max_predictions_per_seq, config.vocab_size,
            options.dynamic_masking, options.seed, special_ids,
        )  # fmt: skip
        workers, replicas = num_workers(self.strategy), self.strategy.num_replicas_in_sync
        self.plan = inputs.BatchPlan(options.train_batch_size, workers, replicas, options.gradient_accumulation_steps)
        self.eval_plan = inputs.BatchPlan(options.eval_batch_size, workers, replicas)
        self.tpu = isinstance(self.strategy, tf.distribute.TPUStrategy)
        self._input = None  # (iterator, its checkpoint), made by the first `train` call
        self._writer = None
        if self.tpu and options.num_tpu_cores and options.num_tpu_cores != replicas:
            log(f"Warning: --num_tpu_cores={options.num_tpu_cores}, but the TPU has {replicas} cores; using all of them.")
        self._build(config)

    def _build(self, config: BertConfig) -> None:
        options = self.options
        # The same seed on every worker: the same initial weights and dropout streams.
        keras.utils.set_random_seed(options.seed)
        with self.strategy.scope():
            encoder = BertEncoder(config, dtype=PRECISIONS[options.mixed_precision])
            self.model = BertPretrainer(encoder, options.max_predictions_per_seq)
            self.optimizer = create_optimizer(
                options.optimizer,
                options.learning_rate,
                options.num_train_steps,
                options.num_warmup_steps,
                bias_correction=options.adam_bias_correction,
                lr_decay=options.lr_decay,
            )
            step_options = StepOptions(self.plan, options.mixed_precision == "fp16", options.jit_compile)
            self.trainer = Trainer(self.strategy, self.model, self.optimizer, step_options, self.tpu)
            self.global_step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
            self.examples = tf.Variable(0, dtype=tf.int64, trainable=False, name="examples")
        seeds = [v.value for v in self.model.non_trainable_variables if "seed_generator" in v.path]
        self.checkpoint = tf.train.Checkpoint(
            model=self.model,
            optimizer=self.optimizer,
            global_step=self.global_step,
            examples=self.examples,
            loss_scale=self.trainer.loss_scale,
            loss_scale_good_steps=self.trainer.good_steps,
            dropout_seeds=seeds,
        )
        self.manager = tf.train.CheckpointManager(
            self.checkpoint, self.output.write_path, max_to_keep=options.keep_checkpoint_max, checkpoint_name="ckpt"
        )

    # === Start ===
    def restore(self) -> None:
        """Resumes from `output_dir`'s latest checkpoint, else loads `--init_checkpoint`."""
        latest = tf.train.latest_checkpoint(self.output.path)
        if latest:
            saved_config = os.path.join(self.output.path, CONFIG_NAME)
            if tf.io.gfile.exists(saved_config) and not _same_shapes(
                BertConfig.from_json_file(saved_config), self.options.bert_config
            ):
                raise BertTfError(
                    f"--output_dir {self.output.path} holds checkpoints of a BERT of "
                    f"{describe(BertConfig.from_json_file(saved_config))}, but this run's config describes "
                    f"{describe(self.options.bert_config)}; use that config or another --output_dir."
                )
            try:
                # The save counter is made on the first save: nothing to restore it into yet.
                self.checkpoint.restore(latest).assert_existing_objects_matched().expect_partial()
            except (ValueError, AssertionError, tf.errors.OpError) as error:
                raise BertTfError(
                    f"The checkpoint {latest} in --output_dir does not fit this run ({_first_line(error)}); "
                    "use the config it was trained with or another --output_dir."
                ) from None
            self.log(f"Resuming from {latest} at step {int(self.global_step.numpy())}.")
        elif self.options.init_checkpoint:
            with self.strategy.scope():
                loaded = load_initial_weights(self.model, self.options.init_checkpoint)
            self.log(f"Initialised from {loaded}.")

    def write_config(self) -> None:
        if self.output.chief:
            self.options.bert_config.to_json_file(os.path.join(self.output.path, CONFIG_NAME))

    # === Training ===
    def train(self, until: int | None = None) -> None:
        """Trains to `--num_train_steps` (or to step `until`, to go on later)."""
        options = self.options
        step = int(self.global_step.numpy())
        stop = options.num_train_steps if until is None else min(until, options.num_train_steps)
        if step >= options.num_train_steps:
            self.log(f"Training already reached step {step} of {options.num_train_steps}.")
            return
        if self._input is None:
            self._input = self._training_iterator(step)
            self._writer = tf.summary.create_file_writer(self.output.path) if self.output.chief else None
        iterator, input_state = self._input
        while step < stop:
            to_save = options.save_checkpoints_steps - step % options.save_checkpoints_steps
            steps = min(options.iterations_per_loop, stop - step, to_save)
            start = time.perf_counter()
            stats = self._run_loop(iterator, step, steps)
            elapsed = time.perf_counter() - start
            if stats["bad_steps"]:
                self._stop_for_nan(int(stats["first_bad_step"]))
            step += steps
            self.global_step.assign(step)
            self.examples.assign_add(steps * options.train_batch_size)
            metrics = self._metrics(stats, elapsed)
            self.log(progress_line(step, options.num_train_steps, metrics))
            if self._writer is not None:
                write_scalars(self._writer, step, metrics)
            if step % options.save_checkpoints_steps == 0 or step == options.num_train_steps:
                self._save(step, input_state)

    def _training_iterator(self, step: int):
        """The input at `step`: the saved input position, else `step` batches skipped."""
        if self.tpu:
            dataset_fn = inputs.tpu_dataset_fn(self.data, self.options.train_batch_size, skip_batches=step)
            return iter(self.strategy.distribute_datasets_from_function(dataset_fn)), None
        iterator = iter(inputs.training_dataset(self.data, self.plan, self.output.worker))
        state = tf.train.Checkpoint(iterator=iterator)
        saved = os.path.join(self._input_state_path(), f"input-{step}")
        if step and tf.io.gfile.exists(saved + ".index") and _read_input_state(state, saved):
            self.log(f"Input position restored from {saved}.")
        elif step:
            # Another input (files, batch, seed...) or a lost position: the data seen
            # so far is not known, so the new stream starts `step` batches in.
            self.log(f"No saved position of this input at step {step}: skipping {step} batches of it.")
            iterator = iter(inputs.training_dataset(self.data, self.plan, self.output.worker, skip_batches=step))
            state = tf.train.Checkpoint(iterator=iterator)
        return iterator, state

    def _input_state_path(self) -> str:
        return self.output.input_state_path(self.data.fingerprint(self.plan))

    def _run_loop(self, iterator, step: int, steps: int) -> dict[str, float]:
        steps_named = f"steps {step + 1}-{step + steps}"
        try:
            return self.trainer.train(iterator, step, steps)
        except tf.errors.DataLossError as error:  # a damaged record, met when the pipeline reaches it
            raise BertTfError(
                f"Reading the training data failed during {steps_named} ({_first_line(error)}); {self._kept()}."
            ) from None
        except tf.errors.InvalidArgumentError as error:  # e.g. a token id beyond the vocabulary
            raise BertTfError(
                f"A training step failed during {steps_named} ({_first_line(error)}); {self._kept()}."
            ) from None

    def _stop_for_nan(self, bad_step: int) -> None:
        raise BertTfError(f"The loss is NaN or infinite at step {bad_step}; training stopped and {self._kept()}.")

    def _kept(self) -> str:
        latest = tf.train.latest_checkpoint(self.output.path)
        return f"the last good checkpoint {latest} is kept" if latest else "no checkpoint had been written yet"

    def _save(self, step: int, input_state: tf.train.Checkpoint | None) -> None:
        # The input position first: the model checkpoint is what a restart looks for.
        if input_state is not None:
            input_state.write(os.path.join(self._input_state_path(), f"input-{step}"))
            self._prune_input_states(step)
        self.manager.save(checkpoint_number=step)
        self.output.discard_scratch()

    def _prune_input_states(self, step: int) -> None:
        keep = self.options.keep_checkpoint_max * self.options.save_checkpoints_steps
        directory = self._input_state_path()
        for name in tf.io.gfile.listdir(directory):
            number = name.split(".")[0].removeprefix("input-")
            if number.isdigit() and int(number) <= step - keep:
                tf.io.gfile.remove(os.path.join(directory, name))

    def _metrics(self, stats: dict[str, float], elapsed: float) -> dict[str, float]:
        metrics = summarize(stats, elapsed)
        metrics["learning_rate"] = float(self.optimizer.learning_rate)  # for the next step
        metrics["loss_scale"] = float(self.trainer.loss_scale.numpy())
        return metrics

    # === Evaluation ===
    def evaluate(
        self, files: list[str] | None = None, max_steps: int | None = None, report: bool = True
    ) -> dict[str, float]:
        """The original's evaluation metrics on the eval files (or `files`, at most
        `max_steps` batches); with `report`, also `eval_results.txt`, TensorBoard and a log line."""
        options = self.options
        files = files or self.eval_files
        limit = max_steps or options.max_eval_steps
        steps = min(limit, inputs.count_full_batches(files, options.eval_batch_size, limit))
        if not steps:
            flag = "--eval_input_file" if options.eval_input_file else "--input_file"
            raise BertTfError(f"{flag} holds fewer than --eval_batch_size={options.eval_batch_size} records to evaluate on.")
        dataset = inputs.evaluation_dataset(dataclasses.replace(self.data, files=tuple(files)), self.eval_plan,
                                            self.output.worker)  # fmt: skip
        if self.tpu:
            dataset = self.strategy.experimental_distribute_dataset(dataset)
        results = eval_results(self.trainer.evaluate(iter(dataset), steps), int(self.global_step.numpy()))
        if report:
            self._report(results)
        return results

    def _report(self, results: dict[str, float]) -> None:
        if self.output.chief:
            write_eval_results(os.path.join(self.output.path, EVAL_RESULTS_NAME), results)
            with tf.summary.create_file_writer(os.path.join(self.output.path, "eval")).as_default():
                for key, value in results.items():
                    if key != "global_step":
                        tf.summary.scalar(key, value, step=results["global_step"])
        self.log("Eval results: " + ", ".join(f"{key} = {value}" for key, value in sorted(results.items())))


# === Reporting ===
def summarize(stats: dict[str, float], elapsed: float) -> dict[str, float]:
    """Metrics of a loop from the stats `Trainer.train` returns."""
    weight = max(stats["masked_lm_weight"], 1e-5)
    examples = max(stats["examples"], 1.0)
    return {
        "loss": stats["loss_sum"] / max(stats["steps"] - stats["bad_steps"], 1.0),
        "masked_lm_loss": stats["masked_lm_loss_sum"] / weight,
        "masked_lm_accuracy": stats["masked_lm_hits"] / weight,
        "next_sentence_loss": stats["next_sentence_loss_sum"] / examples,
        "next_sentence_accuracy": stats["next_sentence_hits"] / examples,
        "gradient_norm": stats["gradient_norm_sum"] / max(stats["applied_steps"], 1.0),
        "examples_per_second": stats["examples"] / elapsed,
        "tokens_per_second": stats["tokens"] / elapsed,
    }


def progress_line(step: int, total: int, metrics: dict[str, float]) -> str:
    """One line per loop, e.g. `step 100/1000 loss 7.1234 mlm 6.4 (acc 0.081) ...`."""
    return (
        f"step {step}/{total}  loss {metrics['loss']:.4f}  "
        f"mlm {metrics['masked_lm_loss']:.4f} (acc {metrics['masked_lm_accuracy']:.4f})  "
        f"nsp {metrics['next_sentence_loss']:.4f} (acc {metrics['next_sentence_accuracy']:.4f})  "
        f"lr {metrics['learning_rate']:.3g}  |g| {metrics['gradient_norm']:.3g}  "
        f"{metrics['examples_per_second']:.1f} examples/s  {metrics['tokens_per_second']:.0f} tokens/s"
    )


def write_scalars(writer, step: int, metrics: dict[str, float]) -> None:
    with writer.as_default():
        for name, value in metrics.items():
            tf.summary.scalar(name, value, step=step)
    writer.flush()


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


def write_eval_results(path: str, results: dict[str, float]) -> None:
    """`key = value` lines, sorted, float32 values printed as numpy does, as the original."""
    lines = [f"{key} = {value if key == 'global_step' else str(np.float32(value))}\n" for key, value in sorted(results.items())]
    with tf.io.gfile.GFile(path, "w") as handle:
        handle.write("".join(lines))


def run(options: PretrainingOptions, strategy: tf.distribute.Strategy | None = None,
        log: Callable[[str], None] = functools.partial(print, flush=True)) -> dict[str, float] | None:  # fmt: skip
    """Trains (`do_train`) then evaluates (`do_eval`); returns the eval results, if any.

    User mistakes raise `BertTfError` with one sentence; nothing saved is ever removed.
    """
    session = PretrainingRun(options, strategy, log)
    session.restore()
    if options.do_train:
        session.write_config()
        session.train()
    if options.do_eval:
        if not options.do_train and not tf.train.latest_checkpoint(options.output_dir) and not options.init_checkpoint:
            print("Warning: evaluating a freshly initialised model (no checkpoint in --output_dir).", file=sys.stderr)
        return session.evaluate()
    return None
