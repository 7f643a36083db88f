"""Pricing uneven shards (``Site.shard_rows``): what one piece of an uneven collective moves and how long
the group waits for it.

Rules (the strategies' cost builders apply them as their executors run, :mod:`hocket.ops.lowering.uneven`):

* every step of a collective or ring moves one block per link, so the largest rank's block sets the pace:
  a piece is priced as an equal collective of ``world x`` its largest rank's rows (``pace_bytes``);
* ``exact`` (``Plan.splits=None``): only the real rows move (``real_bytes``); on GPU ranks the list forms
  issue one call per rank (NCCL runs them as grouped broadcasts / reduces): ``world - 1`` more host
  items than one collective;
* ``padded`` (``Plan.splits="padded"``): the padded buffer moves (the same pace), plus a copy of the real
  rows into the padded buffer and one out of it (a memory pass of ``2 x real_bytes`` each way);
* the GEMMs multiply the real rows only.
"""

from __future__ import annotations

from collections.abc import Sequence


def way(splits: str | None) -> str:
    """``Plan.splits`` as the uneven way: ``padded`` or ``exact``."""
    return "padded" if splits == "padded" else "exact"


def clipped(sizes: Sequence[int], lo: int, hi: int) -> list[int]:
    """Each rank's rows of the piece ``lo:hi`` cut over the largest shard (fewer, or none, for a smaller one)."""
    return [max(0, min(hi, s) - min(lo, s)) for s in sizes]


def pace_bytes(sizes: Sequence[int], unit_bytes: float) -> float:
    """Bytes an equal collective of the largest block moves in its output (``world x max x unit``)."""
    return len(sizes) * max(sizes, default=0) * unit_bytes


def real_bytes(sizes: Sequence[int], unit_bytes: float) -> float:
    return sum(sizes) * unit_bytes


def padding_copy_bytes(sizes: Sequence[int], unit_bytes: float) -> float:
    """Memory traffic of the padded way's copies: the real rows into the padded buffer and out again
    (read + write each)."""
    return 4.0 * real_bytes(sizes, unit_bytes)


def extra_calls(sizes: Sequence[int], splits: str | None) -> int:
    """Host calls the exact way issues beyond one collective (one per rank's block); 0 when padded."""
    return 0 if way(splits) == "padded" else max(0, len(sizes) - 1)


def gain_bound(rates: Sequence[float]) -> float:
    """The compute-only bound of uneven over even shards: the sum of the devices' rates against the
    slowest rate times the group size (>= 1)."""
    if not rates or min(rates) <= 0:
        raise ValueError(f"rates={list(rates)} must be positive, one per rank")
    return sum(rates) / (min(rates) * len(rates))
