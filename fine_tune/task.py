"""What a fine-tuning task is: reader + featuriser + head + loss + metrics + prediction writer.

Figure 3 of the paper: one encoder, a thin head per task. Everything that differs between
tasks sits behind the six small protocols below; the training loop (`fine_tune.trainer`),
the batching (`fine_tune.batching`) and the command line (`fine_tune.cli`) know nothing
about any particular task. A new task (say SQuAD's span head) is a new set of
components registered under a name in `fine_tune.registry`, nothing copied.

Data flows as:

    files --reader--> EvalSet(examples) --featuriser--> Features --batching--> model
    model outputs --head.decode--> one prediction per example --metrics / writer-->
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from collections.abc import Sequence
from typing import Any, Protocol

import keras
import numpy as np

from bert_tf.encoder import BertEncoder
from bert_tf.atomic import atomic_outputs
from bert_tf.tokenization import FullTokenizer

# The encoder inputs every featuriser produces; `input_mask` is derived from the length.
INPUT_KEYS = ("input_word_ids", "input_type_ids")
SPLITS = ("train", "dev", "test")


@dataclasses.dataclass
class EvalSet:
    """The examples of one file of a split.

    `name` tells sets of a split apart (MNLI's dev has `dev_matched` and `dev_mismatched`);
    `submission` is the GLUE leaderboard file stem (e.g. "MNLI-m"), when there is one.
    """

    name: str
    examples: list[Any]
    source: str
    submission: str | None = None


@dataclasses.dataclass
class Features:
    """Unpadded model inputs and training targets, one row per model input ("feature").

    Args:
        sequences: per-token int arrays, all of one row's length: `input_word_ids`,
            `input_type_ids` and any per-token targets (e.g. NER `label_ids`).
        scalars: one value per row (e.g. a sentence label), as arrays of length `len(self)`.
        example_index: the example each row came from: several rows may share one
            (NER windows over long sentences, SQuAD's strides over long contexts).
        extras: anything else a task's `decode` needs per row (e.g. which tokens of a
            window carry a prediction).

    Example:
    >>> import numpy as np
    >>> features = Features({"input_word_ids": [np.array([2, 5, 3]), np.array([2, 3])],
    ...                      "input_type_ids": [np.zeros(3, np.int32), np.zeros(2, np.int32)]},
    ...                     {"label_ids": np.array([1, 0])}, np.array([0, 1]))
    >>> len(features), features.lengths.tolist()
    (2, [3, 2])
    """

    sequences: dict[str, list[np.ndarray]]
    scalars: dict[str, np.ndarray]
    example_index: np.ndarray
    extras: list[Any] | None = None

    def fingerprint(self) -> str:
        """A digest of every row's ids and targets: equal for the same data, files,
        vocabulary, casing and length, whatever the paths (a resumed run checks it)."""
        digest = hashlib.sha256()
        for name in sorted(self.sequences):
            digest.update(name.encode())
            for row in self.sequences[name]:
                digest.update(np.asarray(row).tobytes() + b"|")
        for name in sorted(self.scalars):
            digest.update(name.encode() + np.asarray(self.scalars[name]).tobytes())
        return digest.hexdigest()[:16]

    def __len__(self) -> int:
        return len(self.example_index)

    @property
    def lengths(self) -> np.ndarray:
        return np.fromiter((len(ids) for ids in self.sequences["input_word_ids"]), np.int64, len(self))

    @property
    def target_keys(self) -> list[str]:
        return [key for key in (*self.sequences, *self.scalars) if key not in INPUT_KEYS]


# === The six components ===
class Reader(Protocol):
    """Files -> examples. `labels` are fixed by the task, or None to take them from training data."""

    labels: tuple[str, ...] | None

    def read(self, data_dir: str, split: str) -> list[EvalSet]:
        """The evaluation sets of `split` ("train", "dev" or "test"); raises `DataError`."""

    def labels_in(self, examples: Sequence[Any]) -> tuple[str, ...]:
        """The label set of some (training) examples, when the task does not fix it."""


class TextClassificationReader(Reader, Protocol):
    """A reader of one text or a pair of texts an example (the sentence and pair tasks):
    what a loaded model and its export take as input."""

    takes_pairs: bool


class Featuriser(Protocol):
    def __call__(
        self, examples: Sequence[Any], tokenizer: FullTokenizer, max_seq_length: int, labels: Sequence[str]
    ) -> Features: ...


class Head(Protocol):
    """The task layer on top of the encoder, and the inverse of its outputs."""

    def build(self, encoder: BertEncoder, num_labels: int, dropout: float) -> keras.Model:
        """A model from the encoder's inputs to this head's float32 outputs."""

    def decode(
        self, examples: Sequence[Any], features: Features, outputs: list[np.ndarray], labels: Sequence[str]
    ) -> list[Any]:
        """One prediction per example from the per-row model outputs."""


class Loss(Protocol):
    def __call__(self, targets: dict[str, Any], outputs: Any) -> tuple[Any, Any]:
        """(sum of losses, number of loss terms) of one batch, as tensors."""


class Metrics(Protocol):
    """Dev/test scores from predictions; `primary` names the one that picks the best checkpoint."""

    primary: str

    def __call__(self, examples: Sequence[Any], predictions: Sequence[Any]) -> dict[str, float]: ...


class PredictionWriter(Protocol):
    def __call__(
        self, output_dir: str, eval_set: EvalSet, predictions: Sequence[Any], labels: Sequence[str]
    ) -> list[str]:
        """Writes the prediction files of one evaluation set; returns their paths."""


@dataclasses.dataclass
class Task:
    """A fine-tuning task: the six components under one name (see the module docstring)."""

    name: str
    reader: Reader
    featuriser: Featuriser
    head: Head
    loss: Loss
    metrics: Metrics
    writer: PredictionWriter
    description: str = ""

    def has_labels(self, examples: Sequence[Any]) -> bool:
        """Whether the examples carry gold labels (GLUE test sets do not)."""
        return all(getattr(example, "label", None) is not None for example in examples)


def output_path(output_dir: str, name: str) -> str:
    """`output_dir/name`, creating `output_dir` when needed."""
    os.makedirs(output_dir, exist_ok=True)
    return os.path.join(output_dir, name)


def write_lines(output_dir: str, name: str, lines: Sequence[str]) -> str:
    """Writes `lines` to `output_dir/name` under a temporary name, renamed when complete
    (an interrupted run leaves the previous file whole); returns the path."""
    path = output_path(output_dir, name)
    with atomic_outputs([path]) as (temporary,), open(temporary, "w", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")
    return path
