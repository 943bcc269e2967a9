"""`[CLS] A [SEP] B [SEP]`: how the original packs one text or a pair for the encoder.

Shared by `run_classifier.py`'s and `extract_features.py`'s `convert_*_to_features`
in the original: a pair is cut by dropping one token at a time from the end of the
longer segment (deterministic, unlike pre-training's random front/back trim), a
single text is cut to `max_seq_length - 2`; segment ids are 0 for [CLS] A [SEP] and
1 for B [SEP].

Example:
>>> pack_pair(["a", "b", "c", "d"], ["x", "y"], 7)
(['[CLS]', 'a', 'b', '[SEP]', 'x', 'y', '[SEP]'], [0, 0, 0, 0, 1, 1, 1])
>>> pack_pair(["a", "b", "c"], None, 4)
(['[CLS]', 'a', 'b', '[SEP]'], [0, 0, 0, 0])
"""

from __future__ import annotations

from typing import Sequence


def truncate_seq_pair(tokens_a: list[str], tokens_b: list[str], max_length: int) -> None:
    """Pops the last token of the longer list (B on a tie) until both fit in `max_length`, in place."""
    while len(tokens_a) + len(tokens_b) > max_length:
        (tokens_a if len(tokens_a) > len(tokens_b) else tokens_b).pop()


def pack_pair(
    tokens_a: Sequence[str], tokens_b: Sequence[str] | None, max_seq_length: int
) -> tuple[list[str], list[int]]:
    """The tokens `[CLS] a [SEP] (b [SEP])` within `max_seq_length`, and their segment ids."""
    tokens_a = list(tokens_a)
    if tokens_b is None:
        del tokens_a[max_seq_length - 2 :]
        return ["[CLS]", *tokens_a, "[SEP]"], [0] * (len(tokens_a) + 2)
    tokens_b = list(tokens_b)
    truncate_seq_pair(tokens_a, tokens_b, max_seq_length - 3)
    return ["[CLS]", *tokens_a, "[SEP]", *tokens_b, "[SEP]"], [0] * (len(tokens_a) + 2) + [1] * (len(tokens_b) + 1)
