"""`bert_tf.pooling`: hand-computed values, and a loop-by-loop numpy reference."""

from __future__ import annotations

import numpy as np
import pytest

from bert_tf.errors import BertTfError
from bert_tf.pooling import check_layers, pool, word_start_mask


def _states() -> list[np.ndarray]:
    """Three layers of a batch of two, seq 4, H 2; row 0 has 3 real tokens, row 1 has 4."""
    base = np.arange(16, dtype="float32").reshape(2, 4, 2)
    return [base, base * 10, -base]


MASK = np.array([[1, 1, 1, 0], [1, 1, 1, 1]])


def test_cls_concatenates_layers_in_the_given_order():
    got = np.asarray(pool(_states(), MASK, "cls", layers=(-1, 0)))
    # Row 0's [CLS] is [0, 1] in layer 0 and [-0, -1] in layer -1; row 1's is [8, 9].
    np.testing.assert_array_equal(got, [[0, -1, 0, 1], [-8, -9, 8, 9]])


def test_mean_ignores_padding():
    got = np.asarray(pool(_states(), MASK, "mean", layers=(1,)))
    # Row 0: mean of [0,1],[2,3],[4,5] = [2,3], times 10; row 1: mean of [8..15] pairs = [11,12].
    np.testing.assert_allclose(got, [[20, 30], [110, 120]])


def test_none_keeps_every_token_and_zeroes_padding():
    got = np.asarray(pool(_states(), MASK, "none", layers=(0, 2)))
    assert got.shape == (2, 4, 4)
    np.testing.assert_array_equal(got[0, 2], [4, 5, -4, -5])
    np.testing.assert_array_equal(got[0, 3], [0, 0, 0, 0])
    np.testing.assert_array_equal(got[1, 3], [14, 15, -14, -15])


def test_first_subword_packs_word_starts_to_the_front():
    first = np.array([[0, 0, 1, 1], [0, 1, 0, 1]])  # row 0's last start is padding: dropped
    got = np.asarray(pool(_states(), MASK, "first_subword", layers=(0,), first_subword_mask=first))
    np.testing.assert_array_equal(got[0], [[4, 5], [0, 0], [0, 0], [0, 0]])
    np.testing.assert_array_equal(got[1], [[10, 11], [14, 15], [0, 0], [0, 0]])


def test_matches_a_loop_reference_on_random_input():
    rng = np.random.default_rng(0)
    states = [rng.normal(size=(3, 7, 5)).astype("float32") for _ in range(4)]
    lengths = [7, 4, 1]
    mask = (np.arange(7)[None, :] < np.array(lengths)[:, None]).astype("int32")
    first = rng.integers(0, 2, size=(3, 7)) * mask
    layers = (-1, -2, -3, -4)
    concat = np.concatenate([states[i] for i in layers], axis=-1)
    for row, length in enumerate(lengths):
        np.testing.assert_allclose(
            np.asarray(pool(states, mask, "mean", layers))[row], concat[row, :length].mean(0), rtol=1e-6, atol=1e-6
        )
        words = concat[row][first[row] == 1]
        packed = np.asarray(pool(states, mask, "first_subword", layers, first))[row]
        np.testing.assert_allclose(packed[: len(words)], words, rtol=1e-6)
        assert not packed[len(words) :].any()


def test_bad_layers_and_pooling_are_one_sentence_errors():
    with pytest.raises(BertTfError, match="--layers value -5 is out of range for a model of 4 layers"):
        check_layers([-1, -5], 4, "--layers")
    with pytest.raises(BertTfError, match="is not one of cls, mean, first_subword, none"):
        pool(_states(), MASK, "max")
    with pytest.raises(BertTfError, match="needs first_subword_mask"):
        pool(_states(), MASK, "first_subword")


def test_word_start_mask_marks_words_not_pieces_or_specials():
    tokens = [["[CLS]", "the", "un", "##aff", "[UNK]", "[SEP]", "b", "[SEP]"]]
    assert word_start_mask(tokens, 10).tolist() == [[0, 1, 1, 0, 1, 0, 1, 0, 0, 0]]
