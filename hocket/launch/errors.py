"""What a failed rank looks like to the driver: one record per rank, one exception for all."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class RankFailure:
    """One rank's failure, carried across the process boundary as plain text.

    ``type_names`` holds the qualified names of the exception's classes, most derived
    first (its MRO), so the driver can ask "was it a ValueError?" without unpickling
    the exception itself.
    """

    rank: int
    type_names: tuple[str, ...]
    message: str
    traceback_text: str

    @property
    def exc_type(self) -> str:
        """Name of the exception's class, e.g. ``"ValueError"``."""
        return self.type_names[0] if self.type_names else "<unknown>"

    def is_instance(self, exc_type: type[BaseException] | str) -> bool:
        """True when the rank raised ``exc_type`` or a subclass of it (compared by name)."""
        name = exc_type if isinstance(exc_type, str) else exc_type.__qualname__
        return name in self.type_names

    def describe(self) -> str:
        return f"rank {self.rank}: {self.exc_type}: {self.message}\n{self.traceback_text.rstrip()}"


class RankError(RuntimeError):
    """One or more rank processes raised (or died) while running a task.

    ``failures`` maps rank -> RankFailure for each rank that raised or died;
    ``unfinished`` lists ranks that neither answered nor failed before they were killed
    (usually stuck in a collective the failing rank never joined); ``stacks`` maps such a
    rank to the Python stack it was in when it was stopped (empty when unavailable).
    """

    def __init__(
        self,
        what: str,
        *,
        failures: dict[int, RankFailure],
        unfinished: tuple[int, ...] = (),
        stacks: dict[int, str] | None = None,
        note: str = "",
    ) -> None:
        self.what = what
        self.failures = dict(sorted(failures.items()))
        self.unfinished = tuple(sorted(unfinished))
        self.stacks = dict(stacks or {})
        self.note = note
        super().__init__(self._text())

    @property
    def failed_ranks(self) -> tuple[int, ...]:
        return tuple(self.failures)

    def _headline(self) -> str:
        ranks = ", ".join(str(r) for r in self.failures) or "none"
        return f"{self.what}: rank(s) {ranks} failed"

    def _text(self) -> str:
        parts = [self._headline()]
        parts.extend(f.describe() for f in self.failures.values())
        if self.unfinished:
            ranks = ", ".join(str(r) for r in self.unfinished)
            parts.append(f"rank(s) {ranks} had not finished and were killed")
        for rank, stack in sorted(self.stacks.items()):
            parts.append(f"rank {rank} was here when stopped:\n{stack.rstrip()}")
        if self.note:
            parts.append(self.note)
        return "\n\n".join(parts)


class RankTimeout(RankError):
    """A task did not finish on every rank within its time bound; the ranks were killed."""

    def __init__(
        self,
        what: str,
        *,
        timeout_s: float,
        unfinished: tuple[int, ...],
        failures: dict[int, RankFailure] | None = None,
        stacks: dict[int, str] | None = None,
        note: str = "",
    ) -> None:
        self.timeout_s = timeout_s
        super().__init__(what, failures=failures or {}, unfinished=unfinished, stacks=stacks, note=note)

    def _headline(self) -> str:
        ranks = ", ".join(str(r) for r in self.unfinished)
        return f"{self.what}: timed out after {self.timeout_s:g} s waiting for rank(s) {ranks}"


class RankExpectationError(AssertionError):
    """``RankPool.run_expect_error`` did not see the expected exception on every rank."""
