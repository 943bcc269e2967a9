"""The original BERT tokenizer (`FullTokenizer` = `BasicTokenizer` + `WordpieceTokenizer`).

Pure Python, no TensorFlow. The output is identical to Google's `tokenization.py`
for every input, with the original's `max_input_chars_per_word=200`, but it is much
faster:

- `BasicTokenizer` turns a whole text into "words separated by spaces" with a single
  `str.translate` call. The table is filled lazily, one code point at a time, with
  what the original does to that character alone (clean, CJK spacing, lower-case +
  NFD + strip accents, punctuation split), so the per-character `unicodedata` work is
  paid once per distinct character instead of once per occurrence. ASCII texts take
  CPython's fast one-character `str.translate` and a regular expression instead.
- The only two places where the original is not "one character at a time" (the Greek
  final sigma of `str.lower()` and the canonical reordering of NFD) are detected
  through a sentinel in that table; such (rare) texts take the exact reference path.
- `WordpieceTokenizer` caches the pieces of each word and bounds its greedy search by
  the longest vocabulary entry.

Example:
>>> import tempfile, os
>>> tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "un", "##aff", "##able", ",", "!"]
>>> path = os.path.join(tempfile.mkdtemp(), "vocab.txt")
>>> _ = open(path, "w", encoding="utf-8").write("\\n".join(tokens) + "\\n")
>>> tokenizer = FullTokenizer(path, do_lower_case=True)
>>> tokenizer.tokenize("UNaffable, Unaffäble!")
['un', '##aff', '##able', ',', 'un', '##aff', '##able', '!']
>>> tokenizer.convert_tokens_to_ids(["un", "##able", "[UNK]"])
[5, 7, 1]
"""

from __future__ import annotations

import collections
import os
import re
import unicodedata
from collections.abc import Iterable, Sequence

from bert_tf.errors import BertTfError

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")

# The original's `_is_chinese_char` ranges: CJK Unified Ideographs and extensions A-E
# plus the compatibility blocks. Hangul, Kana and extension G are deliberately absent.
CJK_RANGES = (
    (0x4E00, 0x9FFF),
    (0x3400, 0x4DBF),
    (0x20000, 0x2A6DF),
    (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F),
    (0x2B820, 0x2CEAF),
    (0xF900, 0xFAFF),
    (0x2F800, 0x2FA1F),
)

# How a character ends up in the word stream (see `char_pieces`).
WORD, SOLO, SPACE = 0, 1, 2

CAPITAL_SIGMA = "\u03a3"
# Maps a context-dependent character in the `str.translate` table. NUL itself is
# deleted by the cleaning step, so it never appears in a translated text otherwise.
_NEEDS_CONTEXT = "\x00"
# Bound on the WordPiece cache: enough for the distinct words of a large corpus shard,
# small enough (tens of MB at worst) to keep data generation within its memory bound.
_WORD_CACHE_LIMIT = 1 << 18


def is_cjk(cp: int) -> bool:
    """Whether the original splits code point `cp` off as a CJK ideograph."""
    return any(low <= cp <= high for low, high in CJK_RANGES)


def is_control(ch: str) -> bool:
    """Cc/Cf characters, except the three that the original counts as whitespace."""
    return ch not in "\t\n\r" and unicodedata.category(ch) in ("Cc", "Cf")


def is_whitespace(ch: str) -> bool:
    """The original's whitespace: space, tab, newline, carriage return and Zs."""
    return ch in " \t\n\r" or unicodedata.category(ch) == "Zs"


def is_punctuation(ch: str) -> bool:
    """All ASCII non-alphanumeric symbols (so `$`, `^`, `+` too) and every Unicode P*."""
    cp = ord(ch)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


def is_cleaned_away(ch: str) -> bool:
    """Whether the original's cleaning deletes `ch`: NUL, U+FFFD and control characters."""
    cp = ord(ch)
    return cp == 0 or cp == 0xFFFD or is_control(ch)


def is_word_separator(ch: str) -> bool:
    """Whether the original's words end at `ch`: what its `str.split()` splits at once its
    cleaning has run. Its whitespace, and U+2028/U+2029 too (its cleaning keeps them); not
    the control characters that Python also calls spaces (U+000C, U+001C, U+0085): the
    cleaning deletes those first, so their neighbours stay one word.

    >>> [is_word_separator(ch) for ch in " \\u3000\\u2028\\x0c\\x85a"]
    [True, True, True, False, False, False]
    """
    return ch.isspace() and not is_cleaned_away(ch)


def lower_and_strip_accents(text: str) -> str:
    """`str.lower()`, NFD, then drop the non-spacing marks (Mn): the original's casing."""
    decomposed = unicodedata.normalize("NFD", text.lower())
    return "".join(ch for ch in decomposed if unicodedata.category(ch) != "Mn")


def char_pieces(ch: str, do_lower_case: bool) -> tuple[tuple[str, int], ...]:
    """What the original `BasicTokenizer` makes of the character `ch` on its own.

    Returns `(char, kind)` pairs: `WORD` characters join their neighbours into a word,
    `SOLO` ones (punctuation, CJK) are words by themselves, `SPACE` separates words.
    Deleted characters give `()`. Characters that `needs_context` flags are given
    their context-free value here.

    >>> char_pieces("Ä", do_lower_case=True)
    (('a', 0),)
    >>> char_pieces("\\u0130", do_lower_case=True), char_pieces("\\u4e2d", do_lower_case=False)
    ((('i', 0),), (('中', 1),))
    """
    if is_cleaned_away(ch):
        return ()
    if is_word_separator(ch):
        return ((" ", SPACE),)
    text = lower_and_strip_accents(ch) if do_lower_case else ch
    if is_cjk(ord(ch)):
        # A word of its own. Lower-casing + NFD still applies to it: it maps the
        # compatibility ideographs to one unified ideograph each.
        return tuple((c, SOLO) for c in text)
    return tuple(
        (c, SOLO if is_punctuation(c) else SPACE if c.isspace() else WORD) for c in text
    )


def needs_context(ch: str) -> bool:
    """Whether lower-casing `ch` depends on its neighbours, in the original's pipeline.

    Two cases: the capital sigma (`str.lower()` gives a final `ς` or a medial `σ`), and
    characters whose NFD holds a combining character that is not Mn (some viramas,
    musical symbols...): canonical reordering may move it past a neighbour's one.

    >>> needs_context("\\u03a3"), needs_context("a"), needs_context("\\ua9c0")
    (True, False, True)
    """
    if ch == CAPITAL_SIGMA:
        return True
    return any(
        unicodedata.combining(c) and unicodedata.category(c) != "Mn"
        for c in unicodedata.normalize("NFD", ch.lower())
    )


def pieces_to_text(pieces: Iterable[tuple[str, int]]) -> str:
    """`char_pieces` as text in which spaces separate the words.

    >>> pieces_to_text(char_pieces("(", do_lower_case=True))
    ' ( '
    """
    return "".join(f" {c} " if kind == SOLO else " " if kind == SPACE else c for c, kind in pieces)


class _TranslationTable(dict):
    """A `str.translate` table that computes each code point's entry on first use."""

    def __init__(self, do_lower_case: bool):
        super().__init__()
        self._do_lower_case = do_lower_case

    def __missing__(self, cp: int) -> str:
        ch = chr(cp)
        if self._do_lower_case and needs_context(ch):
            value = _NEEDS_CONTEXT
        else:
            value = pieces_to_text(char_pieces(ch, self._do_lower_case))
        self[cp] = value
        return value


def _split_on_punctuation(token: str) -> list[str]:
    pieces: list[str] = []
    current = ""
    for ch in token:
        if is_punctuation(ch):
            pieces += [current, ch] if current else [ch]
            current = ""
        else:
            current += ch
    return pieces + [current] if current else pieces


def reference_basic_tokenize(text: str, do_lower_case: bool) -> list[str]:
    """The original `BasicTokenizer` algorithm step by step: exact, slow, for any text.

    >>> reference_basic_tokenize("ΣΑΣ ΟΔΟΣ.Α", do_lower_case=True)
    ['σας', 'οδοσ', '.', 'α']
    """
    cleaned = []
    for ch in text:
        if is_cleaned_away(ch):
            continue
        cleaned.append(" " if is_whitespace(ch) else f" {ch} " if is_cjk(ord(ch)) else ch)
    words = []
    for token in "".join(cleaned).split():
        if do_lower_case:
            token = lower_and_strip_accents(token)
        words += _split_on_punctuation(token)
    return " ".join(words).split()


def _to_str(text: str | bytes) -> str:
    # The original's `convert_to_unicode`: bytes are UTF-8, undecodable bytes dropped.
    return text.decode("utf-8", "ignore") if isinstance(text, bytes) else text


def _ascii_table(do_lower_case: bool) -> dict[int, str | None]:
    """`str.translate` table for ASCII text with only one-character values, so that
    CPython's fast ASCII path applies: punctuation is split by `_ASCII_WORDS` instead."""
    table: dict[int, str | None] = {}
    for cp in range(128):
        pieces = char_pieces(chr(cp), do_lower_case)
        table[cp] = pieces[0][0] if pieces else None
    return table


_ASCII_PUNCTUATION = re.escape("".join(chr(cp) for cp in range(128) if is_punctuation(chr(cp))))
# A run of non-space non-punctuation characters, or one punctuation character.
_ASCII_WORDS = re.compile(rf"[^\s{_ASCII_PUNCTUATION}]+|[{_ASCII_PUNCTUATION}]")


class BasicTokenizer:
    """Cleaning, CJK spacing, optional lower-casing + accent stripping, punctuation split.

    >>> BasicTokenizer(do_lower_case=True).tokenize(" \\tHeLLo!how  \\n Are yoU?  ")
    ['hello', '!', 'how', 'are', 'you', '?']
    >>> BasicTokenizer(do_lower_case=False).tokenize("Héllo 中文")
    ['Héllo', '中', '文']
    """

    def __init__(self, do_lower_case: bool = True):
        self.do_lower_case = do_lower_case
        self._ascii_table = _ascii_table(do_lower_case)
        self._table = _TranslationTable(do_lower_case)

    def tokenize(self, text: str | bytes) -> list[str]:
        """Splits `text` into words (before WordPiece)."""
        text = _to_str(text)
        if text.isascii():
            return _ASCII_WORDS.findall(text.translate(self._ascii_table))
        spaced = text.translate(self._table)
        if _NEEDS_CONTEXT in spaced:
            return reference_basic_tokenize(text, self.do_lower_case)
        return spaced.split()


class WordpieceTokenizer:
    """Greedy longest-match-first WordPiece over the words of a whitespace-split text.

    A word longer than `max_input_chars_per_word` characters, or one that cannot be
    covered by vocabulary pieces, becomes `unk_token`.

    >>> vocab = {"[UNK]": 0, "un": 1, "##aff": 2, "##able": 3}
    >>> WordpieceTokenizer(vocab).tokenize("unaffable unfit")
    ['un', '##aff', '##able', '[UNK]']
    """

    def __init__(
        self, vocab: dict[str, int], unk_token: str = "[UNK]", max_input_chars_per_word: int = 200
    ):
        self.vocab = vocab
        self.unk_token = unk_token
        self._max_input_chars_per_word = max_input_chars_per_word
        # No vocabulary entry is longer, so the greedy search never needs to look further.
        self._longest_piece = max(map(len, vocab), default=0)
        self._cache: dict[str, list[str]] = {}

    @property
    def max_input_chars_per_word(self) -> int:
        return self._max_input_chars_per_word

    @max_input_chars_per_word.setter
    def max_input_chars_per_word(self, value: int) -> None:
        self._max_input_chars_per_word = value
        self._cache.clear()  # Cached results may depend on the old limit.

    def tokenize(self, text: str | bytes) -> list[str]:
        """WordPiece tokens of every whitespace-separated word of `text`."""
        return self.tokenize_words(_to_str(text).split())

    def tokenize_words(self, words: Iterable[str]) -> list[str]:
        """WordPiece tokens of words that contain no whitespace."""
        cache = self._cache
        output: list[str] = []
        for word in words:
            pieces = cache.get(word)
            if pieces is None:
                if len(cache) >= _WORD_CACHE_LIMIT:
                    cache.clear()
                pieces = cache[word] = self._tokenize_word(word)
            output += pieces
        return output

    def _tokenize_word(self, word: str) -> list[str]:
        if len(word) > self._max_input_chars_per_word:
            return [self.unk_token]
        pieces = []
        start = 0
        while start < len(word):
            piece = self._longest_piece_at(word, start)
            if piece is None:
                return [self.unk_token]
            pieces.append(piece)
            start += len(piece) - (2 if start else 0)
        return pieces

    def _longest_piece_at(self, word: str, start: int) -> str | None:
        prefix = "##" if start else ""
        end = min(len(word), start + self._longest_piece - len(prefix))
        while end > start:
            piece = prefix + word[start:end]
            if piece in self.vocab:
                return piece
            end -= 1
        return None


def load_vocab(vocab_file: str | os.PathLike) -> collections.OrderedDict[str, int]:
    """Reads a BERT `vocab.txt` (one token a line) into `{token: line number}`.

    Like the original, each line is stripped of surrounding whitespace and a repeated
    token keeps its last line number. Raises `BertTfError` when the file is missing,
    unreadable or empty.
    """
    try:
        with open(vocab_file, encoding="utf-8", newline="\n") as reader:
            lines = reader.readlines()
    except FileNotFoundError:
        raise BertTfError(
            f"Vocabulary file {vocab_file} does not exist; pass the vocab.txt of the checkpoint."
        ) from None
    except (OSError, UnicodeDecodeError) as error:
        raise BertTfError(f"Vocabulary file {vocab_file} cannot be read as UTF-8 text ({error}).") from None
    if not lines:
        raise BertTfError(f"Vocabulary file {vocab_file} is empty; pass the vocab.txt of the checkpoint.")
    vocab: collections.OrderedDict[str, int] = collections.OrderedDict()
    for index, line in enumerate(lines):
        vocab[line.strip()] = index
    return vocab


def validate_vocab(vocab: dict[str, int], vocab_file: str | os.PathLike) -> None:
    """Raises `BertTfError` if `vocab` lacks any of `SPECIAL_TOKENS`.

    >>> validate_vocab({"[PAD]": 0, "[UNK]": 1}, "vocab.txt")
    Traceback (most recent call last):
    ...
    bert_tf.errors.BertTfError: Vocabulary file vocab.txt lacks the special tokens [CLS], [SEP], [MASK] that BERT needs; use the vocab.txt that came with the checkpoint.
    """
    missing = [token for token in SPECIAL_TOKENS if token not in vocab]
    if missing:
        raise BertTfError(
            f"Vocabulary file {vocab_file} lacks the special tokens {', '.join(missing)} that BERT "
            "needs; use the vocab.txt that came with the checkpoint."
        )


class FullTokenizer:
    """`BasicTokenizer` then `WordpieceTokenizer`, with the vocabulary of `vocab_file`.

    See the module docstring for an example.
    """

    def __init__(self, vocab_file: str | os.PathLike, do_lower_case: bool = True):
        self.vocab = load_vocab(vocab_file)
        validate_vocab(self.vocab, vocab_file)
        self.inv_vocab = {index: token for token, index in self.vocab.items()}
        self.basic_tokenizer = BasicTokenizer(do_lower_case=do_lower_case)
        self.wordpiece_tokenizer = WordpieceTokenizer(vocab=self.vocab)

    def tokenize(self, text: str | bytes) -> list[str]:
        """WordPiece tokens of `text`."""
        return self.wordpiece_tokenizer.tokenize_words(self.basic_tokenizer.tokenize(text))

    def convert_tokens_to_ids(self, tokens: Sequence[str]) -> list[int]:
        vocab = self.vocab
        return [vocab[token] for token in tokens]

    def convert_ids_to_tokens(self, ids: Sequence[int]) -> list[str]:
        inv_vocab = self.inv_vocab
        return [inv_vocab[index] for index in ids]
