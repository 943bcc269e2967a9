"""Tab-separated files as GLUE ships them, with a clear error for every malformed row.

The original reads them with `csv.reader(delimiter="\\t", quotechar=None)`: quotes are
ordinary characters (MRPC and QQP contain unbalanced ones). We do the same, drop a
UTF-8 byte-order mark (MRPC's files start with one), and insist that every row has as
many columns as the first one, so a stray tab is reported instead of silently shifting
a sentence into the label column.

Example:
>>> import os, tempfile
>>> path = os.path.join(tempfile.mkdtemp(), "train.tsv")
>>> _ = open(path, "w").write("sentence\\tlabel\\nit works\\t1\\n")
>>> [(row.line, row.cells) for row in read_tsv(path)]
[(1, ['sentence', 'label']), (2, ['it works', '1'])]
"""

from __future__ import annotations

import csv
import dataclasses
import os
import sys

from bert_tf.errors import DataError
from fine_tune.jsonl import utf8_lines

# GLUE sentences are short, but QNLI/SQuAD-like paragraphs can exceed csv's default
# 128 KiB field limit; the original raised it the same way.
csv.field_size_limit(sys.maxsize)


@dataclasses.dataclass(frozen=True)
class Row:
    """One data row: its 1-based line number in the file (for error messages) and its cells."""

    line: int
    cells: list[str]


def read_tsv(path: str | os.PathLike) -> list[Row]:
    """The rows of a TSV file (header included), all of the same width.

    Raises `DataError` naming the file and line when a row's width differs from the
    first row's or a line is not UTF-8, or when the file is missing.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise DataError(f"Data file {path} does not exist.")
    # Line by line: quotes are ordinary characters, so a row never spans two lines.
    rows = []
    for number, text in utf8_lines(path):
        if "\r" in text:  # csv would stop at it with its own error
            raise DataError(f"{path} line {number} holds a carriage return inside the row; remove it.")
        rows.extend(Row(number, cells) for cells in csv.reader([text], delimiter="\t", quotechar=None))
    rows = [row for row in rows if row.cells]  # a trailing blank line is not a row
    if not rows:
        return []
    width = len(rows[0].cells)
    for row in rows:
        if len(row.cells) != width:
            raise DataError(
                f"{path} line {row.line} has {len(row.cells)} tab-separated columns, "
                f"but line {rows[0].line} has {width}."
            )
    return rows
