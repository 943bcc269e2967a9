"""Streaming reader of a corpus in BERT's layout: one sentence a line, a blank line
between documents.

It never holds more than one document, and reports what a user should know about
their input (bad UTF-8, CRLF line ends, empty files, absurdly long lines) through a
`warn` callback, once per file and kind of problem.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from bert_tf.errors import BertTfError

# A line this long is almost certainly not one sentence (a whole article or book on
# one line): the original would make a single segment of it, of which only about
# max_seq_length tokens can reach an instance.
LONG_LINE_BYTES = 100_000
# A document larger than this is cut into pieces of about this size, so that memory
# stays bounded even for a corpus without blank lines. The original holds the whole
# corpus in memory, so it has no such limit; with the default 128-token instances a
# document of this size gives tens of thousands of instances, and cutting it changes
# nothing but which (distant) sentences can pair up.
MAX_DOCUMENT_BYTES = 16 << 20


@dataclass
class Document:
    """One document: its lines (sentences), where it starts and ends in the corpus."""

    lines: list[str]
    start: int  # byte offset of its first line in the concatenated input files
    end: int  # byte offset just past its last line


@dataclass
class InputProblems:
    """Counts of input problems, for the stats file and the closing warnings."""

    undecodable_lines: int = 0
    files_with_undecodable_lines: list[str] = field(default_factory=list)
    crlf_files: list[str] = field(default_factory=list)
    long_lines: int = 0
    split_documents: int = 0


def expand_input_patterns(patterns: str) -> list[str]:
    """The files of comma-separated glob patterns, each pattern's matches sorted.

    A folder stands for every file beneath it (WikiExtractor writes text/AA/wiki_00,
    text/AB/...), hidden files excepted. Raises `BertTfError` for a pattern that
    matches no file.
    """
    files: list[str] = []
    for pattern in (p.strip() for p in patterns.split(",")):
        if not pattern:
            continue
        matches = sorted(path for match in glob.glob(pattern) for path in _files_of(match))
        if not matches:
            raise BertTfError(f"--input_file pattern {pattern!r} matches no file.")
        files.extend(path for path in matches if path not in files)
    if not files:
        raise BertTfError("--input_file is empty; give one or more comma-separated file patterns.")
    return files


def _files_of(path: str) -> list[str]:
    """`path` if it is a file; the non-hidden files beneath it if it is a folder."""
    if not os.path.isdir(path):
        return [path] if os.path.isfile(path) else []
    files = []
    for folder, subfolders, names in os.walk(path):
        subfolders[:] = [name for name in subfolders if not name.startswith(".")]
        files.extend(os.path.join(folder, name) for name in names if not name.startswith("."))
    return files


def non_empty_files(files: list[str], warn: Callable[[str], None]) -> list[str]:
    """`files` without the empty ones; raises `BertTfError` when all are empty."""
    kept = [path for path in files if os.path.getsize(path) > 0]
    if not kept:
        names = ", ".join(files[:3]) + (", ..." if len(files) > 3 else "")
        raise BertTfError(f"Every --input_file is empty ({names}); there is no text to make instances from.")
    if len(kept) < len(files):
        empty = [path for path in files if path not in kept]
        warn(f"skipping {len(empty)} empty input file(s): {', '.join(empty[:3])}{', ...' if len(empty) > 3 else ''}.")
    return kept


def _decode(raw: bytes, path: str, problems: InputProblems) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        problems.undecodable_lines += 1
        if path not in problems.files_with_undecodable_lines:
            problems.files_with_undecodable_lines.append(path)
        # U+FFFD, which the tokenizer then drops: the original decodes with "ignore".
        return raw.decode("utf-8", "replace")


def read_documents(files: list[str], problems: InputProblems, warn: Callable[[str], None]) -> Iterator[Document]:
    """Documents of `files`, in order. Each file ends a document (unlike the original,
    which would join the last document of one file to the first of the next)."""
    base = 0
    for path in files:
        yield from _file_documents(path, base, problems, warn)
        base += os.path.getsize(path)


def _file_documents(path: str, base: int, problems: InputProblems, warn: Callable[[str], None]) -> Iterator[Document]:
    lines: list[str] = []
    start = offset = base
    size = 0
    saw_crlf = warned_long = warned_split = False
    with open(path, "rb") as file:
        for line_number, raw in enumerate(file, start=1):
            line_start, offset = offset, offset + len(raw)
            if not saw_crlf and raw.endswith(b"\r\n"):
                saw_crlf = True
                problems.crlf_files.append(path)
                warn(f"{path} has CRLF (Windows) line ends; they are read as plain line ends.")
            if len(raw) > LONG_LINE_BYTES:
                problems.long_lines += 1
                if not warned_long:
                    warned_long = True
                    warn(
                        f"line {line_number} of {path} is {len(raw) / 1e6:.1f} MB long; each line is one "
                        "sentence, so only about max_seq_length tokens of it reach an instance (split "
                        "sentences with python -m data_prep.prepare_corpus)."
                    )
            text = _decode(raw, path, problems).strip()
            if not text:
                if lines:
                    yield Document(lines, start, line_start)
                    lines, size = [], 0
                continue
            if not lines:
                start = line_start
            elif size + len(raw) > MAX_DOCUMENT_BYTES:
                problems.split_documents += 1
                if not warned_split:
                    warned_split = True
                    warn(
                        f"a document of {path} (near line {line_number}) is over "
                        f"{MAX_DOCUMENT_BYTES >> 20} MB; it is cut into pieces of that size to bound "
                        "memory (separate documents with blank lines)."
                    )
                yield Document(lines, start, line_start)
                lines, size, start = [], 0, line_start
            lines.append(text)
            size += len(raw)
    if lines:
        yield Document(lines, start, offset)
