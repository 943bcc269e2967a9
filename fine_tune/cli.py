"""The commands of fine-tuning: `run_classifier.py`, `run_ner.py` and `run_squad.py`
(`classifier_main`, `ner_main`, `squad_main`), and the library entry `run`.

The flags are the original's (`bert_tf.flags`: absl, so `--nodo_train` and `--flagfile`
work), plus the fields of the family's task configs (`fine_tune.config`); the commands
only map flags onto a `TaskConfig` and a `RunConfig` and call `run(task_config,
run_config)`, which a program can call directly:

    from fine_tune.cli import run
    from fine_tune.glue import GlueConfig
    from fine_tune.config import RunConfig
    run(GlueConfig("mrpc", "glue_data/MRPC"), RunConfig("out", init_checkpoint="bert", do_train=True))

A run writes to `--output_dir`: `checkpoints/` (resumable), `model.weights.h5`,
`best/` (best dev score), `bert_config.json`, `vocab.txt` and `fine_tune.json` (the
typed configs: `--do_predict` alone needs nothing else, and
`fine_tune.registry.task_from_run_dir` rebuilds the task), `logs/` (TensorBoard),
`eval_results.txt` and the task's prediction files.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from typing import Any

import keras
import numpy as np
import tensorflow as tf
from absl.flags import FlagValues

from bert_tf import checkpoints
from bert_tf.config import BertConfig
from bert_tf.encoder import BertEncoder
from bert_tf.errors import BertTfError
from bert_tf.flags import SHARED, Flag, flag_values, parse, path_within, run_main, set_default, setting_changes
from bert_tf.tokenization import FullTokenizer
from bert_tf.training.distribution import create_strategy, is_chief
from bert_tf.training.runloop import dtype_policy, in_precision, write_atomically, write_results, write_scalars
from fine_tune import batching, registry
from fine_tune.config import RunConfig, TaskConfig, config_flags, from_flags
from fine_tune.registry import RUN_FILE
from fine_tune.task import EvalSet, Features, Task
from fine_tune.trainer import (
    BEST_DIR,
    CHECKPOINTS_DIR,
    FineTuningTrainer,
    TrainingConfig,
    fine_tuned_weights,
    load_fine_tuned,
    save_weights,
)

CONFIG_FILE = "bert_config.json"
VOCAB_FILE = "vocab.txt"


# === Flags ===
# The flags of every fine-tuning command besides the shared ones and the task configs'.
FINE_TUNING_FLAGS = {
    "do_predict": Flag(bool, False, "Whether to run prediction on the test set and write the prediction files."),
    "predict_batch_size": Flag(int, 8, "Total batch size for predict."),
    "num_train_epochs": Flag(float, 3.0, "Total number of training epochs to perform."),
    "warmup_proportion": Flag(float, 0.1, "Fraction of the training steps with a linear learning-rate warm-up."),
    "weight_decay_rate": Flag(float, 0.01, "Decoupled weight decay (not on LayerNorm and bias)."),
    "eval_steps": Flag(int, 0, "Also evaluate every N steps while training (0: once per epoch)."),
    "evaluate_during_training": Flag(bool, True, "With --do_eval, score the dev set after every epoch."),
    "use_best_checkpoint": Flag(bool, True, "Evaluate and predict with the best dev checkpoint."),
    "max_train_examples": Flag(int, 0, "Train on the first N examples only (0: all)."),
    "padding": Flag(batching.PADDING_MODES, "dynamic", "fixed: every batch to --max_seq_length; dynamic: each batch "
                    "to its longest row; bucket: batches of rows of similar lengths (see fine_tune.batching)."),
    "pad_to_multiple_of": Flag(int, 8, "Dynamic padding rounds a batch's length up to a multiple of this."),
    "export_dir": Flag(str, None, "After the run, export the fine-tuned model here as a SavedModel that takes "
                       "strings (as bert-export)."),
}
SHARED_GROUPS = ("model", "do_lower_case", "hidden_act", "max_seq_length", "schedule", "optimisation", "runtime",
                 "precision", "output_dir")  # fmt: skip
# RunConfig fields set by a flag of another name.
RUN_FLAG_NAMES = {"seed": "random_seed"}

FAMILIES = {
    "classifier": "Fine-tunes BERT on GLUE, XNLI or your own TSV (run_classifier.py).",
    "ner": "Fine-tunes BERT for named-entity recognition (run_ner.py).",
    "squad": "Fine-tunes BERT on SQuAD v1.1 / v2.0 (or any SQuAD-format data) (run_squad.py).",
}
# The original's defaults where a family's differ from the shared flags' (run_squad.py's 384).
FAMILY_DEFAULTS = {
    "ner": {"task_name": "conll2003"},
    "squad": {"task_name": "squad", "max_seq_length": 384},
}


@functools.cache
def family_flags(family: str) -> FlagValues:
    """The flags of a family's command (built once, parsed anew by every call)."""
    task_flags = dict(flag for config in registry.config_classes(family) for flag in config_flags(config))
    shared = [name for name in task_flags if name in SHARED]
    own = {name: flag for name, flag in task_flags.items() if name not in SHARED}
    values = flag_values(*SHARED_GROUPS, *shared, own={**FINE_TUNING_FLAGS, **own})
    for name, default in FAMILY_DEFAULTS.get(family, {}).items():
        set_default(values, name, default)
    return values


def description(family: str) -> str:
    tasks = "\n".join(f"  {e.name}: {e.description}" for e in registry.entries(family))
    return f"{FAMILIES[family]}\n\ntasks (--task_name):\n{tasks}"


def configs_from_flags(family: str, values: FlagValues) -> tuple[TaskConfig, RunConfig]:
    """The task and run configs that parsed flags describe.

    An evaluation or prediction without `--do_train` takes the settings the run in
    `--output_dir` was trained with (its task, casing, sequence length, windows, ...)
    wherever the command line gives none, so that it feeds the model as training did.
    """
    record = _record_to_evaluate(values, family)
    task_name = values.task_name if record is None or values["task_name"].present else record["task"]
    entry = registry.lookup(task_name, family)
    same_task = record is not None and entry.name == record["task"]
    task_config = from_flags(entry.config, values, record["task_config"] if same_task else None)
    run = {field.name: values[RUN_FLAG_NAMES.get(field.name, field.name)].value
           for field in dataclasses.fields(RunConfig)
           if RUN_FLAG_NAMES.get(field.name, field.name) in values}  # fmt: skip
    run["distribution_strategy"] = values.distribution_strategy or ("tpu" if values.use_tpu else "one_device")
    run["tpu_name"] = values.tpu_name or values.master
    if record is not None:
        run.update({name: record["training"][name] for name in RunConfig.recorded_fields
                    if name in record["training"] and not values[name].present})  # fmt: skip
    return task_config, RunConfig(**run)


def _record_to_evaluate(values: FlagValues, family: str) -> dict[str, Any] | None:
    """The run record (`fine_tune.json`) of `--output_dir` when this command only evaluates
    or predicts a run of its family (`run` refuses one of another)."""
    if values.do_train or not values.output_dir or not os.path.isfile(os.path.join(values.output_dir, RUN_FILE)):
        return None
    record = registry.read_run_record(values.output_dir)
    return record if "task_config" in record and record.get("family") == family else None


def parse_args(family: str, argv: Sequence[str]) -> tuple[TaskConfig, RunConfig]:
    """The configs of a family's command line (`argv` without the program name)."""
    values = family_flags(family)
    parse(values, argv)
    return configs_from_flags(family, values)


def main(family: str, argv: Sequence[str] | None = None) -> int:
    """The command of `family`: exit status 0, or 1 after one `error: ...` line on stderr."""
    values = family_flags(family)
    return run_main(values, argv, description(family), lambda values: run(*configs_from_flags(family, values)))


def classifier_main(argv: Sequence[str] | None = None) -> int:
    """run_classifier.py / bert-classify."""
    return main("classifier", argv)


def ner_main(argv: Sequence[str] | None = None) -> int:
    """run_ner.py / bert-ner."""
    return main("ner", argv)


def squad_main(argv: Sequence[str] | None = None) -> int:
    """run_squad.py / bert-squad."""
    return main("squad", argv)


# === The run ===
@dataclasses.dataclass
class Run:
    """What a run needs besides its configs (`args`: the `RunConfig`): the task, tokenizer,
    config, labels, strategy and the pre-trained weights (read once: the config comes
    from beside them)."""

    args: RunConfig
    task_config: TaskConfig
    task: Task
    config: BertConfig
    tokenizer: FullTokenizer
    vocab_file: str
    strategy: tf.distribute.Strategy
    training: TrainingConfig
    checkpoint: checkpoints.Checkpoint | None = None
    labels: tuple[str, ...] = ()
    resumes: dict[str, Any] | None = None  # the record of the run whose checkpoint training resumes


def run(task_config: TaskConfig, args: RunConfig) -> dict[str, Any]:
    """Trains, evaluates and predicts as the configs say; returns the scores and timings.

    `fine_tune.run`: the library entry that the commands map their flags onto. To evaluate
    a trained run with the settings it was trained with, start from its configs:
    `_, task_config, run_config, _ = fine_tune.registry.task_from_run_dir(output_dir)`
    (the commands take them for every flag not given; here a setting that differs from
    the run's is only warned about).
    """
    resumes = _check_against_record(task_config, args)
    task = registry.build_task(task_config, args)
    _check_flags(task_config, args)
    # First: the multi-worker and TPU strategies reconfigure the TensorFlow runtime.
    strategy = create_strategy(args.distribution_strategy, args.tpu_name, args.tpu_zone, args.gcp_project)
    if not is_chief(strategy):
        # Other workers of a multi-worker run write their (collective) checkpoints and
        # logs aside; only the chief writes to --output_dir.
        args = dataclasses.replace(args, output_dir=tempfile.mkdtemp(prefix="bert_tf_worker_"))
    keras.utils.set_random_seed(args.seed)
    checkpoint = _pre_trained(args)
    config, vocab_file = _config_and_vocab(args, checkpoint)
    tokenizer = FullTokenizer(vocab_file, do_lower_case=args.do_lower_case)
    _check_model_fits(args, config, tokenizer, vocab_file)
    state = Run(args, task_config, task, config, tokenizer, vocab_file, strategy, args.training_config(), checkpoint,
                resumes=resumes)
    splits = {split: _read(state, split) for split in ("train", "dev", "test") if args.wants(split)}
    state.labels = _labels(state, splits.get("train"))  # from the whole train set, not the first N
    if "train" in splits and args.max_train_examples:
        splits["train"][0].examples = splits["train"][0].examples[: args.max_train_examples]
    report: dict[str, Any] = {"task": task.name, "labels": list(state.labels)}
    with state.strategy.scope():
        model = task.head.build(_encoder(state), max(len(state.labels), 1), config.hidden_dropout_prob)
    state.checkpoint = None  # its weights now live in the model
    trainer = FineTuningTrainer(model, task.loss, task.head.per_token, state.training, state.strategy)
    dev = [(eval_set, _featurise(state, eval_set)) for eval_set in splits.get("dev", [])]
    if args.do_train:
        report.update(_train(state, trainer, splits["train"][0], dev))
    else:
        _load_fine_tuned(state, model)
    if args.do_train and args.use_best_checkpoint and args.evaluate_during_training and dev:
        model.load_weights(fine_tuned_weights(args.output_dir, prefer_best=True))
    if dev:
        report["eval"] = _score_sets(state, trainer, dev, args.eval_batch_size, "eval_results")
    if args.do_predict:
        test = [(eval_set, _featurise(state, eval_set)) for eval_set in splits["test"]]
        report["test"] = _score_sets(state, trainer, test, args.predict_batch_size, "test_scores")
    if args.export_dir and is_chief(strategy):
        from fine_tune.export import export  # it reads run dirs through this module

        report["export_dir"] = export(args.output_dir, args.export_dir)
        print(f"exported {args.output_dir} to {args.export_dir}.", flush=True)
    return report


_ZERO_MEANS = {"eval_steps": "once per epoch", "max_train_examples": "all"}


def _check_flags(task_config: TaskConfig, args: RunConfig) -> None:
    if not (args.do_train or args.do_eval or args.do_predict):
        raise BertTfError("At least one of --do_train, --do_eval or --do_predict must be set.")
    if not args.output_dir:
        raise BertTfError("--output_dir is required.")
    if task_config.data_dir and not os.path.isdir(task_config.data_dir):
        raise BertTfError(f"--data_dir {task_config.data_dir} is not a folder.")
    for flag in ("max_seq_length", "train_batch_size", "eval_batch_size", "predict_batch_size"):
        if getattr(args, flag) < 1:
            raise BertTfError(f"--{flag} must be positive, got {getattr(args, flag)}.")
    if args.max_seq_length < 3:
        raise BertTfError(f"--max_seq_length must leave room for [CLS] and [SEP], got {args.max_seq_length}.")
    for flag in ("iterations_per_loop", "save_checkpoints_steps", "pad_to_multiple_of"):
        if getattr(args, flag) < 1:
            raise BertTfError(f"--{flag} must be at least 1, got {getattr(args, flag)}.")
    for flag in ("eval_steps", "max_train_examples"):
        if getattr(args, flag) < 0:
            raise BertTfError(f"--{flag} must not be negative (0: {_ZERO_MEANS[flag]}), got {getattr(args, flag)}.")
    if args.do_train and not args.num_train_epochs > 0:
        raise BertTfError(f"--num_train_epochs must be positive, got {args.num_train_epochs}.")
    if args.do_train and not args.learning_rate >= 0:
        raise BertTfError(f"--learning_rate must not be negative, got {args.learning_rate}.")
    if not 0 <= args.warmup_proportion <= 1:
        raise BertTfError(f"--warmup_proportion is a fraction of the training steps, from 0 to 1; got "
                          f"{args.warmup_proportion}.")
    if os.path.exists(args.output_dir) and not os.path.isdir(args.output_dir):
        raise BertTfError(f"--output_dir {args.output_dir} is a file; give a folder.")
    dtype_policy(args.mixed_precision)  # validates the setting early
    if args.export_dir and os.path.exists(args.export_dir):  # before hours of training, not after
        raise BertTfError(f"--export_dir {args.export_dir} already exists; remove it or give a new folder.")
    if args.export_dir and path_within(args.output_dir, args.export_dir):
        raise BertTfError(f"--export_dir {args.export_dir} would hold --output_dir {args.output_dir}; give a folder "
                          "outside the run.")


def _check_against_record(task_config: TaskConfig, args: RunConfig) -> dict[str, Any] | None:
    """Refuses a run that does not belong to the run already in `--output_dir` (its
    `fine_tune.json`): training that would resume a checkpoint trained with other
    settings, or an evaluation with another task or casing than the model learnt; warns
    about an evaluation with other settings. Returns the record of the run that training
    resumes, if any (its data and model are checked once read: `_check_resumed`)."""
    if not args.output_dir or not os.path.isfile(os.path.join(args.output_dir, RUN_FILE)):
        return None
    record = registry.read_run_record(args.output_dir)
    if "task_config" not in record:
        return None
    here = registry.run_record(task_config, args, ())
    if args.do_train:
        if not tf.train.latest_checkpoint(os.path.join(args.output_dir, CHECKPOINTS_DIR)):
            return None
        changes = _changes(record, here, task_config, RunConfig.training_fields)
        if changes:
            raise BertTfError(
                f"--output_dir {args.output_dir} holds the checkpoint of a run with other settings ({changes}), "
                "which this run would resume; repeat that run's settings to resume it, or give a new --output_dir."
            )
        return record
    if record["family"] != here["family"] or record["task"] not in (here["task"], *_evaluates(task_config)):
        raise BertTfError(
            f"--output_dir {args.output_dir} holds a model fine-tuned for --task_name={record['task']} with "
            f"{COMMANDS[record['family']]}, not for {here['task']}; evaluate it as that, or give the --output_dir of "
            f"a {here['task']} run."
        )
    lower_cased = record["training"].get("do_lower_case", args.do_lower_case)
    if lower_cased != args.do_lower_case:
        raise BertTfError(
            f"The model in {args.output_dir} was trained with do_lower_case={lower_cased}; evaluate it with the same "
            f"casing (--{'' if lower_cased else 'no'}do_lower_case)."
        )
    if record["task"] == here["task"]:
        changes = _changes(record, here, task_config, RunConfig.recorded_fields)
        if changes:
            print(f"Warning: evaluating with other settings than the run in {args.output_dir} was trained with "
                  f"({changes}).", file=sys.stderr, flush=True)
    return None


COMMANDS = {"classifier": "run_classifier.py", "ner": "run_ner.py", "squad": "run_squad.py"}


def _evaluates(task_config: TaskConfig) -> tuple[str, ...]:
    return registry.lookup(task_config.task, task_config.family).evaluates


def _changes(record: dict[str, Any], here: dict[str, Any], task_config: TaskConfig, run_fields: Sequence[str]) -> str:
    """The settings that differ between a run's record and this run's, in words ("" if
    none): the task, its config's fields but for where the data is and its
    `evaluation_fields`, and `run_fields` of the run config (`setting_changes`: one a
    record lacks, of an older run, is not compared)."""
    if record["family"] != here["family"]:
        return f"task was {record['task']} of {COMMANDS[record['family']]}, now {here['task']}"
    if record["task"] != here["task"]:
        return f"task was {record['task']}, now {here['task']}"
    skipped = {"task", *task_config.data_fields, *task_config.evaluation_fields}
    ours = {name: value for name, value in here["task_config"].items() if name not in skipped}
    ours.update((name, here["training"][name]) for name in run_fields)
    # Task and run config fields have distinct names.
    return setting_changes({**record["task_config"], **record["training"]}, ours)


def _check_resumed(state: Run, features: Features) -> None:
    """Refuses to resume a checkpoint whose run trained another model config or on other
    rows (other files, vocabulary, casing or length) than this run's."""
    if state.resumes is None:
        return
    output_dir = state.args.output_dir
    saved = os.path.join(output_dir, CONFIG_FILE)
    if os.path.isfile(saved) and BertConfig.from_json_file(saved) != state.config:
        raise BertTfError(f"--output_dir {output_dir} holds the checkpoint of a run of another model config ({saved}) "
                          "which this run would resume; give that run's model, or a new --output_dir.")
    recorded = state.resumes.get("train_data")
    if recorded is not None and recorded != features.fingerprint():
        raise BertTfError(f"--output_dir {output_dir} holds the checkpoint of a run on other training rows (another "
                          "train file, vocabulary or split) which this run would resume; give that run's data, or a "
                          "new --output_dir.")


# === Model, config and vocabulary ===
def _pre_trained(args: RunConfig) -> checkpoints.Checkpoint | None:
    """The weights of --init_checkpoint (any format) with the flags' config overrides, when training."""
    if not (args.do_train and args.init_checkpoint):
        return None
    return checkpoints.read_checkpoint(args.init_checkpoint, args.bert_config_file, **_activation(args))


def _config_and_vocab(
    args: RunConfig, checkpoint: checkpoints.Checkpoint | None
) -> tuple[BertConfig, str]:
    """The encoder config and vocab: from the fine-tuned run (eval/predict only) or the pre-trained model."""
    if not args.do_train:
        saved = os.path.join(args.output_dir, CONFIG_FILE)
        if not os.path.isfile(saved):
            raise BertTfError(
                f"No fine-tuned model in {args.output_dir} ({CONFIG_FILE} is missing); run --do_train first."
            )
        vocab = args.vocab_file or os.path.join(args.output_dir, VOCAB_FILE)
        return BertConfig.from_json_file(saved), vocab
    overrides = _config_overrides(args)
    if checkpoint is not None:
        config = checkpoint.config
    elif args.preset:
        config = BertConfig.from_preset(args.preset, **overrides)
    elif args.bert_config_file:
        config = BertConfig(**overrides)
    else:
        raise BertTfError("Give --init_checkpoint, --bert_config_file or --preset to say which BERT to fine-tune.")
    return config, _vocab_file(args)


def _config_overrides(args: RunConfig) -> dict[str, Any]:
    overrides = BertConfig.from_json_file(args.bert_config_file).to_dict() if args.bert_config_file else {}
    return {**overrides, **_activation(args)}


def _activation(args: RunConfig) -> dict[str, str]:
    return {"hidden_act": args.hidden_act} if args.hidden_act else {}


def _vocab_file(args: RunConfig) -> str:
    if args.vocab_file:
        return args.vocab_file
    if args.init_checkpoint:
        path = args.init_checkpoint
        for folder in (path, os.path.dirname(path)):
            if os.path.isfile(os.path.join(folder, VOCAB_FILE)):
                return os.path.join(folder, VOCAB_FILE)
    raise BertTfError("--vocab_file is required (no vocab.txt beside --init_checkpoint).")


def _check_model_fits(args: RunConfig, config: BertConfig, tokenizer: FullTokenizer, vocab: str) -> None:
    if args.max_seq_length > config.max_position_embeddings:
        raise BertTfError(
            f"--max_seq_length {args.max_seq_length} is above the model's max_position_embeddings "
            f"({config.max_position_embeddings}); use at most {config.max_position_embeddings}."
        )
    config.check_vocabulary(len(tokenizer.vocab), vocab)


def _encoder(state: Run) -> BertEncoder:
    policy = dtype_policy(state.args.mixed_precision)
    if state.checkpoint is not None:
        encoder = checkpoints.build_model(state.checkpoint, heads=False, dtype=policy)
    else:
        encoder = BertEncoder(state.config, dtype=policy)
    return in_precision(encoder, state.args.mixed_precision)


def _load_fine_tuned(state: Run, model: keras.Model) -> None:
    path = fine_tuned_weights(state.args.output_dir, prefer_best=state.args.use_best_checkpoint)
    if path is None:
        raise BertTfError(f"No fine-tuned weights in {state.args.output_dir}; run --do_train first.")
    load_fine_tuned(model, path, "this command's flags",
                    "give the --output_dir of a --do_train run with the same task and config, or train there.")


# === Data ===
def _read(state: Run, split: str) -> list[EvalSet]:
    return state.task.reader.read(state.task_config.data_dir or "", split)


def _labels(state: Run, train: list[EvalSet] | None) -> tuple[str, ...]:
    """The task's labels: fixed by the task, saved by the training run, or read from the train set."""
    fixed = state.task.reader.labels
    if train is None:
        saved = tuple(registry.read_run_record(state.args.output_dir)["labels"])
        if fixed is not None and tuple(fixed) != saved:
            raise BertTfError(
                f"The model in {state.args.output_dir} predicts the labels {', '.join(saved) or '(a score)'}, "
                f"not those of --task={state.task.name} ({', '.join(fixed) or 'a score'})."
            )
        return saved
    return tuple(fixed) if fixed is not None else tuple(state.task.reader.labels_in(train[0].examples))


def _read_json(path: str) -> dict[str, Any]:
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def _featurise(state: Run, eval_set: EvalSet) -> Features:
    return state.task.featuriser(eval_set.examples, state.tokenizer, state.args.max_seq_length, state.labels)


# === Training ===
def _save_run(state: Run, features: Features) -> None:
    """What `--do_eval/--do_predict` without `--do_train` need to rebuild the model, and
    what a resumed run checks (`features`: the training rows)."""
    output_dir = state.args.output_dir
    os.makedirs(output_dir, exist_ok=True)
    state.config.to_json_file(os.path.join(output_dir, CONFIG_FILE))
    if os.path.abspath(state.vocab_file) != os.path.abspath(os.path.join(output_dir, VOCAB_FILE)):
        shutil.copyfile(state.vocab_file, os.path.join(output_dir, VOCAB_FILE))
    record = {**registry.run_record(state.task_config, state.args, state.labels), "train_data": features.fingerprint()}
    write_atomically(os.path.join(output_dir, RUN_FILE), json.dumps(record, indent=2))


def _train(
    state: Run, trainer: FineTuningTrainer, train: EvalSet, dev: list[tuple[EvalSet, Features]]
) -> dict[str, Any]:
    args = state.args
    features = _featurise(state, train)
    _check_resumed(state, features)
    _save_run(state, features)
    print(f"Training on {len(train.examples)} examples ({len(features)} rows) from {train.source}.", flush=True)
    evaluate = _best_keeper(state, trainer, dev) if dev and args.evaluate_during_training else None
    start = time.perf_counter()
    steps = trainer.train(features, evaluate)
    seconds = time.perf_counter() - start
    save_weights(trainer.model, args.output_dir)
    # Rows per second of the steps this call ran (a resumed run ran only the rest), and
    # once traced: without the first loop, which includes building the step.
    ran = steps - trainer.resumed_at
    rows_per_second = sum(rows for rows, _ in trainer.loop_times) / seconds
    later = trainer.loop_times[1:]
    steady = sum(rows for rows, _ in later) / sum(s for _, s in later) if later else rows_per_second
    resumed = f" (resumed at step {trainer.resumed_at}, to step {steps})" if trainer.resumed_at else ""
    print(f"Trained {ran} steps{resumed} in {seconds:.1f} s ({rows_per_second:.1f} rows/s, {steady:.1f} once "
          "traced).", flush=True)
    return {"train_steps": steps, "train_seconds": seconds, "train_rows": len(features),
            "train_rows_per_second": rows_per_second, "steady_rows_per_second": steady}


def _best_keeper(state: Run, trainer: FineTuningTrainer, dev: list[tuple[EvalSet, Features]]):
    """An `evaluate(step)` callback that scores the dev sets and keeps the best weights in `best/`."""
    args = state.args
    best_dir = os.path.join(args.output_dir, BEST_DIR)
    key = f"{dev[0][0].name}_{state.task.metrics.primary}"
    best_file = os.path.join(best_dir, "eval_results.json")
    # A resumed run must beat the best score of before the interruption.
    best = [_read_json(best_file)[key]] if os.path.isfile(best_file) else [-np.inf]
    writer = tf.summary.create_file_writer(os.path.join(args.output_dir, "logs", "eval"))

    def evaluate(step: int) -> None:
        results = {}
        for eval_set, features in dev:
            results.update(_score(state, trainer, eval_set, features, args.eval_batch_size)[0])
        write_scalars(writer, step, results)
        improved = results[key] > best[0]
        print(f"step {step}: " + ", ".join(f"{k} {v:.4f}" for k, v in results.items())
              + (" (best so far)" if improved else ""), flush=True)
        if improved:
            best[0] = results[key]
            save_weights(trainer.model, best_dir)
            write_results(best_dir, {**results, "step": step})

    return evaluate


# === Evaluation and prediction ===
def _score(
    state: Run, trainer: FineTuningTrainer, eval_set: EvalSet, features: Features, batch_size: int
) -> tuple[dict[str, float], list[Any]]:
    """(metrics named `<set>_<metric>` (none for unlabelled sets), predictions) of one set."""
    outputs = trainer.predict(features, batch_size)
    predictions = state.task.head.decode(eval_set.examples, features, outputs, state.labels)
    if not state.task.has_labels(eval_set.examples):
        return {}, predictions
    scores = state.task.metrics(eval_set.examples, predictions)
    return {f"{eval_set.name}_{name}": value for name, value in scores.items()}, predictions


def _score_sets(
    state: Run, trainer: FineTuningTrainer, sets: list[tuple[EvalSet, Features]], batch_size: int, results_name: str
) -> dict[str, float]:
    results: dict[str, float] = {}
    for eval_set, features in sets:
        start = time.perf_counter()
        scores, predictions = _score(state, trainer, eval_set, features, batch_size)
        seconds = time.perf_counter() - start
        results.update(scores)
        paths = state.task.writer(state.args.output_dir, eval_set, predictions, state.labels)
        print(f"***** {eval_set.name}: {len(eval_set.examples)} examples in {seconds:.1f} s *****", flush=True)
        for name, value in scores.items():
            print(f"  {name} = {value:.4f}", flush=True)
        print(f"  wrote {', '.join(paths)}", flush=True)
    if results:
        write_results(state.args.output_dir, results, results_name)
    return results


def module_main(argv: Sequence[str] | None = None) -> int:
    """`python -m fine_tune.cli FAMILY FLAGS`: the command of the family named first."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] not in FAMILIES:
        print(f"error: python -m fine_tune.cli serves three commands; name one first ({', '.join(FAMILIES)}), "
              "then its flags, e.g. python -m fine_tune.cli classifier --help.", file=sys.stderr)
        return 1
    return main(argv[0], argv[1:])


if __name__ == "__main__":
    sys.exit(module_main())
