"""Flag groups of a persistent producer GEMM cut on its wave grid (plain Python).

A persistent kernel of ``programs`` programs taking tiles in table order with a fixed stride
finishes its tiles a wave at a time: after wave ``w`` the first ``w * programs`` tiles are done,
so with ``tiles_per_block`` tiles per row block the first ``floor(w * programs / tiles_per_block)``
row blocks are complete. A flag group that ends between two such boundaries is ready only at the
next wave: cut off the grid, a group can keep the copy engine waiting for most of a wave (the
1xH200 timeline of ``tile_fused(8)`` to host, 8192x8192x7168: 56 us of idle engine in the first
0.7 ms). :func:`wave_row_offsets` cuts groups where waves end, each as large as the rows that are
done by the time the copy of the group before it ends (greedy), so the engine never waits after
the first group, and groups grow as the GEMM's lead over the copies grows.

Measured, not a default: on one H200 (``benchmarks/results/h200/run23_wave``) these groups did not
beat the operators' ramp on the two large offload shapes, where each group copy's hand-over (its wait
on the group's flag) costs more than the idle engine did; ``benchmarks/probe_wave_groups.py`` uses them,
the planner does not.
"""

from __future__ import annotations

import math


def _positive(name: str, value: object, kind: type = int) -> None:
    ok = isinstance(value, kind) and not isinstance(value, bool) if kind is int else \
        isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value <= 0:
        raise ValueError(f"{name}={value!r} must be a positive {'int' if kind is int else 'number'}")


def blocks_done(wave: int, *, tiles_per_block: int, programs: int, blocks: int) -> int:
    """Row blocks complete once ``wave`` waves of ``programs`` tiles are done."""
    return min(blocks, wave * programs // tiles_per_block)


def wave_of(block_end: int, *, tiles_per_block: int, programs: int) -> int:
    """The wave in which the first ``block_end`` row blocks are complete."""
    return -(-(block_end * tiles_per_block) // programs)


def wave_row_offsets(m: int, *, align: int, tiles_per_block: int, programs: int, wave_ms: float,
                     copy_ms_per_block: float, max_groups: int = 64) -> tuple[int, ...]:
    """Row offsets ``(0, ..., m)`` of flag groups ending on wave boundaries.

    ``align``: rows per block (the kernel's ``block_m``); ``tiles_per_block``: output tiles per row
    block; ``programs``: the persistent grid; ``wave_ms``: one wave's time; ``copy_ms_per_block``:
    one row block's transfer time. The first group is what the first wave completes (at least one
    block); every next group ends at the last wave boundary reached before the previous group's
    copy ends (at least the next wave's rows, when the GEMM is behind). ``max_groups`` caps the
    count: the last group then takes every remaining row.
    """
    for name, value in (("m", m), ("align", align), ("tiles_per_block", tiles_per_block), ("programs", programs),
                        ("max_groups", max_groups)):
        _positive(name, value)
    for name, value in (("wave_ms", wave_ms), ("copy_ms_per_block", copy_ms_per_block)):
        _positive(name, value, float)
    blocks = -(-m // align)
    grid = dict(tiles_per_block=tiles_per_block, programs=programs)
    ends: list[int] = []
    done, copy_end = 0, 0.0
    while done < blocks:
        if len(ends) == max_groups - 1:
            end = blocks
        else:
            next_wave = wave_of(done + 1, **grid)  # the first wave that completes a new block
            reachable = max(next_wave, math.floor(copy_end / wave_ms + 1e-9))
            end = max(done + 1, blocks_done(reachable, blocks=blocks, **grid))
        ready = wave_of(end, **grid) * wave_ms
        copy_end = max(ready, copy_end) + (end - done) * copy_ms_per_block
        ends.append(end)
        done = end
    return (0, *(min(m, e * align) for e in ends))
