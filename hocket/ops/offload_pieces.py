"""Row pieces of the offload operators: how ``A`` (host -> device) or ``C`` (device -> host)
is cut into chunks / flag groups, and which edge rows get narrow tiles (plain Python).

* ``plan.split_sizes`` given: those row counts, in order (they must add up to ``m``);
* ``tile_fused`` without sizes: a geometric ramp (``hocket.kernels.schedule.ramp_row_offsets``)
  with the one-block piece where the pipeline is exposed: first for ``to_host`` (the copy
  waits for the first group), last for ``from_host`` (the GEMM finishes after the last
  chunk lands);
* ``chunked`` without sizes: even pieces, as before.

``narrow_rows``: the edge rows whose tiles are narrow (``TileConfig.narrow_n`` wide): by
default the first (``to_host``) or last (``from_host``) ``EDGE_PIECES`` pieces (never all).
"""

from __future__ import annotations

from hocket.core.pieces import piece_sizes
from hocket.core.plan import Plan
from hocket.kernels.schedule import cdiv, even_row_offsets, offsets_from_sizes, ramp_row_offsets

DIRECTIONS = ("to_host", "from_host")
EDGE_PIECES = 1
"""pieces at the exposed edge that get narrow tiles by default."""


def piece_offsets(plan: Plan, m: int, *, align: int, direction: str) -> tuple[int, ...]:
    """Row offsets ``(0, ..., m)`` of the plan's pieces (chunks or flag groups).

    ``align``: inner offsets are multiples of it (the GEMM's ``block_m`` for tile_fused, so
    a group is whole row blocks); ``plan.chunks`` is clamped to the ``align``-row blocks of
    ``m`` unless ``plan.split_sizes`` names the pieces.
    """
    if direction not in DIRECTIONS:
        raise ValueError(f"direction={direction!r} must be one of {DIRECTIONS}")
    if plan.split_sizes is not None:
        return _explicit(plan, m, align)
    chunks = min(plan.chunks, cdiv(m, align))
    if plan.strategy == "tile_fused":
        return ramp_row_offsets(m, chunks, align=align, reverse=direction == "from_host")
    return even_row_offsets(m, chunks, align=align)


def _explicit(plan: Plan, m: int, align: int) -> tuple[int, ...]:
    sizes = piece_sizes(m, plan)  # count, total and empty pieces checked as for every strategy
    offsets = offsets_from_sizes(list(sizes))
    bad = [o for o in offsets[1:-1] if o % align]
    if bad:
        raise ValueError(f"plan.split_sizes={list(sizes)} puts piece boundaries at rows {bad}, not multiples of "
                         f"{align} (the GEMM's row block); round each size to a multiple of {align}")
    return offsets


def edge_rows(offsets: tuple[int, ...], *, direction: str, pieces: int = EDGE_PIECES) -> int:
    """Rows in the first (``to_host``) or last (``from_host``) ``pieces`` pieces, never all
    of them (a single piece has no exposed edge: its tiles stay full width)."""
    if direction not in DIRECTIONS:
        raise ValueError(f"direction={direction!r} must be one of {DIRECTIONS}")
    if not isinstance(pieces, int) or isinstance(pieces, bool) or pieces < 0:
        raise ValueError(f"pieces={pieces!r} must be an int >= 0")
    count = min(pieces, len(offsets) - 2)
    if direction == "to_host":
        return offsets[count]
    return offsets[-1] - offsets[len(offsets) - 1 - count]
