"""SQuAD v1.1 / v2.0 JSON files -> `SquadExample`s.

As the original `read_squad_examples`, a context is cut into "words" at whitespace
(space, tab, CR, LF and U+202F), and every character maps to the word it belongs to
(a whitespace character to the word before it). One extension, for Chinese
SQuAD-format data (DRCD, CMRC 2018), whose text has no spaces and whose answers are
character offsets: a context with a CJK ideograph in it is cut as BERT's
BasicTokenizer cuts text, each ideograph and each punctuation character a word of its
own (`_tokenize_chinese_chars` and `_run_split_on_punc`), so answers map to exact words
(all but 6 of DRCD_dev's 7,048: those end inside a number, "8" of "81", and the
post-processing narrows them as the original does inside English words). The
WordPieces are the same either way (the tokenizer splits there anyway); only the
words an answer maps back to are finer. A context without CJK gets the original's words.

Answers: every answer text is a gold answer for scoring (the official scripts read
only the texts). Training uses the first answer whose `answer_start` points at its
text in the context; answers that do not are counted and reported once, and a question
left without any such answer is skipped for training (the original skipped answers it
could not recover the same way).

Example:
>>> paragraph = Paragraph.from_context("The Broncos won 24\u201310.")
>>> paragraph.words, paragraph.char_to_word[4]
(('The', 'Broncos', 'won', '24\u201310.'), 1)
>>> Paragraph.from_context("\u5728\u5317\u4eac ok").words
('\u5728', '\u5317', '\u4eac', 'ok')
>>> Paragraph.from_context("\u3002""1991\u5e74 8.90%").words  # 。1991年 8.90%
('\u3002', '1991', '\u5e74', '8', '.', '90', '%')
"""

from __future__ import annotations

import bisect
import dataclasses
import json
import sys
from collections.abc import Callable, Iterator
from typing import Any

from bert_tf.errors import DataError
from bert_tf.tokenization import is_cjk, is_punctuation

# The original's `is_whitespace` in run_squad.py: other Unicode spaces stay inside a
# word (the WordPiece tokenizer splits on them later).
SQUAD_WHITESPACE = frozenset(" \t\r\n\u202f")


@dataclasses.dataclass(frozen=True)
class Paragraph:
    """A context cut into words.

    Args:
        context: the text as in the file.
        words: the words (whitespace-separated runs; with CJK, also single ideographs and punctuation).
        char_to_word: for each character of `context`, the index of its word (a
            whitespace character: the word before it, -1 before the first word).
        spaced: for each word, whether whitespace precedes it in `context`.
    """

    context: str
    words: tuple[str, ...]
    char_to_word: tuple[int, ...]
    spaced: tuple[bool, ...]

    @classmethod
    def from_context(cls, context: str) -> "Paragraph":
        words: list[str] = []
        spaced: list[bool] = []
        char_to_word: list[int] = []
        after_space = True
        solo = _solo_test(context)
        for char in context:
            if char in SQUAD_WHITESPACE:
                after_space = True
            else:
                if after_space or solo(char) or solo(words[-1][-1]):
                    words.append(char)
                    spaced.append(after_space)
                else:
                    words[-1] += char
                after_space = False
            char_to_word.append(len(words) - 1)
        return cls(context, tuple(words), tuple(char_to_word), tuple(spaced))

    def text(self, first: int, last: int) -> str:
        """Words `first..last` joined as in the context, one space for any whitespace run.

        For words without CJK this is the original's `" ".join(doc_tokens[first:last+1])`.

        >>> Paragraph.from_context("a  b\\n\u5317\u4eac").text(0, 3)
        'a b \u5317\u4eac'
        """
        pieces = [self.words[first]]
        for index in range(first + 1, last + 1):
            pieces.append((" " if self.spaced[index] else "") + self.words[index])
        return "".join(pieces)

    def char_span(self, first: int, last: int, start: int, end: int) -> tuple[int, int]:
        """The context offsets of the characters `start:end` of `self.text(first, last)`
        (neither end on a space that joins two words).

        >>> paragraph = Paragraph.from_context("a  bc\\n\u5317\u4eac")
        >>> paragraph.text(1, 3), paragraph.char_span(1, 3, 1, 5), paragraph.context[4:8]
        ('bc \u5317\u4eac', (4, 8), 'c\\n\u5317\u4eac')
        """
        return self._context_offset(first, last, start), self._context_offset(first, last, end - 1) + 1

    def _context_offset(self, first: int, last: int, position: int) -> int:
        joined = 0
        for index in range(first, last + 1):
            joined += index > first and self.spaced[index]
            if position < joined + len(self.words[index]):
                # `char_to_word` never decreases: a word's first character is the first that maps to it.
                return bisect.bisect_left(self.char_to_word, index) + position - joined
            joined += len(self.words[index])
        raise ValueError(f"position {position} is past words {first}..{last}")


def _is_cjk_char(char: str) -> bool:
    return is_cjk(ord(char))


def _is_cjk_or_punctuation(char: str) -> bool:
    return is_cjk(ord(char)) or is_punctuation(char)


def _never(char: str) -> bool:
    return False


def _solo_test(context: str) -> Callable[[str], bool]:
    """Which characters are words of their own in `context`: with CJK, ideographs and
    punctuation (BasicTokenizer's cuts); without, none (the original's whitespace words)."""
    return _is_cjk_or_punctuation if any(map(_is_cjk_char, context)) else _never


@dataclasses.dataclass(frozen=True)
class Answer:
    """A gold answer: its text, its character offset, and (if that offset points at the
    text) the words it spans."""

    text: str
    start: Any
    first_word: int | None = None
    last_word: int | None = None

    @property
    def aligned(self) -> bool:
        return self.first_word is not None


@dataclasses.dataclass(frozen=True)
class SquadExample:
    """One question on a paragraph.

    Args:
        qas_id: the question id of the file (the key of predictions.json).
        question: the question text.
        paragraph: the shared `Paragraph` of its context.
        answers: every gold answer, or None when the file gives none (a test file).
        is_impossible: SQuAD 2.0's unanswerable question.
        source: "file, article N, paragraph M", for messages.
    """

    qas_id: str
    question: str
    paragraph: Paragraph
    answers: tuple[Answer, ...] | None
    is_impossible: bool = False
    source: str = ""

    @property
    def label(self) -> tuple[str, ...] | None:
        """The gold answer texts (empty for an unanswerable question), None when unlabelled."""
        return None if self.answers is None else tuple(answer.text for answer in self.answers)

    @property
    def train_answer(self) -> Answer | None:
        """The answer training uses: the first one aligned with the context."""
        return next((answer for answer in self.answers or () if answer.aligned), None)


def align_answer(paragraph: Paragraph, text: str, start: Any) -> Answer:
    """An `Answer` with its words when `context[start:start+len(text)] == text`.

    Surrounding whitespace of the answer is not part of the span.

    >>> paragraph = Paragraph.from_context("in 1895 (Paris)")
    >>> align_answer(paragraph, "Paris", 9), align_answer(paragraph, "Paris", 3).aligned
    (Answer(text='Paris', start=9, first_word=2, last_word=2), False)
    """
    context = paragraph.context
    if (
        not isinstance(start, int)
        or isinstance(start, bool)
        or not text.strip()
        or start < 0
        or context[start : start + len(text)] != text
    ):
        return Answer(text, start)
    first = start + (len(text) - len(text.lstrip()))
    last = start + len(text.rstrip()) - 1
    return Answer(text, start, paragraph.char_to_word[first], paragraph.char_to_word[last])


# === Files ===
def load_json(path: str) -> list[dict[str, Any]]:
    """The `data` list of a SQuAD file; a `DataError` says what is wrong with it."""
    try:
        with open(path, encoding="utf-8") as handle:
            document = json.load(handle)
    except FileNotFoundError:
        raise DataError(f"The SQuAD file {path} does not exist.") from None
    except json.JSONDecodeError as error:
        raise DataError(f"{path} is not valid JSON (line {error.lineno}, column {error.colno}: {error.msg}).") from None
    except UnicodeDecodeError as error:
        raise DataError(f"{path} is not UTF-8 text ({error.reason} at byte {error.start}).") from None
    if not isinstance(document, dict) or not isinstance(document.get("data"), list):
        raise DataError(f"{path} is not a SQuAD file: it needs a top-level object with a \"data\" list of articles.")
    return document["data"]


def read_squad(path: str, version_2_with_negative: bool, split: str = "train") -> list[SquadExample]:
    """Every question of the SQuAD file `path`, in file order.

    Raises a `DataError` for a malformed file, an empty context, a missing field, a
    repeated question id, or unanswerable questions without `version_2_with_negative`.
    Answers whose `answer_start` does not match are counted and reported once.
    """
    examples = list(_examples(path, load_json(path)))
    _check_ids(path, examples)
    impossible = sum(example.is_impossible for example in examples)
    if impossible and not version_2_with_negative:
        raise DataError(
            f"{path} has {impossible} unanswerable questions (SQuAD 2.0); pass --version_2_with_negative to use it."
        )
    if split == "train":
        _report_misaligned(path, examples)
    return examples


def _examples(path: str, data: list[Any]) -> Iterator[SquadExample]:
    for article_index, article in enumerate(data):
        for paragraph_index, entry in enumerate(_field(article, "paragraphs", list, path, f"article {article_index}")):
            where = f"{path}, article {article_index}, paragraph {paragraph_index}"
            context = _field(entry, "context", str, where, "the paragraph")
            if not context.strip():
                raise DataError(f"{where} has an empty context; remove the paragraph or give it its text.")
            paragraph = Paragraph.from_context(context)
            for qa in _field(entry, "qas", list, where, "the paragraph"):
                yield _example(qa, paragraph, where)


def _example(qa: Any, paragraph: Paragraph, where: str) -> SquadExample:
    qas_id = _field(qa, "id", str, where, "a question")
    question = _field(qa, "question", str, where, f"question {qas_id}")
    is_impossible = bool(qa.get("is_impossible", False))
    answers = None
    if "answers" in qa:
        answers = tuple(
            align_answer(paragraph, _field(answer, "text", str, where, f"an answer of question {qas_id}"),
                         answer.get("answer_start"))
            for answer in _field(qa, "answers", list, where, f"question {qas_id}")
        )
        is_impossible = is_impossible or not answers
    return SquadExample(qas_id, question, paragraph, answers, is_impossible, where)


def _field(entry: Any, key: str, kind: type, where: str, what: str) -> Any:
    if not isinstance(entry, dict) or not isinstance(entry.get(key), kind):
        raise DataError(f"{where}: {what} lacks the {kind.__name__} field \"{key}\", so this is not a SQuAD file.")
    return entry[key]


def _check_ids(path: str, examples: list[SquadExample]) -> None:
    seen: set[str] = set()
    for example in examples:
        if example.qas_id in seen:
            raise DataError(f"{path}: the question id {example.qas_id!r} appears twice; ids must be unique.")
        seen.add(example.qas_id)


def _report_misaligned(path: str, examples: list[SquadExample]) -> None:
    """Says once how many answers do not match their `answer_start`, and what is skipped."""
    misaligned = [
        example for example in examples for answer in example.answers or () if not answer.aligned
    ]
    if not misaligned:
        return
    skipped = sum(1 for example in examples if not example.is_impossible and example.train_answer is None)
    print(
        f"warning: {path}: {len(misaligned)} answers have an answer_start that does not match their text in the "
        f"context (first: question {misaligned[0].qas_id}); {skipped} questions left without a matching answer "
        "are skipped for training.",
        file=sys.stderr,
        flush=True,
    )


def trainable(examples: list[SquadExample]) -> list[SquadExample]:
    """The examples training can use: unanswerable ones and those with an aligned answer."""
    return [example for example in examples if example.is_impossible or example.train_answer is not None]

