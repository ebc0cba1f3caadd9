"""A one-line progress bar for the command line (downloads, judging, training)."""

from __future__ import annotations

import sys


class ProgressBar:
    """A one-line byte progress bar on stderr (redraws in place on a terminal)."""

    def __init__(self, label: str, unit: str = "MB"):
        self.label = label
        self.unit = unit
        self.tty = sys.stderr.isatty()
        self._last = -1

    def __call__(self, done: int, total: int) -> None:
        pct = int(100 * done / total) if total else 0
        if not self.tty and pct == self._last:
            return
        self._last = pct
        width = 30
        fill = int(width * pct / 100)
        amount = f"{done / 1e6:,.1f}/{total / 1e6:,.1f} MB" if self.unit == "MB" else f"{done}/{total} {self.unit}"
        line = f"{self.label} [{'#' * fill}{'.' * (width - fill)}] {pct:3d}% {amount}"
        sys.stderr.write(("\r" + line) if self.tty else (line + "\n"))
        sys.stderr.flush()

    def done(self) -> None:
        if self.tty and self._last >= 0:
            sys.stderr.write("\n")
        self._last = -1

    def reset(self, label: str) -> None:
        self.label = label
        self._last = -1
