"""Tile order and group assignment for the tile-fused GEMMs, in plain Python.

Both GEMMs walk a table of output tiles in a fixed order (one persistent launch, each
program takes every ``num_programs``-th entry). The tables are built here so that the
order can be tested on the CPU and the kernels stay generic.

* Consumer (the all-gather / host->device direction): A's rows arrive in chunks. Each
  tile waits on every chunk its row block overlaps; tiles are ordered by the arrival
  position of the *last* of those chunks, so compute starts as soon as the first chunk
  lands. Inside one arrival step, row blocks are walked with a grouped-M swizzle
  (``group_m`` row blocks share each column sweep, so B's columns stay in L2).
* Producer (the reduce-scatter / device->host direction): output row blocks are split
  into ``groups`` contiguous ranges. A group's rows are one contiguous region of a
  row-major output, so each finished group becomes one transfer. Tiles are ordered
  group by group (swizzled inside), so group 0 completes first.

Two things shorten the pipeline's fill (producer) and drain (consumer), where one tile's
latency (a whole K loop) is paid without overlap:

* uneven pieces: ``ramp_row_offsets`` makes the piece at the edge one row block and
  grows the next ones geometrically, so the first transfer starts after one small group
  and the pipeline still has few pieces (each transfer costs a fixed gap);
* narrow edge tiles: row blocks within ``narrow_rows`` of the edge (the producer's first
  rows, the consumer's last-arriving rows) are split into tiles ``narrow_block_n``
  columns wide, so they finish in a fraction of a full tile's time.

* split edge tiles: row blocks within ``split_rows`` of the edge have each tile cut
  along K into ``splits`` slices, consecutive table entries that run on different
  programs (fp32 partials, the last slice adds them: ``hocket.kernels.gemm_tile``), so
  the edge group is ready, or the drain ends, after a fraction of one K loop.

Tile table: ``TABLE_COLUMNS`` ints per tile, ``(pid_m, pid_n, narrow, x, y)``; ``pid_n``
counts blocks of the tile's own width (``narrow_block_n`` when ``narrow`` is 1). Split
table (only where some tile is split): ``SPLIT_COLUMNS`` ints per table entry,
``(slice, slices, slot, part_base)``: slice ``slice`` of ``slices``; ``slot`` numbers the
split tiles (their arrival counters), ``part_base`` is the first of the tile's ``slices``
rows of fp32 partials. Unsplit entries are ``(0, 1, 0, 0)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

# the row-piece helpers are shared with the cost model (plain Python, no torch): one definition
from hocket.core.pieces import ramp_row_offsets  # noqa: F401  (re-exported)
from hocket.core.pieces import row_units as _row_units

TABLE_COLUMNS = 5
"""ints per tile in a schedule table: (pid_m, pid_n, narrow, x, y)."""

SPLIT_COLUMNS = 4
"""ints per table entry in a split table: (slice, slices, tile slot, first partial row)."""

TICKET_WORDS = 2
"""int32 words of a tile-ticket buffer (``tickets``): (next tile, programs finished)."""


def _positive_int(name: str, value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name}={value!r} must be a positive int")
    return value


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def even_row_offsets(m: int, chunks: int, *, align: int = 1) -> tuple[int, ...]:
    """Offsets ``(0, ..., m)`` of ``chunks`` contiguous row ranges, as even as possible.

    Every boundary except the last is a multiple of ``align`` (use the GEMM's block_m so
    no row block straddles two chunks). Raises if ``m`` cannot give ``chunks`` non-empty
    ranges at that alignment.
    """
    units = _row_units(m, chunks, align)
    base, extra = divmod(units, chunks)
    offsets = [0]
    for i in range(chunks):
        offsets.append(min(m, offsets[-1] + (base + (1 if i < extra else 0)) * align))
    return tuple(offsets)


def offsets_from_sizes(sizes: Sequence[int]) -> tuple[int, ...]:
    """Row offsets ``(0, s0, s0+s1, ...)`` from chunk sizes (every size >= 1)."""
    if len(sizes) == 0:
        raise ValueError("sizes is empty; give one row count per chunk")
    offsets = [0]
    for i, size in enumerate(sizes):
        if not isinstance(size, int) or isinstance(size, bool) or size < 1:
            raise ValueError(f"sizes[{i}]={size!r} must be a positive int (empty chunks carry no rows)")
        offsets.append(offsets[-1] + size)
    return tuple(offsets)


def trapezoid_row_offsets(m: int, chunks: int, *, align: int = 1, ratio: float = 1.6) -> tuple[int, ...]:
    """Offsets ``(0, ..., m)`` of ``chunks`` row ranges that are one ``align``-row block at
    *both* ends, grow by ``ratio`` per piece towards the middle and are even there: sizes
    ``min(ratio**i, ratio**(chunks-1-i), cap)`` blocks, ``cap`` chosen so they add up to ``m``
    (where even uncapped they fall short, the growth rises above ``ratio`` instead).

    Both ends of an offload pipeline can be exposed: to host, the copy waits for the first
    group (fill) and, when the GEMM ends late, the last group's copy follows it (drain);
    from host, the GEMM waits for the first chunk and the last chunk's tiles end it. The
    small pieces sit at both ends; the plateau keeps the number of transfers low.
    """
    units = _row_units(m, chunks, align)
    if not isinstance(ratio, (int, float)) or isinstance(ratio, bool) or not ratio > 1:
        raise ValueError(f"ratio={ratio!r} must be a number > 1 (the growth per piece towards the middle)")
    sizes = _trapezoid_units(units, chunks, float(ratio))
    offsets = [0]
    for size in sizes:
        offsets.append(min(m, offsets[-1] + size * align))
    return tuple(offsets)


def _trapezoid_units(units: int, chunks: int, ratio: float) -> list[int]:
    """``chunks`` positive ints adding up to ``units``: 1 at both ends, rising by about
    ``ratio`` towards an even middle."""
    if chunks <= 2:
        return [units // chunks + (1 if i < units % chunks else 0) for i in range(chunks)][::-1]

    def profile(r: float, cap: float) -> list[float]:
        return [min(r**i, r ** (chunks - 1 - i), cap) for i in range(chunks)]

    r, cap = ratio, float(units)
    if sum(profile(r, cap)) < units:  # even uncapped too small: grow faster
        lo, hi = r, float(units)
        for _ in range(100):
            r = (lo + hi) / 2
            lo, hi = (r, hi) if sum(profile(r, cap)) < units else (lo, r)
        r = hi
    else:
        lo, hi = 1.0, float(units)
        for _ in range(100):
            cap = (lo + hi) / 2
            lo, hi = (cap, hi) if sum(profile(r, cap)) < units else (lo, cap)
        cap = hi
    real = profile(r, cap)
    sizes = [max(1, int(x)) for x in real]
    by_remainder = sorted(range(chunks), key=lambda i: (real[i] - int(real[i]), -abs(i - chunks // 2)), reverse=True)
    i = 0
    while sum(sizes) < units:
        sizes[by_remainder[i % chunks]] += 1
        i += 1
    while sum(sizes) > units:  # rounding up of sub-1 sizes: take back from the largest
        sizes[max(range(chunks), key=lambda j: sizes[j])] -= 1
    return sizes


def _check_offsets(name: str, offsets: Sequence[int], m: int) -> tuple[int, ...]:
    offsets = tuple(int(o) for o in offsets)
    if len(offsets) < 2 or offsets[0] != 0 or offsets[-1] != m:
        raise ValueError(f"{name}={offsets!r} must start at 0 and end at m={m}, e.g. (0, {m // 2}, {m})")
    if any(b <= a for a, b in zip(offsets, offsets[1:])):
        raise ValueError(f"{name}={offsets!r} must be strictly increasing (no empty chunks)")
    return offsets


def _swizzled(row_blocks: Sequence[int], num_n: int, group_m: int) -> list[tuple[int, int]]:
    """Tiles of ``row_blocks`` x all columns, ``group_m`` row blocks per column sweep."""
    tiles = []
    for start in range(0, len(row_blocks), group_m):
        band = row_blocks[start:start + group_m]
        for pid_n in range(num_n):
            for pid_m in band:
                tiles.append((pid_m, pid_n))
    return tiles


def _check_narrow(narrow_block_n: int | None, narrow_rows: int, block_n: int) -> int | None:
    if narrow_rows is None or not isinstance(narrow_rows, int) or isinstance(narrow_rows, bool) or narrow_rows < 0:
        raise ValueError(f"narrow_rows={narrow_rows!r} must be an int >= 0 (rows at the edge with narrow tiles)")
    if narrow_block_n is None or narrow_rows == 0:
        return None
    _positive_int("narrow_block_n", narrow_block_n)
    if narrow_block_n >= block_n or block_n % narrow_block_n:
        raise ValueError(f"narrow_block_n={narrow_block_n} must divide block_n={block_n} and be smaller "
                         f"(e.g. {block_n // 4}); or pass narrow_rows=0 for no narrow tiles")
    return narrow_block_n


def _row_block_tiles(row_blocks: Sequence[int], n: int, block_n: int, group_m: int, narrow: bool):
    """(pid_m, pid_n, narrow) of ``row_blocks``, swizzled; ``pid_n`` in blocks of ``block_n``."""
    return [(pid_m, pid_n, int(narrow)) for pid_m, pid_n in _swizzled(row_blocks, cdiv(n, block_n), group_m)]


def _check_splits(split_rows: int, splits: int) -> int:
    if not isinstance(split_rows, int) or isinstance(split_rows, bool) or split_rows < 0:
        raise ValueError(f"split_rows={split_rows!r} must be an int >= 0 (rows at the edge whose tiles are split along K)")
    _positive_int("splits", splits)
    return splits if split_rows > 0 else 1


def _expand_splits(tiles: list[tuple], is_split: list[bool], splits: int) -> tuple[list[tuple], list[tuple] | None]:
    """Each tile whose ``is_split`` is set becomes ``splits`` consecutive entries (its K
    slices); returns the entries and their split table (None when nothing is split)."""
    if splits == 1 or not any(is_split):
        return list(tiles), None
    entries, table = [], []
    slot = part_base = 0
    for tile, split in zip(tiles, is_split):
        if not split:
            entries.append(tile)
            table.append((0, 1, 0, 0))
            continue
        for s in range(splits):
            entries.append(tile)
            table.append((s, splits, slot, part_base))
        slot += 1
        part_base += splits
    return entries, table


def _edge_split(row_blocks: Sequence[int], is_narrow) -> list[tuple[list[int], bool]]:
    """Runs of consecutive row blocks that are all narrow or all wide, in order."""
    runs: list[tuple[list[int], bool]] = []
    for pid_m in row_blocks:
        narrow = bool(is_narrow(pid_m))
        if runs and runs[-1][1] == narrow:
            runs[-1][0].append(pid_m)
        else:
            runs.append(([pid_m], narrow))
    return runs


class _SplitEntries:
    """The split table of a schedule whose ``splits`` field holds one row per table entry (or None)."""

    splits: tuple[tuple[int, int, int, int], ...] | None

    def split_table(self) -> list[int] | None:
        """Flat split table (``SPLIT_COLUMNS`` per entry), or None when no tile is split."""
        return None if self.splits is None else [value for entry in self.splits for value in entry]

    @property
    def split_tiles(self) -> int:
        """Tiles cut along K (each has an arrival counter)."""
        return 0 if self.splits is None else len({slot for _, count, slot, _ in self.splits if count > 1})

    @property
    def split_partials(self) -> int:
        """Rows of fp32 partials the split tiles need (one per slice)."""
        return 0 if self.splits is None else sum(1 for _, count, _, _ in self.splits if count > 1)


@dataclass(frozen=True, kw_only=True)
class ConsumerSchedule(_SplitEntries):
    """Tile order of the consumer GEMM.

    ``tiles[t] = (pid_m, pid_n, narrow, first_chunk, last_chunk)``: tile ``t`` waits on the
    flags of chunks ``first_chunk..last_chunk`` (inclusive) before it loads A; ``narrow``
    tiles are ``narrow_block_n`` columns wide (``pid_n`` counts those).
    """

    m: int
    n: int
    block_m: int
    block_n: int
    chunk_offsets: tuple[int, ...]
    arrival: tuple[int, ...]
    tiles: tuple[tuple[int, int, int, int, int], ...]
    narrow_block_n: int | None = None
    splits: tuple[tuple[int, int, int, int], ...] | None = None

    @property
    def num_chunks(self) -> int:
        return len(self.chunk_offsets) - 1

    def ready_step(self, tile_index: int) -> int:
        """Arrival step after which tile ``tile_index`` can run (max over its chunks)."""
        _, _, _, lo, hi = self.tiles[tile_index]
        position = {chunk: step for step, chunk in enumerate(self.arrival)}
        return max(position[c] for c in range(lo, hi + 1))

    def table(self) -> list[int]:
        """Flat int list, ``TABLE_COLUMNS`` entries per tile, for the kernel's schedule tensor."""
        return [value for tile in self.tiles for value in tile]


def consumer_schedule(*, m: int, n: int, block_m: int, block_n: int, chunk_offsets: Sequence[int],
                      arrival: Sequence[int] | None = None, group_m: int = 8, narrow_block_n: int | None = None,
                      narrow_rows: int = 0, split_rows: int = 0, splits: int = 1) -> ConsumerSchedule:
    """Order the output tiles of ``[m, n]`` by when their A rows have arrived.

    ``chunk_offsets``: row offsets of the chunks of A (``(0, ..., m)``); ``arrival``: the
    chunk indices in the order they land (default: index order; e.g. ``(r, r+1, ...)``
    for local shard first then ring order). Row blocks that start within the last
    ``narrow_rows`` rows to arrive get tiles ``narrow_block_n`` wide (a shorter drain; a
    block straddling chunks counts from its last chunk's start). Tiles of row blocks within
    the last ``split_rows`` rows (same count) are cut along K into ``splits`` slices.
    """
    narrow_block_n = _check_narrow(narrow_block_n, narrow_rows, block_n)
    splits = _check_splits(split_rows, splits)
    for name, value in (("m", m), ("n", n), ("block_m", block_m), ("block_n", block_n), ("group_m", group_m)):
        _positive_int(name, value)
    offsets = _check_offsets("chunk_offsets", chunk_offsets, m)
    num_chunks = len(offsets) - 1
    arrival = tuple(range(num_chunks)) if arrival is None else tuple(int(c) for c in arrival)
    if sorted(arrival) != list(range(num_chunks)):
        raise ValueError(f"arrival={arrival!r} must be a permutation of the {num_chunks} chunk indices 0..{num_chunks - 1}")
    position = {chunk: step for step, chunk in enumerate(arrival)}

    def chunk_of(row: int) -> int:
        for c in range(num_chunks):
            if offsets[c] <= row < offsets[c + 1]:
                return c
        raise AssertionError(f"row {row} outside chunk_offsets {offsets}")

    num_m = cdiv(m, block_m)
    by_step: dict[int, list[int]] = {}
    span = {}
    for pid_m in range(num_m):
        lo = chunk_of(pid_m * block_m)
        hi = chunk_of(min(m, (pid_m + 1) * block_m) - 1)
        span[pid_m] = (lo, hi)
        step = max(position[c] for c in range(lo, hi + 1))
        by_step.setdefault(step, []).append(pid_m)
    rows_after = {}  # arrival step -> rows of A that land after that step's chunk started
    later = 0
    for step in range(num_chunks - 1, -1, -1):
        chunk = arrival[step]
        later += offsets[chunk + 1] - offsets[chunk]
        rows_after[step] = later

    def rows_from(step: int, pid_m: int) -> int:
        """Rows of A that land from this row block's first row on (its step's chunk and later)."""
        return rows_after[step] - max(0, pid_m * block_m - offsets[arrival[step]])

    tiles, is_split = [], []
    for step in sorted(by_step):
        runs = _edge_split(by_step[step], lambda pid_m, step=step: narrow_block_n is not None
                           and rows_from(step, pid_m) <= narrow_rows)
        for run, narrow in runs:
            width = narrow_block_n if narrow else block_n
            for pid_m, pid_n, flag in _row_block_tiles(run, n, width, group_m, narrow):
                tiles.append((pid_m, pid_n, flag, *span[pid_m]))
                is_split.append(rows_from(step, pid_m) <= split_rows)
    tiles, split_table = _expand_splits(tiles, is_split, splits)
    return ConsumerSchedule(m=m, n=n, block_m=block_m, block_n=block_n, chunk_offsets=offsets,
                            arrival=arrival, tiles=tuple(tiles), narrow_block_n=narrow_block_n,
                            splits=None if split_table is None else tuple(split_table))


@dataclass(frozen=True, kw_only=True)
class ProducerSchedule(_SplitEntries):
    """Tile order and groups of the producer GEMM.

    ``tiles[t] = (pid_m, pid_n, narrow, group, tiles_in_group)``; group ``g`` covers output
    rows ``group_offsets[g]:group_offsets[g+1]`` (contiguous in a row-major output);
    ``narrow`` tiles are ``narrow_block_n`` columns wide (``pid_n`` counts those).
    """

    m: int
    n: int
    block_m: int
    block_n: int
    group_offsets: tuple[int, ...]
    tiles: tuple[tuple[int, int, int, int, int], ...]
    narrow_block_n: int | None = None
    splits: tuple[tuple[int, int, int, int], ...] | None = None

    @property
    def num_groups(self) -> int:
        return len(self.group_offsets) - 1

    def group_rows(self, group: int) -> tuple[int, int]:
        return self.group_offsets[group], self.group_offsets[group + 1]

    def table(self) -> list[int]:
        return [value for tile in self.tiles for value in tile]


def producer_schedule(*, m: int, n: int, block_m: int, block_n: int, groups: int | None = None,
                      group_offsets: Sequence[int] | None = None, group_m: int = 8,
                      narrow_block_n: int | None = None, narrow_rows: int = 0, split_rows: int = 0,
                      splits: int = 1) -> ProducerSchedule:
    """Split the ``[m, n]`` output into contiguous row-block groups, computed in order.

    Give ``groups`` (even groups) or ``group_offsets`` (``(0, ..., m)``, every inner offset
    a multiple of ``block_m``, e.g. from ``ramp_row_offsets``). Row blocks starting before
    row ``narrow_rows`` get tiles ``narrow_block_n`` wide (the first group is ready sooner);
    those starting before row ``split_rows`` are cut along K into ``splits`` slices. A group
    counts tiles, not slices (only a tile's last slice bumps its group's counter).
    """
    splits = _check_splits(split_rows, splits)
    for name, value in (("m", m), ("n", n), ("block_m", block_m), ("block_n", block_n), ("group_m", group_m)):
        _positive_int(name, value)
    narrow_block_n = _check_narrow(narrow_block_n, narrow_rows, block_n)
    num_m = cdiv(m, block_m)
    if (groups is None) == (group_offsets is None):
        raise ValueError(f"give exactly one of groups={groups!r} and group_offsets={group_offsets!r}")
    if groups is not None:
        _positive_int("groups", groups)
        if groups > num_m:
            raise ValueError(
                f"groups={groups} is more than the {num_m} row blocks of m={m} at block_m={block_m}; "
                f"use groups <= {num_m} (a group is a whole number of row blocks)"
            )
        offsets = even_row_offsets(m, groups, align=block_m)
    else:
        offsets = _check_offsets("group_offsets", group_offsets, m)
        if any(o % block_m for o in offsets[:-1]):
            raise ValueError(f"group_offsets={offsets!r}: every offset but the last must be a multiple of "
                             f"block_m={block_m} (a group is a whole number of row blocks)")
    tiles = []
    for g in range(len(offsets) - 1):
        row_blocks = list(range(offsets[g] // block_m, cdiv(offsets[g + 1], block_m)))
        group_tiles = []
        for run, narrow in _edge_split(row_blocks, lambda pid_m: pid_m * block_m < narrow_rows):
            width = narrow_block_n if narrow and narrow_block_n is not None else block_n
            group_tiles.extend(_row_block_tiles(run, n, width, group_m, width != block_n))
        tiles.extend((*tile, g, len(group_tiles)) for tile in group_tiles)
    tiles, split_table = _expand_splits(tiles, [tile[0] * block_m < split_rows for tile in tiles], splits)
    return ProducerSchedule(m=m, n=n, block_m=block_m, block_n=block_n, group_offsets=offsets, tiles=tuple(tiles),
                            narrow_block_n=narrow_block_n, splits=None if split_table is None else tuple(split_table))


# -- balancing the last wave with narrow tiles --------------------------------------------
TILE_OVERHEAD_COLUMNS = 112
"""A tile's time grows like ``width + TILE_OVERHEAD_COLUMNS`` (the A block loaded per K step
and the pipeline's fill and epilogue cost the same at any width): a narrow tile costs
``(narrow_block_n + 112) / (block_n + 112)`` of a full one. Fitted on an H200 (bf16, 128-row
tiles, K=8192, ``sweep_tile_configs.py`` in benchmarks/results/h200/2026-12-01_probes.md): 64 of
256 columns took 0.48 of a full tile, 128 of 256 took 0.61 (0.50 and 0.66 by this rule)."""


TAIL_MIN_GAIN = 0.03
"""Narrow rows beyond the fewest candidate are taken only for a busiest program this much
shorter (a model's gain this small is within what it leaves out)."""


def narrow_tile_cost(*, block_n: int, narrow_block_n: int) -> float:
    """Time of a ``narrow_block_n``-wide tile over a ``block_n``-wide one (``TILE_OVERHEAD_COLUMNS``)."""
    _positive_int("block_n", block_n)
    _positive_int("narrow_block_n", narrow_block_n)
    if narrow_block_n > block_n:
        raise ValueError(f"narrow_block_n={narrow_block_n} must be <= block_n={block_n}")
    return (narrow_block_n + TILE_OVERHEAD_COLUMNS) / (block_n + TILE_OVERHEAD_COLUMNS)


def fixed_stride_makespan(*, wide: int, narrow: int, programs: int, narrow_cost: float, narrow_first: bool) -> float:
    """Work of the busiest program, in full-tile times, when ``programs`` persistent programs
    take tiles ``p, p + programs, ...`` of a table holding ``narrow`` narrow tiles (each
    ``narrow_cost``) before (``narrow_first``) or after ``wide`` full tiles (cost 1)."""
    for name, value in (("wide", wide), ("narrow", narrow)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"{name}={value!r} must be an int >= 0 (tiles in the table)")
    _positive_int("programs", programs)
    if not 0 < narrow_cost <= 1:
        raise ValueError(f"narrow_cost={narrow_cost!r} must be in (0, 1] (a narrow tile's time over a full tile's)")
    total = wide + narrow
    busiest = 0.0
    for p in range(min(programs, total)):
        count = len(range(p, total, programs))
        narrow_here = len(range(p, narrow, programs)) if narrow_first else count - len(range(p, wide, programs))
        busiest = max(busiest, narrow_here * narrow_cost + count - narrow_here)
    return busiest


def tail_narrow_rows(*, m: int, n: int, block_m: int, block_n: int, narrow_block_n: int, programs: int,
                     candidates: Sequence[int], narrow_first: bool) -> int:
    """Of ``candidates`` (row counts at the table's narrow end that the schedule can make
    narrow, e.g. whole pieces), the one whose fixed-stride table has the least-loaded busiest
    program (``fixed_stride_makespan``); ties, and gains under ``TAIL_MIN_GAIN`` over the
    fewest candidate rows, go to the fewest narrow rows.

    Narrow tiles at the edge shorten the pipeline's fill or drain; more of them can also
    fill the last wave of a persistent launch: 320 tiles of 128x256 on 130 programs take 3
    full-tile times, while 52 row blocks of full tiles and 12 of 128x128 tiles take 2.55.
    """
    for name, value in (("m", m), ("n", n), ("block_m", block_m)):
        _positive_int(name, value)
    cost = narrow_tile_cost(block_n=block_n, narrow_block_n=narrow_block_n)
    if not candidates:
        raise ValueError("candidates is empty; give at least one narrow row count (e.g. the edge piece's rows)")
    bad = [rows for rows in candidates if not isinstance(rows, int) or isinstance(rows, bool) or not 0 <= rows <= m]
    if bad:
        raise ValueError(f"candidates {bad} must be ints in [0, m={m}]")
    num_m = cdiv(m, block_m)
    best_rows, best_span, first_span = None, None, None
    for rows in sorted(set(candidates)):
        narrow_blocks = min(num_m, cdiv(rows, block_m))
        span = fixed_stride_makespan(wide=(num_m - narrow_blocks) * cdiv(n, block_n),
                                     narrow=narrow_blocks * cdiv(n, narrow_block_n), programs=programs,
                                     narrow_cost=cost, narrow_first=narrow_first)
        if best_span is None or span < best_span - 1e-9:
            best_rows, best_span = rows, span
        first_span = span if first_span is None else first_span
    if best_span > (1 - TAIL_MIN_GAIN) * first_span:
        return min(candidates)
    return best_rows
