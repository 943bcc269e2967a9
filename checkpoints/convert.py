"""Converts a BERT checkpoint between Google's TF1, HuggingFace and our Keras formats.

The input format is detected: a TF1 checkpoint (prefix or directory, with
`bert_config.json`), a HuggingFace directory (`config.json` + `model.safetensors` or
`pytorch_model.bin`), a `.keras` file or a directory written by this tool. The output
is a new directory holding the weights, the config and the input's `vocab.txt`; it is
written under a temporary name and renamed when complete. Pre-training heads are kept
when the input has them.

Example:
  python -m checkpoints.convert --input uncased_L-12_H-768_A-12/bert_model.ckpt \\
      --output bert_base_hf --output_format hf

A user mistake (missing file, unknown format, a checkpoint that does not fit its
config, ...) prints one sentence on stderr and exits with status 1.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # before TensorFlow is imported: keep C++ logs out

from bert_tf import checkpoints  # noqa: E402
from bert_tf.config import ACTIVATIONS  # noqa: E402
from bert_tf.errors import BertTfError  # noqa: E402
from bert_tf.pretrainer import BertPretrainer  # noqa: E402


class _Parser(argparse.ArgumentParser):
    """Reports a bad command line as a one-sentence `BertTfError` (status 1, not 2)."""

    def error(self, message: str):
        raise BertTfError(f"{message[0].upper()}{message[1:]} (see --help).")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m checkpoints.convert", description=__doc__.split("\n\n")[0])
    parser.add_argument("--input", required=True, help="The checkpoint to convert (format detected).")
    parser.add_argument("--output", required=True, help="The directory to create; it must not exist.")
    parser.add_argument("--output_format", required=True, choices=checkpoints.FORMATS, help="The format to write.")
    parser.add_argument(
        "--hidden_act",
        choices=ACTIVATIONS,
        help="Override the config's activation: 'gelu' is the tanh approximation of the original TF code, "
        "'gelu_exact' the erf form (HuggingFace's 'gelu').",
    )
    parser.add_argument("--vocab_file", help="The vocab.txt to carry along (default: the one beside --input).")
    return parser


_FORMAT_NAMES = {"tf1": "TF1", "hf": "HuggingFace", "keras": "Keras"}


def convert(
    input_path: str, output_path: str, output_format: str, vocab_file: str | None = None, **config_overrides
) -> str:
    """Converts one checkpoint; returns a line describing what was written."""
    if os.path.exists(output_path):  # `save` checks too; failing before the read saves minutes on big models
        raise BertTfError(f"Output {output_path} already exists; remove it or choose another path.")
    checkpoint = checkpoints.read_checkpoint(input_path, **config_overrides)
    model = checkpoints.build_model(checkpoint)
    checkpoints.save(model, output_path, output_format, vocab_file=vocab_file or checkpoint.vocab_file)
    config = checkpoint.config
    kind = "BertPretrainer" if isinstance(model, BertPretrainer) else "BertEncoder"
    return (
        f"Wrote the {kind} ({config.num_hidden_layers} layers, hidden size {config.hidden_size}) of the "
        f"{_FORMAT_NAMES[checkpoint.format]} checkpoint {checkpoint.path} as a {_FORMAT_NAMES[output_format]} "
        f"checkpoint to {output_path}."
    )


def main(argv: list[str] | None = None) -> int:
    """Runs the command line; returns the exit status."""
    try:
        args = _parser().parse_args(argv)
        overrides = {"hidden_act": args.hidden_act} if args.hidden_act else {}
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", UserWarning)
            summary = convert(args.input, args.output, args.output_format, vocab_file=args.vocab_file, **overrides)
    except BertTfError as error:
        print(f"Error: {error}", file=sys.stderr)
        return 1
    for warning in caught:
        if issubclass(warning.category, UserWarning):
            print(f"Warning: {warning.message}", file=sys.stderr)
    print(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
