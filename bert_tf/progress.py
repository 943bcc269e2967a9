"""The progress bar of long-running commands that read many rows (prediction, features)."""

from __future__ import annotations

import sys


def progress_bar(total: int, unit: str, enabled: bool = True, delay: float = 0.0):
    """A tqdm bar on stderr: rows done, rows/s and time left, redrawn at most once a second.

    Used as a context manager; `enabled=False` (`--noprogress`) draws nothing, and neither
    does work that ends within `delay` seconds (the bar shows only where waiting is long)
    or a single row, which has no progress to show (and a batch of one is then 0.1 ms quicker).
    """
    from tqdm import tqdm  # noqa: PLC0415 (only the commands that draw one need it)

    return tqdm(total=total, unit=f" {unit}", file=sys.stderr, disable=not enabled or total < 2, mininterval=1.0,
                dynamic_ncols=True, delay=delay)
