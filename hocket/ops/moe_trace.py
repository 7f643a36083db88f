"""Event recording for the MoE executors: which all-to-all was issued and waited, and which GEMM ran, in order.

``with recording() as events:`` makes every MoE call in this process wrap its transport in a
:class:`TracedTransport` and note its grouped GEMMs; ``events`` is then a list of ``(what, label)`` with
``what`` one of ``issue``, ``wait``, ``gemm``, ``wgrad``, ``shared``. Labels name the piece: ``dispatch:0``,
``combine:1``, ``gemm:a2a_mm:0``, ... (:mod:`hocket.ops.moe_exec`). Off (the default) it costs one list lookup
per event.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

_EVENTS: list[list | None] = [None]


@contextmanager
def recording() -> Iterator[list[tuple[str, str]]]:
    events: list[tuple[str, str]] = []
    before = _EVENTS[0]
    _EVENTS[0] = events
    try:
        yield events
    finally:
        _EVENTS[0] = before


def active() -> bool:
    return _EVENTS[0] is not None


def note(what: str, label: str) -> None:
    events = _EVENTS[0]
    if events is not None:
        events.append((what, label))


class _TracedPending:
    def __init__(self, pending, label: str) -> None:
        self._pending, self._label = pending, label

    def wait(self) -> None:
        self._pending.wait()
        note("wait", self._label)


class TracedTransport:
    """A transport whose ``all_to_all`` notes ``issue``/``wait`` events under the label set by :meth:`label`."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.name = inner.name
        self._label = ""

    def label(self, text: str) -> TracedTransport:
        self._label = text
        return self

    def all_to_all(self, out, inp, out_splits, in_splits):
        label = self._label
        pending = self.inner.all_to_all(out, inp, out_splits, in_splits)
        note("issue", label)
        return _TracedPending(pending, label)
