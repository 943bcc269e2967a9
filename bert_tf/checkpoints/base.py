"""`Checkpoint`: weights read from disk, under the file's own names, with their config."""

from __future__ import annotations

import dataclasses
import os
import re

import numpy as np

from bert_tf.config import BertConfig
from bert_tf.checkpoints.names import HEADS, Naming

VOCAB_NAME = "vocab.txt"


@dataclasses.dataclass
class Checkpoint:
    """What a reader found at `path`.

    Attributes:
        format: "tf1", "hf", "keras" or "training" (a `run_pretraining.py` checkpoint).
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
    """The gist of an error in one line, for one-sentence errors, without TensorFlow's decorations.

    A graph execution error reads "Graph execution error:", a "Detected at node" call
    stack (lines starting with spaces), the reason, then "[[{{node ...}}]] [Op:...]".

    >>> first_line(ValueError("Shapes (2,) and (3,) are incompatible.\\nmore"))
    'Shapes (2,) and (3,) are incompatible'
    """
    text = getattr(error, "message", None) or str(error) or type(error).__name__
    lines = [line for line in text.splitlines() if line.strip()]
    if lines and lines[0].startswith("Graph execution error"):
        lines = [line for line in lines[1:] if not line.startswith((" ", "Detected at node"))] or lines
    reason = re.sub(r"\{\{[^}]*\}\}", "", lines[0] if lines else text).strip()
    return re.split(r"\s*\[\[|\s*\[Op:", reason)[0].strip().rstrip(".")
