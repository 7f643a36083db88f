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
"""

from __future__ import annotations

from hocket.plan.plan import Plan

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
    """The shape of ``sizes``: None (even, no sizes), one of ``SPLIT_PATTERNS``, or ``"custom"``."""
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
