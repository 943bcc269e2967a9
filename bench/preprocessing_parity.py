"""`bert_tf.preprocessing.BertPreprocessor` against the ids the fine-tuning featurisers feed the model.

For the uncased, cased and Chinese vocabularies of Google's BERT, on

- every pair of every shared GLUE `dev.tsv` (and ChnSentiCorp's): the padded rows of
  `BertPreprocessor([text_a, text_b])` (mask-trimmed) against `PairFeaturiser`'s
  (`run_classifier.py`), at `--max_seq_length` 128 and at 32 (much truncation);
- every CoNLL-2003 `eng.testa` sentence (and People's Daily's, character-level): the
  ids of each word from `BertPreprocessor.tokenize` against `FullTokenizer`'s, which
  `TaggingFeaturiser` (`run_ner.py`) cuts words into; and, for sentences that fit in one
  window, the layer's row of the space-joined sentence against the featuriser's row
  (its [UNK] for a word with no WordPiece applied);
- every SQuAD v1.1 dev question: `[CLS] question [SEP] window [SEP]` packed by the
  layer from its tokens of the question and of the whole context, for the same window
  starts and lengths (`doc_spans`), against `SpanFeaturiser`'s rows (`run_squad.py`).

A row counts as identical only if every id (and segment id) is. `tests/test_preprocessing.py`
runs the same comparisons on slices.

    python -m bench.preprocessing_parity [--limit N]
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import os
import time
from collections.abc import Iterator, Sequence

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np
import tensorflow as tf

from bench.common import data_dir, print_table, write_json
from bert_tf.preprocessing import BertPreprocessor
from bert_tf.tokenization import FullTokenizer
from fine_tune import registry
from fine_tune.features import PairExample, PairFeaturiser
from fine_tune.glue import GlueConfig
from fine_tune.squad.features import SpanFeaturiser, doc_spans
from fine_tune.squad.reader import SquadExample, read_squad
from fine_tune.tagging import TaggedSentence, TaggingFeaturiser, read_conll
from fine_tune.tsv import read_tsv

VOCABS = {  # name: (file in the shared data, do_lower_case)
    "uncased": ("vocab/google_uncased_en_vocab.txt", True),
    "cased": ("vocab/google_cased_en_vocab.txt", False),
    "chinese": ("vocab/google_zh_vocab.txt", True),
}
GLUE_FOLDERS = ("CoLA", "MRPC", "QNLI", "RTE", "SST-2", "STS-B", "WNLI")
BATCH = 256


# === Inputs ===
def glue_examples(folder: str) -> list[PairExample]:
    """The dev pairs of a shared GLUE folder, read by its task's reader (the GLUE name, lower-cased)."""
    task = registry.build_task(GlueConfig(task=folder.lower()))
    return task.reader.read(str(data_dir() / "glue" / folder), "dev")[0].examples


def chnsenticorp_examples() -> list[PairExample]:
    rows = read_tsv(str(data_dir() / "zh" / "chnsenticorp" / "dev.tsv"))[1:]
    return [PairExample(str(row.line), row.cells[1], None, row.cells[0]) for row in rows]


def conll_sentences(relative: str) -> list[TaggedSentence]:
    return read_conll(str(data_dir() / relative))


def squad_examples() -> list[SquadExample]:
    return read_squad(str(data_dir() / "squad" / "dev-v1.1.json"), False, split="dev")


@functools.lru_cache(maxsize=None)
def tokenizers(vocab: str) -> tuple[FullTokenizer, BertPreprocessor]:
    """The featurisers' tokenizer and the layer, for a `VOCABS` name (the layer takes seconds to build)."""
    relative, lower = VOCABS[vocab]
    path = str(data_dir() / relative)
    return FullTokenizer(path, do_lower_case=lower), BertPreprocessor(path, do_lower_case=lower, seq_length=512)


def _batches(items: Sequence, size: int = BATCH) -> Iterator[Sequence]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _rows(outputs: dict[str, tf.Tensor]) -> list[tuple[list[int], list[int]]]:
    """(word ids, type ids) of each packed row, without its padding."""
    lengths = outputs["input_mask"].numpy().sum(axis=1)
    ids, types = outputs["input_word_ids"].numpy(), outputs["input_type_ids"].numpy()
    return [(ids[i, :n].tolist(), types[i, :n].tolist()) for i, n in enumerate(lengths)]


# === Comparisons: (identical rows, rows) ===
def pair_parity(vocab: str, examples: Sequence[PairExample], max_seq_length: int) -> tuple[int, int]:
    """PairFeaturiser (run_classifier.py) against the layer on raw texts."""
    tokenizer, preprocessor = tokenizers(vocab)
    labels = sorted({example.label for example in examples if example.label is not None})
    features = PairFeaturiser()(examples, tokenizer, max_seq_length, labels)
    expected = [(w.tolist(), t.tolist()) for w, t in
                zip(features.sequences["input_word_ids"], features.sequences["input_type_ids"])]
    got = []
    for batch in _batches(examples):
        texts = [tf.constant([e.text_a for e in batch])]
        if batch[0].text_b is not None:
            texts.append(tf.constant([e.text_b for e in batch]))
        segments = [preprocessor.tokenize(text) for text in texts]
        got += _rows(preprocessor.pack(segments, seq_length=max_seq_length))
    return sum(a == b for a, b in zip(got, expected)), len(expected)


def word_parity(vocab: str, sentences: Sequence[TaggedSentence], max_seq_length: int = 128) -> dict[str, tuple[int, int]]:
    """Per-word ids (what TaggingFeaturiser cuts words into), and the rows of sentences that fit one window.

    The layer reads each sentence as its words joined by spaces, and must find those words again.
    """
    tokenizer, preprocessor = tokenizers(vocab)
    unk = tokenizer.vocab["[UNK]"]
    unlabelled = [dataclasses.replace(sentence, label=None) for sentence in sentences]
    features = TaggingFeaturiser(document_context=False)(unlabelled, tokenizer, max_seq_length, ())
    single = np.bincount(features.example_index, minlength=len(sentences)) == 1
    row_of = {int(sentence): row for row, sentence in enumerate(features.example_index)}
    same_words = same_rows = 0
    for start, batch in zip(range(0, len(sentences), BATCH), _batches(sentences)):
        words = preprocessor.tokenize(tf.constant([" ".join(s.words) for s in batch])).to_list()
        segments, wanted = [], []
        for number, (sentence, got) in enumerate(zip(batch, words), start):
            want = [tokenizer.convert_tokens_to_ids(tokenizer.tokenize(word)) for word in sentence.words]
            same_words += sum(a == b for a, b in zip(got, want)) if len(got) == len(want) else 0
            if single[number]:
                # The featuriser's rule: a word without any WordPiece is fed as [UNK].
                segments.append([piece for word in got for piece in (word or [unk])])
                wanted.append(features.sequences["input_word_ids"][row_of[number]].tolist())
        if segments:
            packed = preprocessor.pack([tf.ragged.constant(segments, tf.int32, ragged_rank=1)], seq_length=max_seq_length)
            same_rows += sum(ids == want for (ids, _), want in zip(_rows(packed), wanted))
    return {
        "words": (same_words, sum(len(s.words) for s in sentences)),
        "sentences": (same_rows, int(single.sum())),
    }


def squad_parity(
    vocab: str, examples: Sequence[SquadExample], max_seq_length: int = 384, doc_stride: int = 128,
    max_query_length: int = 64,
) -> tuple[int, int]:
    """SpanFeaturiser's windows (run_squad.py) against the layer's, window starts as `doc_spans`."""
    tokenizer, preprocessor = tokenizers(vocab)
    features = SpanFeaturiser(doc_stride, max_query_length)(examples, tokenizer, max_seq_length, ())
    expected = [(w.tolist(), t.tolist()) for w, t in
                zip(features.sequences["input_word_ids"], features.sequences["input_type_ids"])]
    got = []
    for batch in _batches(examples):
        questions = preprocessor.tokenize(tf.constant([e.question for e in batch])).merge_dims(1, 2)
        contexts = preprocessor.tokenize(tf.constant([e.paragraph.context for e in batch])).merge_dims(1, 2)
        queries, windows = [], []
        for question, context in zip(questions.to_list(), contexts.to_list()):
            question = question[:max_query_length]
            for start, length in doc_spans(len(context), max_seq_length - len(question) - 3, doc_stride):
                queries.append(question)
                windows.append(context[start : start + length])
        segments = [tf.ragged.constant(queries, tf.int32, ragged_rank=1), tf.ragged.constant(windows, tf.int32, ragged_rank=1)]
        got += _rows(preprocessor.pack(segments, seq_length=max_seq_length))
    return sum(a == b for a, b in zip(got, expected)), len(expected)


# === The table ===
def run(limit: int | None) -> list[dict]:
    rows = []

    def add(vocab: str, data: str, what: str, result: tuple[int, int], seconds: float) -> None:
        same, total = result
        rows.append({"vocab": vocab, "data": data, "rows": what, "identical": same, "total": total,
                     "share": same / max(total, 1), "seconds": round(seconds, 1)})
        print(f"{vocab:8} {data:22} {what:12} {same}/{total}", flush=True)

    def timed(function, *args):
        start = time.perf_counter()
        return function(*args), time.perf_counter() - start

    squad = squad_examples()[:limit]
    conll = conll_sentences("conll2003/eng.testa")[:limit]
    for vocab in VOCABS:
        for folder in GLUE_FOLDERS:
            examples = glue_examples(folder)[:limit]
            for length in (128, 32):
                add(vocab, f"GLUE {folder} dev", f"pairs@{length}", *timed(pair_parity, vocab, examples, length))
        (words, sentences), seconds = timed(lambda: tuple(word_parity(vocab, conll).values()))
        add(vocab, "CoNLL eng.testa", "words", words, seconds)
        add(vocab, "CoNLL eng.testa", "sentences", sentences, 0.0)
        add(vocab, "SQuAD v1.1 dev", "windows@384", *timed(squad_parity, vocab, squad))
    chinese = chnsenticorp_examples()[:limit]
    add("chinese", "ChnSentiCorp dev", "texts@128", *timed(pair_parity, "chinese", chinese, 128))
    daily = conll_sentences("zh/peoples_daily_ner/example.dev")[:limit]
    (words, sentences), seconds = timed(lambda: tuple(word_parity("chinese", daily).values()))
    add("chinese", "People's Daily dev", "characters", words, seconds)
    add("chinese", "People's Daily dev", "sentences", sentences, 0.0)
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=None, help="Only the first N examples of each set.")
    args = parser.parse_args(argv)
    rows = run(args.limit)
    print()
    print_table(rows, ["vocab", "data", "rows", "identical", "total", "share", "seconds"])
    path = write_json("preprocessing_parity", {"limit": args.limit, "rows": rows,
                                               "all_identical": all(r["identical"] == r["total"] for r in rows)})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
