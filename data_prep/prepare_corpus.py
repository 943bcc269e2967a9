"""Raw text -> BERT's corpus layout: one sentence a line, a blank line between documents.

Next-sentence prediction needs real sentences and real documents. Text that has one
paragraph a line and a blank line after each (WikiText as it ships) makes every
paragraph a one-sentence document: the original then writes ~91% NotNext instances.
This tool splits paragraphs into sentences and finds documents:

- `--documents=blank_lines` (default): a blank line ends a document;
- `--documents=header`: a line matching `--header_regex` starts a document (and is
  dropped); blank lines are only paragraph breaks.

Lines matching `--drop_regex` are dropped (section headings, say). `--corpus_preset=wikitext`
sets both for WikiText (` = Title = ` starts an article, ` = = Section = = ` dropped).

Sentences are split by sentencex (Wikimedia; rule-based, ~300 languages, Chinese
included; about 60 MB/s here on WikiText, 250x pysbd's speed, and it keeps closing
quotes with their sentence where pysbd and blingfire do not).

Other input formats (`--input_format`):

- `wikiextractor`: WikiExtractor's output, the format Wikipedia dumps come in: a
  `<doc id=... title=...>` line opens an article, its title follows (dropped), `</doc>`
  closes it. Empty articles and stubs of one sentence (`--min_sentences`) are dropped
  and counted. A file cut off inside an article, a `</doc>` without its `<doc>` or
  text outside an article stops the run, naming the file and line.
- `tsv`, `csv`: labelled text (news category or review polarity, then the text), one
  record a line, each a document; `--text_column` picks the text, the labels are dropped.

Input that is not UTF-8 stops the run (file and line named) rather than becoming
U+FFFD: a GBK-encoded Chinese file would otherwise turn silently into replacement
characters. Folders stand for every file beneath them.

Example:
  python -m data_prep.prepare_corpus --input_file=wiki.train.tokens \\
      --output_file=corpus.txt --corpus_preset=wikitext
  python -m data_prep.prepare_corpus --input_file=text/ --output_file=corpus.txt \\
      --input_format=wikiextractor
  python -m data_prep.prepare_corpus --input_file=book_review_cls.tsv --language=zh \\
      --output_file=corpus.txt --input_format=tsv --text_column=1
"""

from __future__ import annotations

import csv
import dataclasses
import html
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence

from absl.flags import FlagValues

from bert_tf.atomic import atomic_outputs
from bert_tf.errors import BertTfError
from bert_tf.flags import Flag, check_output_file, flag_values, require, run_main
from data_prep.corpus import check_not_an_input, expand_input_patterns

PRESETS = {
    "wikitext": {
        "documents": "header",
        "header_regex": r"^ = [^=].* = $",
        "drop_regex": r"^ =( =)+ .* =( =)+ $",
    },
}


@dataclasses.dataclass
class CorpusCounts:
    documents: int = 0
    paragraphs: int = 0
    sentences: int = 0
    titles_dropped: int = 0
    empty_documents: int = 0
    short_documents: int = 0  # fewer sentences than min_sentences


@dataclasses.dataclass
class InputFormat:
    """How to read the input files: `name` is one of INPUT_FORMATS."""

    name: str = "text"
    documents: str = "blank_lines"  # text only: blank_lines or header
    header_regex: str | None = None  # text only
    drop_regex: str | None = None  # text only
    text_column: int | None = None  # tsv and csv only
    skip_header: bool = False  # tsv and csv only
    min_sentences: int | None = None  # None: 2 for wikiextractor (stubs), 1 otherwise

    def minimum_sentences(self) -> int:
        if self.min_sentences is not None:
            return self.min_sentences
        return 2 if self.name == "wikiextractor" else 1


INPUT_FORMATS = ["text", "wikiextractor", "tsv", "csv"]
Lines = Iterable[tuple[int, str]]  # (line number, text with its line end: csv needs them in quoted fields)


# A full-width terminator (with the closing quotes after it) always ends a Chinese or
# Japanese sentence; sentencex applies the English rule there too and does not split
# before a lowercase Latin letter ("到死。ps题外话" stays one sentence).
_CJK_SENTENCE_END = re.compile(r"[。！？]+[”’」』）]*")


def _split_cjk(sentence: str) -> list[str]:
    ends = [match.end() for match in _CJK_SENTENCE_END.finditer(sentence)]
    bounds = [0, *(end for end in ends if end < len(sentence)), len(sentence)]
    return [sentence[start:end] for start, end in zip(bounds, bounds[1:])]


def sentence_splitter(language: str) -> Callable[[str], list[str]]:
    """sentencex's segmenter for `language` (an ISO 639-1 code such as en or zh).

    >>> sentence_splitter("zh")("绝望压抑到死。ps题外话，再来交稿。他说：“好的。”")
    ['绝望压抑到死。', 'ps题外话，再来交稿。', '他说：“好的。”']
    >>> sentence_splitter("chinese")
    Traceback (most recent call last):
    ...
    bert_tf.errors.BertTfError: --language 'chinese' is not a language code such as en, zh or de.
    """
    import sentencex  # noqa: PLC0415 (only this tool needs it)

    # sentencex takes any string and splits by English rules when it does not know it.
    if not re.fullmatch(r"[a-z]{2,3}(-[A-Za-z0-9]{2,8})*", language):
        raise BertTfError(f"--language {language!r} is not a language code such as en, zh or de.")

    cjk = language.split("-")[0] in ("zh", "ja")

    def split(paragraph: str) -> list[str]:
        sentences = sentencex.segment(language, paragraph)
        if cjk:
            sentences = [part for sentence in sentences for part in _split_cjk(sentence)]
        return [s.strip() for s in sentences if s.strip()]

    return split


# === Reading ===


def file_lines(path: str) -> Iterator[tuple[int, str]]:
    """Numbered lines of `path` (line ends kept); raises `BertTfError` at bytes that are not UTF-8."""
    with open(path, "rb") as file:
        for number, raw in enumerate(file, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as error:
                # A file cut off (a copy or download that stopped) can end inside a character.
                if error.reason == "unexpected end of data" and not raw.endswith(b"\n"):
                    raise BertTfError(f"{path} ends in the middle of a character (line {number}): the file looks "
                                      "cut off; copy or extract it again.") from None
                raise BertTfError(
                    f"{path} line {number} is not valid UTF-8 (byte {error.start + 1} of the line); "
                    "convert the file to UTF-8 first (e.g. iconv -f GBK -t UTF-8)."
                ) from None
            yield number, line.removeprefix("\ufeff") if number == 1 else line


def text_documents(lines: Lines, mode: str, header: re.Pattern | None, drop: re.Pattern | None) -> Iterator[list[str]]:
    """Groups plain-text lines into documents of paragraphs (lines), by blank lines or headers."""
    paragraphs: list[str] = []
    for _, line in lines:
        line = line.rstrip("\r\n")
        text = line.strip()
        boundary = bool(header and header.match(line)) if mode == "header" else not text
        if boundary:
            if paragraphs:
                yield paragraphs
            paragraphs = []
        elif text and not (drop and drop.match(line)):
            paragraphs.append(text)
    if paragraphs:
        yield paragraphs


_TITLE = re.compile(r'\btitle="(.*)"')


def wikiextractor_documents(path: str, lines: Lines, counts: CorpusCounts) -> Iterator[list[str]]:
    """The articles of a WikiExtractor file, each as its paragraphs without the title line.

    >>> lines = enumerate(['<doc id="1" title="A">', "A", "", "A is B.", "</doc>"], start=1)
    >>> counts = CorpusCounts()
    >>> list(wikiextractor_documents("wiki_00", lines, counts)), counts.titles_dropped
    ([['A is B.']], 1)
    >>> list(wikiextractor_documents("wiki_00", enumerate(["</doc>"], start=1), counts))
    Traceback (most recent call last):
    ...
    bert_tf.errors.BertTfError: wiki_00 line 1 is a </doc> without an opening <doc ...> line: the file is damaged.
    """
    opened_at: int | None = None
    titles: set[str] = set()
    paragraphs: list[str] = []
    for number, line in lines:
        text = line.strip()
        if text.startswith("<doc ") or text == "<doc>":
            if opened_at is not None:
                raise BertTfError(
                    f"{path} line {number} opens an article while the one opened at line {opened_at} has "
                    "no </doc> yet: the file is damaged."
                )
            match = _TITLE.search(text)
            # Versions differ on escaping the attribute (&amp;): either spelling is the title.
            titles = {match.group(1), html.unescape(match.group(1))} if match else set()
            opened_at, paragraphs = number, []
        elif text == "</doc>":
            if opened_at is None:
                raise BertTfError(
                    f"{path} line {number} is a </doc> without an opening <doc ...> line: the file is damaged."
                )
            yield paragraphs
            opened_at = None
        elif opened_at is None:
            if text:
                raise BertTfError(
                    f"{path} line {number} is text outside any <doc ...> ... </doc> article: is the file "
                    "WikiExtractor output? (For plain text use --input_format=text.)"
                )
        elif text:
            # WikiExtractor repeats the title as the article's first line: a heading, not a sentence.
            if not paragraphs and text in titles:
                counts.titles_dropped += 1
                titles = set()
            else:
                paragraphs.append(text)
    if opened_at is not None:
        raise BertTfError(
            f"{path} ends inside the article opened at line {opened_at} (no </doc>): the file looks cut off; "
            "extract it again or delete that last article."
        )


def column_documents(path: str, lines: Lines, separator: str, column: int, skip_header: bool) -> Iterator[list[str]]:
    """One document a record of a labelled-text file: the text of column `column` (0-based).

    TSV is split on tabs as it is (no quoting: a text may hold a `"`); CSV follows RFC 4180 quoting.
    """
    numbered = iter(lines)
    number = 0

    def texts() -> Iterator[str]:
        nonlocal number
        for number, line in numbered:
            yield line

    if separator == ",":
        # strict: a quote left open fails here rather than swallowing the lines after it.
        rows: Iterable[list[str]] = csv.reader(texts(), strict=True)
    else:
        rows = (line.rstrip("\r\n").split("\t") for line in texts())
    try:
        for index, row in enumerate(rows):
            if (index == 0 and skip_header) or not row:
                continue
            if column >= len(row):
                raise BertTfError(
                    f"{path} line {number} has {len(row)} column(s); --text_column={column} (0-based) needs "
                    f"{column + 1}: check --text_column and --input_format."
                )
            text = row[column].strip()
            yield [text] if text else []
    except csv.Error as error:
        raise BertTfError(f"{path} line {number} is not valid CSV: {error}.") from None


def read_documents(path: str, source: InputFormat, counts: CorpusCounts) -> Iterator[list[str]]:
    """The documents of one file, as lists of paragraphs (an empty list: an empty document)."""
    lines = file_lines(path)
    if source.name == "wikiextractor":
        return wikiextractor_documents(path, lines, counts)
    if source.name in ("tsv", "csv"):
        if source.text_column is None:
            raise BertTfError(f"--input_format={source.name} needs --text_column (the 0-based column of the text).")
        separator = "\t" if source.name == "tsv" else ","
        return column_documents(path, lines, separator, source.text_column, source.skip_header)
    header = re.compile(source.header_regex) if source.header_regex else None
    drop = re.compile(source.drop_regex) if source.drop_regex else None
    if source.documents == "header" and header is None:
        raise BertTfError("--documents=header needs --header_regex (the pattern of a document's first line).")
    return text_documents(lines, source.documents, header, drop)


# === Writing ===


def prepare(
    files: list[str], output_file: str, split: Callable[[str], list[str]], source: InputFormat | None = None
) -> CorpusCounts:
    """Writes `files` to `output_file` in BERT's layout (atomically); returns counts."""
    source = source or InputFormat()
    check_output_file(output_file, "--output_file")
    minimum = source.minimum_sentences()
    counts = CorpusCounts()
    with atomic_outputs([output_file]) as (temporary,):
        try:
            out = open(temporary, "w", encoding="utf-8")
        except OSError as error:
            raise BertTfError(f"Cannot write --output_file {output_file}: {error.strerror}.") from None
        with out:
            for path in files:
                for paragraphs in read_documents(path, source, counts):
                    sentences = [sentence for paragraph in paragraphs for sentence in split(paragraph)]
                    if not sentences:
                        counts.empty_documents += 1
                        continue
                    if len(sentences) < minimum:
                        counts.short_documents += 1
                        continue
                    if counts.documents:
                        out.write("\n")
                    out.write("\n".join(sentences) + "\n")
                    counts.documents += 1
                    counts.paragraphs += len(paragraphs)
                    counts.sentences += len(sentences)
    return counts


def summary(counts: CorpusCounts, source: InputFormat, output_file: str) -> str:
    """The closing report: what was written and what was dropped, each kind counted."""
    dropped = [f"{counts.empty_documents:,} empty documents"]
    if source.name == "wikiextractor":
        dropped.insert(0, f"{counts.titles_dropped:,} title lines")
    if source.minimum_sentences() > 1:
        dropped.append(f"{counts.short_documents:,} documents of fewer than {source.minimum_sentences()} sentences")
    return (
        f"{counts.documents:,} documents, {counts.paragraphs:,} paragraphs, {counts.sentences:,} sentences "
        f"-> {output_file}; dropped {', '.join(dropped)}"
    )


FLAGS = flag_values(
    "input_file", "output_file",
    own={
        "language": Flag(str, "en", "Language of the text for sentence splitting (ISO 639-1: en, zh, de...)."),
        "documents": Flag(("blank_lines", "header"), "blank_lines", "How documents are delimited: by blank lines, "
                          "or by lines matching --header_regex."),
        "header_regex": Flag(str, None, "With --documents=header: a line matching it starts a new document (and is "
                             "dropped)."),
        "drop_regex": Flag(str, None, "Lines matching it are dropped (e.g. section headings)."),
        # Not the model's --preset of the other commands: a corpus's settings.
        "corpus_preset": Flag(tuple(PRESETS), None, "Settings for a known corpus; wikitext: documents from "
                              "' = Title = ' lines, section headings dropped.", aliases=("preset",)),
        "input_format": Flag(tuple(INPUT_FORMATS), "text", "text: plain text (see --documents); wikiextractor: "
                             "WikiExtractor's <doc> ... </doc> articles (title lines dropped); tsv / csv: labelled "
                             "text, one document a record, its text in --text_column."),
        "text_column": Flag(int, None, "With --input_format=tsv or csv (required there): the 0-based column holding "
                            "the text; the other columns (labels) are dropped."),
        "skip_header": Flag(bool, False, "With --input_format=tsv or csv: each file's first record is a header."),
        "min_sentences": Flag(int, None, "Documents of fewer sentences are dropped (and counted). Default: 2 with "
                              "--input_format=wikiextractor (stub articles), else 1."),
    },
)  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    """bert-prepare-corpus (`argv` without the program name): exit status 0, or 1 after one
    `error: ...` line on stderr."""
    return run_main(FLAGS, argv, __doc__, _prepare)


def input_format(values: FlagValues) -> InputFormat:
    """The input format the flags describe; raises `BertTfError` for flags that do not fit it."""
    name = values.input_format
    text_only = [flag for flag in ("corpus_preset", "header_regex", "drop_regex", "documents") if values[flag].present]
    if name != "text" and text_only:
        raise BertTfError(f"--{text_only[0]} applies to --input_format=text only, not --input_format={name}.")
    if name not in ("tsv", "csv") and (values["text_column"].present or values.skip_header):
        raise BertTfError(f"--text_column and --skip_header apply to --input_format=tsv or csv, not {name}.")
    for flag in ("header_regex", "drop_regex"):
        if values[flag].value is not None:
            try:
                re.compile(values[flag].value)
            except re.error as error:
                raise BertTfError(f"--{flag} {values[flag].value!r} is not a regular expression ({error}).") from None
    for flag, least in (("text_column", 0), ("min_sentences", 1)):
        if values[flag].value is not None and values[flag].value < least:
            raise BertTfError(f"--{flag} must be at least {least}, got {values[flag].value}.")
    source = InputFormat(
        name,
        values.documents,
        values.header_regex,
        values.drop_regex,
        values.text_column,
        values.skip_header,
        values.min_sentences,
    )
    if values.corpus_preset:
        source = dataclasses.replace(source, **PRESETS[values.corpus_preset])
    return source


def _prepare(values: FlagValues) -> None:
    require(values, "input_file", "output_file")
    source = input_format(values)
    check_not_an_input(values.input_file, values.output_file)
    counts = prepare(
        expand_input_patterns(values.input_file), values.output_file, sentence_splitter(values.language), source
    )
    if not counts.documents:
        print("warning: no text found; the output file is empty.", file=sys.stderr)
    print(summary(counts, source, values.output_file), file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
