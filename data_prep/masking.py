"""Instances as arrays, and the original's masked-LM masking, for a whole batch at once.

The original masks one instance at a time in Python (shuffle the candidate words,
take them until `num_to_predict` tokens, then 80% [MASK] / 10% kept / 10% random per
WordPiece). Here the same choices are made for every row of a `[n, max_seq_length]`
batch with numpy; only the random draws differ from the original's stream, not their
distribution.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bert_tf.data.schema import KEEP_PROB, MASK_PROB
from data_prep.encoding import CONTINUATION_FLAG, ID_MASK


@dataclass(frozen=True)
class MaskingOptions:
    masked_lm_prob: float
    max_predictions_per_seq: int
    vocab_size: int
    mask_id: int
    whole_word: bool


@dataclass
class InstanceBatch:
    """`[n, max_seq_length]` instances: `[CLS] A [SEP] B [SEP]`, zero-padded."""

    input_ids: np.ndarray  # int32
    segment_ids: np.ndarray  # int8
    lengths: np.ndarray  # int64, real tokens (with [CLS] and both [SEP])
    candidates: np.ndarray  # bool, tokens of A and B (what masking may choose)
    chinese_continuation: np.ndarray  # bool, CJK character continuing a Chinese word
    next_sentence_labels: np.ndarray  # int8: 1 = B is from another document (NotNext)


@dataclass
class MaskedLm:
    """The masked-LM side of a batch, padded to `max_predictions_per_seq`."""

    input_ids: np.ndarray  # int32, with the replacements
    positions: np.ndarray  # int32, sorted, 0-padded
    label_ids: np.ndarray  # int32, the original ids at `positions`
    weights: np.ndarray  # float32, 1.0 for real predictions
    replaced: int  # counts of [MASK], kept and random-id predictions
    kept: int
    random: int


def assemble(
    tokens: np.ndarray,
    a_start: np.ndarray,
    a_length: np.ndarray,
    b_start: np.ndarray,
    b_length: np.ndarray,
    next_sentence_labels: np.ndarray,
    max_seq_length: int,
    cls_id: int,
    sep_id: int,
) -> InstanceBatch:
    """Gathers `tokens[a]` and `tokens[b]` ranges into padded `[CLS] A [SEP] B [SEP]` rows."""
    n = len(a_start)
    position = np.arange(max_seq_length, dtype=np.int32)
    length_a = a_length.astype(np.int32)[:, None]
    b_first = length_a + 2
    lengths = (a_length + b_length + 3).astype(np.int32)
    in_a = (position >= 1) & (position <= length_a)
    candidates = in_a | ((position >= b_first) & (position < lengths[:, None] - 1))
    # Token i of row r: a_start + i - 1 in A, b_start + i - b_first in B.
    offset = np.where(in_a, (a_start - 1).astype(np.int32)[:, None], (b_start.astype(np.int32)[:, None] - b_first))
    raw = np.take(tokens, offset + position, mode="clip")
    raw[~candidates] = 0
    input_ids = raw & ID_MASK
    rows = np.arange(n)
    input_ids[:, 0] = cls_id
    input_ids[rows, b_first[:, 0] - 1] = sep_id
    input_ids[rows, lengths - 1] = sep_id
    segment_ids = ((position >= b_first) & (position < lengths[:, None])).view(np.int8)
    return InstanceBatch(
        input_ids=input_ids,
        segment_ids=segment_ids,
        lengths=lengths.astype(np.int64),
        candidates=candidates,
        chinese_continuation=(raw & CONTINUATION_FLAG) != 0,
        next_sentence_labels=next_sentence_labels,
    )


def num_to_predict(lengths: np.ndarray, masked_lm_prob: float, max_predictions_per_seq: int) -> np.ndarray:
    """The original's `min(max_predictions, max(1, round(len(tokens) * prob)))`; `len`
    counts [CLS] and [SEP] too, and `np.rint` rounds half to even like Python's `round`."""
    return np.minimum(max_predictions_per_seq, np.maximum(1, np.rint(lengths * masked_lm_prob))).astype(np.int64)


def word_continuation(batch: InstanceBatch, is_wordpiece_suffix: np.ndarray) -> np.ndarray:
    """Tokens that continue the word of the token before: `##` pieces and the characters
    of a Chinese word after its first."""
    suffix = is_wordpiece_suffix[np.minimum(batch.input_ids, len(is_wordpiece_suffix) - 1)]
    return batch.candidates & (suffix | batch.chinese_continuation)


def _choose_tokens(
    candidates: np.ndarray, budget: np.ndarray, width: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Per row, `budget` (or all, if fewer) random candidate positions: a `[n, width]`
    array of them, sorted, and the mask of the real ones."""
    keys = rng.random(candidates.shape, dtype=np.float32)
    keys[~candidates] = 2.0  # after every candidate
    if width < keys.shape[1]:
        order = np.argpartition(keys, width - 1, axis=1)[:, :width]
        # Of the `width` smallest keys, the first `budget` in key order are chosen.
        rank = np.argsort(np.take_along_axis(keys, order, 1), axis=1)
        order = np.take_along_axis(order, rank, 1)
    else:
        order = np.argsort(keys, axis=1)
    real = np.arange(order.shape[1]) < np.minimum(budget, candidates.sum(axis=1))[:, None]
    positions = np.sort(np.where(real, order, keys.shape[1]), axis=1)
    return np.where(real, positions, 0)[:, :width], real[:, :width]


def _choose_whole_words(
    candidates: np.ndarray, continuation: np.ndarray, budget: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """Per row, random whole words while they fit in `budget` tokens (the original:
    shuffle the words, skip one that would overflow, stop once `budget` is reached)."""
    n, length = candidates.shape
    position = np.arange(length)
    # As in the original, a `##` piece joins the previous candidate word even across
    # [SEP] (B starting with `##` after truncation); only the very first candidate
    # always starts a word.
    starts = candidates & (~continuation | (position == 1))
    word = np.cumsum(starts, axis=1) - 1
    num_words = starts.sum(axis=1)
    rows = np.broadcast_to(np.arange(n)[:, None], (n, length))
    word_length = np.bincount((rows * length + np.maximum(word, 0))[candidates], minlength=n * length).reshape(
        n, length
    )
    keys = rng.random((n, length))
    keys[position[None, :] >= num_words[:, None]] = 2.0
    order = np.argsort(keys, axis=1)  # word ids, in random order
    # Slots past a row's words count nothing (a row of continuations only has none).
    ranked_length = np.where(position < num_words[:, None], np.take_along_axis(word_length, order, 1), 0)
    # Until a row's first word that overflows, every word fits: those are the words whose
    # running total is within the budget, all rows at once.
    running = np.cumsum(ranked_length, axis=1)
    accepted = (running <= budget[:, None]) & (ranked_length > 0)
    overflow = (running <= budget[:, None]).sum(axis=1)  # that word's rank (>= num_words: none overflows)
    taken = np.where(accepted, ranked_length, 0).sum(axis=1)
    # After it, a smaller word may still fit (the original skips only the word that
    # overflows): one rank at a time, for the rows still under budget only.
    open_rows = np.flatnonzero((taken < budget) & (overflow < num_words))
    for rank in range(int(overflow[open_rows].min(initial=length)) + 1, int(num_words.max(initial=0))):
        size = ranked_length[open_rows, rank]
        fits = (rank > overflow[open_rows]) & (size > 0) & (taken[open_rows] + size <= budget[open_rows])
        taken[open_rows[fits]] += size[fits]
        accepted[open_rows[fits], rank] = True
        open_rows = open_rows[taken[open_rows] < budget[open_rows]]
        if not open_rows.size:
            break
    word_chosen = np.zeros((n, length), dtype=bool)
    np.put_along_axis(word_chosen, order, accepted, axis=1)
    return candidates & np.take_along_axis(word_chosen, np.maximum(word, 0), 1)


def _positions_of(chosen: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
    """The chosen positions of each row (at most `width`), sorted, and the real-mask."""
    rows, columns = np.nonzero(chosen)  # row by row, left to right: sorted
    per_row = chosen.sum(axis=1)
    slot = np.arange(len(rows)) - np.repeat(np.cumsum(per_row) - per_row, per_row)
    positions = np.zeros((len(chosen), width), dtype=np.int64)
    positions[rows, slot] = columns
    return positions, np.arange(width) < per_row[:, None]


def mask_batch(
    batch: InstanceBatch,
    continuation: np.ndarray | None,
    options: MaskingOptions,
    rng: np.random.Generator,
) -> MaskedLm:
    """Chooses and replaces the masked-LM tokens of every row of `batch`.

    `continuation` (see `word_continuation`) is needed for whole-word masking only.
    """
    width = options.max_predictions_per_seq
    budget = num_to_predict(batch.lengths, options.masked_lm_prob, width)
    if options.whole_word:
        positions, real = _positions_of(_choose_whole_words(batch.candidates, continuation, budget, rng), width)
    else:
        positions, real = _choose_tokens(batch.candidates, budget, width, rng)
    original = np.take_along_axis(batch.input_ids, positions, 1)
    # The 80/10/10 draw is made per WordPiece, as in the original (Model Garden draws
    # once per whole word or n-gram).
    draw = rng.random(positions.shape, dtype=np.float32)
    random_ids = rng.integers(0, options.vocab_size, positions.shape, dtype=np.int32)
    replacement = np.where(
        draw < MASK_PROB, options.mask_id, np.where(draw < MASK_PROB + KEEP_PROB, original, random_ids)
    )
    input_ids = batch.input_ids.copy()
    rows = np.broadcast_to(np.arange(len(positions))[:, None], positions.shape)
    input_ids[rows[real], positions[real]] = replacement[real]
    replaced = int((real & (draw < MASK_PROB)).sum())
    kept = int((real & (draw < MASK_PROB + KEEP_PROB)).sum()) - replaced
    return MaskedLm(
        input_ids=input_ids,
        positions=positions.astype(np.int32),
        label_ids=np.where(real, original, 0).astype(np.int32),
        weights=real.astype(np.float32),
        replaced=replaced,
        kept=kept,
        random=int(real.sum()) - replaced - kept,
    )
