"""Row pieces of a pipelined plan: even, or uneven from ``Plan.split_sizes`` (plain Python).

One definition for the executors (``hocket.ops.lowering.chunked``), the cost model and
the candidate space, so that a plan's prediction and its run cut the same rows.

``split_sizes`` of a ``chunked`` plan are the row counts of its pieces, in processing
order, over the rows the strategy splits (``hocket.plan.space.split_rows``: each
shard's rows for ``ag_mm``, each destination block's for ``mm_rs``, all ``m`` for
``mm_ar``); ``len(split_sizes) == chunks``. The uneven shapes the space enumerates:

* ``fill``: a small first piece, so the first transfer, which nothing hides (the
  all-gather side waits for it before the first GEMM), is short;
* ``drain``: a small last piece, so the work after the last overlap (the last
  reduce-scatter or all-reduce, or the GEMM on the last gathered piece) is short;
* ``fill_drain``: both.

The small piece is half an even piece, rounded down to ``align`` rows.

The offload operators' persistent kernels (``tile_fused`` of ``h2d_mm`` / ``mm_d2h``) cut
their flag groups with :func:`fused_offload_sizes`: ``split_sizes`` when given, else a
geometric ramp from one row block at the exposed edge (:func:`ramp_row_offsets`; the
executors' ``hocket.ops.offload_pieces`` and the kernels' ``hocket.kernels.schedule`` use
these same functions, so the cost model prices the groups the kernel runs).
"""

from __future__ import annotations

from hocket.core.plan import Plan

SPLIT_PATTERNS = ("fill", "drain", "fill_drain")
DEFAULT_ALIGN = 8


def split_even(total: int, parts: int) -> tuple[int, ...]:
    """``total`` rows in ``min(parts, total)`` near-equal positive parts, the extra rows first."""
    if parts < 1:
        raise ValueError(f"parts={parts} must be >= 1")
    parts = max(1, min(parts, total))
    base, extra = divmod(total, parts)
    return tuple(base + (1 if i < extra else 0) for i in range(parts))


def ramp_sizes(total: int, chunks: int, pattern: str, *, align: int = DEFAULT_ALIGN) -> tuple[int, ...] | None:
    """Uneven piece sizes of ``pattern`` for ``total`` rows in ``chunks`` pieces, or None when
    the pattern does not fit (too few pieces or rows for a small piece of ``align`` rows
    that is smaller than the others)."""
    if pattern not in SPLIT_PATTERNS:
        raise ValueError(f"pattern={pattern!r} is unknown; use one of {SPLIT_PATTERNS}")
    if align < 1:
        raise ValueError(f"align={align} must be >= 1")
    small_pieces = 2 if pattern == "fill_drain" else 1
    if chunks <= small_pieces or total < chunks:
        return None
    small = (total // chunks // 2) // align * align
    if small < 1:
        return None
    middle = split_even(total - small_pieces * small, chunks - small_pieces)
    if len(middle) != chunks - small_pieces or min(middle) <= small:
        return None
    if pattern == "fill":
        return (small, *middle)
    if pattern == "drain":
        return (*middle, small)
    return (small, *middle, small)


def split_pattern(sizes: tuple[int, ...] | None) -> str | None:
    """The shape of ``sizes``: None (even, no sizes), one of ``SPLIT_PATTERNS``, ``"ramp"`` (growing or
    shrinking monotonically with three or more sizes, e.g. :func:`ramp_row_offsets`'s), or ``"custom"``."""
    if sizes is None:
        return None
    if len(sizes) < 2:
        return "custom"
    def even(part) -> bool:
        return bool(part) and max(part) - min(part) <= 1

    if even(sizes[1:]) and sizes[0] < min(sizes[1:]):
        return "fill"
    if even(sizes[:-1]) and sizes[-1] < min(sizes[:-1]):
        return "drain"
    inner = sizes[1:-1]
    if even(inner) and max(sizes[0], sizes[-1]) < min(inner):
        return "fill_drain"
    steps = [b - a for a, b in zip(sizes, sizes[1:])]
    if len(set(sizes)) >= 3 and (all(d >= 0 for d in steps) or all(d <= 0 for d in steps)):
        return "ramp"
    return "custom"


def piece_sizes(rows: int, plan: Plan) -> tuple[int, ...]:
    """Row counts of ``plan``'s pieces over ``rows``: ``plan.split_sizes`` (checked) or even."""
    if plan.split_sizes is None:
        return split_even(rows, plan.chunks)
    sizes = plan.split_sizes
    if len(sizes) != plan.chunks:
        raise ValueError(f"plan.split_sizes has {len(sizes)} pieces but plan.chunks={plan.chunks}; "
                         f"give chunks=len(split_sizes)")
    if sum(sizes) != rows:
        raise ValueError(f"plan.split_sizes={list(sizes)} adds up to {sum(sizes)} rows but the strategy splits "
                         f"{rows}; the pieces must cover every row once (hocket.plan.bucket.fit_plan rescales)")
    if any(size == 0 for size in sizes):
        raise ValueError(f"plan.split_sizes={list(sizes)} has an empty piece; drop it and lower chunks")
    return sizes


def piece_ranges(rows: int, plan: Plan) -> list[tuple[int, int]]:
    """``(lo, hi)`` row ranges of ``plan``'s pieces over ``rows`` (see :func:`piece_sizes`)."""
    bounds, start = [], 0
    for size in piece_sizes(rows, plan) if rows > 0 else ():
        bounds.append((start, start + size))
        start += size
    return bounds


OFFLOAD_DIRECTIONS = ("to_host", "from_host")


def row_units(m: int, chunks: int, align: int) -> int:
    """Blocks of ``align`` rows in ``m`` (the last may be partial), checked to hold ``chunks`` pieces."""
    for name, value in (("m", m), ("chunks", chunks), ("align", align)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name}={value!r} must be a positive int")
    units = -(-m // align)
    if chunks > units:
        raise ValueError(f"chunks={chunks} is more than the {units} row ranges of {align} rows that m={m} has; "
                         f"use chunks <= {units}")
    return units


def ramp_row_offsets(m: int, chunks: int, *, align: int = 1, reverse: bool = False) -> tuple[int, ...]:
    """Offsets ``(0, ..., m)`` of ``chunks`` row ranges growing geometrically from one
    ``align``-row block: sizes ``align * r**i`` (rounded to ``align``) with ``r`` chosen so
    they add up to ``m``. ``reverse=True`` mirrors them (largest first, one block last).

    The small piece sits where the pipeline fills (the producer's first group) or drains
    (the consumer's last chunk); growth keeps the number of transfers low. Raises when
    ``m`` has fewer than ``chunks`` blocks of ``align`` rows.
    """
    units = row_units(m, chunks, align)
    sizes = _ramp_units(units, chunks)
    if reverse:
        sizes = sizes[::-1]
    offsets = [0]
    for size in sizes:
        offsets.append(min(m, offsets[-1] + size * align))
    return tuple(offsets)


def _ramp_units(units: int, chunks: int) -> list[int]:
    """``chunks`` positive ints adding up to ``units``, first 1, nondecreasing, about geometric."""
    if chunks == 1:
        return [units]
    lo, hi = 1.0, float(units)
    for _ in range(100):  # bisect the growth ratio r: sum(r**i, i < chunks) == units
        r = (lo + hi) / 2
        if sum(r**i for i in range(chunks)) > units:
            hi = r
        else:
            lo = r
    sizes, used = [], 0
    for i in range(chunks - 1):
        left = chunks - 1 - i  # pieces still to place after this one, each >= this one
        ideal = max(1, round(r**i), sizes[-1] if sizes else 1)
        size = min(ideal, (units - used) // (left + 1))
        sizes.append(max(size, sizes[-1] if sizes else 1))
        used += sizes[-1]
    sizes.append(units - used)
    return sizes


def fused_offload_sizes(m: int, plan: Plan, *, align: int, direction: str) -> tuple[int, ...]:
    """Row counts of the flag groups an offload ``tile_fused`` kernel runs over ``m`` rows, in
    order: ``plan.split_sizes`` (checked) or the ramp of ``min(plan.chunks, blocks)`` groups,
    one ``align``-row block first ``to_host`` (the first copy waits for it), last
    ``from_host`` (the GEMM ends after it lands) -- as ``hocket.ops.offload_pieces.piece_offsets``
    cuts them."""
    if direction not in OFFLOAD_DIRECTIONS:
        raise ValueError(f"direction={direction!r} must be one of {OFFLOAD_DIRECTIONS}")
    if plan.split_sizes is not None:
        return piece_sizes(m, plan)
    chunks = min(plan.chunks, -(-m // align))
    offsets = ramp_row_offsets(m, chunks, align=align, reverse=direction == "from_host")
    return tuple(b - a for a, b in zip(offsets, offsets[1:]))
