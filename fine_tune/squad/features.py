"""SQuAD examples -> model inputs: sliding windows over the context, as the original.

Each row is `[CLS] question [SEP] window of the context [SEP]` (segment ids 0 for the
first part, 1 for the second). The question is cut to `max_query_length` WordPieces; a
context longer than the room left (`max_seq_length - len(question) - 3`) is covered by
windows starting every `doc_stride` tokens. A token seen by several windows is
predicted only from the one where it has the most context on its shorter side (the
original's `_check_is_max_context`).

Alignment: each context word is cut into WordPieces on its own, so every WordPiece
knows its word; an answer's words become a WordPiece span, narrowed to the WordPieces
of the answer text when they are inside it (the original's `_improve_answer_span`:
"(1895-1943)." holds the answer "1895"). Training targets point at that span in each
window that contains it whole, and at [CLS] (position 0) elsewhere and for
unanswerable questions.

Example:
>>> doc_spans(num_tokens=10, max_tokens_for_doc=4, doc_stride=3)
[(0, 4), (3, 4), (6, 4)]
>>> [mask.tolist() for mask in max_context_masks([(0, 4), (3, 4), (6, 4)], 10)]
[[True, True, True, True], [False, True, True, True], [False, True, True, True]]
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Sequence

import numpy as np

from bert_tf.errors import BertTfError
from bert_tf.tokenization import FullTokenizer
from fine_tune.squad.reader import Paragraph, SquadExample
from fine_tune.task import Features


@dataclasses.dataclass(frozen=True)
class DocTokens:
    """The WordPieces of a paragraph.

    Args:
        tokens: every WordPiece of the context, word after word.
        ids: their vocabulary ids.
        token_to_word: the word of each WordPiece.
        word_to_token: the first WordPiece of each word (a word with no WordPiece, e.g.
            only control characters, points at the next word's).
    """

    tokens: list[str]
    ids: np.ndarray
    token_to_word: np.ndarray
    word_to_token: np.ndarray

    @classmethod
    def of(cls, paragraph: Paragraph, tokenizer: FullTokenizer) -> "DocTokens":
        tokens: list[str] = []
        token_to_word: list[int] = []
        word_to_token: list[int] = []
        for index, word in enumerate(paragraph.words):
            word_to_token.append(len(tokens))
            pieces = tokenizer.tokenize(word)
            tokens += pieces
            token_to_word += [index] * len(pieces)
        return cls(
            tokens,
            np.asarray(tokenizer.convert_tokens_to_ids(tokens), dtype=np.int32),
            np.asarray(token_to_word, dtype=np.int32),
            np.asarray(word_to_token, dtype=np.int32),
        )


@dataclasses.dataclass(frozen=True)
class Window:
    """One row of an example: doc tokens `start .. start+length-1` at row positions from `offset`.

    `max_context[i]` says whether doc token `start + i` is predicted from this window.
    """

    doc: DocTokens
    start: int
    length: int
    offset: int
    max_context: np.ndarray

    def word(self, position: int) -> int:
        """The context word of row position `position` (a context position)."""
        return int(self.doc.token_to_word[self.start + position - self.offset])

    def tokens(self, first: int, last: int) -> list[str]:
        """The WordPieces at row positions `first..last` (context positions)."""
        return self.doc.tokens[self.start + first - self.offset : self.start + last - self.offset + 1]


# === Windows ===
def doc_spans(num_tokens: int, max_tokens_for_doc: int, doc_stride: int) -> list[tuple[int, int]]:
    """(start, length) of each window over `num_tokens` context tokens."""
    spans = []
    start = 0
    while start < num_tokens:
        length = min(num_tokens - start, max_tokens_for_doc)
        spans.append((start, length))
        if start + length == num_tokens:
            break
        start += min(length, doc_stride)
    return spans


def max_context_masks(spans: Sequence[tuple[int, int]], num_tokens: int) -> list[np.ndarray]:
    """For each window, which of its tokens it has the most context for.

    A token's score in a window is min(left context, right context) + 0.01 * window
    length; the first window with the highest score wins (ties go to the earlier one).
    """
    if not spans:  # a context without any WordPiece (empty, or control characters only)
        return []
    positions = np.arange(num_tokens)
    scores = np.full((len(spans), num_tokens), -np.inf)
    for index, (start, length) in enumerate(spans):
        inside = positions[start : start + length]
        scores[index, start : start + length] = (
            np.minimum(inside - start, start + length - 1 - inside) + 0.01 * length
        )
    best = np.argmax(scores, axis=0)
    return [best[start : start + length] == index for index, (start, length) in enumerate(spans)]


# === Answers ===
def improve_answer_span(
    doc_tokens: Sequence[str], start: int, end: int, tokenizer: FullTokenizer, answer_text: str
) -> tuple[int, int]:
    """The first (then longest) sub-span of `start..end` whose WordPieces are the answer's.

    >>> class Tokenizer:  # splits "(1895-1943)." as BERT does
    ...     def tokenize(self, text): return text.replace("(", "( ").replace("-", " - ").split()
    >>> improve_answer_span(["(", "1895", "-", "1943", ")", "."], 0, 5, Tokenizer(), "1895")
    (1, 1)
    """
    target = " ".join(tokenizer.tokenize(answer_text))
    for new_start in range(start, end + 1):
        for new_end in range(end, new_start - 1, -1):
            if " ".join(doc_tokens[new_start : new_end + 1]) == target:
                return new_start, new_end
    return start, end


def answer_token_span(example: SquadExample, doc: DocTokens, tokenizer: FullTokenizer) -> tuple[int, int] | None:
    """The WordPiece span of the example's training answer, or None (no aligned answer)."""
    answer = example.train_answer
    if example.is_impossible or answer is None:
        return None
    start = int(doc.word_to_token[answer.first_word])
    if answer.last_word + 1 < len(doc.word_to_token):
        end = int(doc.word_to_token[answer.last_word + 1]) - 1
    else:
        end = len(doc.tokens) - 1
    return improve_answer_span(doc.tokens, start, end, tokenizer, answer.text)


# === The featuriser ===
class SpanFeaturiser:
    """Featuriser of span extraction (SQuAD): one row per window of each example.

    Rows carry `start_positions` / `end_positions` (the training targets; [CLS] = 0 when
    the answer is not in the window, the question is unanswerable, or unlabelled), and
    a `Window` each in `Features.extras` for decoding.

    Example:
    >>> import os, tempfile
    >>> words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "who", "won", "?", "the", "bron", "##cos", "did"]
    >>> path = os.path.join(tempfile.mkdtemp(), "vocab.txt")
    >>> _ = open(path, "w").write("\\n".join(words))
    >>> from fine_tune.squad.reader import Paragraph, align_answer
    >>> paragraph = Paragraph.from_context("The Broncos did.")
    >>> example = SquadExample("q1", "Who won?", paragraph, (align_answer(paragraph, "Broncos", 4),))
    >>> features = SpanFeaturiser(doc_stride=2, max_query_length=8)([example], FullTokenizer(path), 16, [])
    >>> features.sequences["input_word_ids"][0].tolist()
    [2, 5, 6, 7, 3, 8, 9, 10, 11, 1, 3]
    >>> features.scalars["start_positions"].tolist(), features.scalars["end_positions"].tolist()
    ([6], [7])
    """

    def __init__(self, doc_stride: int, max_query_length: int):
        self.doc_stride = doc_stride
        self.max_query_length = max_query_length

    def __call__(
        self, examples: Sequence[SquadExample], tokenizer: FullTokenizer, max_seq_length: int, labels: Sequence[str]
    ) -> Features:
        check_lengths(max_seq_length, self.max_query_length, self.doc_stride)
        special = tokenizer.convert_tokens_to_ids(["[CLS]", "[SEP]"])
        docs: dict[int, DocTokens] = {}
        rows = _Rows()
        truncated = 0
        for example_index, example in enumerate(examples):
            query = tokenizer.tokenize(example.question)
            truncated += len(query) > self.max_query_length
            query_ids = np.asarray(tokenizer.convert_tokens_to_ids(query[: self.max_query_length]), np.int32)
            key = id(example.paragraph)
            if key not in docs:
                docs[key] = DocTokens.of(example.paragraph, tokenizer)
            doc = docs[key]
            answer = answer_token_span(example, doc, tokenizer)
            self._add_windows(rows, example_index, query_ids, doc, answer, max_seq_length, special)
        if truncated:
            print(
                f"note: {truncated} questions are longer than --max_query_length={self.max_query_length} WordPieces; "
                "they were truncated to it.",
                file=sys.stderr,
                flush=True,
            )
        return rows.features()

    def _add_windows(
        self,
        rows: "_Rows",
        example_index: int,
        query_ids: np.ndarray,
        doc: DocTokens,
        answer: tuple[int, int] | None,
        max_seq_length: int,
        special: list[int],
    ) -> None:
        cls_id, sep_id = special
        spans = doc_spans(len(doc.tokens), max_seq_length - len(query_ids) - 3, self.doc_stride)
        offset = len(query_ids) + 2
        head = np.concatenate([[cls_id], query_ids, [sep_id]]).astype(np.int32)
        for (start, length), mask in zip(spans, max_context_masks(spans, len(doc.tokens))):
            ids = np.concatenate([head, doc.ids[start : start + length], [sep_id]]).astype(np.int32)
            types = np.zeros(len(ids), np.int32)
            types[offset:] = 1
            target = (0, 0)
            if answer is not None and answer[0] >= start and answer[1] <= start + length - 1:
                target = (answer[0] - start + offset, answer[1] - start + offset)
            rows.add(example_index, ids, types, target, Window(doc, start, length, offset, mask))


class _Rows:
    """Accumulates the rows of a featuriser call."""

    def __init__(self):
        self.word_ids: list[np.ndarray] = []
        self.type_ids: list[np.ndarray] = []
        self.targets: list[tuple[int, int]] = []
        self.example_index: list[int] = []
        self.windows: list[Window] = []

    def add(self, example_index: int, ids: np.ndarray, types: np.ndarray, target: tuple[int, int], window: Window):
        self.word_ids.append(ids)
        self.type_ids.append(types)
        self.targets.append(target)
        self.example_index.append(example_index)
        self.windows.append(window)

    def features(self) -> Features:
        targets = np.asarray(self.targets, dtype=np.int32).reshape(-1, 2)
        return Features(
            sequences={"input_word_ids": self.word_ids, "input_type_ids": self.type_ids},
            scalars={"start_positions": targets[:, 0], "end_positions": targets[:, 1]},
            example_index=np.asarray(self.example_index, dtype=np.int64),
            extras=self.windows,
        )


def check_lengths(max_seq_length: int, max_query_length: int, doc_stride: int) -> None:
    """Raises a `BertTfError` unless windows of the context can be built and overlap.

    >>> check_lengths(384, 64, 400)
    Traceback (most recent call last):
    ...
    bert_tf.errors.BertTfError: --doc_stride 400 must be smaller than the room left for the context, max_seq_length - max_query_length - 3 = 317, or windows would skip context tokens.
    """
    room = max_seq_length - max_query_length - 3
    if room < 1:
        raise BertTfError(
            f"--max_seq_length {max_seq_length} must be greater than --max_query_length {max_query_length} + 3 "
            "to leave room for the context."
        )
    if doc_stride < 1:
        raise BertTfError(f"--doc_stride must be positive, got {doc_stride}.")
    if doc_stride >= room:
        raise BertTfError(
            f"--doc_stride {doc_stride} must be smaller than the room left for the context, "
            f"max_seq_length - max_query_length - 3 = {room}, or windows would skip context tokens."
        )
