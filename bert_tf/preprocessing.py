"""Preprocessing in the graph: raw strings to the encoder's inputs, as the fine-tuning featurisers.

`BertPreprocessor` is a Keras layer (TensorFlow backend: it is built on tensorflow-text)
that takes one or two batches of strings and returns `input_word_ids`, `input_mask`
and `input_type_ids`, the ids that `fine_tune.features.PairFeaturiser` gives the model:

    [CLS] A [SEP]            segment ids 0 ... 0
    [CLS] A [SEP] B [SEP]    segment ids 0 ... 0 1 ... 1

A pair too long for `seq_length` loses one token at a time from the end of the longer
side (the original's `_truncate_seq_pair`, in closed form: `truncated_lengths`). Rows
are padded to `seq_length` (`padding="fixed"`, as the original) or to the batch's
longest rounded up to a multiple of `pad_to_multiple_of` (`padding="longest"`, as
`fine_tune.batching`'s dynamic mode). It runs in `tf.data` (`dataset.map`), inside a
Keras model and in a SavedModel.

Texts are cut into words at the original's whitespace, and each word is tokenized by
`FastBertTokenizer`. The ids are the same as the whole text's: the original splits on
whitespace first and cleans, lower-cases and strips accents one whitespace-separated
word at a time. The words give the character offsets: every token carries the
`[start, end)` code point span of the word it comes from in its own input string
(WordPieces of one word share it); [CLS], [SEP] and padding carry -1. For pre-split
words (NER) and windows of a context (SQuAD) the contract is the layer's parts:
`tokenize` gives each word's ids, `pack` packs given token segments.

Example:
>>> import tempfile, os
>>> tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "un", "##aff", "##able", "is", "it", "?"]
>>> path = os.path.join(tempfile.mkdtemp(), "vocab.txt")
>>> _ = open(path, "w", encoding="utf-8").write("\\n".join(tokens) + "\\n")
>>> preprocessor = BertPreprocessor(path, seq_length=8, padding="longest", offsets=True)
>>> inputs = preprocessor([tf.constant(["Unaffable?"]), tf.constant(["is it"])])  # "?" is cut (truncation)
>>> inputs["input_word_ids"].numpy().tolist(), inputs["input_type_ids"].numpy().tolist()
([[2, 5, 6, 7, 3, 8, 9, 3]], [[0, 0, 0, 0, 0, 1, 1, 1]])
>>> inputs["start_offsets"].numpy().tolist(), inputs["end_offsets"].numpy().tolist()
([[-1, 0, 0, 0, -1, 0, 3, -1]], [[-1, 10, 10, 10, -1, 2, 5, -1]])
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

import keras
import tensorflow as tf
import tensorflow_text as tf_text

from bert_tf import by_length, tokenization
from bert_tf.errors import BertTfError
from bert_tf.fast_tokenizer import FastBertTokenizer, char_class

PADDING_MODES = ("fixed", "longest")
NO_OFFSET = -1  # The offsets of [CLS], [SEP] and padding.


# === Words ===
@functools.lru_cache(maxsize=1)
def word_separators() -> str:
    """An RE2 class of the characters at which the original splits words
    (`tokenization.is_word_separator`)."""
    # Every separator is one of Python's spaces: testing those alone skips 1.1M code points.
    spaces = (ch for ch in map(chr, range(sys.maxunicode + 1)) if ch.isspace())
    return char_class([ord(ch) for ch in spaces if tokenization.is_word_separator(ch)])


@functools.lru_cache(maxsize=1)
def solo_characters() -> str:
    """An RE2 class of the characters that the original makes words of their own:
    punctuation (`tokenization.is_punctuation`) and CJK ideographs."""
    solo = [cp for cp in range(sys.maxunicode + 1)
            if tokenization.is_cjk(cp) or tokenization.is_punctuation(chr(cp))]  # fmt: skip
    return char_class(solo)


def split_basic_tokens(texts: tf.Tensor) -> tuple[tf.RaggedTensor, tf.RaggedTensor, tf.RaggedTensor]:
    """The basic tokens of `texts` (BasicTokenizer's cut: at its word separators, and each
    punctuation or CJK character a token of its own) with their byte starts and ends."""
    solo = solo_characters()
    return tf_text.regex_split_with_offsets(texts, f"{word_separators()}|{solo}", solo)


def char_offsets(texts: tf.Tensor, byte_offsets: tf.RaggedTensor) -> tf.RaggedTensor:
    """Byte offsets (at character boundaries) into `texts` as code point offsets."""
    _, char_starts = tf.strings.unicode_decode_with_offsets(texts, "UTF-8", errors="replace")
    # One sorted sequence for the whole batch: each row's positions shifted past the previous row's.
    stride = tf.cast(tf.maximum(tf.reduce_max(tf.strings.length(texts)), 0), tf.int64) + 1
    keys = char_starts.value_rowids() * stride + char_starts.flat_values
    rows = byte_offsets.value_rowids()
    queries = rows * stride + byte_offsets.flat_values
    counts = tf.searchsorted(keys, queries, side="left", out_type=tf.int64) - tf.gather(char_starts.row_splits, rows)
    return byte_offsets.with_flat_values(counts)


# === Packing ===
def truncated_lengths(length_a: tf.Tensor, length_b: tf.Tensor, budget: int | tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """How many tokens of each side `_truncate_seq_pair` keeps, without its loop.

    Popping from the longer side (from side b on a tie) first shortens the longer side
    down to the other, then alternates b, a, b...: a side shorter than half the budget
    is kept whole, and two long sides end at ceil(budget / 2) and floor(budget / 2).

    >>> a, b = truncated_lengths(tf.constant([3, 10, 10, 2]), tf.constant([10, 3, 10, 2]), 5)
    >>> a.numpy().tolist(), b.numpy().tolist()
    ([3, 3, 3, 2], [2, 2, 2, 2])
    """
    budget = tf.cast(budget, length_a.dtype)
    keep_a = tf.minimum(length_a, tf.maximum((budget + 1) // 2, budget - length_b))
    return keep_a, tf.minimum(length_b, budget - keep_a)


def _first(values: tf.RaggedTensor, counts: tf.Tensor) -> tf.RaggedTensor:
    """The first `counts[i]` values of each row i."""
    positions = tf.ragged.range(values.row_lengths())
    return tf.ragged.boolean_mask(values, positions < tf.expand_dims(tf.cast(counts, positions.dtype), 1))


def _special(batch_size: tf.Tensor, value: int) -> tf.RaggedTensor:
    """One `value` per row, as a ragged column."""
    return tf.RaggedTensor.from_tensor(tf.fill(tf.stack([batch_size, 1]), tf.constant(value, tf.int32)))


def _packed(segments: Sequence[tf.RaggedTensor], first: int, separators: Sequence[int]) -> tf.RaggedTensor:
    """`first` segment_0 `separators[0]` (segment_1 `separators[1]`), each row."""
    batch_size = segments[0].nrows(out_type=tf.int32)
    parts = [_special(batch_size, first)]
    for segment, separator in zip(segments, separators):
        parts += [tf.cast(segment, tf.int32), _special(batch_size, separator)]
    return tf.concat(parts, axis=1)


# === The layer ===
@keras.saving.register_keras_serializable(package="bert_tf")
class BertPreprocessor(keras.layers.Layer):
    """One or two batches of strings `[batch]` to the encoder's int32 inputs `[batch, length]`.

    Args:
        vocab_file: a BERT `vocab.txt`.
        do_lower_case: lower-case and strip accents (uncased models).
        seq_length: the longest row, special tokens included (the original's
            `max_seq_length`); longer inputs are truncated.
        padding: "fixed" (every row `seq_length` long) or "longest" (the batch's
            longest row, rounded up to `pad_to_multiple_of`, at most `seq_length`).
        pad_to_multiple_of: see `padding`.
        offsets: also return `start_offsets` and `end_offsets`, the code point span in
            its input string of each token's word (-1 for special tokens and padding).
    """

    def __init__(
        self,
        vocab_file: str | os.PathLike,
        do_lower_case: bool = True,
        seq_length: int = 128,
        padding: str = "fixed",
        pad_to_multiple_of: int = 8,
        offsets: bool = False,
        **kwargs: Any,
    ):
        super().__init__(trainable=False, **kwargs)
        if padding not in PADDING_MODES:
            raise BertTfError(f"Unknown padding {padding!r}; use one of {', '.join(PADDING_MODES)}.")
        if seq_length < 3:
            raise BertTfError(f"seq_length must leave room for [CLS] and two [SEP], got {seq_length}.")
        if pad_to_multiple_of < 1:  # -1 cut every row to two tokens; 0 divided by zero in the graph
            raise BertTfError(f"pad_to_multiple_of must be 1 or more, got {pad_to_multiple_of}.")
        self.vocab_file = os.fspath(vocab_file)
        self.do_lower_case = do_lower_case
        self.seq_length = seq_length
        self.padding = padding
        self.pad_to_multiple_of = pad_to_multiple_of
        self.offsets = offsets
        self.tokenizer = FastBertTokenizer(vocab_file, do_lower_case=do_lower_case)
        vocab = tokenization.load_vocab(vocab_file)
        self.cls_id, self.sep_id, self.pad_id = vocab["[CLS]"], vocab["[SEP]"], vocab["[PAD]"]

    # --- Tokenizing ---
    def tokenize_with_offsets(
        self, texts: tf.Tensor, split_punctuation: bool = False
    ) -> tuple[tf.RaggedTensor, tf.RaggedTensor, tf.RaggedTensor]:
        """int32 ids `[batch, (words), (pieces)]` and each word's code point start and end `[batch, (words)]`.

        Words end at the original's whitespace; with `split_punctuation`, each punctuation
        and CJK character is a word of its own too (the words a tagger labels, as
        `fine_tune.predictor.split_words` cuts them, each word tokenized on its own as
        run_ner.py's featuriser does).
        """
        texts = tf.convert_to_tensor(texts, tf.string)
        # `regex_split` stops at a NUL. U+0001 is deleted by the original as NUL is, in one byte too.
        splittable = tf.strings.regex_replace(texts, "\\x00", "\x01")
        if split_punctuation:
            words, byte_starts, byte_ends = split_basic_tokens(splittable)
        else:
            words, byte_starts, byte_ends = tf_text.regex_split_with_offsets(splittable, word_separators(), "")
        pieces = tf.cast(self.tokenizer(words.flat_values), tf.int32)
        return words.with_flat_values(pieces), char_offsets(texts, byte_starts), char_offsets(texts, byte_ends)

    def tokenize(self, texts: tf.Tensor) -> tf.RaggedTensor:
        """int32 ids `[batch, (words), (pieces)]`, Model Garden's `tokenize` layout."""
        return self.tokenize_with_offsets(texts)[0]

    # --- Packing ---
    def packed_length(self, lengths: tf.Tensor, seq_length: int | tf.Tensor) -> tf.Tensor:
        """The padded length of a batch whose rows are `lengths` long (at most `seq_length`)."""
        if self.padding == "fixed":
            return tf.cast(seq_length, tf.int32)
        return by_length.packed_length(lengths, seq_length, self.pad_to_multiple_of)

    def pack(
        self,
        segments: Sequence[tf.RaggedTensor],
        offsets: Sequence[tuple[tf.RaggedTensor, tf.RaggedTensor]] | None = None,
        seq_length: int | None = None,
    ) -> dict[str, tf.Tensor]:
        """Truncates, joins with [CLS]/[SEP] and pads one or two token segments.

        Args:
            segments: ids `[batch, (tokens)]` or `[batch, (words), (tokens)]`, one or two.
            offsets: optionally, (start, end) of every token of each segment, same shapes.
            seq_length: overrides the layer's.
        """
        if len(segments) not in (1, 2):
            raise BertTfError(f"BERT packs one or two segments, got {len(segments)}.")
        seq_length = self.seq_length if seq_length is None else seq_length
        segments = [_tokens(segment) for segment in segments]
        lengths = [segment.row_lengths() for segment in segments]
        if len(segments) == 1:
            keep = [tf.minimum(lengths[0], tf.cast(seq_length - 2, lengths[0].dtype))]
        else:
            keep = list(truncated_lengths(lengths[0], lengths[1], seq_length - 3))
        kept = [_first(segment, count) for segment, count in zip(segments, keep)]
        word_ids = _packed(kept, self.cls_id, [self.sep_id] * len(kept))
        # Segment ids: 0 up to the first [SEP], 1 after it.
        segment_ids = [tf.ones_like(k) * index for index, k in enumerate(kept)]
        type_ids = _packed(segment_ids, 0, range(len(kept)))
        length = self.packed_length(tf.cast(word_ids.row_lengths(), tf.int32), seq_length)
        shape = tf.stack([word_ids.nrows(out_type=tf.int32), length])
        outputs = {
            "input_word_ids": word_ids.to_tensor(self.pad_id, shape=shape),
            "input_mask": tf.ones_like(word_ids).to_tensor(0, shape=shape),
            "input_type_ids": type_ids.to_tensor(0, shape=shape),
        }
        if offsets is not None:
            for index, name in enumerate(("start_offsets", "end_offsets")):
                values = [_first(_tokens(pair[index]), count) for pair, count in zip(offsets, keep)]
                outputs[name] = _packed(values, NO_OFFSET, [NO_OFFSET] * len(kept)).to_tensor(NO_OFFSET, shape=shape)
        return outputs

    # --- Running a model ---
    def call_by_length(self, model: Callable, inputs: dict[str, tf.Tensor], output_spec: Any = None,
                       jit_compile: bool = False) -> Any:
        """`model(inputs, training=False)` on rows of similar length, 8 at a time (`bert_tf.by_length`,
        through XLA with `jit_compile`): a served batch comes in the client's order.
        `output_spec` defaults to a functional model's `output`."""
        output_spec = model.output if output_spec is None else output_spec
        return by_length.call_by_length(model, inputs, output_spec, multiple_of=self.pad_to_multiple_of,
                                        jit_compile=jit_compile)

    # --- Keras ---
    def call(self, inputs: tf.Tensor | Sequence[tf.Tensor]) -> dict[str, tf.Tensor]:
        texts = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
        tokenized = [self.tokenize_with_offsets(tf.reshape(text, [-1])) for text in texts]
        segments = [ids for ids, _, _ in tokenized]
        if not self.offsets:
            return self.pack(segments)
        offsets = [_token_offsets(ids, starts, ends) for ids, starts, ends in tokenized]
        return self.pack(segments, offsets)

    def compute_output_spec(self, inputs: Any) -> dict[str, keras.KerasTensor]:
        first = inputs[0] if isinstance(inputs, (list, tuple)) else inputs
        length = self.seq_length if self.padding == "fixed" else None
        names = ["input_word_ids", "input_mask", "input_type_ids"]
        names += ["start_offsets", "end_offsets"] if self.offsets else []
        return {name: keras.KerasTensor((first.shape[0], length), dtype="int32", name=name) for name in names}

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(
            vocab_file=self.vocab_file,
            do_lower_case=self.do_lower_case,
            seq_length=self.seq_length,
            padding=self.padding,
            pad_to_multiple_of=self.pad_to_multiple_of,
            offsets=self.offsets,
        )
        config.pop("trainable", None)
        return config


def _tokens(segment: tf.RaggedTensor) -> tf.RaggedTensor:
    """`[batch, (tokens)]`, merging a words axis if there is one."""
    return segment.merge_dims(1, 2) if segment.ragged_rank == 2 else segment


def _token_offsets(
    ids: tf.RaggedTensor, starts: tf.RaggedTensor, ends: tf.RaggedTensor
) -> tuple[tf.RaggedTensor, tf.RaggedTensor]:
    """Each word's span repeated for each of its pieces: `[batch, (words), (pieces)]`."""
    word_of_piece = ids.values.value_rowids()
    return (
        ids.with_flat_values(tf.cast(tf.gather(starts.flat_values, word_of_piece), tf.int32)),
        ids.with_flat_values(tf.cast(tf.gather(ends.flat_values, word_of_piece), tf.int32)),
    )
