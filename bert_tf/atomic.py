"""Output files and folders that appear whole or not at all.

Why: a run killed half-way, or stopped by bad input, must not leave a file that the next
stage (or the user) takes for a finished one. Every output is written beside its final
name under a temporary one and renamed when complete; a rename within a folder is atomic.
The temporary name starts with a dot, so that a glob such as `out-*` given to a reader
never picks up a file still being written, and ends in `.incomplete`, so that one left by
a crash says what it is (the next run writing that output replaces it). Missing folders
of an output are made. A folder output (a SavedModel, a checkpoint) is built in a
temporary folder `.NAME.incomplete-XXXXXXXX` (a random suffix: one a crash left is not
reused; delete it) and renamed. Local paths only: a gs:// output goes through
`tf.io.gfile` (`bert_tf.training.runloop.write_atomically`).

Example:
>>> import os, tempfile
>>> path = os.path.join(tempfile.mkdtemp(), "new", "notes.txt")
>>> write_text(path, "done\\n")
>>> open(path).read(), os.listdir(os.path.dirname(path))
('done\\n', ['notes.txt'])
>>> incomplete_path(os.path.join("out", "part-1.tfrecord")) == os.path.join("out", ".part-1.tfrecord.incomplete")
True
>>> write_text("gs://bucket/notes.txt", "done\\n")
Traceback (most recent call last):
...
bert_tf.errors.BertTfError: gs://bucket/notes.txt is not a local path; write it to a local folder and copy it there.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence

from bert_tf.errors import BertTfError


def incomplete_path(path: str) -> str:
    """The name `path` is written under until it is complete."""
    directory, name = os.path.split(path)
    return os.path.join(directory, f".{name}.incomplete")


@contextlib.contextmanager
def atomic_outputs(paths: Sequence[str]) -> Iterator[list[str]]:
    """Temporary names for `paths`, renamed to them when the block succeeds, removed if not.

    Missing folders of `paths` are made, and removed again (when still empty) if the block fails.
    """
    temporaries = [incomplete_path(path) for path in paths]
    with folders_of(paths):
        try:
            yield temporaries
            for temporary, path in zip(temporaries, paths):
                os.replace(temporary, path)
        except BaseException:
            for temporary in temporaries:
                with contextlib.suppress(FileNotFoundError):
                    os.remove(temporary)
            raise


@contextlib.contextmanager
def folders_of(paths: Sequence[str]) -> Iterator[None]:
    """Makes the missing folders of `paths`; removes them again (when still empty) if the block fails."""
    for path in paths:
        if "://" in path:  # os.path would make a local folder "gs:" and write there
            raise BertTfError(f"{path} is not a local path; write it to a local folder and copy it there.")
    made = _make_folders_of(paths)
    try:
        yield
    except BaseException:
        for folder in made:
            with contextlib.suppress(OSError):
                os.rmdir(folder)
        raise


@contextlib.contextmanager
def atomic_folder(path: str) -> Iterator[str]:
    """A temporary folder beside `path`, renamed to `path` when the block completes (an
    existing `path` is replaced; callers decide whether it may be) and removed when it fails."""
    with folders_of([path]):
        path = os.path.abspath(path)
        temporary = tempfile.mkdtemp(dir=os.path.dirname(path), prefix=os.path.basename(incomplete_path(path)) + "-")
        os.chmod(temporary, 0o755)  # mkdtemp's 0700 would hide the model from a serving user.
        try:
            yield temporary
            if os.path.exists(path):
                old = temporary + ".old"
                os.rename(path, old)
                os.rename(temporary, path)
                shutil.rmtree(old)
            else:
                os.rename(temporary, path)
        finally:
            shutil.rmtree(temporary, ignore_errors=True)


def write_text(path: str, text: str) -> None:
    """Writes `text` (UTF-8) to `path` atomically."""
    with atomic_outputs([path]) as (temporary,), open(temporary, "w", encoding="utf-8") as handle:
        handle.write(text)


def _make_folders_of(paths: Sequence[str]) -> list[str]:
    """Makes the folders of `paths` that do not exist; returns them, deepest first."""
    made = []
    for path in paths:
        missing = []
        folder = os.path.dirname(os.path.abspath(path))
        while not os.path.exists(folder):
            missing.append(folder)
            folder = os.path.dirname(folder)
        for folder in reversed(missing):
            os.mkdir(folder)
            made.append(folder)
    return made[::-1]
