"""Turning sentence (pair) examples into unpadded model inputs, as the original `run_classifier.py`.

    [CLS] tokens_a [SEP]                      segment ids 0 ... 0
    [CLS] tokens_a [SEP] tokens_b [SEP]       segment ids 0 ... 0 1 ... 1

A pair too long for `max_seq_length` loses one token at a time from the end of the
longer side (the original's `_truncate_seq_pair`). Rows are not padded here: padding
is the batcher's job (`fine_tune.batching`), so a short sentence never pays for
`max_seq_length`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from bert_tf.errors import DataError
from bert_tf.packing import pack_pair
from bert_tf.tokenization import FullTokenizer
from fine_tune.task import Features


@dataclasses.dataclass(frozen=True)
class PairExample:
    """A sentence or sentence pair with its label (None for unlabelled test data).

    `source` ("file line N") is where it came from, for error messages.
    """

    guid: str
    text_a: str
    text_b: str | None
    label: str | None
    source: str = ""


def label_index(labels: Sequence[str]) -> dict[str, int]:
    return {label: index for index, label in enumerate(labels)}


def unknown_label(label: str, source: str, labels: Sequence[str]) -> DataError:
    return DataError(f"{source}: unknown label {label!r}; this task's labels are {', '.join(map(repr, labels))}.")


class PairFeaturiser:
    """Featuriser of sentence(-pair) classification and regression tasks.

    Labels become `label_ids` (int) or, with `regression=True`, a float `label`; an
    unlabelled example (GLUE test) gets 0, which nothing reads.

    Example:
    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "vocab.txt")
    >>> _ = open(path, "w").write("\\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "good", "film"]))
    >>> tokenizer = FullTokenizer(path)
    >>> features = PairFeaturiser()([PairExample("1", "Good film", None, "1")], tokenizer, 8, ["0", "1"])
    >>> features.sequences["input_word_ids"][0].tolist(), features.scalars["label_ids"].tolist()
    ([2, 5, 6, 3], [1])
    """

    def __init__(self, regression: bool = False):
        self.regression = regression

    def __call__(
        self, examples: Sequence[PairExample], tokenizer: FullTokenizer, max_seq_length: int, labels: Sequence[str]
    ) -> Features:
        word_ids, type_ids = [], []
        for example in examples:
            tokens_b = tokenizer.tokenize(example.text_b) if example.text_b is not None else None
            tokens, segments = pack_pair(tokenizer.tokenize(example.text_a), tokens_b, max_seq_length)
            word_ids.append(np.asarray(tokenizer.convert_tokens_to_ids(tokens), dtype=np.int32))
            type_ids.append(np.asarray(segments, dtype=np.int32))
        return Features(
            sequences={"input_word_ids": word_ids, "input_type_ids": type_ids},
            scalars=self._targets(examples, labels),
            example_index=np.arange(len(examples)),
        )

    def _targets(self, examples: Sequence[PairExample], labels: Sequence[str]) -> dict[str, np.ndarray]:
        if self.regression:
            return {"label": np.array([_score(e) for e in examples], dtype=np.float32)}
        index = label_index(labels)
        ids = []
        for example in examples:
            if example.label is not None and example.label not in index:
                raise unknown_label(example.label, example.source, labels)
            ids.append(index.get(example.label, 0))
        return {"label_ids": np.array(ids, dtype=np.int32)}


def _score(example: PairExample) -> float:
    if example.label is None:
        return 0.0
    try:
        return float(example.label)
    except ValueError:
        raise DataError(f"{example.source}: the score {example.label!r} is not a number.") from None
