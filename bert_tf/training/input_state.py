"""The position of each worker's input pipeline at each pre-training checkpoint.

Beside `ckpt-<step>`, every worker saves its `tf.data` iterator as
`input_state/<fingerprint>/worker-<i>/input-<step>`, the fingerprint naming the input
(files, batch plan, seed, masking): a restart of the same input goes on with exactly the
batches an uninterrupted run would have read; another input starts afresh.
"""

from __future__ import annotations

import os

import tensorflow as tf

from bert_tf.training.runloop import OutputDir

INPUT_STATE_DIR = "input_state"


class InputPositions:
    """The saved positions of one worker's input iterator.

    Args:
        output: the run's `OutputDir`.
        fingerprint: names the input (`DataSpec.fingerprint`).
        keep_steps: positions older than this many steps are removed (those of
            checkpoints no longer kept).
    """

    def __init__(self, output: OutputDir, fingerprint: str, keep_steps: int):
        self.directory = os.path.join(output.path, INPUT_STATE_DIR, fingerprint, f"worker-{output.worker}")
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
        for name in tf.io.gfile.listdir(self.directory):
            number = name.split(".")[0].removeprefix("input-")
            if number.isdigit() and int(number) <= step - self.keep_steps:
                tf.io.gfile.remove(os.path.join(self.directory, name))
