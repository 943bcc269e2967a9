"""The command line shared by `run_classifier.py` and `run_ner.py` (and any later task family).

The original flags keep their names and defaults (`--task_name` is accepted for
`--task`; booleans take `--flag`, `--flag=true|false` and absl's `--noflag`), plus:
`--distribution_strategy`, `--mixed_precision`, `--padding`, `--preset`, `--hidden_act`,
`--evaluate_during_training`, `--use_best_checkpoint`, `--max_train_examples`, and the
task-specific ones (`--xnli_language`, the `tsv` column flags, NER's `--label_scheme`
and `--document_context`).

A run writes to `--output_dir`: `checkpoints/` (resumable), `model.weights.h5`,
`best/` (best dev score), `bert_config.json`, `vocab.txt` and `fine_tune.json` (so that
`--do_predict` alone needs nothing else), `logs/` (TensorBoard), `eval_results.txt`
and the task's prediction files.
"""

from __future__ import annotations

import argparse
import dataclasses
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

from bert_tf import checkpoints
from bert_tf.config import BertConfig
from bert_tf.encoder import BertEncoder
from bert_tf.errors import BertTfError
from bert_tf.optimization import LR_DECAYS
from bert_tf.tokenization import FullTokenizer
from bert_tf.training.distribution import STRATEGIES, create_strategy, is_chief
from bert_tf.training.runloop import dtype_policy, write_results, write_scalars
from fine_tune import batching, registry
from fine_tune.task import EvalSet, Features, Task
from fine_tune.trainer import BEST_DIR, FineTuningTrainer, TrainingConfig, fine_tuned_weights, save_weights

RUN_FILE = "fine_tune.json"
CONFIG_FILE = "bert_config.json"
VOCAB_FILE = "vocab.txt"


# === Flags ===
def _bool(text: str) -> bool:
    value = text.strip().lower()
    if value in ("true", "1", "yes", "t", "y"):
        return True
    if value in ("false", "0", "no", "f", "n"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def add_bool(parser: argparse.ArgumentParser, name: str, default: bool, help: str) -> None:
    """`--name`, `--name=true|false` and `--noname`, as absl's boolean flags."""
    parser.add_argument(f"--{name}", type=_bool, nargs="?", const=True, default=default, help=help)
    parser.add_argument(f"--no{name}", dest=name, action="store_false", help=argparse.SUPPRESS)


def build_parser(family: str, description: str) -> argparse.ArgumentParser:
    tasks = "; ".join(f"{e.name}: {e.description}" for e in registry.entries(family))
    parser = argparse.ArgumentParser(description=description)
    add = parser.add_argument
    add("--task", "--task_name", dest="task", help=f"The task. {tasks}.")
    add("--data_dir", help="The folder of the task's files.")
    add("--output_dir", help="Where checkpoints, the fine-tuned model, results and predictions go.")
    add("--init_checkpoint", help="Pre-trained weights: a Google TF1 checkpoint, a HuggingFace folder or ours.")
    add("--bert_config_file", help="bert_config.json; default: the one beside --init_checkpoint.")
    add("--preset", help="A config by name (tiny ... large) when there is neither checkpoint nor config file.")
    add("--vocab_file", help="vocab.txt; default: the one beside --init_checkpoint (or in --output_dir).")
    add("--hidden_act", help="Override the config's activation: gelu (tanh form, original) or gelu_exact (HF).")
    add_bool(parser, "do_lower_case", True, "Lower-case the input (uncased models).")
    add("--max_seq_length", type=int, default=128, help="Longest input in WordPieces; longer ones are truncated.")
    add_bool(parser, "do_train", False, "Fine-tune on the train set.")
    add_bool(parser, "do_eval", False, "Score the dev set (and keep the best checkpoint while training).")
    add_bool(parser, "do_predict", False, "Predict the test set and write the prediction files.")
    add("--train_batch_size", type=int, default=32)
    add("--eval_batch_size", type=int, default=8)
    add("--predict_batch_size", type=int, default=8)
    add("--learning_rate", type=float, default=5e-5)
    add("--num_train_epochs", type=float, default=3.0)
    add("--warmup_proportion", type=float, default=0.1, help="Fraction of the steps with linear warm-up.")
    add(
        "--lr_decay",
        default="original",
        choices=LR_DECAYS,
        help="original: linear decay counted from step 0, as the original and Model Garden (0.9x the peak when a "
        "10%% warm-up ends); from_peak: from the peak at the end of warm-up to 0, as HF's "
        "get_linear_schedule_with_warmup.",
    )
    add("--optimizer", default="adamw", help="adamw (the original AdamWeightDecay) or lamb.")
    add_bool(parser, "adam_bias_correction", False, "adamw with Adam's bias correction (as HF/torch AdamW; the original has none).")
    add("--weight_decay_rate", type=float, default=0.01, help="Decoupled weight decay (not on LayerNorm, bias).")
    add("--save_checkpoints_steps", type=int, default=1000)
    add("--iterations_per_loop", type=int, default=100, help="Steps per host call; logs come once per loop.")
    add("--keep_checkpoint_max", type=int, default=3)
    add("--eval_steps", type=int, default=0, help="Also evaluate every N steps while training (0: per epoch).")
    add_bool(parser, "evaluate_during_training", True, "With --do_eval, score the dev set after every epoch.")
    add_bool(parser, "use_best_checkpoint", True, "Evaluate and predict with the best dev checkpoint.")
    add("--max_train_examples", type=int, default=0, help="Train on the first N examples only (0: all).")
    add("--distribution_strategy", default="one_device", help=f"One of {', '.join(STRATEGIES)}.")
    add_bool(parser, "use_tpu", False, "The original's TPU switch: --distribution_strategy=tpu.")
    add("--tpu_name", default=None)
    add("--tpu_zone", default=None)
    add("--gcp_project", default=None)
    add("--mixed_precision", default="none", help="none, bf16 or fp16 (with dynamic loss scaling).")
    add_bool(parser, "jit_compile", False, "Compile the training loop with XLA.")
    add(
        "--padding",
        default="dynamic",
        help=f"One of {', '.join(batching.PADDING_MODES)} (see fine_tune.batching); bucket is faster still, but its "
        "batches of similar lengths can hurt a task whose labels go with length.",
    )
    add("--pad_to_multiple_of", type=int, default=8)
    add("--seed", type=int, default=12345)
    add("--train_file", help="Training file, relative to --data_dir (tsv and NER tasks).")
    add("--dev_file", help="Dev file, relative to --data_dir (tsv and NER tasks).")
    add("--test_file", help="Test file, relative to --data_dir (tsv and NER tasks).")
    return parser


def classifier_flags(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--xnli_language", default="zh", help="XNLI: the language to train and evaluate on (original: zh).")
    add("--text_a_column", default="0", help="tsv: column (index or header name) of the first text.")
    add("--text_b_column", default=None, help="tsv: column of the second text, if any.")
    add("--label_column", default="1", help="tsv: column of the label.")
    add("--guid_column", default=None, help="tsv: column of the example id written with predictions.")
    add_bool(parser, "has_header", True, "tsv: the files start with a header row.")
    add("--labels", default=None, help="tsv: the labels, comma-separated (default: those of the train file).")
    add_bool(parser, "regression", False, "tsv: the label is a number (a regression head, STS-B-like).")
    parser.set_defaults(train_file="train.tsv", dev_file="dev.tsv", test_file="test.tsv")


def ner_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--label_scheme", default="iob2", help="iob2: train on IOB2 tags; keep: as in the files.")
    add_bool(parser, "document_context", False, "Feed each sentence with its document around it (paper, 5.3).")


def squad_flags(parser: argparse.ArgumentParser) -> None:
    # Imported here: fine_tune.squad.task builds on this module.
    from fine_tune.squad.task import squad_flags as add_squad_flags

    add_squad_flags(parser)


FAMILIES = {
    "classifier": ("Fine-tunes BERT on GLUE, XNLI or your own TSV (run_classifier.py).", None, classifier_flags),
    "ner": ("Fine-tunes BERT for named-entity recognition (run_ner.py).", "conll2003", ner_flags),
    "squad": ("Fine-tunes BERT on SQuAD v1.1 / v2.0 (or any SQuAD-format data) (run_squad.py).", "squad", squad_flags),
}


def parse_args(family: str, argv: Sequence[str] | None = None) -> argparse.Namespace:
    description, default_task, extra = FAMILIES[family]
    parser = build_parser(family, description)
    extra(parser)
    parser.set_defaults(task=default_task)
    args = parser.parse_args(argv)
    args.family = family
    if args.use_tpu:
        args.distribution_strategy = "tpu"
    return args


# === The run ===
@dataclasses.dataclass
class Run:
    """What a run needs besides the flags: the task, tokenizer, config, labels, strategy and
    the pre-trained weights (read once: the config comes from beside them)."""

    args: argparse.Namespace
    task: Task
    config: BertConfig
    tokenizer: FullTokenizer
    vocab_file: str
    strategy: tf.distribute.Strategy
    training: TrainingConfig
    checkpoint: checkpoints.Checkpoint | None = None
    labels: tuple[str, ...] = ()


def main(family: str, argv: Sequence[str] | None = None) -> int:
    """Entry point: runs, printing a `BertTfError` as one line on stderr (exit status 1)."""
    try:
        run(parse_args(family, argv))
    except BertTfError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Trains, evaluates and predicts as the flags say; returns the scores and timings."""
    task = registry.get_task(args.task, args.family, args)
    _check_flags(args)
    # First: the multi-worker and TPU strategies reconfigure the TensorFlow runtime.
    strategy = create_strategy(args.distribution_strategy, args.tpu_name, args.tpu_zone, args.gcp_project)
    if not is_chief(strategy):
        # Other workers of a multi-worker run write their (collective) checkpoints and
        # logs aside; only the chief writes to --output_dir.
        args.output_dir = tempfile.mkdtemp(prefix="bert_tf_worker_")
    keras.utils.set_random_seed(args.seed)
    checkpoint = _pre_trained(args)
    config, vocab_file = _config_and_vocab(args, checkpoint)
    tokenizer = FullTokenizer(vocab_file, do_lower_case=args.do_lower_case)
    _check_model_fits(args, config, tokenizer, vocab_file)
    state = Run(args, task, config, tokenizer, vocab_file, strategy, _training_config(args), checkpoint)
    splits = {split: _read(state, split) for split in ("train", "dev", "test") if _wants(args, split)}
    state.labels = _labels(state, splits.get("train"))
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
    return report


def _check_flags(args: argparse.Namespace) -> None:
    if not (args.do_train or args.do_eval or args.do_predict):
        raise BertTfError("At least one of --do_train, --do_eval or --do_predict must be set.")
    for flag in ("data_dir", "output_dir"):
        if not getattr(args, flag):
            raise BertTfError(f"--{flag} is required.")
    if not os.path.isdir(args.data_dir):
        raise BertTfError(f"--data_dir {args.data_dir} is not a folder.")
    for flag in ("max_seq_length", "train_batch_size", "eval_batch_size", "predict_batch_size"):
        if getattr(args, flag) < 1:
            raise BertTfError(f"--{flag} must be positive, got {getattr(args, flag)}.")
    if args.max_seq_length < 3:
        raise BertTfError(f"--max_seq_length must leave room for [CLS] and [SEP], got {args.max_seq_length}.")


def _training_config(args: argparse.Namespace) -> TrainingConfig:
    names = {field.name for field in dataclasses.fields(TrainingConfig)}
    dtype_policy(args.mixed_precision)  # validates the flag early
    return TrainingConfig(**{name: getattr(args, name) for name in names})


def _wants(args: argparse.Namespace, split: str) -> bool:
    return {"train": args.do_train, "dev": args.do_eval, "test": args.do_predict}[split]


# === Model, config and vocabulary ===
def _pre_trained(args: argparse.Namespace) -> checkpoints.Checkpoint | None:
    """The weights of --init_checkpoint (any format) with the flags' config overrides, when training."""
    if not (args.do_train and args.init_checkpoint):
        return None
    return checkpoints.read_checkpoint(args.init_checkpoint, **_config_overrides(args))


def _config_and_vocab(
    args: argparse.Namespace, checkpoint: checkpoints.Checkpoint | None
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


def _config_overrides(args: argparse.Namespace) -> dict[str, Any]:
    overrides = BertConfig.from_json_file(args.bert_config_file).to_dict() if args.bert_config_file else {}
    if args.hidden_act:
        overrides["hidden_act"] = args.hidden_act
    return overrides


def _vocab_file(args: argparse.Namespace) -> str:
    if args.vocab_file:
        return args.vocab_file
    if args.init_checkpoint:
        path = args.init_checkpoint
        for folder in (path, os.path.dirname(path)):
            if os.path.isfile(os.path.join(folder, VOCAB_FILE)):
                return os.path.join(folder, VOCAB_FILE)
    raise BertTfError("--vocab_file is required (no vocab.txt beside --init_checkpoint).")


def _check_model_fits(args: argparse.Namespace, config: BertConfig, tokenizer: FullTokenizer, vocab: str) -> None:
    if args.max_seq_length > config.max_position_embeddings:
        raise BertTfError(
            f"--max_seq_length {args.max_seq_length} is above the model's max_position_embeddings "
            f"({config.max_position_embeddings}); use at most {config.max_position_embeddings}."
        )
    if len(tokenizer.vocab) > config.vocab_size:
        raise BertTfError(
            f"The vocabulary {vocab} has {len(tokenizer.vocab)} tokens but the model only {config.vocab_size}; "
            "use the vocab.txt that came with the checkpoint."
        )


def _encoder(state: Run) -> BertEncoder:
    policy = dtype_policy(state.args.mixed_precision)
    if state.checkpoint is not None:
        return checkpoints.build_model(state.checkpoint, heads=False, dtype=policy)
    return BertEncoder(state.config, dtype=policy)


def _load_fine_tuned(state: Run, model: keras.Model) -> None:
    path = fine_tuned_weights(state.args.output_dir, prefer_best=state.args.use_best_checkpoint)
    if path is None:
        raise BertTfError(f"No fine-tuned weights in {state.args.output_dir}; run --do_train first.")
    model.load_weights(path)


# === Data ===
def _read(state: Run, split: str) -> list[EvalSet]:
    sets = state.task.reader.read(state.args.data_dir, split)
    if split == "train" and state.args.max_train_examples:
        sets[0].examples = sets[0].examples[: state.args.max_train_examples]
    return sets


def _labels(state: Run, train: list[EvalSet] | None) -> tuple[str, ...]:
    """The task's labels: fixed by the task, saved by the training run, or read from the train set."""
    fixed = state.task.reader.labels
    saved_path = os.path.join(state.args.output_dir, RUN_FILE)
    if train is None:
        if not os.path.isfile(saved_path):
            raise BertTfError(
                f"No fine-tuned model in {state.args.output_dir} ({RUN_FILE} is missing); run --do_train first."
            )
        saved = tuple(_read_json(saved_path)["labels"])
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
def _save_run(state: Run) -> None:
    """What `--do_eval/--do_predict` without `--do_train` need to rebuild the model."""
    output_dir = state.args.output_dir
    os.makedirs(output_dir, exist_ok=True)
    state.config.to_json_file(os.path.join(output_dir, CONFIG_FILE))
    if os.path.abspath(state.vocab_file) != os.path.abspath(os.path.join(output_dir, VOCAB_FILE)):
        shutil.copyfile(state.vocab_file, os.path.join(output_dir, VOCAB_FILE))
    run = {"task": state.task.name, "labels": list(state.labels), "do_lower_case": state.args.do_lower_case,
           "max_seq_length": state.args.max_seq_length}
    with open(os.path.join(output_dir, RUN_FILE), "w", encoding="utf-8") as handle:
        json.dump(run, handle, indent=2)


def _train(
    state: Run, trainer: FineTuningTrainer, train: EvalSet, dev: list[tuple[EvalSet, Features]]
) -> dict[str, Any]:
    args = state.args
    _save_run(state)
    features = _featurise(state, train)
    print(f"Training on {len(train.examples)} examples ({len(features)} rows) from {train.source}.", flush=True)
    evaluate = _best_keeper(state, trainer, dev) if dev and args.evaluate_during_training else None
    start = time.perf_counter()
    steps = trainer.train(features, evaluate)
    seconds = time.perf_counter() - start
    save_weights(trainer.model, args.output_dir)
    # Rows per second of a run from scratch (a resumed run counts the epochs it did not redo),
    # and once traced: without the first loop, which includes building the step.
    rows_per_second = len(features) * args.num_train_epochs / seconds
    later = trainer.loop_times[1:]
    steady = sum(rows for rows, _ in later) / sum(s for _, s in later) if later else rows_per_second
    print(f"Trained {steps} steps in {seconds:.1f} s ({rows_per_second:.1f} rows/s, {steady:.1f} once traced).",
          flush=True)
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
