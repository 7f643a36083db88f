"""Progress of a measurement, shown by rank 0 only (other ranks stay quiet).

On a terminal: a rich progress bar on stderr. In a pipe or log file (CI, torchrun logs,
remote runs) a live bar would print nothing until the end, so each step is one line.
"""

from __future__ import annotations

import time

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


class RankProgress:
    """Steps of a run; a no-op when ``enabled`` is False (ranks other than 0)."""

    def __init__(self, *, total: int, enabled: bool, console: Console | None = None) -> None:
        self._console = (console or Console(stderr=True)) if enabled else None
        self._total = total
        self._done = -1
        self._start_s = time.monotonic()
        self._progress = None
        if self._console is not None and self._console.is_terminal:
            self._progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                      TimeElapsedColumn(), console=self._console)
            self._task = self._progress.add_task("starting", total=total)

    def __enter__(self) -> RankProgress:
        if self._progress is not None:
            self._progress.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._progress is not None:
            self._progress.update(self._task, completed=self._total, description="done")
            self._progress.stop()
        elif self._console is not None:
            self._done = self._total
            self._line("done")

    def _line(self, description: str) -> None:
        elapsed_s = time.monotonic() - self._start_s
        self._console.print(f"[{max(self._done, 0)}/{self._total} {elapsed_s:6.1f} s] {description}",
                            highlight=False, soft_wrap=True)

    def step(self, description: str) -> None:
        """The previous step is done; ``description`` says what runs next."""
        if self._console is None:
            return
        self._done += 1
        if self._progress is not None:
            self._progress.update(self._task, completed=self._done, description=description)
        else:
            self._line(description)
