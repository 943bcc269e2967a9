"""Sentences to WordPiece ids, with the word boundaries that whole-word masking needs.

Ids are kept as int32. With Chinese whole-word masking, bit 30 of an id
(`CONTINUATION_FLAG`) marks a character that continues the Chinese word of the one
before it; English word continuations are the vocabulary's `##` pieces, which the
masking step finds from the id alone (`continuation_table`).
"""

from __future__ import annotations

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
# then tested in C, not a character at a time in Python (it was most of the time of
# whole-word masking).
_CJK_CLASS = "".join(f"{re.escape(chr(low))}-{re.escape(chr(high))}" for low, high in CJK_RANGES)
_CJK_WORD = re.compile(f"[{_CJK_CLASS}]{{2,}}")
_CJK_CHAR = re.compile(f"[{_CJK_CLASS}]")
_CONTINUING_CJK = re.compile(f"(?<=[{_CJK_CLASS}])[{_CJK_CLASS}]")
_MIXED_WORD = re.compile(f"[{_CJK_CLASS}][^{_CJK_CLASS}\x01]|[^{_CJK_CLASS}\x01][{_CJK_CLASS}]")
_MARK_CHARACTERS = re.compile("[\x01-\x03]")
_NOT_A_MARK = re.compile("[^\x02\x03]")
_MARKS = str.maketrans("\x02\x03", "10")


def _cjk_character_continuations(words: list[str]) -> str:
    """"1" for each CJK character of `words` that continues a multi-character all-CJK
    word, else "0". The words must not hold the characters \\x01-\\x03.

    >>> _cjk_character_continuations(["我", "爱", "北京", "，", "天安门"])
    '0001011'
    >>> _cjk_character_continuations(["我", "爱", "T恤", "，", "天安门"])
    '000011'
    """
    joined = "\x01".join(words)
    if _MIXED_WORD.search(joined):  # a word of CJK and other characters ("T恤"): a word at a time
        return "".join(
            "0" + "1" * (len(word) - 1) if _CJK_WORD.fullmatch(word) else "0" * len(_CJK_CHAR.findall(word))
            for word in words
        )
    # Otherwise a CJK character continues a word exactly when a CJK character precedes it
    # in the same word: two regex passes mark continuing (\x02) and other (\x03) CJK
    # characters, in C rather than a Python step per word.
    marked = _CJK_CHAR.sub("\x03", _CONTINUING_CJK.sub("\x02", joined))
    return _NOT_A_MARK.sub("", marked).translate(_MARKS)


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
    """Turns one line of text into its token ids (empty for a line of no tokens).

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
        # Ids of the single-character CJK tokens, for whole-word masking's fast path.
        self._cjk_ids = frozenset(index for index, token in self._tokens.items() if _CJK_CHAR.fullmatch(token))
        self._cache: dict[str, list[int]] = {}

    def encode(self, text: str) -> list[int]:
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
        if self._zh_segmenter is not None and ids:
            return self._with_chinese_continuations(text, ids)
        return ids

    def _clear_caches(self) -> None:
        self._cache.clear()
        # The WordPiece tokenizer caches the same words (up to 262,144 of them, tens of
        # MB); setting its word-length limit is its public way to empty that cache.
        wordpiece = self._tokenizer.wordpiece_tokenizer
        wordpiece.max_input_chars_per_word = wordpiece.max_input_chars_per_word

    def _with_chinese_continuations(self, text: str, ids: list[int]) -> list[int]:
        words = self._zh_segmenter(text)
        cjk_ids, tokens = self._cjk_ids, self._tokens
        continues = None if _MARK_CHARACTERS.search(text) else _cjk_character_continuations(words)
        # Fast path: as many single-character CJK tokens as the text has CJK characters (none
        # became [UNK]), so the k-th such token is the k-th character and takes its flag. This
        # is what `chinese_continuations` computes, without searching the text for each token
        # (it differs only at a compatibility ideograph, which the tokenizer normalises: that
        # search misses it, and this path gives it the flag of its own word).
        if continues is not None and sum(map(cjk_ids.__contains__, ids)) == len(continues):
            flag, each = CONTINUATION_FLAG, iter(continues)
            return [index | flag if index in cjk_ids and next(each) == "1" else index for index in ids]
        flags = chinese_continuations(text, [tokens[index] for index in ids], words)
        return [index | CONTINUATION_FLAG if flag else index for index, flag in zip(ids, flags, strict=True)]
