"""The command `bert-convert` (`python -m bert_tf.checkpoints.convert`): converts a BERT
checkpoint between Google's TF1, HuggingFace and our Keras formats.

The input format is detected: a TF1 checkpoint (prefix or directory, with
`bert_config.json` or `--bert_config_file`), a HuggingFace directory (`config.json` +
`model.safetensors` or `pytorch_model.bin`), a `.keras` file, a directory written by
this tool or a `run_pretraining.py` output directory (its last checkpoint). The output
is a new directory holding the weights, the config and the input's `vocab.txt`; it is
written under a temporary name and renamed when complete. Pre-training heads are kept
when the input has them.

Example:
  bert-convert --input uncased_L-12_H-768_A-12/bert_model.ckpt \\
      --output bert_base_hf --output_format hf

A user mistake (missing file, unknown format, a checkpoint that does not fit its
config, ...) prints one line `error: ...` on stderr and exits with status 1.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Sequence

from absl.flags import FlagValues

from bert_tf import checkpoints
from bert_tf.errors import BertTfError
from bert_tf.flags import Flag, flag_values, require, run_main
from bert_tf.pretrainer import BertPretrainer
from bert_tf.tokenization import load_vocab

FLAGS = flag_values(
    "bert_config_file", "hidden_act", "vocab_file",
    own={
        "input": Flag(str, None, "The checkpoint to convert (format detected)."),
        "output": Flag(str, None, "The directory to create; it must not exist."),
        "output_format": Flag(checkpoints.FORMATS, None, "The format to write."),
    },
)  # fmt: skip

_FORMAT_NAMES = {"tf1": "TF1", "hf": "HuggingFace", "keras": "Keras", "training": "run_pretraining.py"}


def convert(
    input_path: str,
    output_path: str,
    output_format: str,
    vocab_file: str | None = None,
    config_file: str | None = None,
    **config_overrides,
) -> str:
    """Converts one checkpoint; returns a line describing what was written."""
    if os.path.exists(output_path):  # `save` checks too; failing before the read saves minutes on big models
        raise BertTfError(f"Output {output_path} already exists; remove it or choose another path.")
    if vocab_file is not None and not os.path.isfile(vocab_file):
        raise BertTfError(f"--vocab_file {vocab_file} does not exist.")
    checkpoint = checkpoints.read_checkpoint(input_path, config_file, **config_overrides)
    vocab_file = vocab_file or checkpoint.vocab_file
    if vocab_file is not None:
        checkpoint.config.check_vocabulary(len(load_vocab(vocab_file)), vocab_file)
    model = checkpoints.build_model(checkpoint)
    checkpoints.save(model, output_path, output_format, vocab_file=vocab_file)
    config = checkpoint.config
    kind = "BertPretrainer" if isinstance(model, BertPretrainer) else "BertEncoder"
    return (
        f"Wrote the {kind} ({config.num_hidden_layers} layers, hidden size {config.hidden_size}) of the "
        f"{_FORMAT_NAMES[checkpoint.format]} checkpoint {checkpoint.path} as a {_FORMAT_NAMES[output_format]} "
        f"checkpoint to {output_path}."
    )


def _convert(values: FlagValues) -> None:
    require(values, "input", "output", "output_format")
    overrides = {"hidden_act": values.hidden_act} if values.hidden_act else {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", UserWarning)
        summary = convert(values.input, values.output, values.output_format, values.vocab_file,
                          values.bert_config_file, **overrides)
    for warning in caught:
        if issubclass(warning.category, UserWarning):
            print(f"Warning: {warning.message}", file=sys.stderr)
    print(summary)


def main(argv: Sequence[str] | None = None) -> int:
    """bert-convert (`argv` without the program name): exit status 0, or 1 after one
    `error: ...` line on stderr."""
    return run_main(FLAGS, argv, __doc__, _convert)


if __name__ == "__main__":
    sys.exit(main())
