"""Trains a WordPiece vocabulary and writes it in BERT's `vocab.txt` layout.

The layout is Google's: `[PAD]` = 0, `[unused0]`..`[unused98]` = 1..99 (slots to add
domain tokens later without resizing the model), `[UNK]` = 100, `[CLS]` = 101,
`[SEP]` = 102, `[MASK]` = 103, then the learned pieces (`##` marks a piece that
continues a word).

The trainer is HuggingFace `tokenizers`' WordPiece trainer (Rust, multi-threaded;
measured ~30x faster than tensorflow-text's `bert_vocab_from_dataset`), fed through
the same normalization as BERT's `BasicTokenizer`: text cleaning, spaces around CJK
characters, and (with `--do_lower_case`) lower-casing and accent stripping.

Example:
  python -m data_prep.build_vocab --input_file=corpus.txt --output_file=vocab.txt \\
      --vocab_size=30522 --do_lower_case
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Iterator, Sequence

import numpy as np
from absl.flags import FlagValues

from bert_tf.atomic import write_text
from bert_tf.errors import BertTfError
from bert_tf.flags import Flag, check_output_file, flag_values, require, run_main
from bert_tf.tokenization import is_punctuation
from data_prep.corpus import check_not_an_input, expand_input_patterns

SPECIAL_TOKENS = ("[UNK]", "[CLS]", "[SEP]", "[MASK]")
DEFAULT_UNUSED = 99  # Google's: puts [UNK], [CLS], [SEP], [MASK] at 100..103


def _text_lines(files: list[str]) -> Iterator[str]:
    for path in files:
        with open(path, encoding="utf-8", errors="replace") as file:
            yield from file


def _chunks(lines: Iterator[str], size: int = 1 << 20) -> Iterator[str]:
    """The lines joined into pieces of about `size` characters (whole lines each)."""
    chunk: list[str] = []
    length = 0
    for line in lines:
        chunk.append(line)
        length += len(line)
        if length >= size:
            yield "".join(chunk)
            chunk, length = [], 0
    if chunk:
        yield "".join(chunk)


def character_counts(files: list[str], normalizer) -> tuple[Counter[str], set[str]]:
    """How often each character of the normalized corpus occurs, and the characters seen
    inside a word (after its first character), where the trainer makes their `##` forms.
    Words are split as `BertPreTokenizer` splits them: at whitespace and punctuation.

    >>> from tokenizers import normalizers
    >>> path = __import__("tempfile").mkstemp(suffix=".txt")[1]
    >>> _ = open(path, "w", encoding="utf-8").write("Bb a, cab")
    >>> counts, inside = character_counts([path], normalizers.BertNormalizer(lowercase=True))
    >>> sorted(counts.items()), sorted(inside)
    ([(' ', 2), (',', 1), ('a', 2), ('b', 3), ('c', 1)], ['a', 'b'])
    """
    counts = np.zeros(sys.maxunicode + 1, np.int64)  # by code point
    inside = np.zeros(sys.maxunicode + 1, bool)
    splits = np.zeros(sys.maxunicode + 1, bool)  # whitespace and punctuation: where words end
    # BERT's normalization maps each character on its own (cleaning, spaces around CJK,
    # accents, case), so the corpus is normalized through a table of each character's
    # image: several times faster than normalizing the text itself, with its alignments.
    images: dict[int, str] = {}
    for chunk in _chunks(_text_lines(files)):
        images.update({ord(char): normalizer.normalize_str(char) for char in set(chunk) if ord(char) not in images})
        points = np.frombuffer(chunk.translate(images).encode("utf-32-le"), np.uint32)
        chunk_counts = np.bincount(points, minlength=len(counts))
        new = np.flatnonzero((chunk_counts > 0) & (counts == 0))
        counts += chunk_counts
        splits[new] = [chr(point).isspace() or is_punctuation(chr(point)) for point in new]
        in_word = ~splits[points]
        inside[points[1:][in_word[:-1] & in_word[1:]]] = True
    seen = np.flatnonzero(counts)
    return Counter(dict(zip(map(chr, seen), counts[seen].tolist()))), set(map(chr, np.flatnonzero(inside)))


def alphabet(counts: Counter[str], limit: int) -> list[str]:
    """The `limit` most frequent non-space characters, ties in code-point order, in code-point order.

    The trainer keeps its `limit_alphabet` most frequent characters by itself, but breaks
    ties in a hash map's order, which changes from run to run (tokenizers#1794): two runs
    on the same corpus gave two vocabularies (rare characters swapped, 288 of 16,000
    tokens in other places). Handed this list as its initial alphabet, it keeps these.

    >>> alphabet(Counter("bb aa c d"), limit=3)
    ['a', 'b', 'c']
    """
    ranked = sorted((char for char in counts if not char.isspace()), key=lambda char: (-counts[char], ord(char)))
    return sorted(ranked[:limit])


def train_wordpiece(
    files: list[str], vocab_size: int, do_lower_case: bool, min_frequency: int = 2, limit_alphabet: int = 1000
) -> list[str]:
    """The learned pieces in the trainer's order: the alphabet, the `##` form of each of its
    characters seen inside a word, then the merged pieces, most useful first; no special token.
    The same corpus and settings give the same pieces on every run (see `alphabet`)."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers  # noqa: PLC0415

    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]", max_input_chars_per_word=200))
    # As BERT's BasicTokenizer: accents are stripped only when lower-casing.
    tokenizer.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=do_lower_case, lowercase=do_lower_case
    )
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    counts, inside = character_counts(files, tokenizer.normalizer)
    characters = alphabet(counts, limit_alphabet)
    # The trainer numbers the `##` forms in its word table's hash order as it meets them, and
    # breaks ties between equally frequent merges by those numbers: the merges, too, changed
    # from run to run. Given as special tokens, they are numbered in this fixed order.
    continuing = [f"##{char}" for char in characters if char in inside]
    specials = ["[PAD]", *SPECIAL_TOKENS, *continuing]
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        limit_alphabet=limit_alphabet,
        initial_alphabet=characters,
        special_tokens=specials,
        continuing_subword_prefix="##",
        show_progress=False,
    )
    tokenizer.train_from_iterator(_text_lines(files), trainer=trainer)
    vocab = tokenizer.get_vocab()
    special = set(specials)
    learned = [token for token in sorted(vocab, key=vocab.get) if token not in special]
    return learned[: len(characters)] + continuing + learned[len(characters) :]


def bert_layout(pieces: list[str], vocab_size: int, num_unused: int = DEFAULT_UNUSED) -> list[str]:
    """[PAD], the unused slots, [UNK] [CLS] [SEP] [MASK], then pieces, `vocab_size` in all.

    >>> bert_layout(["the", "##s", "a"], vocab_size=9, num_unused=2)
    ['[PAD]', '[unused0]', '[unused1]', '[UNK]', '[CLS]', '[SEP]', '[MASK]', 'the', '##s']
    """
    head = ["[PAD]", *(f"[unused{k}]" for k in range(num_unused)), *SPECIAL_TOKENS]
    return head + pieces[: vocab_size - len(head)]


def check_sizes(vocab_size: int, num_unused: int, min_frequency: int) -> None:
    """Raises `BertTfError` for sizes the trainer cannot work with (it overflowed on a negative count).

    >>> check_sizes(50, DEFAULT_UNUSED, 2)
    Traceback (most recent call last):
    ...
    bert_tf.errors.BertTfError: --vocab_size 50 leaves no room for pieces after the 104 special tokens ([PAD], 99 [unusedN], [UNK] [CLS] [SEP] [MASK]); use more, or fewer --num_unused.
    """
    if num_unused < 0:
        raise BertTfError(f"--num_unused must be 0 or more, got {num_unused}.")
    if min_frequency < 1:
        raise BertTfError(f"--min_frequency must be 1 or more, got {min_frequency}.")
    specials = 1 + num_unused + len(SPECIAL_TOKENS)
    if vocab_size <= specials:
        raise BertTfError(f"--vocab_size {vocab_size} leaves no room for pieces after the {specials} special tokens "
                          f"([PAD], {num_unused} [unusedN], {' '.join(SPECIAL_TOKENS)}); use more, or fewer --num_unused.")


def build_vocab(
    files: list[str],
    output_file: str,
    vocab_size: int,
    do_lower_case: bool,
    num_unused: int = DEFAULT_UNUSED,
    min_frequency: int = 2,
) -> int:
    """Trains and writes `output_file` (atomically); returns the number of tokens written."""
    check_sizes(vocab_size, num_unused, min_frequency)
    check_output_file(output_file, "--output_file")
    learned = vocab_size - num_unused  # the trainer counts [PAD] and the 4 specials
    pieces = train_wordpiece(files, learned, do_lower_case, min_frequency)
    tokens = bert_layout(pieces, vocab_size, num_unused)
    try:
        write_text(output_file, "\n".join(tokens) + "\n")
    except OSError as error:
        raise BertTfError(f"Cannot write --output_file {output_file}: {error.strerror}.") from None
    return len(tokens)


FLAGS = flag_values(
    "input_file", "output_file", "vocab_size", "do_lower_case",
    own={
        "num_unused": Flag(int, DEFAULT_UNUSED, "[unusedN] slots between [PAD] and [UNK]."),
        "min_frequency": Flag(int, 2, "Ignore pieces seen fewer times than this."),
    },
)  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    """bert-build-vocab (`argv` without the program name): exit status 0, or 1 after one
    `error: ...` line on stderr."""
    return run_main(FLAGS, argv, __doc__, _build)


def _build(values: FlagValues) -> None:
    require(values, "input_file", "output_file")
    check_not_an_input(values.input_file, values.output_file)
    count = build_vocab(
        expand_input_patterns(values.input_file),
        values.output_file,
        values.vocab_size,
        values.do_lower_case,
        values.num_unused,
        values.min_frequency,
    )
    if count < values.vocab_size:
        print(
            f"warning: the corpus gave only {count:,} tokens (< --vocab_size {values.vocab_size:,}); "
            "use a bigger corpus or a smaller --vocab_size.",
            file=sys.stderr,
        )
    print(f"{count:,} tokens -> {values.output_file}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
