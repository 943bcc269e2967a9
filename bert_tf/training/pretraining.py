"""BERT pre-training (masked LM + next sentence), as the original `run_pretraining.py`.

`run(PretrainingOptions(...))` trains and/or evaluates a `BertPretrainer` on the
TFRecords of `create_pretraining_data.py` under any `tf.distribute` strategy. The step
is `steps.PretrainingTrainer`'s; what surrounds it is the run core's
(`bert_tf.training.runloop`, shared with fine-tuning):

- `--iterations_per_loop` steps per host call, a progress line and TensorBoard
  scalars after each (in `output_dir`; evaluation in `output_dir/eval`);
- a checkpoint every `--save_checkpoints_steps` (model, optimiser, step, examples
  seen, loss scale, dropout RNG state) and, per worker, the position of its input
  pipeline, so a restart (after any kill) goes on exactly where the last checkpoint
  was written;
- `--init_checkpoint`: Google's TF1 checkpoints, HuggingFace directories, `.keras`
  files or our training checkpoints (a directory or prefix), loaded into the model by
  `bert_tf.checkpoints.load_into`, when `output_dir` holds no checkpoint yet;
- a NaN or infinite loss stops the run naming the step, before anything is saved;
- `--do_eval` writes `eval_results.txt` as the original does.

Two-phase pre-training (the original README's recipe: 90% of the steps at sequence
length 128, the last 10% at 512, on data written twice): phase 2 runs in a new
`output_dir` with `--init_checkpoint=PHASE1_DIR` and `--init_checkpoint_state`:

- `weights` (the default) is the original `run_pretraining.py` with `--init_checkpoint`
  into a new output dir: its `get_assignment_map_from_checkpoint` maps only
  `tf.trainable_variables()`, so `global_step` and the Adam moments (`adam_m`,
  `adam_v`, non-trainable) are not loaded: phase 2 starts at step 0 with zero moments
  and its own warm-up and decay over its own `--num_train_steps`.
- `all` carries phase 1's step, Adam moments (so the schedule goes on where it was),
  examples count and dropout RNG state: `--num_train_steps` is the total of both phases
  (900 at 128, then 1000 at 512: phase 2 trains steps 901-1000). This is what the
  original does when phase 2 is run in phase 1's own output dir: its Estimator restores
  every variable from there and `max_steps` counts from step 0.

Either way phase 2's input starts at the beginning of its own files (phase 1's input
position belongs to other files) and the fp16 loss scale starts afresh (phase 2 may use
another `--mixed_precision`). Re-running phase 1's output dir with records of another
length is refused, with the command to use instead: one output dir holds one phase
(`input_state.Phase`), so phase 1's final checkpoint stays there for fine-tuning.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
from collections.abc import Callable
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from bert_tf import checkpoints
from bert_tf.checkpoints import training_format
from bert_tf.checkpoints.base import first_line
from bert_tf.config import BertConfig
from bert_tf.encoder import BertEncoder
from bert_tf.errors import BertTfError
from bert_tf.flags import setting_changes
from bert_tf.optimization import create_optimizer
from bert_tf.pretrainer import BertPretrainer
from bert_tf.training import inputs
from bert_tf.training.distribution import create_strategy, num_workers
from bert_tf.training.input_state import InputPositions, Phase
from bert_tf.training.options import PretrainingOptions
from bert_tf.training.runloop import (
    HostLoop,
    LoopResult,
    OutputDir,
    RunCheckpoint,
    dtype_policy,
    in_precision,
    write_atomically,
    write_results,
    write_scalars,
)
from bert_tf.training.steps import PretrainingTrainer, StepOptions, eval_results, summarize

CONFIG_NAME = "bert_config.json"
# What --init_checkpoint_state=all carries besides the model (`RunCheckpoint.objects`).
CARRIED_STATE = ("optimizer", "global_step", "examples", "dropout_seeds")
EVAL_DIR = "eval"  # TensorBoard scalars of the evaluations
# The flags a resumed run must repeat (with the model config and the input files): they
# fix the schedule, the batches and the arithmetic of every step.
RESUMED_SETTINGS = ("train_batch_size", "gradient_accumulation_steps", "learning_rate", "num_train_steps",
                    "num_warmup_steps", "optimizer", "adam_bias_correction", "lr_decay", "mixed_precision", "seed",
                    "dynamic_masking")  # fmt: skip
# The flags that, with the step, give the learning rate: carrying a run's step under other
# values moves the rate at that step, as it would in the original (its schedule is a
# function of the flags and the global step), so it is said.
SCHEDULE_SETTINGS = ("learning_rate", "num_warmup_steps", "lr_decay")


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
        # The data is checked before --output_dir is made: a refused run leaves nothing behind.
        config = options.bert_config
        check = (options.max_seq_length, options.max_predictions_per_seq, config.vocab_size, options.dynamic_masking)
        self.files = inputs.check_input_files(options.input_file, *check)
        self.eval_files = inputs.check_input_files(options.eval_input_file, *check) if options.eval_input_file else self.files
        special_ids = inputs.special_token_ids(options.vocab_file) if options.vocab_file else ()
        if options.dynamic_masking:
            inputs.check_special_ids(special_ids, config.vocab_size)
        workers, replicas = num_workers(self.strategy), self.strategy.num_replicas_in_sync
        self.plan = inputs.BatchPlan(options.train_batch_size, workers, replicas, options.gradient_accumulation_steps)
        self.eval_plan = inputs.BatchPlan(options.eval_batch_size, workers, replicas)
        # Counted before training (a run of days must not end in its error), and kept.
        self.eval_steps = self._eval_steps(self.eval_files, options.max_eval_steps) if options.do_eval else None
        self.output = OutputDir(options.output_dir, self.strategy)
        if not self.output.chief:  # one voice per cluster: the chief's
            self.log = lambda message: None
        if options.do_train and options.num_warmup_steps >= options.num_train_steps:
            self.log(f"Warning: --num_warmup_steps={options.num_warmup_steps} is not below --num_train_steps="
                     f"{options.num_train_steps}: the learning rate never reaches --learning_rate.")
        self.data = inputs.DataSpec(
            tuple(self.files), options.max_seq_length, options.max_predictions_per_seq, config.vocab_size,
            options.dynamic_masking, options.seed, special_ids,
        )  # fmt: skip
        self.tpu = isinstance(self.strategy, tf.distribute.TPUStrategy)
        self.positions = InputPositions(
            self.output, self.data.fingerprint(self.plan), options.keep_checkpoint_max * options.save_checkpoints_steps
        )
        # The phase this run trains: it begins at step 0 unless `restore` says otherwise.
        self.phase = Phase(0, options.max_seq_length, options.max_predictions_per_seq, options.num_train_steps,
                           self._settings())
        self._input = None  # (iterator, its checkpoint), made by the first `train` call
        self._loop: HostLoop | None = None
        if self.tpu and options.num_tpu_cores and options.num_tpu_cores != replicas:
            log(f"Warning: --num_tpu_cores={options.num_tpu_cores}, but the TPU has {replicas} cores; using all of them.")
        self._build(config)

    def _settings(self) -> dict[str, Any]:
        """What fixes the steps this run computes (`Phase.settings`): its hyper-parameters,
        the model config and the input files by name and size (a moved corpus is the same)."""
        options = self.options
        files = sorted((os.path.basename(path), tf.io.gfile.stat(path).length) for path in self.files)
        settings = {name: getattr(options, name) for name in RESUMED_SETTINGS}
        return json.loads(json.dumps({**settings, "bert_config": options.bert_config.to_dict(), "input_files": files}))

    def _build(self, config: BertConfig) -> None:
        options = self.options
        # The same seed on every worker: the same initial weights and dropout streams.
        keras.utils.set_random_seed(options.seed)
        with self.strategy.scope():
            encoder = in_precision(BertEncoder(config, dtype=dtype_policy(options.mixed_precision)),
                                   options.mixed_precision)
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
            self.trainer = PretrainingTrainer(self.strategy, self.model, self.optimizer, step_options, self.tpu)
            self.global_step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
            self.examples = tf.Variable(0, dtype=tf.int64, trainable=False, name="examples")
        self.checkpoint = RunCheckpoint(
            self.model,
            self.trainer.updater,
            self.output.write_path,
            options.keep_checkpoint_max,
            resume_from=self.output.path,
            global_step=self.global_step,
            examples=self.examples,
        )

    # === Start ===
    def restore(self) -> None:
        """Resumes from `output_dir`'s latest checkpoint, else starts from `--init_checkpoint`:
        its weights, or with `--init_checkpoint_state=all` its training state too."""
        options = self.options
        if self.checkpoint.latest:
            self._check_saved_config()
            self._resume_phase()
            purpose = "Resuming from" if options.do_train else "Evaluating"
            self.checkpoint.restore(self.log, lambda: int(self.global_step.numpy()), purpose)
            if options.init_checkpoint:
                self.log(f"Warning: --init_checkpoint {options.init_checkpoint} is not read: this run goes on from "
                         "its own checkpoint in --output_dir.")
        elif options.init_checkpoint and options.init_checkpoint_state == "all":
            self._carry(options.init_checkpoint)
        elif options.init_checkpoint:
            with self.strategy.scope():
                loaded = checkpoints.load_into(self.model, options.init_checkpoint, flag="--init_checkpoint")
            self.log(f"Initialised from {loaded}.")

    def _check_saved_config(self) -> None:
        saved_config = os.path.join(self.output.path, CONFIG_NAME)
        if not tf.io.gfile.exists(saved_config):
            return
        saved, ours = BertConfig.from_json_file(saved_config), self.options.bert_config
        if not checkpoints.same_size(saved, ours):
            raise BertTfError(
                f"--output_dir {self.output.path} holds checkpoints of a BERT of {checkpoints.describe(saved)}, "
                f"but this run's config describes {checkpoints.describe(ours)}; "
                "use that config or another --output_dir."
            )

    def _resume_phase(self) -> None:
        """The phase `output_dir` holds; training on records of another shape, or with other
        settings (`Phase.settings`), is refused."""
        saved = Phase.load(self.output.path)
        if saved is None:  # written before phases were recorded: one phase from step 0
            return
        if self.options.do_train and saved.records != self.phase.records:
            raise BertTfError(
                f"--output_dir {self.output.path} holds a pre-training phase on records of max_seq_length "
                f"{saved.max_seq_length} and max_predictions_per_seq {saved.max_predictions_per_seq}, but this run "
                f"reads {self.phase.max_seq_length} and {self.phase.max_predictions_per_seq}; train the next phase "
                f"into a new --output_dir with --init_checkpoint={self.output.path} (and "
                "--init_checkpoint_state=all to carry the step count, optimiser state and schedule)."
            )
        # After the records' shape: a phase 2 run into phase 1's dir gets the command it needs.
        changes = setting_changes(saved.settings or {}, self.phase.settings)
        if self.options.do_train and changes:
            raise BertTfError(
                f"--output_dir {self.output.path} holds the checkpoint of a run with other settings ({changes}), "
                "which this run would resume; repeat that run's settings to resume it, or train into a new "
                f"--output_dir (with --init_checkpoint={self.output.path} to start from its weights)."
            )
        self.phase = dataclasses.replace(self.phase, first_step=saved.first_step)

    def _carry(self, path: str) -> None:
        """`--init_checkpoint_state=all`: the weights and `CARRIED_STATE` of the training
        checkpoint at `path`; this run's input begins at the step carried."""
        prefix = self._training_prefix(path)
        with self.strategy.scope():
            checkpoints.load_into(self.model, prefix, flag="--init_checkpoint")
            try:
                self.checkpoint.read(prefix, *CARRIED_STATE)
            except (AssertionError, ValueError, tf.errors.OpError) as error:
                raise BertTfError(
                    f"The training state of --init_checkpoint {prefix} does not fit this run ({first_line(error)}); "
                    "pass --init_checkpoint_state=weights to start from its weights only."
                ) from None
        step = int(self.global_step.numpy())
        if self.options.do_train and step >= self.options.num_train_steps:
            raise BertTfError(
                f"--init_checkpoint {prefix} is at step {step}, which --init_checkpoint_state=all carries on from: "
                f"--num_train_steps={self.options.num_train_steps} counts both phases, so it must exceed {step}."
            )
        self.phase = dataclasses.replace(self.phase, first_step=step)
        self.log(
            f"Carried step {step}, the optimiser state and the learning-rate schedule from training checkpoint "
            f"{prefix}; the input starts at its beginning."
        )
        carried = Phase.load(os.path.dirname(prefix))
        if carried and carried.last_step and step < carried.last_step:
            # Not refused: an earlier checkpoint may be chosen on purpose (say, before a divergence).
            self.log(
                f"Warning: its run was to train to step {carried.last_step}, so this phase starts {carried.last_step - step} "
                f"steps early, with the schedule where step {step} left it; if that run was interrupted, resume it "
                f"first (the same command on {os.path.dirname(prefix)})."
            )
        schedule = {name: self.phase.settings[name] for name in SCHEDULE_SETTINGS}
        changes = setting_changes(carried.settings or {}, schedule) if carried else ""
        if changes:
            self.log(f"Warning: the schedule goes on from step {step} with this run's flags ({changes}); give its "
                     "run's to continue its schedule.")

    @staticmethod
    def _training_prefix(path: str) -> str:
        """The run_pretraining.py checkpoint that `--init_checkpoint` names."""
        if not (os.path.exists(path) or os.path.exists(f"{path}.index")):
            raise BertTfError(f"--init_checkpoint {path} does not exist.")
        prefix = training_format.find_training_prefix(path)
        if prefix is None:
            raise BertTfError(
                f"--init_checkpoint_state=all carries the training state of a run_pretraining.py checkpoint, but "
                f"--init_checkpoint {path} is a {checkpoints.detect_format(path)} checkpoint (weights only); "
                "pass --init_checkpoint_state=weights."
            )
        return prefix

    def write_config(self) -> None:
        if self.output.chief:
            # Through tf.io.gfile: the output dir may be gs://.
            write_atomically(os.path.join(self.output.path, CONFIG_NAME), self.options.bert_config.to_json_string())

    # === Training ===
    def train(self, until: int | None = None) -> None:
        """Trains to `--num_train_steps` (or to step `until`, to go on later)."""
        options = self.options
        step = int(self.global_step.numpy())
        stop = options.num_train_steps if until is None else min(until, options.num_train_steps)
        if step >= options.num_train_steps:
            self.log(f"Training already reached step {step} of {options.num_train_steps}.")
            return
        if self._loop is None:
            if self.output.chief:  # before the first checkpoint: a restart finds it
                self.phase.save(self.output.path)
            self._input = self._training_iterator(step)
            self._loop = HostLoop(
                self.checkpoint, options.iterations_per_loop, options.save_checkpoints_steps, options.num_train_steps,
                log_dir=self.output.path if self.output.chief else None, log=self.log, save=self._save,
            )  # fmt: skip
        self._loop.run(step, stop, self._train_steps)

    def _training_iterator(self, step: int):
        """The input at `step`: the saved input position, else the batches read since the
        phase began skipped."""
        read = step - self.phase.first_step  # batches of this input read so far
        if self.tpu:
            dataset_fn = inputs.tpu_dataset_fn(self.data, self.options.train_batch_size, skip_batches=read)
            return iter(self.strategy.distribute_datasets_from_function(dataset_fn)), None
        iterator = iter(inputs.training_dataset(self.data, self.plan, self.output.worker))
        state = tf.train.Checkpoint(iterator=iterator)
        if read and self.positions.restore(state, step):
            self.log(f"Input position restored from {self.positions.path(step)}.")
        elif read:
            # Another input (files, batch, seed...) or a lost position: the data seen
            # so far is not known, so the new stream starts as many batches in.
            self.log(f"No saved position of this input at step {step}: skipping {read} batches of it.")
            iterator = iter(inputs.training_dataset(self.data, self.plan, self.output.worker, skip_batches=read))
            state = tf.train.Checkpoint(iterator=iterator)
        return iterator, state

    def _train_steps(self, step: int, steps: int) -> LoopResult:
        """Steps `step + 1`... `step + steps`, in one host call."""
        iterator, _ = self._input
        steps_named = f"steps {step + 1}-{step + steps}"
        try:
            stats = self.trainer.train(iterator, step, steps)
        except tf.errors.DataLossError as error:  # a damaged record, met when the pipeline reaches it
            raise BertTfError(
                f"Reading the training data (--input_file {self.options.input_file}) failed during {steps_named}: "
                f"a record is damaged ({first_line(error)}); "
                f"{self.checkpoint.kept()}."
            ) from None
        except tf.errors.InvalidArgumentError as error:  # e.g. a token id beyond the vocabulary
            raise BertTfError(
                f"A training step failed during {steps_named} ({first_line(error)}); {self.checkpoint.kept()}."
            ) from None
        self.global_step.assign(step + steps)
        self.examples.assign_add(steps * self.options.train_batch_size)
        return summarize(stats)

    def _save(self, step: int) -> None:
        # The input position first: the model checkpoint is what a restart looks for.
        _, input_state = self._input
        if input_state is not None:
            self.positions.save(input_state, step)
        self.checkpoint.save(step)
        self.output.discard_scratch()

    # === Evaluation ===
    def evaluate(
        self, files: list[str] | None = None, max_steps: int | None = None, report: bool = True
    ) -> dict[str, float]:
        """The original's evaluation metrics on the eval files (or `files`, at most
        `max_steps` batches); with `report`, also `eval_results.txt`, TensorBoard and a log line."""
        options = self.options
        if files is None and max_steps is None and self.eval_steps is not None:
            steps = self.eval_steps
        else:
            steps = self._eval_steps(files or self.eval_files, max_steps or options.max_eval_steps)
        files = files or self.eval_files
        dataset = inputs.evaluation_dataset(dataclasses.replace(self.data, files=tuple(files)), self.eval_plan,
                                            self.output.worker)  # fmt: skip
        if self.tpu:
            dataset = self.strategy.experimental_distribute_dataset(dataset)
        results = eval_results(self.trainer.evaluate(iter(dataset), steps), int(self.global_step.numpy()))
        if report:
            self._report(results)
        return results

    def _eval_steps(self, files: list[str], limit: int) -> int:
        """The batches an evaluation of `files` reads: full ones, at most `limit`."""
        options = self.options
        steps = min(limit, inputs.count_full_batches(files, options.eval_batch_size, limit))
        if not steps:
            flag = "--eval_input_file" if options.eval_input_file else "--input_file"
            raise BertTfError(f"{flag} holds fewer than --eval_batch_size={options.eval_batch_size} records to evaluate on.")
        return steps

    def _report(self, results: dict[str, float]) -> None:
        if self.output.chief:
            step = results["global_step"]
            metrics = {key: value for key, value in results.items() if key != "global_step"}
            # The original's metrics are float32 tensors: printed as numpy prints them.
            write_results(self.output.path, {"global_step": step, **{k: np.float32(v) for k, v in metrics.items()}},
                          with_json=False)  # fmt: skip
            write_scalars(tf.summary.create_file_writer(os.path.join(self.output.path, EVAL_DIR)), step, metrics)
        self.log("Eval results: " + ", ".join(f"{key} = {value}" for key, value in sorted(results.items())))


def run(options: PretrainingOptions, strategy: tf.distribute.Strategy | None = None,
        log: Callable[[str], None] = functools.partial(print, flush=True)) -> dict[str, float] | None:  # fmt: skip
    """Trains (`do_train`) then evaluates (`do_eval`); returns the eval results, if any.

    User mistakes raise `BertTfError` with one sentence; nothing saved is ever removed.
    """
    if options.do_eval and not options.do_train and not options.init_checkpoint:
        if not tf.io.gfile.exists(options.output_dir) or not tf.train.latest_checkpoint(options.output_dir):
            raise BertTfError(f"--output_dir {options.output_dir} holds no checkpoint to evaluate; give the "
                              "--output_dir of a run_pretraining.py run, or --init_checkpoint.")
    session = PretrainingRun(options, strategy, log)
    try:
        session.restore()
    except BertTfError:  # e.g. an --init_checkpoint that does not fit: leave no empty --output_dir
        session.output.remove_if_unused()
        raise
    if options.do_train:
        session.write_config()
        session.train()
    if options.do_eval:
        return session.evaluate()
    return None
