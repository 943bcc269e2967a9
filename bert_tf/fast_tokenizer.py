"""The original BERT tokenizer as TensorFlow graph ops, for whole batches of text.

`FastBertTokenizer` gives the same WordPiece ids as `bert_tf.tokenization.FullTokenizer`
(and so as Google's original), for every input, but runs as a handful of vectorised
ops per batch: inside `tf.data`, in a SavedModel, with no Python per text.

How it stays exact: the original's character rules (cleaning, whitespace, CJK
spacing, `str.lower()` + NFD + strip Mn, punctuation split) are not re-implemented
with ICU-based TF string ops, whose Unicode version and casing rules differ from
Python's (`İ`, final sigma, ...). Instead one table, computed at construction from
Python's own `unicodedata` through `tokenization.char_pieces`, says for every code
point what the original makes of it (one character and whether it starts, continues
or separates words; several characters; or nothing). The two context-dependent
cases of the original, both rare, are handled in their own graph branch: the Greek
final sigma (decided from the neighbours, as `str.lower()` does) and the canonical
reordering of NFD (a stable sort by combining class inside each run). Words are then
cut from the per-character kinds and given to `tf_text.FastWordpieceTokenizer`; the
original's word-length limit is in characters, so it is applied here, not as
FastWordpieceTokenizer's byte limit.

Example:
>>> import tempfile, os
>>> tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "un", "##aff", "##able", ",", "!"]
>>> path = os.path.join(tempfile.mkdtemp(), "vocab.txt")
>>> _ = open(path, "w", encoding="utf-8").write("\\n".join(tokens) + "\\n")
>>> tokenizer = FastBertTokenizer(path, do_lower_case=True)
>>> tokenizer(tf.constant(["UNaffable, Unaffäble!", ""])).to_list()
[[5, 6, 7, 8, 5, 6, 7, 9], []]
>>> tokenizer.tokenize_to_ids(["unaffable"])
[[5, 6, 7]]
"""

from __future__ import annotations

import functools
import os
import unicodedata
from collections.abc import Sequence

import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text

from bert_tf import tokenization

_NUM_CODE_POINTS = 0x110000
_CAPITAL_SIGMA, _SMALL_SIGMA, _FINAL_SIGMA = 0x3A3, 0x3C3, 0x3C2

# Layout of one entry of the code point table (int32):
#   bits 0-20   payload: the output code point, or an index into the expansion table
#   bits 21-22  kind: WORD, SOLO or SPACE of `tokenization`, or _DELETED
#   bit  23     _EXPAND: the code point gives several characters (payload = index)
#   bit  24     _REORDER: its NFD holds a non-Mn combining mark (canonical reordering)
#   bits 25-26  its part in the final-sigma rule: _TRANSPARENT, _CASED or _OTHER
_KIND_SHIFT = 21
_PAYLOAD_MASK = (1 << _KIND_SHIFT) - 1
_DELETED = 3
_EXPAND = 1 << 23
_REORDER = 1 << 24
_SIGMA_SHIFT = 25
_TRANSPARENT, _CASED, _OTHER = 0, 1, 2
# Payload, kind and _EXPAND: what an entry means once flags and sigma bits are dropped.
_ENTRY_MASK = (1 << 24) - 1
_EXPAND_OR_DELETED = _DELETED << _KIND_SHIFT  # entries at or above this (masked) do either


def _entry(cp: int, kind: int) -> int:
    return cp | kind << _KIND_SHIFT


def _sigma_role(ch: str) -> int:
    """Where `ch` stands in Python's final-sigma rule, found by asking `str.lower()`.

    Python lower-cases `Σ` to `ς` when a cased letter precedes it (skipping
    case-ignorable characters) and none follows it. Neither property is exposed by
    `unicodedata`, so we probe: `ch + Σ` is final only if `ch` is cased and not
    ignorable; `A + ch + Σ` is final if `ch` is cased or ignorable.
    """
    if tokenization.char_pieces(ch, do_lower_case=True) == ():
        return _TRANSPARENT  # Cleaned away before lower-casing ever sees it.
    if tokenization.is_whitespace(ch) or ch.isspace() or tokenization.is_cjk(ord(ch)):
        return _OTHER  # They end the word that `str.lower()` sees.
    if (ch + "\u03a3").lower()[-1] == "\u03c2":
        return _CASED
    if ("A" + ch + "\u03a3").lower()[-1] == "\u03c2":
        return _TRANSPARENT
    return _OTHER


def _code_points_to_compute() -> list[int]:
    """Code points whose entry may differ from "itself, a word character".

    Unassigned, private-use and surrogate code points are left alone by every step of
    the original, except inside the CJK ranges, which are split off regardless.
    """
    cjk = {cp for low, high in tokenization.CJK_RANGES for cp in range(low, high + 1)}
    return [
        cp
        for cp in range(_NUM_CODE_POINTS)
        if cp in cjk or unicodedata.category(chr(cp)) not in ("Cn", "Co", "Cs")
    ]


def _ragged_table(rows: list[list[int]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`rows` as (starts, lengths, values). `values` begins with a dummy element so that
    gathering at index 0 is always valid, even when there are no rows."""
    lengths = np.array([len(row) for row in rows], dtype=np.int32)
    starts = (1 + np.cumsum(lengths) - lengths).astype(np.int32)
    values = np.array([0] + [v for row in rows for v in row], dtype=np.int32)
    return starts, lengths, values


@functools.lru_cache(maxsize=2)
def _tables(do_lower_case: bool) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """The code point table, and the ragged table of the expansions it points to."""
    table = np.arange(_NUM_CODE_POINTS, dtype=np.int32) | np.int32(_OTHER << _SIGMA_SHIFT)
    expansions: list[list[int]] = []
    for cp in _code_points_to_compute():
        ch = chr(cp)
        pieces = tokenization.char_pieces(ch, do_lower_case)
        if not pieces:
            entry = _entry(0, _DELETED)
        elif len(pieces) == 1:
            entry = _entry(ord(pieces[0][0]), pieces[0][1])
        else:
            entry = _EXPAND | len(expansions)
            expansions.append([_entry(ord(c), kind) for c, kind in pieces])
        if do_lower_case:
            entry |= _sigma_role(ch) << _SIGMA_SHIFT
            if cp != _CAPITAL_SIGMA and tokenization.needs_context(ch):
                entry |= _REORDER
        table[cp] = entry
    return table, _ragged_table(expansions)


@functools.lru_cache(maxsize=1)
def _reorder_tables() -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray, np.ndarray], np.ndarray, np.ndarray]:
    """For the canonical-reordering branch (lower-casing only).

    Returns the code points whose "clean, lower-case, NFD" (Mn kept) is not themselves,
    with those results as a ragged table; and the code points that are combining or
    Mn, with `2 * combining class + is_mn` for each.
    """
    keys, rows, mark_keys, mark_values = [], [], [], []
    for cp in _code_points_to_compute():
        ch = chr(cp)
        pieces = tokenization.char_pieces(ch, do_lower_case=False)
        if not pieces or pieces[0][1] == tokenization.SPACE:
            full = [c for c, _ in pieces]  # Cleaned away, or whitespace.
        else:
            full = list(unicodedata.normalize("NFD", ch.lower()))
        if full != [ch]:
            keys.append(cp)
            rows.append([ord(c) for c in full])
        ccc, is_mn = unicodedata.combining(ch), unicodedata.category(ch) == "Mn"
        if ccc or is_mn:
            mark_keys.append(cp)
            mark_values.append(2 * ccc + is_mn)
    return np.array(keys, np.int64), _ragged_table(rows), np.array(mark_keys, np.int64), np.array(mark_values, np.int64)


def _static_table(keys: np.ndarray, values: np.ndarray, default: int) -> tf.lookup.StaticHashTable:
    initializer = tf.lookup.KeyValueTensorInitializer(keys, values)
    return tf.lookup.StaticHashTable(initializer, default_value=default)


def _wordpiece_vocab(vocab: dict[str, int]) -> list[str]:
    """The vocabulary as FastWordpieceTokenizer wants it: a list, token i at index i.

    Ids that no token maps to (the earlier line of a repeated token, like in the
    original) and empty tokens get a filler containing a space: words never do, so
    it never matches.
    """
    tokens = [f" unused {index}" for index in range(max(vocab.values()) + 1)]
    for token, index in vocab.items():
        if token:
            tokens[index] = token
    return tokens


def _spell_out(
    lengths: tf.Tensor, starts: tf.Tensor, table_values: tf.Tensor, singles: tf.Tensor
) -> tuple[tf.Tensor, tf.Tensor]:
    """Replaces input j by `lengths[j]` elements: `table_values[starts[j]:][:lengths[j]]`
    when `starts[j] >= 0`, else `singles[j]` (then `lengths[j]` is 0 or 1).

    Returns the elements and, for each, the index of the input it came from.
    """
    source = tf.repeat(tf.range(tf.size(lengths)), lengths)
    offsets = tf.range(tf.size(source)) - tf.gather(tf.cumsum(lengths, exclusive=True), source)
    source_starts = tf.gather(starts, source)
    from_table = tf.gather(table_values, tf.maximum(source_starts, 0) + offsets)
    return tf.where(source_starts >= 0, from_table, tf.gather(singles, source)), source


def _shifted_right(x: tf.Tensor, first: bool | int) -> tf.Tensor:
    """`x[i - 1]` at each position i, and `first` at position 0."""
    return tf.concat([tf.fill([1], tf.constant(first, x.dtype)), x], axis=0)[:-1]


class FastBertTokenizer(tf.Module):
    """Batched, exact BERT tokenization: strings `[batch]` to ids `[batch, (tokens)]`.

    Args:
        vocab_file: a BERT `vocab.txt`.
        do_lower_case: lower-case and strip accents, as for the uncased models.
        max_input_chars_per_word: longer words become `[UNK]` (the original's 200).
    """

    def __init__(
        self, vocab_file: str | os.PathLike, do_lower_case: bool = True, max_input_chars_per_word: int = 200
    ):
        super().__init__(name="fast_bert_tokenizer")
        vocab = tokenization.load_vocab(vocab_file)
        tokenization.validate_vocab(vocab, vocab_file)
        self.do_lower_case = do_lower_case
        self.max_input_chars_per_word = max_input_chars_per_word
        self.unk_token = "[UNK]"
        table, (starts, lengths, values) = _tables(do_lower_case)
        self._table = tf.constant(table)
        self._expansion_starts = tf.constant(starts)
        self._expansion_lengths = tf.constant(lengths)
        self._expansion_values = tf.constant(values)
        if do_lower_case:
            keys, (starts, lengths, values), mark_keys, mark_values = _reorder_tables()
            self._nfd_index = _static_table(keys, np.arange(len(keys), dtype=np.int64), -1)
            self._nfd_starts = tf.constant(starts)
            self._nfd_lengths = tf.constant(lengths)
            self._nfd_values = tf.constant(values)
            self._marks = _static_table(mark_keys, mark_values, 0)
        self._wordpiece = tf_text.FastWordpieceTokenizer(
            vocab=_wordpiece_vocab(vocab),
            suffix_indicator="##",
            # The original's limit counts characters and is applied in `_word_ids`;
            # this byte limit only has to let every word within it through.
            max_bytes_per_word=4 * max_input_chars_per_word,
            token_out_type=tf.int64,
            unknown_token=self.unk_token,
            no_pretokenization=True,
        )

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def __call__(self, texts: tf.Tensor) -> tf.RaggedTensor:
        """WordPiece ids of each text: int64 `[batch, (tokens)]`."""
        # Invalid UTF-8 becomes U+FFFD, which is then cleaned away: the same as the
        # original's `decode("utf-8", "ignore")`.
        code_points = tf.strings.unicode_decode(texts, "UTF-8", errors="replace")
        values = code_points.flat_values
        rows = tf.cast(code_points.value_rowids(), tf.int32)
        entries = tf.gather(self._table, values)
        if self.do_lower_case:
            values, entries = tf.cond(
                tf.reduce_any(tf.equal(values, _CAPITAL_SIGMA)),
                lambda: self._resolve_sigmas(values, entries, rows),
                lambda: (values, entries),
            )
            chars, rows = tf.cond(
                tf.reduce_any(tf.not_equal(tf.bitwise.bitwise_and(entries, _REORDER), 0)),
                lambda: self._reordered_chars(values, rows),
                lambda: self._chars(entries, rows),
            )
        else:
            chars, rows = self._chars(entries, rows)
        return self._word_ids(chars, rows, tf.cast(code_points.nrows(), tf.int32))

    def tokenize_to_ids(self, texts: Sequence[str]) -> list[list[int]]:
        """Eager convenience: a list of texts to lists of ids."""
        return self(tf.constant([text.encode("utf-8") for text in texts], tf.string)).to_list()

    def _resolve_sigmas(self, values: tf.Tensor, entries: tf.Tensor, rows: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """Replaces each `Σ` by `ς` or `σ`, as `str.lower()` does on the word around it."""
        roles = tf.bitwise.right_shift(entries, _SIGMA_SHIFT)
        visible = tf.cast(tf.where(tf.not_equal(roles, _TRANSPARENT))[:, 0], tf.int32)
        visible_rows = tf.gather(rows, visible)
        visible_cased = tf.equal(tf.gather(roles, visible), _CASED)
        # For each position, the rank among visible positions of the first one at or
        # after it. A sigma is visible: its neighbours have ranks -1 and +1.
        rank = tf.cumsum(tf.cast(tf.not_equal(roles, _TRANSPARENT), tf.int32), exclusive=True)
        sigmas = tf.cast(tf.where(tf.equal(values, _CAPITAL_SIGMA))[:, 0], tf.int32)
        sigma_rank, sigma_rows = tf.gather(rank, sigmas), tf.gather(rows, sigmas)

        def cased_neighbour(neighbour_rank: tf.Tensor) -> tf.Tensor:
            inside = (neighbour_rank >= 0) & (neighbour_rank < tf.size(visible))
            safe = tf.clip_by_value(neighbour_rank, 0, tf.size(visible) - 1)
            same_row = tf.equal(tf.gather(visible_rows, safe), sigma_rows)
            return inside & same_row & tf.gather(visible_cased, safe)

        final = cased_neighbour(sigma_rank - 1) & ~cased_neighbour(sigma_rank + 1)
        replacements = tf.where(final, _FINAL_SIGMA, _SMALL_SIGMA)
        indices = tf.expand_dims(sigmas, 1)
        values = tf.tensor_scatter_nd_update(values, indices, replacements)
        entries = tf.tensor_scatter_nd_update(entries, indices, tf.gather(self._table, replacements))
        return values, entries

    def _chars(self, entries: tf.Tensor, rows: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """The output characters (as entries) and their rows: expansions spelled out,
        deleted characters gone."""
        entries = tf.bitwise.bitwise_and(entries, _ENTRY_MASK)
        return tf.cond(
            tf.reduce_any(entries >= _EXPAND_OR_DELETED),
            lambda: self._expand(entries, rows),
            lambda: (entries, rows),
        )

    def _expand(self, entries: tf.Tensor, rows: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        expanding = entries >= _EXPAND
        index = tf.where(expanding, tf.bitwise.bitwise_and(entries, _PAYLOAD_MASK), 0)
        deleted = tf.equal(tf.bitwise.right_shift(entries, _KIND_SHIFT), _DELETED)
        lengths = tf.where(expanding, tf.gather(self._expansion_lengths, index), tf.cast(~deleted, tf.int32))
        starts = tf.where(expanding, tf.gather(self._expansion_starts, index), -1)
        chars, source = _spell_out(lengths, starts, self._expansion_values, entries)
        return chars, tf.gather(rows, source)

    def _reordered_chars(self, values: tf.Tensor, rows: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """`_chars` for a batch where NFD's canonical reordering may matter.

        Spells out the full NFD (Mn included) of every character, sorts each run of
        combining characters by combining class (stably, as NFD does), and only then
        drops the Mn characters.
        """
        index = tf.cast(self._nfd_index.lookup(tf.cast(values, tf.int64)), tf.int32)
        known = index >= 0
        safe_index = tf.maximum(index, 0)
        lengths = tf.where(known, tf.gather(self._nfd_lengths, safe_index), 1)
        starts = tf.where(known, tf.gather(self._nfd_starts, safe_index), -1)
        code_points, source = _spell_out(lengths, starts, self._nfd_values, values)
        rows = tf.gather(rows, source)
        marks = tf.cast(self._marks.lookup(tf.cast(code_points, tf.int64)), tf.int32)
        combining_class = tf.bitwise.right_shift(marks, 1)
        # A run starts at every starter (class 0) and at every new text.
        run_starts = tf.equal(combining_class, 0) | tf.not_equal(rows, _shifted_right(rows, -1))
        runs = tf.cumsum(tf.cast(run_starts, tf.int64))
        order = tf.argsort(runs * 256 + tf.cast(combining_class, tf.int64), stable=True)
        kept = tf.gather(order, tf.where(tf.equal(tf.gather(marks, order) % 2, 0))[:, 0])
        # The kept characters are already lower-cased, NFD and mark-free: their table
        # entries are themselves, with their kind.
        entries = tf.bitwise.bitwise_and(tf.gather(self._table, tf.gather(code_points, kept)), _ENTRY_MASK)
        return entries, tf.gather(rows, kept)

    def _word_ids(self, chars: tf.Tensor, rows: tf.Tensor, num_rows: tf.Tensor) -> tf.RaggedTensor:
        """Cuts the characters into words and WordPiece-tokenizes them."""
        kinds = tf.bitwise.right_shift(chars, _KIND_SHIFT)
        is_space = tf.equal(kinds, tokenization.SPACE)
        is_solo = tf.equal(kinds, tokenization.SOLO)
        # A word starts at a non-space character that is solo, begins its text, or
        # follows a space or a solo character.
        after_break = _shifted_right(is_space | is_solo, True) | tf.not_equal(rows, _shifted_right(rows, -1))
        kept = tf.where(~is_space)[:, 0]
        starts = tf.gather(is_solo | after_break, kept)
        word_starts = tf.cast(tf.where(starts)[:, 0], tf.int32)
        word_splits = tf.concat([word_starts, tf.fill([1], tf.size(kept, out_type=tf.int32))], axis=0)
        words = tf.RaggedTensor.from_row_splits(
            tf.bitwise.bitwise_and(tf.gather(chars, kept), _PAYLOAD_MASK), word_splits, validate=False
        )
        strings = tf.strings.unicode_encode(words, "UTF-8")
        too_long = words.row_lengths() > self.max_input_chars_per_word
        strings = tf.where(too_long, self.unk_token, strings)
        pieces = self._wordpiece.tokenize(strings)
        # Pieces per text: the piece counts of its words, summed.
        word_rows = tf.gather(tf.gather(rows, kept), word_starts)
        counts = tf.math.unsorted_segment_sum(tf.cast(pieces.row_lengths(), tf.int32), word_rows, num_rows)
        splits = tf.concat([tf.zeros([1], tf.int32), tf.cumsum(counts)], axis=0)
        return tf.RaggedTensor.from_row_splits(pieces.flat_values, tf.cast(splits, tf.int64), validate=False)
