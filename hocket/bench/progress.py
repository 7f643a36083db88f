"""Progress of a measurement, shown by rank 0 only (other ranks stay quiet)."""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


class RankProgress:
    """A rich progress bar on stderr; a no-op when ``enabled`` is False (ranks other than 0)."""

    def __init__(self, *, total: int, enabled: bool) -> None:
        self._progress = None
        self._task = None
        if enabled:
            self._progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                      TimeElapsedColumn(), console=Console(stderr=True), transient=False)
            self._task = self._progress.add_task("starting", total=total)
        self._started = False


    def __enter__(self) -> "RankProgress":
        if self._progress is not None:
            self._progress.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._progress is not None:
            if self._started:
                self._progress.advance(self._task)
            self._progress.update(self._task, description="done")
            self._progress.stop()

    def step(self, description: str) -> None:
        """Mark one step done-so-far and say what runs next."""
        if self._progress is None:
            return
        if self._started:
            self._progress.advance(self._task)
        self._started = True
        self._progress.update(self._task, description=description)
