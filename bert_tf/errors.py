"""Errors that mean "the user gave us something wrong", not "the code is broken".

Every entry point runs through `run_command`: a `BertTfError` ends the command with one
line `error: <what and what to do>` on stderr and exit status 1; everything else is a
bug and keeps its traceback.

Example:
>>> def command():
...     raise DataError("Data file x.tsv does not exist.")
>>> import contextlib, io
>>> stderr = io.StringIO()
>>> with contextlib.redirect_stderr(stderr):
...     status = run_command(command)
>>> status, stderr.getvalue()
(1, 'error: Data file x.tsv does not exist.\\n')
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

INTERRUPTED_STATUS = 130  # as a shell reports a command stopped by Ctrl-C


class BertTfError(ValueError):
    """A user mistake: a bad flag, file, config or checkpoint. The message is one
    sentence that names the file or flag and says what to do."""


class DataError(BertTfError):
    """A data file that cannot be read as the task expects."""


def run_command(command: Callable[[], Any], interrupted: str = "interrupted.") -> int:
    """Runs `command()`; returns the exit status: 0, 1 after a user mistake (printed as
    one `error: ...` line on stderr), or 130 after Ctrl-C (printing `interrupted`)."""
    try:
        command()
    except BertTfError as error:
        message = " ".join(str(error).strip().splitlines())  # one line, whatever the message held
        print(f"error: {message}", file=sys.stderr, flush=True)
        return 1
    except KeyboardInterrupt:
        print(f"\n{interrupted}", file=sys.stderr, flush=True)
        return INTERRUPTED_STATUS
    return 0
