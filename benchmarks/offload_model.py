"""Event model of the tile-fused GEMM -> host pipeline (to_host), from measured H200 numbers.

Programs take tiles in table order (list scheduling, as a persistent launch does); a
group's copy starts when the group is done and the previous copy has ended; every copy
costs a fixed set-up. With the times measured on an H200 for (8192, 8192, 7168)
(benchmarks/results/h200/README.md: a 128x256 tile over K=8192 ~0.094 ms, a narrow
128x64 one ~0.040 ms, PCIe ~3836 rows of 7168 bf16 per ms, ~3 us per copy) it reproduces
the measured 2.27 ms of the 8-piece ramp and prints what other piece layouts would give.

    python benchmarks/offload_model.py
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from hocket.kernels.schedule import ramp_row_offsets, trapezoid_row_offsets


@dataclass(frozen=True, kw_only=True)
class PipelineTimes:
    programs: int = 130
    wide_tile_ms: float = 0.094
    narrow_tile_ms: float = 0.040
    launch_ms: float = 0.008
    copy_rows_per_ms: float = 3836.0
    copy_setup_ms: float = 0.003
    handoff_ms: float = 0.004
    cols: int = 7168
    block_m: int = 128
    block_n: int = 256
    narrow_n: int = 64


def to_host_ms(sizes: list[int], times: PipelineTimes, *, narrow_pieces: int = 1) -> tuple[float, float]:
    """(end of the last copy, end of the GEMM) in ms for row pieces ``sizes``."""
    tiles = []
    for group, rows in enumerate(sizes):
        narrow = group < narrow_pieces
        width = times.narrow_n if narrow else times.block_n
        per_block = times.cols // width
        tiles += [(group, times.narrow_tile_ms if narrow else times.wide_tile_ms)] * (per_block * rows // times.block_m)
    free = [times.launch_ms] * times.programs
    done: dict[int, float] = {}
    for group, ms in tiles:
        end = heapq.heappop(free) + ms
        heapq.heappush(free, end)
        done[group] = max(done.get(group, 0.0), end)
    copy_end = 0.0
    for group, rows in enumerate(sizes):
        copy_end = max(copy_end, done[group] + times.handoff_ms) + rows / times.copy_rows_per_ms + times.copy_setup_ms
    return copy_end, max(done.values())


def main() -> None:
    times = PipelineTimes()
    print(f"one copy alone: {8192 / times.copy_rows_per_ms:.3f} ms")
    for name, pieces in (("ramp", ramp_row_offsets), ("trapezoid", trapezoid_row_offsets)):
        for chunks in (6, 8, 12, 16, 24):
            offsets = pieces(8192, chunks, align=times.block_m)
            sizes = [b - a for a, b in zip(offsets, offsets[1:])]
            for narrow in (1, 2):
                end_ms, gemm_ms = to_host_ms(sizes, times, narrow_pieces=narrow)
                print(f"{name:9s} {chunks:2d} pieces, {narrow} narrow: {end_ms:.3f} ms (GEMM ends {gemm_ms:.3f}) {sizes[:4]}...")


if __name__ == "__main__":
    main()
