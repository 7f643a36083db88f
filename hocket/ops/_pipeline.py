"""The chunk pipeline every executor shares, and how rows are cut into pieces.

A piece goes through up to three stages: ``produce`` (compute before communicating,
e.g. the matmul whose result is reduce-scattered), ``communicate`` (issue an async
transfer, returning a :class:`~hocket.transport.pending.Pending`) and ``consume``
(after the transfer: e.g. the matmul on a gathered piece). At most ``depth`` transfers
are in flight; with the default ``depth=2`` the transfer of piece ``i+1`` runs while
piece ``i`` is consumed (all-gather side) or produced (reduce-scatter side). A piece
``i`` may use scratch slot ``i % depth``: that slot is free again once piece ``i`` is
consumed, before piece ``i + depth`` is produced.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from hocket.transport.pending import Pending


def block_bounds(total: int, parts: int) -> list[tuple[int, int]]:
    """``total`` rows cut into exactly ``parts`` contiguous near-equal ranges, the extra rows first
    (10 rows, 3 parts -> 4, 3, 3); ranges are empty when ``total < parts``."""
    if parts < 1:
        raise ValueError(f"parts={parts} must be >= 1")
    base, extra = divmod(max(total, 0), parts)
    bounds, start = [], 0
    for i in range(parts):
        stop = start + base + (1 if i < extra else 0)
        bounds.append((start, stop))
        start = stop
    return bounds


def piece_bounds(total: int, parts: int) -> list[tuple[int, int]]:
    """Like :func:`block_bounds` but never empty: ``parts`` above ``total`` is clamped to ``total``
    and ``total == 0`` gives no pieces."""
    if parts < 1:
        raise ValueError(f"parts={parts} must be >= 1")
    return block_bounds(total, min(parts, total)) if total > 0 else []


def run_pipeline(n_pieces: int, *, communicate: Callable[[int], Pending],
                 produce: Callable[[int], None] | None = None,
                 consume: Callable[[int], None] | None = None, depth: int = 2) -> None:
    """Run ``n_pieces`` pieces through produce -> communicate -> consume, ``depth`` transfers in flight."""
    if depth < 1:
        raise ValueError(f"depth={depth} must be >= 1")
    in_flight: deque[tuple[int, Pending]] = deque()
    for i in range(n_pieces):
        if produce is not None:
            produce(i)
        in_flight.append((i, communicate(i)))
        if len(in_flight) >= depth:
            j, pending = in_flight.popleft()
            pending.wait()
            if consume is not None:
                consume(j)
    while in_flight:
        j, pending = in_flight.popleft()
        pending.wait()
        if consume is not None:
            consume(j)
