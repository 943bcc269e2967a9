"""Extracts BERT features from text: the original's `extract_features.py`, plus sentence
and word vectors in a compact format.

Input (`--input_file`): UTF-8, one text a line, or a pair as `text_a ||| text_b` (the
separator with a space on each side, as the original's `^(.*) \\|\\|\\| (.*)$`). Each
line is packed as `[CLS] a [SEP] (b [SEP])` within `--max_seq_length` (see
`bert_tf.packing`). An empty line is an empty text, and a line with several separators
splits at the last (`a ||| b ||| c` is the pair `a ||| b`, `c`), as in the original.

Output (`--output_file`), by `--output_format` and `--pooling`; layers are the
`--layers` indices into the encoder's blocks (-1 is the last), in the order given:
- jsonl, none (the defaults): the original's format exactly, one JSON object a line,
  `{"linex_index": i, "features": [{"token": t, "layers": [{"index": l, "values": [...]}, ...]}, ...]}`
  for every token ([CLS] and [SEP] included), values rounded to 6 decimals: byte for
  byte what the original's `round(float(x), 6)` and `json.dumps` write, 14x faster
  (`bert_tf.feature_writers`, `bench/extract_features.py`).
- jsonl, first_subword: the same, with only the first WordPiece of every word.
- jsonl, cls or mean: `{"linex_index": i, "pooling": p, "layers": [{"index": l, "values": [...]}, ...]}`.
- npy, cls or mean: `OUTPUT` is one float32 array [lines, F], row i for line i, with
  F = len(layers) * hidden_size (the layers side by side, in `--layers` order).
- npy, none or first_subword: `OUTPUT` is float32 [rows, F], the rows of every line
  one after the other; `STEM.offsets.npy` is int64 [lines + 1], line i's rows being
  `offsets[i]:offsets[i + 1]`; `STEM.tokens.txt` has line i's row tokens, space-separated
  (WordPieces hold no spaces). STEM is OUTPUT without its `.npy`.
  `numpy.load(OUTPUT, mmap_mode="r")` reads any of them without loading it whole.

Memory stays bounded: lines are read, run and written one batch at a time (npy rows
go straight to a memory-mapped file, sized by a first pass over the input). Every
output is written under a temporary name and renamed when complete.

Example:
  bert-extract-features --input_file=input.txt --output_file=features.jsonl \\
    --init_checkpoint=uncased_L-12_H-768_A-12/bert_model.ckpt --layers=-1,-2,-3,-4
  bert-extract-features --input_file=input.txt --output_file=sentences.npy \\
    --init_checkpoint=all-MiniLM-L6-v2 --layers=-1 --pooling=mean --output_format=npy
"""

from __future__ import annotations

import dataclasses
import os
import sys
from typing import Callable, Iterable, Iterator, Sequence

import numpy as np
from absl.flags import FlagValues

from bert_tf.atomic import atomic_outputs
from bert_tf.errors import BertTfError
from bert_tf.flags import Flag, check_output_file, flag_values, path_within, run_main, set_help
from bert_tf.feature_writers import JsonLinesWriter, NpyWriter, companion_paths
from bert_tf.packing import pack_pair
from bert_tf.pooling import POOLINGS, check_layers, pool, word_start_mask
from bert_tf.progress import progress_bar

SEPARATOR = " ||| "
OUTPUT_FORMATS = ("jsonl", "npy")
TOKEN_POOLINGS = ("none", "first_subword")  # one output row per token (or word), not per line

# === Flags ===
FLAGS = flag_values(
    "input_file", "output_file", "bert_config_file", "init_checkpoint", "vocab_file", "do_lower_case",
    "max_seq_length",
    own={
        "layers": Flag(str, "-1,-2,-3,-4", "Comma-separated encoder layers, -1 the last."),
        "batch_size": Flag(int, 32, "Lines per forward pass."),
        "pooling": Flag(POOLINGS, "none", "none: every token (the original); first_subword: the first WordPiece of "
                        "every word; cls: the [CLS] vector; mean: the mean over the tokens ([CLS] and [SEP] "
                        "included)."),
        "output_format": Flag(OUTPUT_FORMATS, "jsonl", "jsonl (the original's) or npy (float32 arrays)."),
        "progress": Flag(bool, True, "Show a progress bar on stderr."),
    },
)  # fmt: skip
set_help(FLAGS, "input_file", "The text file: one text, or one pair as 'text_a ||| text_b', a line.")


@dataclasses.dataclass(frozen=True)
class Options:
    """What one extraction needs; `options_from_flags` fills it from the command line."""

    input_file: str
    output_file: str
    init_checkpoint: str
    layers: tuple[int, ...] = (-1, -2, -3, -4)
    bert_config_file: str | None = None
    vocab_file: str | None = None
    do_lower_case: bool = True
    max_seq_length: int = 128
    batch_size: int = 32
    pooling: str = "none"
    output_format: str = "jsonl"
    progress: bool = True


def parse_layers(text: str) -> tuple[int, ...]:
    """`--layers` as ints.

    >>> parse_layers("-1,-2, -3")
    (-1, -2, -3)
    """
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise BertTfError(f"--layers={text!r} is not a comma-separated list of integers such as -1,-2,-3,-4.") from None


def options_from_flags(values: FlagValues) -> Options:
    for name in ("input_file", "output_file", "init_checkpoint"):
        if not getattr(values, name):
            raise BertTfError(f"--{name} is required (see --help).")
    return Options(
        input_file=values.input_file,
        output_file=values.output_file,
        init_checkpoint=values.init_checkpoint,
        layers=parse_layers(values.layers),
        bert_config_file=values.bert_config_file,
        vocab_file=values.vocab_file,
        do_lower_case=values.do_lower_case,
        max_seq_length=values.max_seq_length,
        batch_size=values.batch_size,
        pooling=values.pooling,
        output_format=values.output_format,
        progress=values.progress,
    )


# === Input ===
@dataclasses.dataclass(frozen=True)
class Line:
    index: int  # from 0: the output's `linex_index`
    text_a: str
    text_b: str | None


def parse_line(text: str, index: int) -> Line:
    """One input line as the original reads it: stripped, split at the last ` ||| ` (its
    regular expression's greedy first group).

    >>> parse_line("Who? ||| Me.\\n", 0)
    Line(index=0, text_a='Who?', text_b='Me.')
    >>> parse_line("\\n", 2)
    Line(index=2, text_a='', text_b=None)
    >>> parse_line("a ||| b ||| c", 4)
    Line(index=4, text_a='a ||| b', text_b='c')
    """
    text = text.strip()  # an empty line is an empty text, as the original reads it: [CLS] [SEP]
    text_a, separator, text_b = text.rpartition(SEPARATOR)
    return Line(index, text_a, text_b) if separator else Line(index, text, None)


def read_lines(path: str) -> Iterator[Line]:
    """The lines of `path`, parsed, one at a time. Read as bytes and split at "\\n" only,
    as the original's `tf.gfile` reader does, so that an undecodable line can be named."""
    with open(path, "rb") as reader:
        for index, raw in enumerate(reader):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise BertTfError(f"Line {index + 1} of {path} is not UTF-8 text; save the file as UTF-8.") from None
            yield parse_line(text, index)


# === Features ===
@dataclasses.dataclass(frozen=True)
class Packed:
    """One line as the encoder sees it: tokens, their ids and segment ids."""

    index: int
    tokens: list[str]
    ids: list[int]
    type_ids: list[int]
    truncated: bool  # the line had more tokens than --max_seq_length holds


class Packer:
    """Tokenizes and packs lines exactly as the original's `convert_examples_to_features`."""

    def __init__(self, tokenizer, max_seq_length: int):
        self.tokenizer = tokenizer
        self.max_seq_length = max_seq_length

    def __call__(self, line: Line) -> Packed:
        tokens_a = self.tokenizer.tokenize(line.text_a)
        tokens_b = self.tokenizer.tokenize(line.text_b) if line.text_b else []
        # The original packs a pair only when B has tokens at all.
        tokens, type_ids = pack_pair(tokens_a, tokens_b or None, self.max_seq_length)
        untruncated = len(tokens_a) + len(tokens_b) + (3 if tokens_b else 2)
        return Packed(line.index, tokens, self.tokenizer.convert_tokens_to_ids(tokens), type_ids,
                      untruncated > len(tokens))


def row_tokens(packed: Packed, pooling: str) -> list[str]:
    """The tokens that get an output row: all of them, or the first piece of every word."""
    if pooling == "first_subword":
        starts = word_start_mask([packed.tokens], len(packed.tokens))[0]
        return [token for token, start in zip(packed.tokens, starts) if start]
    return packed.tokens


def chunks(items: Iterable, size: int) -> Iterator[list]:
    chunk: list = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def batch_arrays(batch: Sequence[Packed], max_seq_length: int) -> dict[str, np.ndarray]:
    """The encoder's inputs, padded to the batch's longest line rounded up to a multiple of 8.

    Padding is masked out of attention, so the values of real tokens do not depend on
    it; padding to the longest instead of `max_seq_length` saves the time of the rest.
    """
    longest = max(len(packed.ids) for packed in batch)
    length = min(-(-longest // 8) * 8, max_seq_length)
    ids, mask, type_ids = (np.zeros((len(batch), length), dtype="int32") for _ in range(3))
    for row, packed in enumerate(batch):
        ids[row, : len(packed.ids)] = packed.ids
        mask[row, : len(packed.ids)] = 1
        type_ids[row, : len(packed.type_ids)] = packed.type_ids
    return {"input_word_ids": ids, "input_mask": mask, "input_type_ids": type_ids}


# === Extraction ===
def _check_files(options: Options) -> None:
    if not os.path.isfile(options.input_file):
        raise BertTfError(f"--input_file {options.input_file} does not exist.")
    check_output_file(options.output_file, "--output_file")
    if any(path_within(path, options.input_file) for path in [options.output_file, *companion_paths(options.output_file)]):
        raise BertTfError(f"--output_file {options.output_file} would replace --input_file; give another file name.")
    if options.bert_config_file and not os.path.isfile(options.bert_config_file):
        raise BertTfError(f"--bert_config_file {options.bert_config_file} does not exist.")
    if options.vocab_file and not os.path.isfile(options.vocab_file):
        raise BertTfError(f"--vocab_file {options.vocab_file} does not exist.")
    if options.max_seq_length < 3:
        raise BertTfError(f"--max_seq_length={options.max_seq_length} leaves no room for [CLS] x [SEP]; use 3 or more.")
    if options.batch_size < 1:
        raise BertTfError(f"--batch_size={options.batch_size} must be 1 or more.")
    if options.pooling not in POOLINGS:
        raise BertTfError(f"--pooling={options.pooling} is not one of {', '.join(POOLINGS)}.")
    if options.output_format not in OUTPUT_FORMATS:
        raise BertTfError(f"--output_format={options.output_format} is not one of {', '.join(OUTPUT_FORMATS)}.")


def load_encoder_and_tokenizer(options: Options):
    """(encoder, tokenizer), or a `BertTfError` for a config, checkpoint or vocab that does not fit."""
    from bert_tf import checkpoints
    from bert_tf.tokenization import FullTokenizer

    checkpoint = checkpoints.read_checkpoint(options.init_checkpoint, options.bert_config_file)
    config = checkpoint.config
    check_layers(options.layers, config.num_hidden_layers, "--layers")
    if options.max_seq_length > config.max_position_embeddings:
        raise BertTfError(
            f"--max_seq_length={options.max_seq_length} exceeds the {config.max_position_embeddings} positions "
            f"of the model at {options.init_checkpoint}; use {config.max_position_embeddings} or less."
        )
    vocab_file = options.vocab_file or checkpoint.vocab_file
    if vocab_file is None:
        raise BertTfError(f"No vocab.txt beside {options.init_checkpoint}; pass --vocab_file.")
    tokenizer = FullTokenizer(vocab_file, do_lower_case=options.do_lower_case)
    config.check_vocabulary(len(tokenizer.vocab), vocab_file)
    return checkpoints.build_model(checkpoint, heads=False), tokenizer


def count_lines(path: str) -> int:
    """Reads every line once, so that a bad one is reported before anything is loaded or written."""
    count = sum(1 for _ in read_lines(path))
    if count == 0:
        raise BertTfError(f"--input_file {path} is empty; write one text, or one pair as 'text_a ||| text_b', a line.")
    return count


def rows_per_line(path: str, packer: Packer, pooling: str) -> np.ndarray:
    """How many output rows each line gets: what sizes a token-level npy before it is written."""
    return np.array([len(row_tokens(packer(line), pooling)) for line in read_lines(path)], dtype=np.int64)


def _output_paths(options: Options, token_npy: bool) -> list[str]:
    return [options.output_file, *companion_paths(options.output_file)] if token_npy else [options.output_file]


def forward_function(encoder) -> Callable[[dict[str, np.ndarray]], list[np.ndarray]]:
    """`encoder_outputs` of a batch, as numpy, traced once for every batch size and length
    (Keras' `predict_on_batch` traces anew for each new padded length, ~2 s each)."""
    import tensorflow as tf

    from bert_tf.encoder import INPUT_NAMES

    signature = {name: tf.TensorSpec([None, None], tf.int32, name=name) for name in INPUT_NAMES}

    @tf.function(input_signature=[signature], autograph=False)
    def forward(inputs):
        return encoder(inputs, training=False)["encoder_outputs"]

    return lambda inputs: [state.numpy() for state in forward(inputs)]


def batch_features(forward, batch: Sequence[Packed], options: Options) -> np.ndarray:
    """The features of a batch of lines: [batch, F] pooled, or [batch, seq, F] a token."""
    inputs = batch_arrays(batch, options.max_seq_length)
    hidden_states = forward(inputs)
    mask = inputs["input_mask"]
    starts = None
    if options.pooling == "first_subword":
        starts = word_start_mask([packed.tokens for packed in batch], mask.shape[1])
    return np.asarray(pool(hidden_states, mask, options.pooling, options.layers, starts))


def extract(options: Options) -> str:
    """Runs one extraction; returns a line saying what was written."""
    _check_files(options)
    num_lines = count_lines(options.input_file)
    encoder, tokenizer = load_encoder_and_tokenizer(options)
    packer = Packer(tokenizer, options.max_seq_length)
    token_npy = options.output_format == "npy" and options.pooling in TOKEN_POOLINGS
    rows = rows_per_line(options.input_file, packer, options.pooling) if token_npy else None
    width = len(options.layers) * encoder.bert_config.hidden_size
    forward = forward_function(encoder)
    with atomic_outputs(_output_paths(options, token_npy)) as paths, progress_bar(num_lines, "lines", options.progress) as bar:
        if options.output_format == "npy":
            writer = NpyWriter(paths, rows, num_lines, width)
        else:
            writer = JsonLinesWriter(open(paths[0], "w", encoding="utf-8"), options.layers, options.pooling)
        truncated = 0
        try:
            for batch in chunks(map(packer, read_lines(options.input_file)), options.batch_size):
                for packed, values in zip(batch, batch_features(forward, batch, options)):
                    tokens = row_tokens(packed, options.pooling) if options.pooling in TOKEN_POOLINGS else None
                    writer.write(packed.index, tokens, values)
                    truncated += packed.truncated
                bar.update(len(batch))
        finally:
            writer.close()
    kind = "token" if options.pooling == "none" else options.pooling
    cut = (f" {truncated:,} of them had more tokens than --max_seq_length={options.max_seq_length} holds and were "
           "cut as the original cuts them (tokens dropped from the end of the longer text)." if truncated else "")
    return (
        f"Wrote the {kind} features of {num_lines:,} lines (layers {','.join(map(str, options.layers))}) "
        f"to {options.output_file}.{cut}"
    )


# === Command line ===
def main(argv: Sequence[str] | None = None) -> int:
    """bert-extract-features (`argv` without the program name): exit status 0, or 1 after
    one `error: ...` line on stderr."""
    return run_main(FLAGS, argv, __doc__, lambda values: print(extract(options_from_flags(values))))


if __name__ == "__main__":
    sys.exit(main())
