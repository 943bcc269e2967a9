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

import os
import sys
from collections.abc import Iterator

from absl import app, flags

from bert_tf.errors import BertTfError
from data_prep.corpus import expand_input_patterns

SPECIAL_TOKENS = ("[UNK]", "[CLS]", "[SEP]", "[MASK]")
DEFAULT_UNUSED = 99  # Google's: puts [UNK], [CLS], [SEP], [MASK] at 100..103


def _text_lines(files: list[str]) -> Iterator[str]:
    for path in files:
        with open(path, encoding="utf-8", errors="replace") as file:
            yield from file


def train_wordpiece(
    files: list[str], vocab_size: int, do_lower_case: bool, min_frequency: int = 2, limit_alphabet: int = 1000
) -> list[str]:
    """The learned pieces, most useful first, without any special token."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers  # noqa: PLC0415

    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]", max_input_chars_per_word=200))
    # As BERT's BasicTokenizer: accents are stripped only when lower-casing.
    tokenizer.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=do_lower_case, lowercase=do_lower_case
    )
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        limit_alphabet=limit_alphabet,
        special_tokens=["[PAD]", *SPECIAL_TOKENS],
        continuing_subword_prefix="##",
        show_progress=False,
    )
    tokenizer.train_from_iterator(_text_lines(files), trainer=trainer)
    vocab = tokenizer.get_vocab()
    return [
        token for token, _ in sorted(vocab.items(), key=lambda item: item[1]) if token not in ("[PAD]", *SPECIAL_TOKENS)
    ]


def bert_layout(pieces: list[str], vocab_size: int, num_unused: int = DEFAULT_UNUSED) -> list[str]:
    """[PAD], the unused slots, [UNK] [CLS] [SEP] [MASK], then pieces, `vocab_size` in all.

    >>> bert_layout(["the", "##s", "a"], vocab_size=9, num_unused=2)
    ['[PAD]', '[unused0]', '[unused1]', '[UNK]', '[CLS]', '[SEP]', '[MASK]', 'the', '##s']
    """
    head = ["[PAD]", *(f"[unused{k}]" for k in range(num_unused)), *SPECIAL_TOKENS]
    if vocab_size <= len(head):
        raise BertTfError(f"--vocab_size {vocab_size} leaves no room for pieces after {len(head)} special tokens.")
    return head + pieces[: vocab_size - len(head)]


def build_vocab(
    files: list[str],
    output_file: str,
    vocab_size: int,
    do_lower_case: bool,
    num_unused: int = DEFAULT_UNUSED,
    min_frequency: int = 2,
) -> int:
    """Trains and writes `output_file` (atomically); returns the number of tokens written."""
    learned = vocab_size - num_unused  # the trainer counts [PAD] and the 4 specials
    pieces = train_wordpiece(files, learned, do_lower_case, min_frequency)
    tokens = bert_layout(pieces, vocab_size, num_unused)
    directory, name = os.path.split(os.path.abspath(output_file))
    temporary = os.path.join(directory, f".{name}.incomplete")
    try:
        with open(temporary, "w", encoding="utf-8") as out:
            out.write("\n".join(tokens) + "\n")
    except OSError as error:
        raise BertTfError(f"Cannot write --output_file {output_file}: {error.strerror}.") from None
    os.replace(temporary, output_file)
    return len(tokens)


FLAGS = flags.FLAGS


def define_flags() -> None:
    """The command-line flags, defined only when run as a script: importing this module
    as a library must not claim flag names (absl's registry is global) that another
    module, e.g. create_pretraining_data.py, also defines."""
    flags.DEFINE_string("input_file", None, "Training text: comma-separated glob patterns.")
    flags.DEFINE_string("output_file", None, "The vocab.txt to write.")
    flags.DEFINE_integer("vocab_size", 30522, "Tokens in the vocabulary, special and unused ones included.")
    flags.DEFINE_bool("do_lower_case", True, "Lower-case and strip accents (uncased model) or not (cased).")
    flags.DEFINE_integer("num_unused", DEFAULT_UNUSED, "[unusedN] slots between [PAD] and [UNK].")
    flags.DEFINE_integer("min_frequency", 2, "Ignore pieces seen fewer times than this.")


def _run(argv: list[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
    try:
        count = build_vocab(
            expand_input_patterns(FLAGS.input_file),
            FLAGS.output_file,
            FLAGS.vocab_size,
            FLAGS.do_lower_case,
            FLAGS.num_unused,
            FLAGS.min_frequency,
        )
    except BertTfError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(1)
    if count < FLAGS.vocab_size:
        print(
            f"warning: the corpus gave only {count:,} tokens (< --vocab_size {FLAGS.vocab_size:,}); "
            "use a bigger corpus or a smaller --vocab_size.",
            file=sys.stderr,
        )
    print(f"{count:,} tokens -> {FLAGS.output_file}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    """The `bert-build-vocab` command: parses `argv` (default `sys.argv`) as flags and runs.

    absl's `app.run` handles --help and usage errors and ends the process with the exit
    status (1 after an `error:` line), so the status is never returned to the caller.
    """
    define_flags()
    flags.mark_flags_as_required(["input_file", "output_file"])
    app.run(_run, argv)


if __name__ == "__main__":
    sys.exit(main())
