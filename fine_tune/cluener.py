"""CLUENER2020 (fine-grained Chinese NER, 10 entity types) in its own JSON-lines format.

One object a line: `{"text": ..., "label": {type: {entity: [[start, end], ...]}}}`,
character offsets with `end` inclusive (the test file has no "label"). Each character
is a word, as in Chinese BERT NER: spans become character BIO tags (IOB2) for the
tagging model of `fine_tune.tagging`, and predicted tags become spans again, written
back in the same format (`<set>_predictions.json`, the other keys of each line kept).

A span whose characters are not its entity's text stops the run, naming the file,
line and span. Flat BIO cannot hold an entity nested inside another (one line of the
released train.json: a company inside a book title): the outer one is kept, the inner
ones are dropped and counted in a warning; of two overlapping spans the one that starts
first is kept.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

from bert_tf.errors import DataError
from bert_tf.atomic import atomic_outputs
from fine_tune.config import RunConfig
from fine_tune.jsonl import read_json_lines
from fine_tune.metrics import chunks
from fine_tune.registry import register
from fine_tune.tagging import ConllConfig, ConllReader, tagging_task
from fine_tune.task import EvalSet, Task, output_path

Span = tuple[str, str, int, int]  # (type, entity text, start, end inclusive)


@dataclasses.dataclass(frozen=True)
class ClueNerRecord:
    """One line of a CLUENER file, as `fine_tune.tagging`'s featuriser and head read a sentence.

    Args:
        guid: "<file>-<index>".
        words: the characters of the text.
        label: the BIO tags of the characters, or None for an unlabelled (test) line.
        document: its own index: lines are independent texts.
        source: "file line N".
        fields: the line's other keys (an "id", say), written back with the predictions.
    """

    guid: str
    words: tuple[str, ...]
    label: tuple[str, ...] | None
    document: int
    source: str
    fields: tuple[tuple[str, Any], ...] = ()


# === Spans and tags ===


def spans_of(label: dict, text: str, source: str) -> list[Span]:
    """The spans of a line's "label", sorted, each checked against `text`.

    >>> spans_of({"name": {"叶老桂": [[9, 11]]}, "company": {"浙商银行": [[0, 3]]}},
    ...          "浙商银行企业信贷部叶老桂博士", "train.json line 1")
    [('company', '浙商银行', 0, 3), ('name', '叶老桂', 9, 11)]
    >>> spans_of({"name": {"叶老": [[9, 11]]}}, "浙商银行企业信贷部叶老桂博士", "train.json line 1")
    Traceback (most recent call last):
    ...
    bert_tf.errors.DataError: train.json line 1: the name span [9, 11] covers '叶老桂', not its entity '叶老'.
    """
    if not isinstance(label, dict):
        raise DataError(f'{source}: "label" must be an object {{type: {{entity: [[start, end], ...]}}}}.')
    spans = []
    for kind, entities in label.items():
        if not isinstance(entities, dict):
            raise DataError(f'{source}: the "label" entry {kind!r} must be an object {{entity: [[start, end], ...]}}, '
                            f"not {json.dumps(entities, ensure_ascii=False)}.")
        for entity, positions in entities.items():
            if not isinstance(positions, list):
                raise DataError(f"{source}: the {kind} spans of {entity!r} must be a list of [start, end], "
                                f"not {json.dumps(positions, ensure_ascii=False)}.")
            for position in positions:
                if not (isinstance(position, list) and len(position) == 2 and all(type(p) is int for p in position)):
                    raise DataError(f"{source}: the {kind} span {position!r} of {entity!r} is not [start, end].")
                start, end = position
                if start > end:
                    raise DataError(f"{source}: the {kind} span [{start}, {end}] of {entity!r} starts after it ends; "
                                    "give [start, end] with end inclusive.")
                if not 0 <= start <= end < len(text):
                    raise DataError(
                        f"{source}: the {kind} span [{start}, {end}] of {entity!r} is outside the text "
                        f"of {len(text)} characters."
                    )
                if text[start : end + 1] != entity:
                    raise DataError(
                        f"{source}: the {kind} span [{start}, {end}] covers {text[start : end + 1]!r}, "
                        f"not its entity {entity!r}."
                    )
                spans.append((kind, entity, start, end))
    return sorted(spans, key=lambda span: (span[2], -span[3], span[0]))


def spans_to_tags(spans: Sequence[Span], length: int) -> tuple[list[str], int]:
    """Character BIO tags of sorted `spans`, and how many spans were dropped because an
    earlier one (the outer, for nested spans) already tagged one of their characters.

    >>> spans_to_tags([("book", "《招商银行》", 0, 5), ("company", "招商银行", 1, 4)], 7)
    (['B-book', 'I-book', 'I-book', 'I-book', 'I-book', 'I-book', 'O'], 1)
    """
    tags = ["O"] * length
    dropped = 0
    for kind, _, start, end in spans:
        if any(tag != "O" for tag in tags[start : end + 1]):
            dropped += 1
            continue
        tags[start : end + 1] = [f"B-{kind}"] + [f"I-{kind}"] * (end - start)
    return tags, dropped


def tags_to_label(tags: Sequence[str], text: str) -> dict[str, dict[str, list[list[int]]]]:
    """CLUENER's "label" object of character tags, read as conlleval reads entities.

    >>> tags_to_label(["B-name", "I-name", "O", "B-game", "I-game"], "叶老看CS")
    {'name': {'叶老': [[0, 1]]}, 'game': {'CS': [[3, 4]]}}
    """
    label: dict[str, dict[str, list[list[int]]]] = {}
    for chunk in chunks(tags):
        entity = text[chunk.start : chunk.end]
        label.setdefault(chunk.type, {}).setdefault(entity, []).append([chunk.start, chunk.end - 1])
    return label


# === Reader and writer ===


def read_cluener(path: str) -> tuple[list[ClueNerRecord], int]:
    """The lines of a CLUENER file, and how many nested or overlapping spans were dropped."""
    records: list[ClueNerRecord] = []
    dropped = 0
    for number, record in read_json_lines(path):
        source = f"{path} line {number}"
        if not isinstance(record.get("text"), str):
            raise DataError(f'{source} has no "text" string; CLUENER lines are {{"text": ..., "label": ...}}.')
        text = record["text"]
        tags = None
        if "label" in record:
            tags, nested = spans_to_tags(spans_of(record["label"], text, source), len(text))
            dropped += nested
        fields = tuple((key, value) for key, value in record.items() if key not in ("text", "label"))
        index, label = len(records), None if tags is None else tuple(tags)
        guid = f"{os.path.basename(path)}-{index}"
        records.append(ClueNerRecord(guid, tuple(text), label, index, source, fields))
    return records, dropped


class ClueNerReader:
    """Reads `files[split]` (relative to the data dir) as CLUENER JSON lines."""

    labels = None  # taken from the training file
    labels_in = ConllReader.labels_in  # "O", then B- and I- of every type seen

    def __init__(self, files: dict[str, str]):
        self.files = files

    def read(self, data_dir: str, split: str) -> list[EvalSet]:
        path = os.path.join(data_dir, self.files[split])
        records, dropped = read_cluener(path)
        if not records:
            raise DataError(f"{path} holds no lines for the {split} set.")
        if dropped:
            print(
                f"warning: {path}: {dropped} entity span(s) nested inside or overlapping an earlier one were "
                "dropped (character BIO tags hold one entity a character).",
                file=sys.stderr,
            )
        return [EvalSet(split, records, path)]


class ClueNerWriter:
    """`<set>_predictions.json`: each input line's keys with the predicted "label", one line each."""

    def __call__(
        self, output_dir: str, eval_set: EvalSet, predictions: Sequence[Sequence[str]], labels: Sequence[str]
    ) -> list[str]:
        path = output_path(output_dir, f"{eval_set.name}_predictions.json")
        with atomic_outputs([path]) as (temporary,), open(temporary, "w", encoding="utf-8") as handle:
            for record, tags in zip(eval_set.examples, predictions, strict=True):
                text = "".join(record.words)
                line = {**dict(record.fields), "text": text, "label": tags_to_label(tags, text)}
                handle.write(json.dumps(line, ensure_ascii=False) + "\n")
        return [path]


@register(
    "cluener",
    "CLUENER2020 fine-grained Chinese NER (10 types), JSON lines: train.json, dev.json, test.json",
    ConllConfig,
    aliases=("cluener2020",),
)
def cluener(config: ConllConfig, run: RunConfig) -> Task:
    files = {"train": "train.json", "dev": "dev.json", "test": "test.json"}
    return tagging_task("cluener", files, config, run, "CLUENER2020 Chinese NER", cluener_format)


def cluener_format(files: dict[str, str], config: ConllConfig) -> tuple[ClueNerReader, ClueNerWriter]:
    """CLUENER's JSON lines, always read as IOB2 character tags (`--label_scheme` has no say)."""
    return ClueNerReader(files), ClueNerWriter()
