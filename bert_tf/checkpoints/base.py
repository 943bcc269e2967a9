"""`Checkpoint`: weights read from disk, under the file's own names, with their config."""

from __future__ import annotations

import dataclasses
import os

import numpy as np

from bert_tf.config import BertConfig
from bert_tf.checkpoints.names import HEADS, Naming

VOCAB_NAME = "vocab.txt"


@dataclasses.dataclass
class Checkpoint:
    """What a reader found at `path`.

    Attributes:
        format: "tf1", "hf" or "keras".
        path: the checkpoint itself (TF1 prefix, HF directory or .keras file).
        config: the model's config, overrides applied.
        config_source: where the config came from, for messages.
        weights: name -> value, under the format's names (see `naming`), without
            optimizer slots or buffers.
        naming: how the format names the TF1 variables.
        vocab_file: the `vocab.txt` beside the checkpoint, if any.
    """

    format: str
    path: str
    config: BertConfig
    config_source: str
    weights: dict[str, np.ndarray]
    naming: Naming
    vocab_file: str | None = None

    @property
    def has_heads(self) -> bool:
        """Whether any pre-training head variable is present."""
        return any(self.naming.scope(name) == HEADS for name in self.weights)


def vocab_beside(directory: str) -> str | None:
    path = os.path.join(directory, VOCAB_NAME)
    return path if os.path.isfile(path) else None


def first_line(error: BaseException) -> str:
    """The first line of an exception's message, for one-sentence errors."""
    text = str(error).strip().splitlines()
    return text[0].rstrip(".") if text else type(error).__name__
