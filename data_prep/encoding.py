"""Sentences to WordPiece ids, with the word boundaries that whole-word masking needs.

Ids are kept as int32. With Chinese whole-word masking, bit 30 of an id
(`CONTINUATION_FLAG`) marks a character that continues the Chinese word of the one
before it; English word continuations are the vocabulary's `##` pieces, which the
masking step finds from the id alone (`continuation_table`).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable

import numpy as np

from bert_tf.errors import BertTfError
from bert_tf.tokenization import CJK_RANGES, FullTokenizer

CONTINUATION_FLAG = 1 << 30
ID_MASK = CONTINUATION_FLAG - 1


def continuation_table(vocab: dict[str, int]) -> np.ndarray:
    """`table[id]` is True for `##` pieces: they continue the word of the piece before."""
    table = np.zeros(max(vocab.values()) + 1, dtype=bool)
    for token, index in vocab.items():
        if token.startswith("##"):
            table[index] = True
    return table


def chinese_word_segmenter() -> Callable[[str], list[str]]:
    """jieba's default (accurate, HMM) mode, the segmenter of Chinese-BERT-wwm's era, as
    rjieba runs it: jieba-rs, the same dictionary and algorithm in Rust. On the shared
    Chinese text it agrees with jieba on 99.8% of word boundaries; the differences seen
    are in Latin runs ("K-12" is one word, not three), which whole-word masking does not
    use, and the masking statistics come out the same. It runs 7.5x faster
    (bench/zh_segmentation.py) and needs no pkg_resources, which jieba imports and
    setuptools >= 81 no longer ships.

    Raises `BertTfError` when rjieba is not installed.
    """
    try:
        import rjieba  # noqa: PLC0415 (only --zh_whole_word_mask needs it)
    except ImportError:
        raise BertTfError("--zh_whole_word_mask needs the rjieba word segmenter: pip install rjieba.") from None
    return rjieba.cut


# The ranges `is_cjk` tests, as one regex character class: whole words and tokens are
# then tested in C, not a character at a time in Python.
_CJK_CLASS = "".join(f"{re.escape(chr(low))}-{re.escape(chr(high))}" for low, high in CJK_RANGES)
_CJK_WORD = re.compile(f"[{_CJK_CLASS}]{{2,}}")
_CJK_CHAR = re.compile(f"[{_CJK_CLASS}]")
WORD_BREAK = "\x01"  # joins the words of a segmentation; a line holding it takes the per-token search


# `_CJK_CODES[code]` for every code point up to the last CJK one: one lookup per character.
_CJK_CODES = np.zeros(max(high for _, high in CJK_RANGES) + 2, dtype=bool)
for _low, _high in CJK_RANGES:
    _CJK_CODES[_low : _high + 1] = True


def is_cjk_code(codes: np.ndarray) -> np.ndarray:
    """Which code points are CJK ideographs (`is_cjk`), for an array of them.

    >>> is_cjk_code(np.array([ord("北"), ord("a"), 0x2FA1F, 0x10FFFF])).tolist()
    [True, False, True, False]
    """
    return _CJK_CODES[np.minimum(codes, len(_CJK_CODES) - 1)]


def cjk_character_continuations(segmentations: list[list[str]]) -> tuple[np.ndarray, np.ndarray]:
    """For each CJK character of each segmented line, in order: whether it continues a
    multi-character all-CJK word, and the index of its line. The words must not hold
    `WORD_BREAK`. All lines in one pass over their code points, not a step per word.

    >>> flags, lines = cjk_character_continuations([["我", "爱", "北京"], ["T恤", "，", "天安门"]])
    >>> flags.astype(int).tolist(), lines.tolist()
    ([0, 0, 0, 1, 0, 0, 1, 1], [0, 0, 0, 0, 1, 1, 1, 1])
    """
    joined = [WORD_BREAK.join(words) for words in segmentations]
    codes = np.frombuffer(WORD_BREAK.join(joined).encode("utf-32-le"), dtype=np.uint32)
    cjk = is_cjk_code(codes)
    word = np.cumsum(codes == ord(WORD_BREAK))  # a line's end is a word's end too
    # A CJK character continues a word when one precedes it in the same word (the break
    # is not CJK), unless the word also holds other characters ("T恤"): those continue none.
    other = ~cjk & (codes != ord(WORD_BREAK))
    mixed = (np.bincount(word, weights=other) > 0) & (np.bincount(word, weights=cjk) > 0)
    continues = cjk & np.concatenate(([False], cjk[:-1])) & ~mixed[word]
    line = np.repeat(np.arange(len(joined)), [len(text) + 1 for text in joined])[: len(codes)]
    return continues[cjk], line[cjk]


def chinese_continuations(text: str, tokens: list[str], words: list[str]) -> list[bool]:
    """For each token, whether it is a CJK character that continues a multi-character
    all-CJK word of the segmentation `words` of `text`.

    Every CJK character is a token of its own (the tokenizer splits them), so each
    single-character CJK token is matched to its next occurrence in `text`.

    >>> chinese_continuations("我爱北京", ["我", "爱", "北", "京"], ["我", "爱", "北京"])
    [False, False, False, True]
    """
    # "1" at each character of `text` that continues a multi-character CJK word.
    continues = "".join(
        "0" + "1" * (len(word) - 1) if _CJK_WORD.fullmatch(word) else "0" * len(word) for word in words
    )
    flags = []
    position = 0
    for token in tokens:
        flag = False
        if len(token) == 1 and _CJK_CHAR.match(token):
            found = text.find(token, position)
            if found >= 0:
                flag = continues[found : found + 1] == "1"
                position = found + 1
        flags.append(flag)
    return flags


class SentenceEncoder:
    """Turns lines of text into their token ids (empty for a line of no tokens): `encode`
    one line, `encode_lines` many at once (data generation's call, a chunk at a time).

    Exactly `FullTokenizer.tokenize` then the vocabulary lookup, with a cache from each
    word (after basic tokenization) straight to its ids: one dictionary lookup per word.
    """

    # Words kept in the cache; it is emptied when full, which bounds its memory (~25 MB).
    CACHE_WORDS = 1 << 17

    def __init__(self, tokenizer: FullTokenizer, zh_segmenter: Callable[[str], list[str]] | None = None):
        self._tokenizer = tokenizer
        self._vocab = tokenizer.vocab
        self._zh_segmenter = zh_segmenter
        self._tokens = tokenizer.inv_vocab
        # `table[id]`: the token is a single CJK character, for whole-word masking's fast path.
        self._cjk_id_table = np.zeros(max(self._tokens) + 1, dtype=bool)
        self._cjk_id_table[[index for index, token in self._tokens.items() if _CJK_CHAR.fullmatch(token)]] = True
        self._cache: dict[str, list[int]] = {}

    def _ids(self, text: str) -> list[int]:
        cache = self._cache
        ids: list[int] = []
        for word in self._tokenizer.basic_tokenizer.tokenize(text):
            word_ids = cache.get(word)
            if word_ids is None:
                if len(cache) >= self.CACHE_WORDS:
                    self._clear_caches()
                pieces = self._tokenizer.wordpiece_tokenizer.tokenize_words((word,))
                word_ids = cache[word] = [self._vocab[piece] for piece in pieces]
            ids += word_ids
        return ids

    def encode(self, text: str) -> list[int]:
        """The line's ids; with a segmenter, CJK word continuations carry `CONTINUATION_FLAG`."""
        if self._zh_segmenter is None:
            return self._ids(text)
        return self.encode_lines([text])[0].tolist()

    def encode_lines(self, lines: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """All lines' ids in one int32 array (continuations flagged, with a segmenter), and
        each line's number of ids."""
        per_line = [self._ids(line) for line in lines]
        lengths = np.fromiter(map(len, per_line), dtype=np.int64, count=len(per_line))
        ids = np.fromiter(itertools.chain.from_iterable(per_line), dtype=np.int32, count=int(lengths.sum()))
        if self._zh_segmenter is not None and len(ids):
            self._flag_chinese_continuations(ids, lines, lengths)
        return ids, lengths

    def _clear_caches(self) -> None:
        self._cache.clear()
        # The WordPiece tokenizer caches the same words (up to 262,144 of them, tens of
        # MB); setting its word-length limit is its public way to empty that cache.
        wordpiece = self._tokenizer.wordpiece_tokenizer
        wordpiece.max_input_chars_per_word = wordpiece.max_input_chars_per_word

    def _flag_chinese_continuations(self, ids: np.ndarray, lines: list[str], lengths: np.ndarray) -> None:
        """Sets `CONTINUATION_FLAG` on `ids` (all `lines`' ids, `lengths` each) in place.

        Fast path, for every line with as many single-character CJK tokens as CJK
        characters (none became [UNK]): the k-th such token is the k-th character and takes
        its flag, all lines at once. It is what `chinese_continuations` computes without
        searching the text for each token (it differs only at a compatibility ideograph,
        which the tokenizer normalises: that search misses it, and this path gives it the
        flag of its own word). The other lines take that search.
        """
        segmentations = [self._zh_segmenter(line) for line in lines]
        unbroken = np.array([WORD_BREAK not in line for line in lines], dtype=bool)
        safe = [words if ok else [] for words, ok in zip(segmentations, unbroken, strict=True)]
        char_flags, char_line = cjk_character_continuations(safe)
        token_line = np.repeat(np.arange(len(lines)), lengths)
        cjk_token = self._cjk_id_table[ids]
        tokens_per_line = np.bincount(token_line[cjk_token], minlength=len(lines))
        fast = unbroken & (np.bincount(char_line, minlength=len(lines)) == tokens_per_line)
        positions = np.flatnonzero(cjk_token & fast[token_line])
        ids[positions[char_flags[fast[char_line]]]] |= CONTINUATION_FLAG
        starts = np.cumsum(lengths) - lengths
        for index in np.flatnonzero(~fast & (lengths > 0)):
            begin, end = starts[index], starts[index] + lengths[index]
            tokens = [self._tokens[int(token)] for token in ids[begin:end]]
            flags = chinese_continuations(lines[index], tokens, segmentations[index])
            ids[begin:end] |= np.where(flags, CONTINUATION_FLAG, 0).astype(np.int32)
