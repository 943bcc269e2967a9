"""A one-line progress report on stderr: rows done, rows per second and the time left.

Silent for small jobs (fewer than `min_rows` rows), so that a quick `predict()` call
prints nothing; redrawn in place on a terminal, and written as a line every
`every_seconds` otherwise (a log file gets a few lines, not thousands).

Example:
>>> import io
>>> stream = io.StringIO()
>>> progress = Progress(total=300, what="rows", min_rows=100, stream=stream, every_seconds=0)
>>> progress.update(100); progress.update(200); progress.close()
>>> stream.getvalue().splitlines()[-1].startswith("300/300 rows (100%)")
True
"""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    """Counts rows and reports `done/total rows (pct) N rows/s, ETA M:SS`."""

    def __init__(
        self,
        total: int | None,
        what: str = "rows",
        min_rows: int = 1000,
        stream: TextIO | None = None,
        every_seconds: float = 1.0,
    ):
        self.total = total
        self.what = what
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = total is None or total >= min_rows
        self.every_seconds = every_seconds
        self.done = 0
        self.start = time.perf_counter()
        self.shown_at = -float("inf")
        self.terminal = getattr(self.stream, "isatty", lambda: False)()

    def update(self, rows: int) -> None:
        self.done += rows
        now = time.perf_counter()
        if self.enabled and now - self.shown_at >= self.every_seconds:
            self.shown_at = now
            self._show(now)

    def close(self) -> None:
        """The final line (always written when enabled)."""
        if self.enabled:
            self._show(time.perf_counter())
            if self.terminal:
                self.stream.write("\n")
            self.stream.flush()

    def line(self, now: float) -> str:
        seconds = max(now - self.start, 1e-9)
        rate = self.done / seconds
        if self.total is None:
            return f"{self.done} {self.what} {rate:.1f} {self.what}/s"
        left = (self.total - self.done) / rate if rate > 0 else float("inf")
        eta = f"{int(left // 60)}:{int(left % 60):02d}" if left != float("inf") else "?"
        percent = 100 * self.done / self.total if self.total else 100
        return f"{self.done}/{self.total} {self.what} ({percent:.0f}%) {rate:.1f} {self.what}/s, ETA {eta}"

    def _show(self, now: float) -> None:
        text = self.line(now)
        self.stream.write(f"\r{text}" if self.terminal else f"{text}\n")
        self.stream.flush()
