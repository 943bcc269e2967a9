"""data_prep.prepare_corpus on slices of the real shared corpora: WikiExtractor dumps
(English and Chinese), labelled Chinese text (TSV, CSV) and their malformed variants.

Expected counts and sentences are worked out by hand from the slices (line numbers
below are the shared files' own).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from bert_tf.errors import BertTfError
from data_prep.prepare_corpus import CorpusCounts, InputFormat, prepare, sentence_splitter
from tests.conftest import REPO_ROOT, require_module, shared_file

ENWIKI = "pretrain/enwiki/wiki_00"
ZHWIKI = "pretrain/zh/zhwiki_wiki_00"


@pytest.fixture(autouse=True)
def _sentencex():
    require_module("sentencex", "the sentence segmenter of prepare_corpus")


def lines_of(relative: str, *ranges: tuple[int, int]) -> list[str]:
    """Lines `first..last` (1-based, inclusive) of each range of a shared file, line ends kept."""
    lines = shared_file(relative).read_text(encoding="utf-8").splitlines(keepends=True)
    return [line for first, last in ranges for line in lines[first - 1 : last]]


def write(path: Path, lines: list[str], encoding: str = "utf-8") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes("".join(lines).encode(encoding))
    return path


def documents_of(path: Path) -> list[list[str]]:
    return [document.splitlines() for document in path.read_text(encoding="utf-8").split("\n\n")]


def run_tool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "data_prep.prepare_corpus", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


# === WikiExtractor ===


def test_wikiextractor_folder_drops_titles_empty_and_one_sentence_articles(tmp_path):
    # wiki_00 lines 1-5: "Marcus Claudius Tacitus", title only (empty); 6-13: "Jarred Shaw",
    # title + 3 paragraphs; 694-699: "Matīss Miknis", title + one sentence. Two files in
    # WikiExtractor's folder layout (text/AA, text/AB).
    first = lines_of(ENWIKI, (1, 13))
    write(tmp_path / "text" / "AA" / "wiki_00", first)
    write(tmp_path / "text" / "AB" / "wiki_00", lines_of(ENWIKI, (694, 699)))
    output = tmp_path / "corpus.txt"

    result = run_tool(f"--input_file={tmp_path / 'text'}", f"--output_file={output}", "--input_format=wikiextractor")

    assert result.returncode == 0, result.stderr
    # Paragraph 3 (line 11) holds three sentences: split by hand at its ". ".
    third = first[10].strip().split(". ")
    expected = [first[8].strip(), first[9].strip(), third[0] + ".", third[1] + ".", third[2]]
    assert documents_of(output) == [expected]
    assert expected[1] == "Professional career."  # WikiExtractor's section heading, kept as a line
    assert (
        "1 documents, 3 paragraphs, 5 sentences -> " in result.stderr
        and "dropped 3 title lines, 1 empty documents, 1 documents of fewer than 2 sentences" in result.stderr
    ), result.stderr


def test_wikiextractor_chinese_article(tmp_path):
    # zhwiki_wiki_00 lines 1266-1275: "信息学", two paragraphs of 1 and 3 sentences (。);
    # 2422-2428: "设计模式", one sentence (a disambiguation stub).
    lines = lines_of(ZHWIKI, (1266, 1275), (2422, 2428))
    source = write(tmp_path / "wiki_00", lines)
    output = tmp_path / "corpus.txt"

    counts = prepare([str(source)], str(output), sentence_splitter("zh"), InputFormat("wikiextractor"))

    expected = [sentence + "。" for line in (lines[3], lines[6]) for sentence in line.strip().split("。")[:-1]]
    assert len(expected) == 4
    assert documents_of(output) == [expected]
    assert counts == CorpusCounts(
        documents=1, paragraphs=2, sentences=4, titles_dropped=2, empty_documents=0, short_documents=1
    )


# === Labelled text ===


def test_tsv_keeps_the_text_column_one_document_a_line(tmp_path):
    lines = lines_of("pretrain/zh/book_review_cls.tsv", (1, 5))
    source = write(tmp_path / "reviews.tsv", lines)
    output = tmp_path / "corpus.txt"

    counts = prepare([str(source)], str(output), sentence_splitter("zh"), InputFormat("tsv", text_column=1))

    texts = [line.rstrip("\n").split("\t")[1] for line in lines]
    assert ["".join(document) for document in documents_of(output)] == texts
    # Review 1 ends four sentences with 。; the others are one sentence each ("。。" included).
    assert counts == CorpusCounts(documents=5, paragraphs=5, sentences=8)


def test_csv_reads_quoted_fields_and_skips_the_header(tmp_path):
    # Line 8 quotes a review holding commas; line 7310 escapes a quote as "".
    source = write(tmp_path / "waimai.csv", lines_of("pretrain/zh/waimai_10k.csv", (1, 8), (7310, 7310)))
    output = tmp_path / "corpus.txt"

    counts = prepare(
        [str(source)], str(output), sentence_splitter("zh"), InputFormat("csv", text_column=1, skip_header=True)
    )

    texts = ["".join(document) for document in documents_of(output)]
    assert texts[0] == "很快，好吃，味道足，量大"
    assert texts[6:] == ["送餐快,态度也特别好,辛苦啦谢谢", '无语O__O"…问苍天']
    assert counts.documents == 8 and counts.empty_documents == 0


# === Bad input ===


@pytest.mark.parametrize(
    ("relative", "ranges", "source", "encoding", "message"),
    [
        # Cut off inside "Harrow International School Shanghai" (opened at line 14).
        (ENWIKI, [(1, 20)], InputFormat("wikiextractor"), "utf-8", r"ends inside the article opened at line 14 "),
        # Starts at the </doc> of line 5.
        (ENWIKI, [(5, 13)], InputFormat("wikiextractor"), "utf-8", r"line 1 is a </doc> without an opening <doc"),
        # Two articles with the </doc> between them (line 13) removed.
        (ENWIKI, [(6, 12), (14, 28)], InputFormat("wikiextractor"), "utf-8", r"line 8 opens an .* at line 1 "),
        # Plain text given as WikiExtractor output.
        ("pretrain/sample_text.txt", [(1, 5)], InputFormat("wikiextractor"), "utf-8", r"line 1 is text outside"),
        # GB18030 bytes, a common encoding of Chinese files; line 1 holds the title attribute 信息学.
        (ZHWIKI, [(1266, 1275)], InputFormat("wikiextractor"), "gb18030", r"line 1 is not valid UTF-8"),
        ("pretrain/zh/book_review_cls.tsv", [(1, 3)], InputFormat("tsv", text_column=2), "utf-8", r"line 1 has 2 "),
    ],
)
def test_bad_input_names_file_and_line_and_writes_nothing(tmp_path, relative, ranges, source, encoding, message):
    path = write(tmp_path / "input", lines_of(relative, *ranges), encoding)
    output = tmp_path / "corpus.txt"
    with pytest.raises(BertTfError, match=f"^{re.escape(str(path))} .*{message}"):
        prepare([str(path)], str(output), sentence_splitter("en"), source)
    assert list(tmp_path.iterdir()) == [path]


def test_a_file_cut_inside_a_character_is_called_cut_off(tmp_path):
    """zhwiki lines 1-12, the last cut after the first byte of its first Chinese character:
    a file cut off, not a file in another encoding."""
    content = "".join(lines_of(ZHWIKI, (1, 12))).encode("utf-8")
    cut = content.rindex(b"\n", 0, len(content) - 1) + 1  # the start of line 12
    cut += next(i for i, byte in enumerate(content[cut:]) if byte >= 0xE0) + 1  # one byte into a 3-byte character
    path = tmp_path / "wiki_00"
    path.write_bytes(content[:cut])
    with pytest.raises(BertTfError, match=f"^{re.escape(str(path))} ends in the middle of a character \\(line 12\\): "
                                          "the file looks cut off; copy or extract it again\\.$"):
        prepare([str(path)], str(tmp_path / "out.txt"), sentence_splitter("zh"), InputFormat("wikiextractor"))
    assert list(tmp_path.iterdir()) == [path]


def test_csv_quote_left_open_is_named(tmp_path):
    # waimai line 11018 (a quoted review) with its closing quote cut off, after 2 good lines.
    lines = lines_of("pretrain/zh/waimai_10k.csv", (1, 2), (11018, 11018))
    lines[2] = lines[2].rstrip('"\n') + "\n"
    path = write(tmp_path / "waimai.csv", lines)
    with pytest.raises(BertTfError, match=f"^{re.escape(str(path))} line 3 is not valid CSV: unexpected end of data"):
        prepare([str(path)], str(tmp_path / "out.txt"), sentence_splitter("zh"), InputFormat("csv", text_column=1))
    assert list(tmp_path.iterdir()) == [path]


def test_command_reports_bad_input_in_one_line(tmp_path):
    path = write(tmp_path / "wiki_00", lines_of(ENWIKI, (1, 20)))
    result = run_tool(f"--input_file={path}", f"--output_file={tmp_path / 'out.txt'}", "--input_format=wikiextractor")
    assert result.returncode == 1
    assert result.stderr.startswith(f"error: {path} ends inside the article opened at line 14")
    assert "Traceback" not in result.stderr and not (tmp_path / "out.txt").exists()
    good = write(tmp_path / "good_00", lines_of(ENWIKI, (1, 13)))
    result = run_tool(f"--input_file={good}", f"--output_file={tmp_path}/", "--input_format=wikiextractor")
    assert (result.returncode, result.stderr) == (1, f"error: --output_file {tmp_path}/ is a folder; give a file "
                                                     "name.\n")  # was a NotADirectoryError after the work
    result = run_tool(f"--input_file={good}", "--output_file=x.txt", "--language=chinese")
    assert (result.returncode, result.stderr) == (1, "error: --language 'chinese' is not a language code such as en, "
                                                     "zh or de.\n")
    # Its own output among its inputs: a re-run merged last run's corpus into the new one, exit 0.
    result = run_tool(f"--input_file={tmp_path}", f"--output_file={tmp_path / 'corpus.txt'}",
                      "--input_format=wikiextractor")
    assert (result.returncode, result.stderr) == (1, f"error: --output_file {tmp_path / 'corpus.txt'} is (or once "
                                                     "written would be) one of the --input_file files; write it "
                                                     "elsewhere.\n")
    for flag in ("--header_regex=(", "--drop_regex=["):  # were re.error tracebacks
        result = run_tool(f"--input_file={good}", f"--output_file={tmp_path / 'x.txt'}", flag)
        assert result.returncode == 1 and result.stderr.startswith(f"error: --{flag[2:].split('=')[0]} "
                                                                   f"'{flag[-1]}' is not a regular expression (")
        assert result.stderr.count("\n") == 1 and not (tmp_path / "x.txt").exists()
