"""Predictions through a `bert-export` SavedModel, with the API of `fine_tune.predictor`.

`load_task_model(export_dir)` returns one of these when given an export instead of a run
dir: the same `predict` / `answer` / `predict_rows` and the same results
(`Classification`, `Score`, `Tagging`, `Answer`), computed by the SavedModel's
`serving_default` signature (tokenization, windows and answer selection in the graph,
the settings frozen at export). Inputs are checked and turned into the task's examples
by the predictor's own classes, so an input the run dir refuses is refused here in the
same words.

What an export cannot do: `embed` (it holds the task's outputs, not the encoder's; use
`bert-export --hub_dir` or the run dir) and settings (they were fixed at export).
A classifier's note on truncated inputs comes from the signature's `truncated` output.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from bert_tf.errors import BertTfError
from bert_tf.progress import progress_bar
from fine_tune.export import EXPORT_INFO, LABELS_FILE, SIGNATURE, WORDS_SIGNATURE
from fine_tune.heads import Prediction
from fine_tune.predictor import (PROGRESS_DELAY_SECONDS, Answer, Classifier, QuestionAnswerer, Regressor,
                                 Tagger, TaskModel)

SAVED_MODEL = "saved_model.pb"
INFO_KEYS = ("task", "family", "labels", "inputs", "max_seq_length")  # what predicting through an export reads


def is_export(path: str | os.PathLike) -> bool:
    """Whether `path` is (or claims to be) a bert-export folder rather than a run dir."""
    return os.path.isfile(os.path.join(path, SAVED_MODEL)) or os.path.isfile(os.path.join(path, "assets", EXPORT_INFO))


def load_export(export_dir: str | os.PathLike, batch_size: int) -> "ExportedModel":
    """The model of a bert-export folder; a `BertTfError` for one that is incomplete or damaged."""
    export_dir = os.fspath(export_dir)
    info_path = os.path.join(export_dir, "assets", EXPORT_INFO)
    try:
        with open(info_path, encoding="utf-8") as handle:
            info = json.load(handle)
        missing = [key for key in INFO_KEYS if key not in info]
        if missing:
            raise KeyError(f"{EXPORT_INFO} lacks {', '.join(missing)}")
        family, labels = info["family"], tuple(info["labels"])
        if labels and _listed_labels(export_dir) != labels:  # the signature names label ids from labels.txt
            raise ValueError(f"assets/{LABELS_FILE} does not list the {len(labels)} labels of {EXPORT_INFO}")
        kinds = {"squad": ExportedAnswerer, "ner": ExportedTagger}
        kind = kinds.get(family) or (ExportedClassifier if labels else ExportedRegressor)
        serve = tf.saved_model.load(export_dir).signatures[kind.signature]
    except Exception as error:  # noqa: BLE001 - TF and protobuf raise many kinds for one damaged file
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise BertTfError(f"{export_dir} is not a complete bert-export SavedModel ({type(error).__name__}: "
                          f"{reason[:200]}); export the run again with bert-export --overwrite.") from None
    return kind(export_dir, info, serve, batch_size)


def _listed_labels(export_dir: str) -> tuple[str, ...]:
    with open(os.path.join(export_dir, "assets", LABELS_FILE), encoding="utf-8") as handle:
        return tuple(line.rstrip("\n") for line in handle)


class ExportedModel(TaskModel):
    """The part every exported task shares: batches of requests to the signature, in input order.

    Subclasses (one per task, each after the predictor's class of that task, whose
    `example` and `result` they reuse) say what the signature is given (`request`) and
    what of its outputs is the prediction of one input (`prediction`).
    """

    signature = SIGNATURE  # the one it calls

    def __init__(self, export_dir: str, info: dict[str, Any], serve: Any, batch_size: int):
        self.export_dir = export_dir
        self.info = info
        self.serve = serve
        self.labels = tuple(info["labels"])
        self.max_seq_length = info["max_seq_length"]
        self.batch_size = batch_size

    def __repr__(self) -> str:
        return f"{type(self).__name__}(task={self.task_name!r}, export_dir={self.export_dir!r})"

    @property
    def task_name(self) -> str:
        return self.info["task"]

    @property
    def model_dir(self) -> str:
        return self.export_dir

    def predict_rows(self, rows: Sequence[Any], sources: Sequence[str] | None = None,
                     progress: bool = True) -> tuple[list[Any], int]:
        inputs = self.examples_of(rows, sources)
        bar = progress_bar(len(inputs), "inputs", enabled=progress, delay=PROGRESS_DELAY_SECONDS)
        results: list[Any] = []
        truncated = 0
        for start in range(0, len(inputs), self.batch_size):
            chunk = inputs[start : start + self.batch_size]
            request = self.request([example for example, _ in chunk])
            outputs = {name: value.numpy() for name, value in self.serve(**request).items()}
            results += [self.result(example, context, self.prediction(outputs, row))
                        for row, (example, context) in enumerate(chunk)]
            truncated += int(outputs["truncated"].sum()) if "truncated" in outputs else 0  # taggers and SQuAD: windows
            bar.update(len(chunk))
        bar.close()
        return results, truncated

    def request(self, examples: Sequence[Any]) -> dict[str, tf.Tensor]:
        raise NotImplementedError

    def prediction(self, outputs: dict[str, np.ndarray], row: int) -> Any:
        raise NotImplementedError

    def embed(self, texts: Any, pooling: str = "cls", layers: Sequence[int] = (-1,)) -> Any:
        raise BertTfError(f"{self.export_dir} is a bert-export SavedModel, which holds the task's outputs, not the "
                          "encoder's features; load its run dir to embed() (or use bert-export --hub_dir's encoder).")


def _text(value: bytes) -> str:
    return value.decode("utf-8")


def _strings(texts: list[str]) -> tf.Tensor:
    return tf.constant(texts, tf.string)


# === The tasks ===
class ExportedClassifier(ExportedModel, Classifier):
    @property
    def takes_pairs(self) -> bool:
        return "text_b" in self.info["inputs"]

    def request(self, examples):
        texts = {"text_a": _strings([example.text_a for example in examples])}
        if self.takes_pairs:
            texts["text_b"] = _strings([example.text_b for example in examples])
        return texts

    def prediction(self, outputs, row):
        return Prediction(_text(outputs["label"][row]), outputs["probabilities"][row].astype(np.float64))


class ExportedRegressor(ExportedClassifier, Regressor):
    def prediction(self, outputs, row):
        return float(outputs["score"][row])


class ExportedTagger(ExportedModel, Tagger):
    """It gives the export the predictor's words (`split_words` of a text, or the words
    given), through its `tag_words` signature."""

    signature = WORDS_SIGNATURE

    def request(self, examples):
        words = np.full((len(examples), max(len(example.words) for example in examples)), "", dtype=object)
        for row, example in enumerate(examples):
            words[row, : len(example.words)] = example.words
        return {"words": tf.constant(words, tf.string),
                "num_words": tf.constant([len(example.words) for example in examples], tf.int32)}

    def prediction(self, outputs, row):
        return [_text(tag) for tag in outputs["tags"][row][: outputs["num_words"][row]]]


class ExportedAnswerer(ExportedModel, QuestionAnswerer):
    def request(self, examples):
        return {"question": _strings([example.question for example in examples]),
                "context": _strings([example.paragraph.context for example in examples])}

    def prediction(self, outputs, row):
        text = _text(outputs["answer"][row])
        version_2 = "has_answer" in outputs
        return Answer(text, int(outputs["start"][row]), int(outputs["end"][row]), float(outputs["score"][row]),
                      bool(outputs["has_answer"][row]) if version_2 else bool(text),
                      float(outputs["null_score_diff"][row]) if version_2 else None)

    def result(self, example, context, prediction: Answer) -> Answer:
        return prediction
