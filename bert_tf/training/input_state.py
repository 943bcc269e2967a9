"""The input of a pre-training output dir: the phase it holds, and the position of each
worker's input pipeline at each checkpoint.

One output dir holds one *phase* of pre-training: one input, whose records have one
shape. `Phase` (`input_state/phase.json`) says at which step that input began (0, or
the step carried from phase 1 by `--init_checkpoint_state=all`), the shape of its
records and the settings that fix its steps: a restart that reads records of another
shape is a new phase, refused (it goes into a new output dir), as is a restart with
other settings (batch size, schedule, model config, input files, ...), and an input
whose saved position is lost is skipped to where it was, counted from the phase's
first step.

Beside `ckpt-<step>`, every worker saves its `tf.data` iterator as
`input_state/<fingerprint>/worker-<i>/input-<step>`, the fingerprint naming the input
(files, batch plan, seed, masking): a restart of the same input goes on with exactly the
batches an uninterrupted run would have read; another input starts afresh.

Example:
>>> import tempfile
>>> output_dir = tempfile.mkdtemp()
>>> Phase.load(output_dir) is None
True
>>> Phase(first_step=900, max_seq_length=512, max_predictions_per_seq=80, last_step=1000,
...       settings={"seed": 1}).save(output_dir)
>>> Phase.load(output_dir)
Phase(first_step=900, max_seq_length=512, max_predictions_per_seq=80, last_step=1000, settings={'seed': 1})
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
from typing import Any

import tensorflow as tf

from bert_tf.errors import BertTfError
from bert_tf.training.runloop import OutputDir, write_atomically

INPUT_STATE_DIR = "input_state"
PHASE_NAME = "phase.json"


@dataclasses.dataclass(frozen=True)
class Phase:
    """The phase of pre-training an output dir holds.

    Attributes:
        first_step: the global step at which its input began.
        max_seq_length, max_predictions_per_seq: the shape of its records.
        last_step: the step it trains to (its `--num_train_steps`; None in a record
            written before this was kept).
        settings: what else fixes its steps (hyper-parameters, model config, input
            files), which a restart must repeat; None in a record written before this
            was kept.
    """

    first_step: int
    max_seq_length: int
    max_predictions_per_seq: int
    last_step: int | None = None
    settings: dict[str, Any] | None = None

    @staticmethod
    def path(output_dir: str) -> str:
        return os.path.join(output_dir, INPUT_STATE_DIR, PHASE_NAME)

    @classmethod
    def load(cls, output_dir: str) -> Phase | None:
        """The phase recorded in `output_dir`; None if none is (a new directory, or one
        written before phases were recorded)."""
        path = cls.path(output_dir)
        if not tf.io.gfile.exists(path):
            return None
        try:
            with tf.io.gfile.GFile(path) as handle:
                return cls(**json.load(handle))
        except (ValueError, TypeError) as error:
            raise BertTfError(f"{path} is damaged ({error}); delete it to resume as the first phase.") from None

    def save(self, output_dir: str) -> None:
        tf.io.gfile.makedirs(os.path.dirname(self.path(output_dir)))
        write_atomically(self.path(output_dir), json.dumps(dataclasses.asdict(self), indent=2) + "\n")

    @property
    def records(self) -> tuple[int, int]:
        """The shape of its records: (max_seq_length, max_predictions_per_seq)."""
        return self.max_seq_length, self.max_predictions_per_seq


class InputPositions:
    """The saved positions of one worker's input iterator.

    Args:
        output: the run's `OutputDir`.
        fingerprint: names the input (`DataSpec.fingerprint`).
        keep_steps: positions older than this many steps are removed (those of
            checkpoints no longer kept), whatever input they were of: an output dir
            restarted on another input (other workers, say) does not keep the first
            one's positions (6.5 MB each with BERT's shuffle buffer) for ever.
    """

    def __init__(self, output: OutputDir, fingerprint: str, keep_steps: int):
        self.root = os.path.join(output.path, INPUT_STATE_DIR)
        self.worker = f"worker-{output.worker}"
        self.directory = os.path.join(self.root, fingerprint, self.worker)
        self.keep_steps = keep_steps

    def path(self, step: int) -> str:
        return os.path.join(self.directory, f"input-{step}")

    def restore(self, state: tf.train.Checkpoint, step: int) -> bool:
        """Restores the iterator of `state` to `step`; False if no saved position fits it."""
        if not tf.io.gfile.exists(self.path(step) + ".index"):
            return False
        try:
            state.read(self.path(step)).assert_consumed()
        except (ValueError, AssertionError, tf.errors.OpError):
            return False
        return True

    def save(self, state: tf.train.Checkpoint, step: int) -> None:
        state.write(self.path(step))
        for entry in tf.io.gfile.listdir(self.root):
            directory = os.path.join(self.root, entry.rstrip("/"), self.worker)
            if not tf.io.gfile.isdir(directory):
                continue  # phase.json, or another worker's input
            for name in tf.io.gfile.listdir(directory):
                number = name.split(".")[0].removeprefix("input-")
                if number.isdigit() and int(number) <= step - self.keep_steps:
                    tf.io.gfile.remove(os.path.join(directory, name))
            if not tf.io.gfile.listdir(directory):  # an earlier input's, all of whose positions are gone
                _remove_empty(directory)
                _remove_empty(os.path.dirname(directory))


def _remove_empty(directory: str) -> None:
    """Removes `directory` if it is empty (another worker may be removing it too)."""
    with contextlib.suppress(tf.errors.OpError):
        if not tf.io.gfile.listdir(directory):
            tf.io.gfile.rmtree(directory)
