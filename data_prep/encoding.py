"""Sentences to WordPiece ids, with the word boundaries that whole-word masking needs.

Ids are kept as int32. With Chinese whole-word masking, bit 30 of an id
(`CONTINUATION_FLAG`) marks a character that continues the Chinese word of the one
before it; English word continuations are the vocabulary's `##` pieces, which the
masking step finds from the id alone (`continuation_table`).
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable

import numpy as np

from bert_tf.errors import BertTfError
from bert_tf.tokenization import FullTokenizer, is_cjk

CONTINUATION_FLAG = 1 << 30
ID_MASK = CONTINUATION_FLAG - 1


def continuation_table(vocab: dict[str, int]) -> np.ndarray:
    """`table[id]` is True for `##` pieces: they continue the word of the piece before."""
    table = np.zeros(max(vocab.values()) + 1, dtype=bool)
    for token, index in vocab.items():
        if token.startswith("##"):
            table[index] = True
    return table


def jieba_segmenter() -> Callable[[str], list[str]]:
    """jieba's default (accurate, HMM) mode: the segmenter of Chinese-BERT-wwm's era.

    Raises `BertTfError` when jieba is not installed.
    """
    try:
        with warnings.catch_warnings():  # jieba imports the deprecated pkg_resources
            warnings.simplefilter("ignore", UserWarning)
            import jieba
    except ImportError:
        raise BertTfError("--zh_whole_word_mask needs the jieba word segmenter: pip install jieba.") from None
    jieba.setLogLevel(logging.WARNING)  # It logs its dictionary loading at INFO.
    jieba.initialize()
    return jieba.lcut


def chinese_continuations(text: str, tokens: list[str], words: list[str]) -> list[bool]:
    """For each token, whether it is a CJK character that continues a multi-character
    all-CJK word of the segmentation `words` of `text`.

    Every CJK character is a token of its own (the tokenizer splits them), so each
    single-character CJK token is matched to its next occurrence in `text`.

    >>> chinese_continuations("我爱北京", ["我", "爱", "北", "京"], ["我", "爱", "北京"])
    [False, False, False, True]
    """
    continues_at: list[bool] = []
    for word in words:
        joined = len(word) > 1 and all(is_cjk(ord(ch)) for ch in word)
        continues_at.extend(joined and k > 0 for k in range(len(word)))
    flags = []
    position = 0
    for token in tokens:
        flag = False
        if len(token) == 1 and is_cjk(ord(token)):
            found = text.find(token, position)
            if found >= 0:
                flag = found < len(continues_at) and continues_at[found]
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
        self._cache: dict[str, list[int]] = {}

    def encode(self, text: str) -> list[int]:
        if self._zh_segmenter is not None:
            return self._encode_with_chinese_words(text)
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

    def _clear_caches(self) -> None:
        self._cache.clear()
        # The WordPiece tokenizer caches the same words (up to 262,144 of them, tens of
        # MB); setting its word-length limit is its public way to empty that cache.
        wordpiece = self._tokenizer.wordpiece_tokenizer
        wordpiece.max_input_chars_per_word = wordpiece.max_input_chars_per_word

    def _encode_with_chinese_words(self, text: str) -> list[int]:
        tokens = self._tokenizer.tokenize(text)
        ids = [self._vocab[token] for token in tokens]
        if not ids:
            return ids
        flags = chinese_continuations(text, tokens, self._zh_segmenter(text))
        return [index | CONTINUATION_FLAG if flag else index for index, flag in zip(ids, flags, strict=True)]
