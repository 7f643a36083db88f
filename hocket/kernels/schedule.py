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
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


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
    _positive_int("m", m)
    _positive_int("chunks", chunks)
    _positive_int("align", align)
    units = cdiv(m, align)
    if chunks > units:
        raise ValueError(
            f"chunks={chunks} is more than the {units} row ranges of {align} rows that m={m} has; "
            f"use chunks <= {units}"
        )
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


@dataclass(frozen=True, kw_only=True)
class ConsumerSchedule:
    """Tile order of the consumer GEMM.

    ``tiles[t] = (pid_m, pid_n, first_chunk, last_chunk)``: tile ``t`` waits on the flags
    of chunks ``first_chunk..last_chunk`` (inclusive) before it loads A.
    """

    m: int
    n: int
    block_m: int
    block_n: int
    chunk_offsets: tuple[int, ...]
    arrival: tuple[int, ...]
    tiles: tuple[tuple[int, int, int, int], ...]

    @property
    def num_chunks(self) -> int:
        return len(self.chunk_offsets) - 1

    def ready_step(self, tile_index: int) -> int:
        """Arrival step after which tile ``tile_index`` can run (max over its chunks)."""
        _, _, lo, hi = self.tiles[tile_index]
        position = {chunk: step for step, chunk in enumerate(self.arrival)}
        return max(position[c] for c in range(lo, hi + 1))

    def table(self) -> list[int]:
        """Flat int list, 4 entries per tile, for the kernel's schedule tensor."""
        return [value for tile in self.tiles for value in tile]


def consumer_schedule(*, m: int, n: int, block_m: int, block_n: int, chunk_offsets: Sequence[int],
                      arrival: Sequence[int] | None = None, group_m: int = 8) -> ConsumerSchedule:
    """Order the output tiles of ``[m, n]`` by when their A rows have arrived.

    ``chunk_offsets``: row offsets of the chunks of A (``(0, ..., m)``); ``arrival``: the
    chunk indices in the order they land (default: index order; e.g. ``(r, r+1, ...)``
    for local shard first then ring order).
    """
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

    num_m, num_n = cdiv(m, block_m), cdiv(n, block_n)
    by_step: dict[int, list[int]] = {}
    span = {}
    for pid_m in range(num_m):
        lo = chunk_of(pid_m * block_m)
        hi = chunk_of(min(m, (pid_m + 1) * block_m) - 1)
        span[pid_m] = (lo, hi)
        step = max(position[c] for c in range(lo, hi + 1))
        by_step.setdefault(step, []).append(pid_m)
    tiles = []
    for step in sorted(by_step):
        for pid_m, pid_n in _swizzled(by_step[step], num_n, group_m):
            tiles.append((pid_m, pid_n, *span[pid_m]))
    return ConsumerSchedule(m=m, n=n, block_m=block_m, block_n=block_n, chunk_offsets=offsets,
                            arrival=arrival, tiles=tuple(tiles))


@dataclass(frozen=True, kw_only=True)
class ProducerSchedule:
    """Tile order and groups of the producer GEMM.

    ``tiles[t] = (pid_m, pid_n, group, tiles_in_group)``; group ``g`` covers output rows
    ``group_offsets[g]:group_offsets[g+1]`` (contiguous in a row-major output).
    """

    m: int
    n: int
    block_m: int
    block_n: int
    group_offsets: tuple[int, ...]
    tiles: tuple[tuple[int, int, int, int], ...]

    @property
    def num_groups(self) -> int:
        return len(self.group_offsets) - 1

    def group_rows(self, group: int) -> tuple[int, int]:
        return self.group_offsets[group], self.group_offsets[group + 1]

    def table(self) -> list[int]:
        return [value for tile in self.tiles for value in tile]


def producer_schedule(*, m: int, n: int, block_m: int, block_n: int, groups: int,
                      group_m: int = 8) -> ProducerSchedule:
    """Split the ``[m, n]`` output into ``groups`` contiguous row-block ranges, in order."""
    for name, value in (("m", m), ("n", n), ("block_m", block_m), ("block_n", block_n), ("group_m", group_m)):
        _positive_int(name, value)
    _positive_int("groups", groups)
    num_m, num_n = cdiv(m, block_m), cdiv(n, block_n)
    if groups > num_m:
        raise ValueError(
            f"groups={groups} is more than the {num_m} row blocks of m={m} at block_m={block_m}; "
            f"use groups <= {num_m} (a group is a whole number of row blocks)"
        )
    offsets = even_row_offsets(m, groups, align=block_m)
    tiles = []
    for g in range(groups):
        row_blocks = list(range(offsets[g] // block_m, cdiv(offsets[g + 1], block_m)))
        group_tiles = _swizzled(row_blocks, num_n, group_m)
        tiles.extend((pid_m, pid_n, g, len(group_tiles)) for pid_m, pid_n in group_tiles)
    return ProducerSchedule(m=m, n=n, block_m=block_m, block_n=block_n, group_offsets=offsets, tiles=tuple(tiles))
