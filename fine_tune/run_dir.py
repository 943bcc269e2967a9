"""A finished fine-tuning run, read back from its `--output_dir`.

A run dir of `run_classifier.py` / `run_ner.py` holds `bert_config.json`, `vocab.txt`,
`fine_tune.json` (task, labels, do_lower_case, max_seq_length) and `model.weights.h5`
(and `best/model.weights.h5` when the best dev checkpoint was kept, which is preferred,
as `--use_best_checkpoint`). `load_run` checks all of them before building anything.
"""

from __future__ import annotations

import dataclasses
import json
import os

import keras

from bert_tf.config import BertConfig
from bert_tf.encoder import BertEncoder
from bert_tf.errors import BertTfError
from fine_tune import registry
from fine_tune.cli import CONFIG_FILE, RUN_FILE, VOCAB_FILE
from fine_tune.heads import ClassificationHead, RegressionHead, TokenClassificationHead
from fine_tune.trainer import WEIGHTS_NAME, fine_tuned_weights

# The task families whose models `load_run` rebuilds, with their head for a label set.
HEADS = {
    "classifier": lambda labels: ClassificationHead() if labels else RegressionHead(),
    "ner": lambda labels: TokenClassificationHead(),
}


@dataclasses.dataclass(frozen=True)
class FineTunedRun:
    """What a run dir holds: its task (name and family), labels (empty: regression),
    tokenization settings, encoder config, and the Keras task model with its weights."""

    run_dir: str
    task: str
    family: str
    labels: tuple[str, ...]
    do_lower_case: bool
    max_seq_length: int
    vocab_file: str
    config: BertConfig
    model: keras.Model

    @property
    def is_regression(self) -> bool:
        return self.family == "classifier" and not self.labels


def _family(task: str, run_file: str) -> str:
    for family in ("classifier", "ner", "squad"):
        if any(entry.name == task for entry in registry.entries(family)):
            return family
    raise BertTfError(f"{run_file} names the task {task!r}, which this version does not know.")


def _run_settings(run_dir: str) -> dict:
    run_file = os.path.join(run_dir, RUN_FILE)
    try:
        with open(run_file, encoding="utf-8") as handle:
            settings = json.load(handle)
        missing = [key for key in ("task", "labels", "do_lower_case", "max_seq_length") if key not in settings]
    except (OSError, ValueError, TypeError) as error:
        raise BertTfError(f"{run_file} cannot be read as a fine-tuning run's settings ({error}).") from None
    if missing:
        raise BertTfError(f"{run_file} lacks {', '.join(missing)}; it was not written by a fine-tuning run.")
    return settings


def load_run(run_dir: str, families: tuple[str, ...] = tuple(HEADS)) -> FineTunedRun:
    """The fine-tuned run in `run_dir`, its model built and loaded, or a `BertTfError` naming what is wrong.

    `families` are the task families the caller can use; a run of another one is refused.
    """
    if not os.path.isdir(run_dir):
        raise BertTfError(f"--model_dir {run_dir} is not a folder; give the --output_dir of a fine-tuning run.")
    needed = [RUN_FILE, CONFIG_FILE, VOCAB_FILE]
    missing = [name for name in needed if not os.path.isfile(os.path.join(run_dir, name))]
    weights = fine_tuned_weights(run_dir, prefer_best=True)
    if weights is None:
        missing.append(WEIGHTS_NAME)
    if missing:
        raise BertTfError(
            f"--model_dir {run_dir} is not a finished fine-tuning run ({', '.join(missing)} missing); "
            "give the --output_dir of a run with --do_train."
        )
    settings = _run_settings(run_dir)
    task, labels = str(settings["task"]), tuple(settings["labels"])
    family = _family(task, os.path.join(run_dir, RUN_FILE))
    if family not in families:
        raise BertTfError(
            f"--model_dir {run_dir} holds a {family} model (task {task}); this needs one of: {', '.join(families)}."
        )
    config = BertConfig.from_json_file(os.path.join(run_dir, CONFIG_FILE))
    model = HEADS[family](labels).build(BertEncoder(config), max(len(labels), 1), 0.0)
    try:
        model.load_weights(weights)
    except (ValueError, OSError) as error:
        raise BertTfError(f"The weights {weights} do not fit the model of {run_dir} ({error}).") from None
    return FineTunedRun(
        run_dir, task, family, labels, bool(settings["do_lower_case"]), int(settings["max_seq_length"]),
        os.path.join(run_dir, VOCAB_FILE), config, model,
    )
