"""A finished fine-tuning run read back from its output dir: the task, its tokenizer and the Keras task model.

`run_classifier.py`, `run_ner.py` and `run_squad.py` (`fine_tune.cli`) leave in `--output_dir`:

- `bert_config.json` and `vocab.txt`: the encoder and its vocabulary;
- `fine_tune.json`: `{"task", "labels", "do_lower_case", "max_seq_length"}`;
- `model.weights.h5` (the end of training) and, when the dev set was scored while
  training, `best/model.weights.h5` (the best dev score; preferred, as
  `--use_best_checkpoint` does).

`load_run` rebuilds the task exactly as the run script does for `--do_predict`: the
task from the registry with the script's default flags, the run's `do_lower_case`,
`max_seq_length` and labels, and any task flags given as `settings` (e.g. SQuAD's
`version_2_with_negative` or `doc_stride`, which `fine_tune.json` does not record).
Only `read_run_info` reads `fine_tune.json`: a richer run record changes that one
function.

Example:
>>> load_run("/nonexistent")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
bert_tf.errors.BertTfError: /nonexistent is not a folder; give the --output_dir of a run_classifier.py, run_ner.py or run_squad.py run.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from typing import Any

import keras

from bert_tf.config import BertConfig
from bert_tf.encoder import BertEncoder
from bert_tf.errors import BertTfError
from bert_tf.tokenization import FullTokenizer
from fine_tune import cli, registry
from fine_tune.task import Task
from fine_tune.trainer import BEST_DIR, WEIGHTS_NAME, fine_tuned_weights

RUN_SCRIPTS = "run_classifier.py, run_ner.py or run_squad.py"


@dataclasses.dataclass(frozen=True)
class RunInfo:
    """What a run recorded about its task (`fine_tune.json`).

    Args:
        task: the registered task name (e.g. "mrpc", "conll2003", "squad").
        labels: the label names, in the order of the model's outputs (empty: a
            regression or SQuAD model).
        do_lower_case: whether the tokenizer lower-cases.
        max_seq_length: the longest model input, in WordPieces.
        settings: task flags beyond these (by their flag name without `--`).
    """

    task: str
    labels: tuple[str, ...]
    do_lower_case: bool
    max_seq_length: int
    settings: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class LoadedRun:
    """A run's task model, ready to predict.

    Args:
        run_dir: the output dir it came from.
        info: its `RunInfo` (with the `settings` it was loaded with).
        family: the command it belongs to: "classifier", "ner" or "squad".
        task: the `Task` (featuriser, head, ...) built as the run script builds it.
        args: the flags the task was built from (the script's defaults, the run's values).
        config: the encoder config.
        tokenizer: the run's tokenizer.
        model: the Keras task model with the fine-tuned weights.
        weights: the weights file that was loaded.
    """

    run_dir: str
    info: RunInfo
    family: str
    task: Task
    args: argparse.Namespace
    config: BertConfig
    tokenizer: FullTokenizer
    model: keras.Model
    weights: str


# === Reading the run dir ===
def _not_a_run(run_dir: str, what: str) -> BertTfError:
    return BertTfError(f"{run_dir} is not a finished fine-tuning run ({what}); give the --output_dir of a "
                       f"{RUN_SCRIPTS} run that trained (--do_train).")


def read_run_info(run_dir: str) -> RunInfo:
    """The task record of a run (`fine_tune.json`); a `BertTfError` when it is missing or malformed."""
    path = os.path.join(run_dir, cli.RUN_FILE)
    if not os.path.isfile(path):
        raise _not_a_run(run_dir, f"{cli.RUN_FILE} is missing")
    try:
        with open(path, encoding="utf-8") as handle:
            record = json.load(handle)
        info = RunInfo(
            task=str(record["task"]),
            labels=tuple(str(label) for label in record["labels"]),
            do_lower_case=bool(record["do_lower_case"]),
            max_seq_length=int(record["max_seq_length"]),
            settings={k: v for k, v in record.items() if k not in ("task", "labels", "do_lower_case",
                                                                    "max_seq_length")},
        )
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, ValueError, AttributeError) as error:
        raise BertTfError(f"{path} is damaged ({type(error).__name__}: {error}); rerun the training that wrote it.") \
            from None
    return info


def family_of(task: str) -> str:
    """The command ("classifier", "ner", "squad") whose registry holds `task`.

    >>> family_of("mrpc"), family_of("conll2003"), family_of("squad")
    ('classifier', 'ner', 'squad')
    """
    for family in cli.FAMILIES:
        if any(entry.name == task for entry in registry.entries(family)):
            return family
    raise BertTfError(f"Unknown task {task!r} in a run's {cli.RUN_FILE}; this version knows the tasks of "
                      f"{RUN_SCRIPTS} only.")


def task_flags(family: str, info: RunInfo) -> argparse.Namespace:
    """The flags the run script would have for `--do_predict` on this run.

    The family's defaults, then the run's recorded values, then `info.settings`;
    a setting that is no flag of the family is refused.
    """
    args = cli.parse_args(family, [f"--task={info.task}"])
    known = vars(args)
    for name, value in info.settings.items():
        if name not in known:
            flags = sorted(key for key in known if key not in ("task", "family"))
            raise BertTfError(f"{name!r} is not a setting of {info.task} models; the run script's flags are "
                              f"{', '.join(flags)}.")
        setattr(args, name, value)
    args.do_lower_case = info.do_lower_case
    args.max_seq_length = info.max_seq_length
    if family == "classifier":  # a run with no labels trained a regression head (tsv --regression)
        args.regression = not info.labels
    return args


def _file(run_dir: str, name: str) -> str:
    path = os.path.join(run_dir, name)
    if not os.path.isfile(path):
        raise _not_a_run(run_dir, f"{name} is missing")
    return path


# === Rebuilding the model ===
def load_run(run_dir: str | os.PathLike, prefer_best: bool = True, **settings: Any) -> LoadedRun:
    """The task model of a finished run, with its fine-tuned weights.

    Args:
        run_dir: the `--output_dir` of a `run_classifier.py`, `run_ner.py` or
            `run_squad.py` run that trained.
        prefer_best: load `best/` when the run kept it (as `--use_best_checkpoint`).
        **settings: task flags the run did not record, by name (e.g.
            `version_2_with_negative=True`, `null_score_diff_threshold=-1.5`).

    Raises `BertTfError` for a folder that is not a finished run (a missing or
    damaged file, weights that do not fit the config).
    """
    run_dir = os.fspath(run_dir)
    if not os.path.isdir(run_dir):
        raise BertTfError(f"{run_dir} is not a folder; give the --output_dir of a {RUN_SCRIPTS} run.")
    info = read_run_info(run_dir)
    info = dataclasses.replace(info, settings={**info.settings, **settings})
    family = family_of(info.task)
    config = BertConfig.from_json_file(_file(run_dir, cli.CONFIG_FILE))
    tokenizer = FullTokenizer(_file(run_dir, cli.VOCAB_FILE), do_lower_case=info.do_lower_case)
    args = task_flags(family, info)
    task = registry.get_task(info.task, family, args)
    weights = fine_tuned_weights(run_dir, prefer_best=prefer_best)
    if weights is None:
        raise _not_a_run(run_dir, f"neither {WEIGHTS_NAME} nor {BEST_DIR}/{WEIGHTS_NAME} is there")
    model = task.head.build(BertEncoder(config), max(len(info.labels), 1), config.hidden_dropout_prob)
    try:
        model.load_weights(weights)
    except (ValueError, OSError) as error:
        raise BertTfError(f"{weights} does not fit the model of {cli.CONFIG_FILE} and {cli.RUN_FILE} beside it "
                          f"({str(error).splitlines()[0]}); the run dir's files come from different runs.") from None
    return LoadedRun(run_dir, info, family, task, args, config, tokenizer, model, weights)
