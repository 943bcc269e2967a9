"""Sentence(-pair) classification and regression: every GLUE task, XNLI, and users' own TSV files.

Each task is a table row: where its files are, which columns hold the texts and the
label, its labels and metrics (as the GLUE leaderboard) and the name of its GLUE
submission file. One reader (`TsvReader`), one featuriser (`PairFeaturiser`), two heads
(classification, regression), one metrics class and one writer serve them all.

GLUE layouts (the `glue_data/<TASK>/` folders of the GLUE download script):

| task | train/dev columns (a, b, label) | test columns (id, a, b) | labels |
|---|---|---|---|
| CoLA | 3, -, 1 (no header) | 0, 1, - | 0 1 |
| SST-2 | 0, -, 1 | 0, 1, - | 0 1 |
| MRPC | 3, 4, 0 | 0, 3, 4 | 0 1 |
| STS-B | 7, 8, 9 (float) | 0, 7, 8 | regression |
| QQP | 3, 4, 5 | 0, 1, 2 | 0 1 |
| MNLI | 8, 9, last (dev_matched / dev_mismatched) | 0, 8, 9 | contradiction entailment neutral |
| QNLI, RTE | 1, 2, 3 | 0, 1, 2 | entailment not_entailment |
| WNLI | 1, 2, 3 | 0, 1, 2 | 0 1 |
| AX | - (predict only, with an MNLI model) | diagnostic.tsv 0, 1, 2 | as MNLI |
| XNLI | multinli/multinli.train.{lang}.tsv 0, 1, 2; xnli.{dev,test}.tsv 6, 7, 1 | | as MNLI |
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import numpy as np

from bert_tf.errors import DataError
from bert_tf.flags import Flag
from fine_tune import metrics as metric_functions
from fine_tune.config import RunConfig, TaskConfig, check_data_dir, own, shared
from fine_tune.features import PairExample, PairFeaturiser
from fine_tune.heads import (
    ClassificationHead,
    Prediction,
    RegressionHead,
    classification_loss,
    regression_loss,
)
from fine_tune.registry import register
from fine_tune.task import EvalSet, Task, TextClassificationReader, write_lines
from fine_tune.tsv import read_tsv

Column = int | str  # an index, or a header name


@dataclasses.dataclass(frozen=True)
class Layout:
    """One TSV file of a split and what its columns hold.

    Args:
        file: path relative to the data dir; `{language}` is filled in (XNLI).
        header: whether the first row is a header.
        text_a, text_b, label, guid: column indices (negative ones count from the end)
            or header names; `text_b` None for single sentences, `label` None for
            unlabelled test files, `guid` None to number the rows from 0.
        name: the evaluation set's name (defaults to the split).
        submission: the GLUE submission file stem, e.g. "MNLI-m".
        label_aliases: labels to rename (XNLI's "contradictory").
        keep: (column, value): only rows with that value are read (XNLI's language).
        optional_label: a missing label column means "unlabelled" instead of an error.
    """

    file: str
    header: bool
    text_a: Column
    text_b: Column | None
    label: Column | None
    guid: Column | None = None
    name: str = ""
    submission: str | None = None
    label_aliases: tuple[tuple[str, str], ...] = ()
    keep: tuple[Column, str] | None = None
    optional_label: bool = False


class TsvReader:
    """Reads the `Layout`s of each split into `PairExample`s.

    Example:
    >>> import os, tempfile
    >>> data_dir = tempfile.mkdtemp()
    >>> _ = open(os.path.join(data_dir, "train.tsv"), "w").write("sentence\\tlabel\\nfine\\t1\\n")
    >>> reader = TsvReader({"train": (Layout("train.tsv", True, 0, None, 1),)}, labels=("0", "1"))
    >>> [example.text_a for example in reader.read(data_dir, "train")[0].examples]
    ['fine']
    """

    def __init__(
        self,
        layouts: dict[str, tuple[Layout, ...]],
        labels: tuple[str, ...] | None,
        params: dict[str, str] | None = None,
        missing_split_hint: str = "",
    ):
        self.layouts = layouts
        self.labels = labels
        self.params = params or {}
        self.missing_split_hint = missing_split_hint

    @property
    def takes_pairs(self) -> bool:
        """Whether an example is a pair of texts: a layout of the task's files has a second text
        (a `tsv` run's, its recorded `--text_b_column`)."""
        return any(layout.text_b is not None for split in self.layouts.values() for layout in split)

    def read(self, data_dir: str, split: str) -> list[EvalSet]:
        if split not in self.layouts:
            raise DataError(f"This task has no {split} set{self.missing_split_hint}.")
        return [self._read_set(data_dir, split, layout) for layout in self.layouts[split]]

    def labels_in(self, examples: Sequence[PairExample]) -> tuple[str, ...]:
        return tuple(sorted({example.label for example in examples if example.label is not None}))

    def _read_set(self, data_dir: str, split: str, layout: Layout) -> EvalSet:
        path = os.path.join(data_dir, layout.file.format(**self.params))
        rows = read_tsv(path)
        body = rows[1:] if layout.header else rows
        if not body:
            raise DataError(f"{path} holds no examples for the {split} set.")
        columns = _Columns(path, rows[0].cells if layout.header else None, len(rows[0].cells))
        aliases = dict(layout.label_aliases)
        keep = (columns.index(layout.keep[0], "keep"), layout.keep[1]) if layout.keep else None
        text_a = columns.index(layout.text_a, "text_a")
        text_b = columns.index(layout.text_b, "text_b") if layout.text_b is not None else None
        label = columns.label_index(layout.label, layout.optional_label)
        guid = columns.index(layout.guid, "guid") if layout.guid is not None else None
        examples = []
        for row in body:
            if keep is not None and row.cells[keep[0]] != keep[1]:
                continue
            cells = row.cells
            value = cells[label].strip() if label is not None else None
            examples.append(
                PairExample(
                    guid=cells[guid] if guid is not None else str(len(examples)),
                    text_a=cells[text_a],
                    text_b=cells[text_b] if text_b is not None else None,
                    label=aliases.get(value, value),
                    source=f"{path} line {row.line}",
                )
            )
        if not examples:
            raise DataError(f"{path} holds no examples for the {split} set.")
        return EvalSet(layout.name or split, examples, path, layout.submission)


@dataclasses.dataclass
class _Columns:
    """Resolves `Column`s of one file to indices, with errors naming the file."""

    path: str
    header: list[str] | None
    width: int

    def index(self, column: Column, role: str) -> int:
        if isinstance(column, str):
            if self.header is None or column not in self.header:
                found = f"its header has {', '.join(self.header)}" if self.header else "it has no header"
                raise DataError(f"{self.path} has no column named {column!r} for {role}; {found}.")
            return self.header.index(column)
        if not -self.width <= column < self.width:
            raise DataError(f"{self.path} has {self.width} columns, so it has no column {column} for {role}.")
        return column

    def label_index(self, column: Column | None, optional: bool) -> int | None:
        if column is None:
            return None
        missing = column not in (self.header or []) if isinstance(column, str) else not column < self.width
        return None if optional and missing else self.index(column, "label")


# === Metrics and predictions ===
METRIC_FUNCTIONS: dict[str, Callable[[np.ndarray, np.ndarray], float]] = {
    "accuracy": metric_functions.accuracy,
    "f1": lambda gold, predicted: metric_functions.f1(gold, predicted, positive="1"),
    "matthews_corrcoef": metric_functions.matthews_corrcoef,
    "pearson": metric_functions.pearson,
    "spearman": metric_functions.spearman,
}


class SentenceMetrics:
    """GLUE's metrics of a task, by name; the first is the primary one.

    >>> scores = SentenceMetrics(("f1", "accuracy"))(
    ...     [PairExample("0", "a", None, "1"), PairExample("1", "b", None, "0")], ["1", "1"])
    >>> round(scores["f1"], 4), scores["accuracy"]
    (0.6667, 0.5)
    """

    def __init__(self, names: Sequence[str]):
        self.names = tuple(names)
        self.primary = self.names[0]

    def __call__(self, examples: Sequence[PairExample], predictions: Sequence[Any]) -> dict[str, float]:
        values = [p.label if isinstance(p, Prediction) else p for p in predictions]
        if values and isinstance(values[0], float):
            gold, predicted = np.array([float(e.label) for e in examples]), np.array(values)
        else:
            gold, predicted = np.array([e.label for e in examples]), np.array(values)
        return {name: METRIC_FUNCTIONS[name](gold, predicted) for name in self.names}


class SentenceWriter:
    """`<SUBMISSION>.tsv` (GLUE's "index<TAB>prediction") or `<set>_predictions.tsv`, and
    for classifiers the original's `<set>_results.tsv` (one row of class probabilities per example)."""

    def __call__(
        self, output_dir: str, eval_set: EvalSet, predictions: Sequence[Any], labels: Sequence[str]
    ) -> list[str]:
        name = f"{eval_set.submission}.tsv" if eval_set.submission else f"{eval_set.name}_predictions.tsv"
        lines = ["index\tprediction"]
        for example, prediction in zip(eval_set.examples, predictions, strict=True):
            value = prediction.label if isinstance(prediction, Prediction) else f"{prediction:.3f}"
            lines.append(f"{example.guid}\t{value}")
        paths = [write_lines(output_dir, name, lines)]
        if predictions and isinstance(predictions[0], Prediction):
            rows = ["\t".join(str(float(p)) for p in prediction.probabilities) for prediction in predictions]
            paths.append(write_lines(output_dir, f"{eval_set.name}_results.tsv", rows))
        return paths


# === Tasks ===
def sentence_task(
    name: str,
    reader: TextClassificationReader,
    metric_names: Sequence[str],
    description: str,
    regression: bool = False,
) -> Task:
    """A classification (or, with `regression`, a regression) task over `reader`'s files."""
    return Task(
        name=name,
        reader=reader,
        featuriser=PairFeaturiser(regression=regression),
        head=RegressionHead() if regression else ClassificationHead(),
        loss=regression_loss if regression else classification_loss,
        metrics=SentenceMetrics(metric_names),
        writer=SentenceWriter(),
        description=description,
    )


def _glue_layouts(
    train: tuple[int, int | None, int],
    test: tuple[int, int | None],
    submission: str,
    header: bool = True,
) -> dict[str, tuple[Layout, ...]]:
    """train.tsv / dev.tsv with (a, b, label) columns; test.tsv with (a, b) and the id in column 0."""
    text_a, text_b, label = train
    return {
        "train": (Layout("train.tsv", header, text_a, text_b, label),),
        "dev": (Layout("dev.tsv", header, text_a, text_b, label),),
        "test": (Layout("test.tsv", True, test[0], test[1], None, guid=0, submission=submission),),
    }


BINARY = ("0", "1")
NLI = ("contradiction", "entailment", "neutral")
ENTAILMENT = ("entailment", "not_entailment")

# name: (layouts, labels (None: regression), metrics, description)
GLUE = {
    "cola": (_glue_layouts((3, None, 1), (1, None), "CoLA", header=False), BINARY, ("matthews_corrcoef", "accuracy"),
             "CoLA: grammatical acceptability (Matthews correlation)"),
    "sst-2": (_glue_layouts((0, None, 1), (1, None), "SST-2"), BINARY, ("accuracy",),
              "SST-2: sentiment of movie-review sentences"),
    "mrpc": (_glue_layouts((3, 4, 0), (3, 4), "MRPC"), BINARY, ("f1", "accuracy"),
             "MRPC: paraphrase pairs (F1 and accuracy)"),
    "sts-b": (_glue_layouts((7, 8, 9), (7, 8), "STS-B"), None, ("spearman", "pearson"),
              "STS-B: sentence similarity 0-5, a regression head (Pearson and Spearman)"),
    "qqp": ({"train": (Layout("train.tsv", True, 3, 4, 5),), "dev": (Layout("dev.tsv", True, 3, 4, 5),),
             "test": (Layout("test.tsv", True, 1, 2, None, guid=0, submission="QQP"),)},
            BINARY, ("f1", "accuracy"), "QQP: duplicate Quora questions (F1 and accuracy)"),
    "mnli": ({"train": (Layout("train.tsv", True, 8, 9, -1),),
              "dev": (Layout("dev_matched.tsv", True, 8, 9, -1, name="dev_matched"),
                      Layout("dev_mismatched.tsv", True, 8, 9, -1, name="dev_mismatched")),
              "test": (Layout("test_matched.tsv", True, 8, 9, None, guid=0, name="test_matched", submission="MNLI-m"),
                       Layout("test_mismatched.tsv", True, 8, 9, None, guid=0, name="test_mismatched",
                              submission="MNLI-mm"))},
             NLI, ("accuracy",), "MNLI: entailment, matched and mismatched genres"),
    "qnli": (_glue_layouts((1, 2, 3), (1, 2), "QNLI"), ENTAILMENT, ("accuracy",),
             "QNLI: does the sentence answer the question"),
    "rte": (_glue_layouts((1, 2, 3), (1, 2), "RTE"), ENTAILMENT, ("accuracy",), "RTE: textual entailment"),
    "wnli": (_glue_layouts((1, 2, 3), (1, 2), "WNLI"), BINARY, ("accuracy",), "WNLI: Winograd schema entailment"),
    "ax": ({"test": (Layout("diagnostic.tsv", True, 1, 2, None, guid=0, submission="AX"),)}, NLI, ("accuracy",),
           "AX: GLUE's diagnostic set, predicted with a model fine-tuned on MNLI (--do_predict only)"),
}
ALIASES = {"sst-2": ("sst2", "sst"), "sts-b": ("stsb", "sts"), "ax": ("diagnostic",)}
# The tasks a GLUE task evaluates the fine-tuned models of, besides its own.
EVALUATES = {"ax": ("mnli",)}


# === Configs ===
@dataclasses.dataclass
class GlueConfig(TaskConfig):
    """A GLUE task: its files are those of `data_dir` (the GLUE download's layout)."""

    family: ClassVar[str] = "classifier"


@dataclasses.dataclass
class XnliConfig(GlueConfig):
    """XNLI: MNLI's training data in one language, XNLI's dev and test sets in that language."""

    xnli_language: str = own(Flag(str, "zh", "XNLI: the language to train and evaluate on (original: zh)."))


@dataclasses.dataclass
class TsvConfig(GlueConfig):
    """Your own TSV files: which columns hold what; file names relative to `data_dir` if given."""

    text_a_column: str = own(Flag(str, "0", "tsv: column (index or header name) of the first text."))
    text_b_column: str | None = own(Flag(str, None, "tsv: column of the second text, if any."))
    label_column: str = own(Flag(str, "1", "tsv: column of the label."))
    guid_column: str | None = own(Flag(str, None, "tsv: column of the example id written with predictions."))
    has_header: bool = own(Flag(bool, True, "tsv: the files start with a header row."))
    labels: str | None = own(Flag(str, None, "tsv: the labels, comma-separated (default: those of the train file)."))
    regression: bool = own(Flag(bool, False, "tsv: the label is a number (a regression head, STS-B-like)."))
    train_file: str | None = shared("train_file")
    dev_file: str | None = shared("dev_file")
    test_file: str | None = shared("test_file")


# === Factories ===
def _glue_factory(name: str) -> Callable[[GlueConfig, RunConfig], Task]:
    layouts, labels, metric_names, description = GLUE[name]
    hint = (
        "; AX is only predicted, with a model fine-tuned on MNLI: run --task=ax --do_predict "
        "with the MNLI run's --output_dir"
        if name == "ax"
        else ""
    )

    def factory(config: GlueConfig, run: RunConfig) -> Task:
        check_data_dir(config, run)
        # Regression tasks have no labels: `()`, unlike None ("take them from the data").
        reader = TsvReader(layouts, labels if labels is not None else (), missing_split_hint=hint)
        return sentence_task(name, reader, metric_names, description, regression=labels is None)

    return factory


for _name in GLUE:
    register(_name, GLUE[_name][3], GlueConfig, ALIASES.get(_name, ()), EVALUATES.get(_name, ()))(
        _glue_factory(_name)
    )


XNLI_LANGUAGES = ("ar", "bg", "de", "el", "en", "es", "fr", "hi", "ru", "sw", "th", "tr", "ur", "vi", "zh")


@register("xnli", "XNLI: MNLI in 15 languages (--xnli_language, 'zh' as the original)", XnliConfig,
          evaluates=("mnli",))  # zero-shot: an MNLI model scored in another language
def xnli(config: XnliConfig, run: RunConfig) -> Task:
    language = config.xnli_language
    if language not in XNLI_LANGUAGES:
        raise DataError(f"Unknown XNLI language {language!r}; use one of {', '.join(XNLI_LANGUAGES)}.")
    check_data_dir(config, run)
    keep = (0, language)
    layouts = {
        "train": (Layout("multinli/multinli.train.{language}.tsv", True, 0, 1, 2,
                         label_aliases=(("contradictory", "contradiction"),)),),
        "dev": (Layout("xnli.dev.tsv", True, 6, 7, 1, keep=keep),),
        "test": (Layout("xnli.test.tsv", True, 6, 7, 1, keep=keep),),
    }
    reader = TsvReader(layouts, NLI, {"language": language})
    return sentence_task("xnli", reader, ("accuracy",), f"XNLI ({language})")


TSV_FILES = {"train": "train.tsv", "dev": "dev.tsv", "test": "test.tsv"}


@register("tsv", "your own TSV files: --text_a_column --text_b_column --label_column ...", TsvConfig)
def tsv(config: TsvConfig, run: RunConfig) -> Task:
    """Any TSV files: columns by index or header name, labels from --labels or the training file."""
    given = {"train": config.train_file, "dev": config.dev_file, "test": config.test_file}
    check_data_dir(config, run, given)
    columns = dict(
        header=config.has_header,
        text_a=_column(config.text_a_column),
        text_b=_column(config.text_b_column) if config.text_b_column not in (None, "") else None,
        label=_column(config.label_column),
        guid=_column(config.guid_column) if config.guid_column not in (None, "") else None,
    )
    files = {split: given[split] or default for split, default in TSV_FILES.items()}
    layouts = {split: (Layout(file, optional_label=split == "test", **columns),) for split, file in files.items()}
    labels = tuple(config.labels.split(",")) if config.labels else None
    metric_names = ("spearman", "pearson") if config.regression else ("accuracy",)
    reader = TsvReader(layouts, () if config.regression else labels)
    return sentence_task("tsv", reader, metric_names, "your own TSV files", regression=config.regression)


def _column(value: str) -> Column:
    """'3' -> 3, '-1' -> -1, 'sentence' -> 'sentence'."""
    try:
        return int(value)
    except ValueError:
        return value
