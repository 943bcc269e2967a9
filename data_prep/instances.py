"""The original's instance algorithm: pack sentences into `[CLS] A [SEP] B [SEP]` pairs.

This follows google-research/bert `create_instances_from_document` step by step (see
the comments), with two changes that keep memory bounded and the work vectorisable:

- Token ids of a document live in one int32 array with sentence start offsets, and an
  instance is recorded as two (start, length) ranges instead of copied token lists.
  Truncation (`truncate_seq_pair`) just moves the ends of those ranges.
- The random NotNext document is drawn from a `DocumentPool` of recent documents
  instead of from the whole corpus, which the original holds in memory.
"""

from __future__ import annotations

import random
from array import array
from bisect import bisect_left
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np


class PoolDocument:
    """A document's token ids, and its sentence boundaries."""

    __slots__ = ("ids", "starts")

    def __init__(self, ids: np.ndarray, starts: array):
        self.ids = ids  # int32, all sentences back to back
        self.starts = starts  # sentence k is ids[starts[k]:starts[k + 1]]


class DocumentPool:
    """The documents a NotNext segment B may come from: the most recent ones.

    The original draws it from the whole (shuffled) corpus, so its memory grows with the
    corpus. We keep the last `max_documents` documents, and at most `max_tokens` tokens
    (the most recent document is always kept).
    """

    def __init__(self, max_documents: int, max_tokens: int):
        self.max_documents = max_documents
        self.max_tokens = max_tokens
        self._documents: deque[PoolDocument] = deque()
        self._tokens = 0

    def add(self, document: PoolDocument) -> None:
        documents = self._documents
        documents.append(document)
        self._tokens += len(document.ids)
        while len(documents) > 1 and (len(documents) > self.max_documents or self._tokens > self.max_tokens):
            self._tokens -= len(documents.popleft().ids)

    def draw(self, document: PoolDocument, random: Callable[[], float]) -> PoolDocument:
        """A random document of the pool other than `document`, if possible.

        The original tries 10 times to pick a document other than the current one; with
        a single document (or bad luck) it uses the same one.
        """
        documents = self._documents
        for _ in range(10):
            other = documents[int(random() * len(documents))]
            if other is not document:
                break
        return other

    def clear(self) -> None:
        self._documents.clear()
        self._tokens = 0


@dataclass(frozen=True)
class PackingOptions:
    max_seq_length: int
    short_seq_prob: float


@dataclass
class Recipes:
    """Instances as ranges into the chunk's token array. A NotNext segment B comes from
    another document: it is copied into `borrowed`, and its `b_start` counts from the
    start of the borrowed tokens."""

    a_start: array = field(default_factory=lambda: array("q"))
    a_length: array = field(default_factory=lambda: array("q"))
    b_start: array = field(default_factory=lambda: array("q"))
    b_length: array = field(default_factory=lambda: array("q"))
    is_random_next: array = field(default_factory=lambda: array("b"))
    borrowed: list[np.ndarray] = field(default_factory=list)
    borrowed_tokens: int = 0

    def __len__(self) -> int:
        return len(self.a_start)


def truncate_seq_pair(
    length_a: int, length_b: int, max_num_tokens: int, rng: random.Random
) -> tuple[int, int, int, int]:
    """The original's truncation, as counts: (a_front, a_back, b_front, b_back) trims.

    One token at a time, the original trims the longer segment (B on a tie), from the
    front or the back with equal chance. We take the run of steps that hit the same
    segment at once and draw its front/back split as fair coin flips
    (`getrandbits(k).bit_count()`): the same distribution, with few draws even when a
    giant sentence must lose thousands of tokens.
    """
    trims = [0, 0, 0, 0]
    while length_a + length_b > max_num_tokens:
        excess = length_a + length_b - max_num_tokens
        if length_a == length_b and excess >= 2:
            # Equal lengths: the trims alternate B, A, B, A...; take whole pairs.
            steps = excess // 2
            for side in (0, 2):
                front = rng.getrandbits(steps).bit_count()
                trims[side] += front
                trims[side + 1] += steps - front
            length_a -= steps
            length_b -= steps
            continue
        if length_a > length_b:
            side, steps = 0, min(excess, length_a - length_b)
            length_a -= steps
        else:
            side, steps = 2, min(excess, length_b - length_a + 1)
            length_b -= steps
        front = rng.getrandbits(steps).bit_count()
        trims[side] += front
        trims[side + 1] += steps - front
    return trims[0], trims[1], trims[2], trims[3]


def pack_document(
    document: PoolDocument,
    base: int,
    pool: DocumentPool,
    options: PackingOptions,
    rng: random.Random,
    out: Recipes,
) -> None:
    """Appends to `out` the instances of one pass over `document` (the original's
    `create_instances_from_document`); `base` is where its ids start in the chunk array.

    A uniform integer in [0, n) is drawn as `int(random() * n)` rather than with
    `randint`, five times faster; for any n here its bias (n / 2**53) is nil.
    """
    random = rng.random
    starts = document.starts
    num_sentences = len(starts) - 1
    # [CLS], [SEP], [SEP]
    max_num_tokens = options.max_seq_length - 3
    # Usually fill the whole sequence; sometimes (short_seq_prob) aim shorter, to narrow
    # the gap between pre-training and fine-tuning sequence lengths. The target is only
    # a target: segments are whole sentences, and truncation enforces the real limit.
    target_seq_length = max_num_tokens
    if random() < options.short_seq_prob:
        target_seq_length = 2 + int(random() * (max_num_tokens - 1))  # randint(2, max_num_tokens)
    first = 0  # first sentence of the current chunk
    i = 0
    while i < num_sentences:
        if i == num_sentences - 1 or starts[i + 1] - starts[first] >= target_seq_length:
            segments = i - first + 1
            # Segment A is a random number of the chunk's sentences, from its start.
            a_end = first + (1 + int(random() * (segments - 1)) if segments >= 2 else 1)
            a_lo, a_hi = starts[first], starts[a_end]
            if segments == 1 or random() < 0.5:
                is_random_next = 1
                # B from a random other document, from a random sentence on, until it
                # reaches what is left of the target.
                target_b_length = target_seq_length - (a_hi - a_lo)
                other = pool.draw(document, random)
                other_starts = other.starts
                other_sentences = len(other_starts) - 1
                random_start = int(random() * other_sentences)
                b_lo = other_starts[random_start]
                b_end = bisect_left(other_starts, b_lo + target_b_length, random_start + 1, other_sentences)
                b_length = other_starts[b_end] - b_lo
                b_start = out.borrowed_tokens
                out.borrowed.append(other.ids[b_lo : b_lo + b_length])
                out.borrowed_tokens += b_length
                # The chunk's sentences after A were not used: put them back, so that
                # the next chunk starts with them.
                i -= segments - (a_end - first)
            else:
                is_random_next = 0
                b_start = base + a_hi
                b_length = starts[i + 1] - a_hi
            a_length = a_hi - a_lo
            if a_length + b_length > max_num_tokens:
                a_front, a_back, b_front, b_back = truncate_seq_pair(a_length, b_length, max_num_tokens, rng)
                a_lo += a_front
                a_length -= a_front + a_back
                b_start += b_front
                b_length -= b_front + b_back
            out.a_start.append(base + a_lo)
            out.a_length.append(a_length)
            out.b_start.append(b_start)
            out.b_length.append(b_length)
            out.is_random_next.append(is_random_next)
            first = i + 1
        i += 1


def chunk_tokens(recipes: Recipes, chunk_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The chunk's ids followed by the borrowed segments, and the B starts into that array."""
    b_start = np.frombuffer(recipes.b_start, dtype=np.int64).copy()
    borrowed = np.frombuffer(recipes.is_random_next, dtype=np.int8).astype(bool)
    b_start[borrowed] += len(chunk_ids)
    tokens = np.concatenate([chunk_ids, *recipes.borrowed]) if recipes.borrowed else chunk_ids
    return tokens, b_start
