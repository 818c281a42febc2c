"""A plain progress bar on stderr: redrawn in place on a terminal, a line per 10 % otherwise."""

from __future__ import annotations

import time
from typing import TextIO

BAR_WIDTH = 30


class Progress:
    def __init__(self, total: int, stream: TextIO | None, label: str = "replay") -> None:
        self.total = max(total, 1)
        self.done = 0
        self.stream = stream
        self.label = label
        self.current = ""
        self.started = time.monotonic()
        self._interactive = stream is not None and stream.isatty()
        self._last_decile = -1

    def describe(self, current: str) -> None:
        """Name the work under way, shown beside the bar."""
        self.current = current
        self._draw()

    def advance(self) -> None:
        self.done = min(self.done + 1, self.total)
        self._draw()

    def finish(self) -> None:
        if self.stream is not None and self._interactive:
            self.stream.write("\n")
            self.stream.flush()

    def line(self) -> str:
        filled = BAR_WIDTH * self.done // self.total
        elapsed = time.monotonic() - self.started
        return (
            f"{self.label} [{'#' * filled}{'.' * (BAR_WIDTH - filled)}] "
            f"{self.done}/{self.total} {elapsed:5.0f}s {self.current}"
        )

    def _draw(self) -> None:
        if self.stream is None:
            return
        if self._interactive:
            self.stream.write("\r\x1b[K" + self.line())
        else:
            # Logs and CI: a line each tenth of the way, not one per step.
            decile = 10 * self.done // self.total
            if decile == self._last_decile:
                return
            self._last_decile = decile
            self.stream.write(self.line() + "\n")
        self.stream.flush()
