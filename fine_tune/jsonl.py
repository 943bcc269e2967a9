"""JSON-lines files (one object a line, the layout CLUE releases its tasks in), with one
clear sentence for a missing file, a line that is not UTF-8 or not a JSON object.

Example:
>>> import os, tempfile
>>> path = os.path.join(tempfile.mkdtemp(), "train.json")
>>> _ = open(path, "w").write('{"sentence": "好", "label": "1"}\\n\\n{"sentence": "坏"\\n')
>>> read_json_lines(path)  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
bert_tf.errors.DataError: .../train.json line 3 is not a JSON object: Expecting ',' delimiter (column 17).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

from bert_tf.errors import DataError


def utf8_lines(path: str) -> Iterator[tuple[int, str]]:
    """(1-based line number, text without its line end) of every line of `path`, read as bytes
    so that a line that is not UTF-8 can be named (a `DataError`)."""
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, 1):
            try:
                text = raw.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError as error:
                raise DataError(f"{path} line {number} is not UTF-8 text ({error.reason} at byte {error.start} "
                                "of the line); convert the file to UTF-8.") from None
            yield number, text.rstrip("\r\n")


def read_json_lines(path: str) -> list[tuple[int, dict]]:
    """(1-based line number, object) of each non-blank line of `path`; raises `DataError`."""
    if not os.path.isfile(path):
        raise DataError(f"Data file {path} does not exist.")
    records = []
    for number, line in utf8_lines(path):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            message = f"{error.msg} (column {error.colno})"
            raise DataError(f"{path} line {number} is not a JSON object: {message}.") from None
        if not isinstance(record, dict):
            raise DataError(f"{path} line {number} is not a JSON object but a {type(record).__name__}.")
        records.append((number, record))
    return records
