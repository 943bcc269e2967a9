"""Streaming reader of a corpus in BERT's layout: one sentence a line, a blank line
between documents.

It never holds more than one document, and reports what a user should know about
their input (bad UTF-8, CRLF line ends, empty files, absurdly long lines) through a
`warn` callback, once per file and kind of problem.
"""

from __future__ import annotations

import glob
import os
import pathlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from bert_tf.errors import BertTfError
from bert_tf.flags import path_within

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

    def merge(self, other: InputProblems) -> None:
        """Adds the problems another reader (of other spans) found."""
        self.undecodable_lines += other.undecodable_lines
        self.long_lines += other.long_lines
        self.split_documents += other.split_documents
        for mine, theirs in ((self.files_with_undecodable_lines, other.files_with_undecodable_lines),
                             (self.crlf_files, other.crlf_files)):
            mine.extend(path for path in theirs if path not in mine)


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


def check_not_an_input(patterns: str, output: str, flag: str = "--output_file") -> None:
    """Refuses an output that is one of the files of `patterns`, or would be once written (in
    an input folder, or matching an input glob): it would replace the text it reads, or be
    read back as input by the next run.

    >>> check_not_an_input("corpus/*.txt", "corpus/all.txt")
    Traceback (most recent call last):
    ...
    bert_tf.errors.BertTfError: --output_file corpus/all.txt is (or once written would be) one of the --input_file files; write it elsewhere.
    """
    target = pathlib.PurePath(os.path.abspath(output))
    for pattern in (p.strip() for p in patterns.split(",") if p.strip()):
        if target.match(os.path.abspath(pattern)) or any(path_within(output, match) for match in glob.glob(pattern)):
            raise BertTfError(f"{flag} {output} is (or once written would be) one of the --input_file files; "
                              "write it elsewhere.")


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


# === Spans: the unit of reading ===
@dataclass(frozen=True)
class Span:
    """Bytes [start, end) of one input file; the documents that start there are its own.

    A reader of a span reads its own documents whole, past `end` if they go on, and
    skips the end of a document that started before `start`: spans of one file can be
    read independently, by different processes or machines, and together they yield
    every document exactly once.
    """

    path: str
    start: int  # within the file
    end: int
    base: int  # where the file starts in the concatenated input files


def file_spans(path: str, size: int, base: int, cuts: list[int]) -> list[Span]:
    """The spans of a file of `size` bytes at `base`, cut at the corpus offsets `cuts`.

    >>> [(s.start, s.end) for s in file_spans("b.txt", 10, 100, [95, 104, 108, 120])]
    [(0, 4), (4, 8), (8, 10)]
    """
    inner = [cut - base for cut in cuts if base < cut < base + size]
    bounds = [0, *inner, size]
    return [Span(path, lo, hi, base) for lo, hi in zip(bounds, bounds[1:], strict=False)]


def read_documents(files: list[str], problems: InputProblems, warn: Callable[[str], None]) -> Iterator[Document]:
    """Documents of `files`, in order. Each file ends a document (unlike the original,
    which would join the last document of one file to the first of the next)."""
    base = 0
    for path in files:
        size = os.path.getsize(path)
        yield from span_documents(Span(path, 0, size, base), problems, warn)
        base += size


def span_documents(
    span: Span, problems: InputProblems, warn: Callable[[str], None], opener: Callable = open
) -> Iterator[Document]:
    """The documents that start in `span` (`opener(path, "rb")` opens its file)."""
    with opener(span.path, "rb") as file:
        offset, between = _first_line(file, span.start)
        yield from _documents(file, span, offset, between, problems, warn)


def _first_line(file, start: int) -> tuple[int, bool]:
    """Seeks `file` to its first line starting at or after `start`; returns that offset
    and whether it is between documents (at the file's start or after a blank line)."""
    if start == 0:
        file.seek(0)
        return 0, True
    file.seek(start - 1)
    offset = start - 1 + len(file.readline())  # the rest of the line `start` is in
    between = _blank_line_before(file, offset)
    file.seek(offset)
    return offset, between


def _blank_line_before(file, offset: int) -> bool:
    """Whether the line that ends just before `offset` is blank (or there is none)."""
    if offset == 0:
        return True
    block = 256  # most lines are short; a long one takes a few doubling reads
    line = b""
    position = offset - 1  # the line's "\n"
    while position > 0:
        low = max(0, position - block)
        block *= 2
        file.seek(low)
        data = file.read(position - low)
        newline = data.rfind(b"\n")
        line = data[newline + 1 :] + line
        # Printable ASCII is never part of a (multi-byte) white space character.
        if newline >= 0 or any(0x21 <= byte <= 0x7E for byte in data):
            break
        position = low
    return not line.decode("utf-8", "replace").strip()


def _documents(
    file, span: Span, offset: int, between: bool, problems: InputProblems, warn: Callable[[str], None]
) -> Iterator[Document]:
    path = span.path
    lines: list[str] = []
    start = offset
    size = 0
    warned_long = warned_split = False
    for raw in file:
        line_start, offset = offset, offset + len(raw)
        if not lines and between and line_start >= span.end:
            return  # the next document is the next span's
        if path not in problems.crlf_files and raw.endswith(b"\r\n"):
            problems.crlf_files.append(path)
            warn(f"{path} has CRLF (Windows) line ends; they are read as plain line ends.")
        if not between:  # the end of a document that started before the span
            between = not raw.decode("utf-8", "replace").strip()
            continue
        if len(raw) > LONG_LINE_BYTES:
            problems.long_lines += 1
            if not warned_long:
                warned_long = True
                warn(
                    f"{path} has lines over {LONG_LINE_BYTES / 1e6:.1f} MB long; each line is one sentence, "
                    "so only about max_seq_length tokens of one reach an instance (split sentences with "
                    "python -m data_prep.prepare_corpus)."
                )
        text = _decode(raw, path, problems).strip()
        if not text:
            if lines:
                yield Document(lines, span.base + start, span.base + line_start)
                lines, size = [], 0
            continue
        if not lines:
            start = line_start
        elif size + len(raw) > MAX_DOCUMENT_BYTES:
            problems.split_documents += 1
            if not warned_split:
                warned_split = True
                warn(
                    f"{path} has a document over {MAX_DOCUMENT_BYTES >> 20} MB; it is cut into pieces of "
                    "that size to bound memory (separate documents with blank lines)."
                )
            yield Document(lines, span.base + start, span.base + line_start)
            lines, size, start = [], 0, line_start
        lines.append(text)
        size += len(raw)
    if lines:
        yield Document(lines, span.base + start, span.base + offset)
