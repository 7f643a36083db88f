"""Event model of the tile-fused GEMM -> host pipeline (to_host), from measured H200 numbers.

Programs take tiles in table order (list scheduling, as a persistent launch does); a
group's copy starts when the group is done and the previous copy has ended; every copy
costs a fixed set-up. With the times measured on an H200 for (8192, 8192, 7168)
(benchmarks/results/h200/README.md: a 128x256 tile over K=8192 ~0.094 ms, a narrow
128x64 one ~0.040 ms, PCIe ~3836 rows of 7168 bf16 per ms, ~3 us per copy) it reproduces
the measured 2.27 ms of the 8-piece ramp and prints what other piece layouts would give.

    python benchmarks/offload_model.py

The same for a ``chunked`` pipeline (one library GEMM per row piece, then its copy), with the piece
GEMM times of h200 run11 (``probe_offload_pieces.py``: 128 rows 0.035 ms, 256 0.046, 512 0.085, 1024
0.166, then 0.1438 us per row), ~2 us per copy piece and ~2 us per hand-over, searched over every
nondecreasing layout of 128-row blocks with 3-8 pieces (``chunked_search``): it reproduces the measured
ramp(8) (2.194 against 2.195-2.198 ms) and finds nothing under 2.192 ms (eff 0.945) to host on
8192x8192x7168.
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


PIECE_GEMM_MS = {128: 0.035, 256: 0.046, 512: 0.085, 1024: 0.166}
"""library GEMM of a row piece of 8192x8192x7168 bf16 on an H200 (h200 run11), ms."""
PER_ROW_GEMM_MS = 0.1438e-3
"""beyond 1024 rows: the whole GEMM's time per row (1.178 ms / 8192)."""


def piece_gemm_ms(rows: int) -> float:
    """Interpolated ``PIECE_GEMM_MS``; linear in rows beyond the largest point."""
    points = sorted(PIECE_GEMM_MS)
    if rows <= points[0]:
        return PIECE_GEMM_MS[points[0]]
    for a, b in zip(points, points[1:]):
        if rows <= b:
            return PIECE_GEMM_MS[a] + (PIECE_GEMM_MS[b] - PIECE_GEMM_MS[a]) * (rows - a) / (b - a)
    return PIECE_GEMM_MS[points[-1]] + (rows - points[-1]) * PER_ROW_GEMM_MS


def chunked_to_host_ms(sizes: list[int], *, copy_ms_per_row: float = 2.127 / 8192, piece_ms: float = 0.002,
                       handoff_ms: float = 0.002, launch_ms: float = 0.003) -> float:
    """End of the last copy of a chunked to-host pipeline: GEMMs back to back, each piece's copy after
    its GEMM and the previous copy."""
    gemm_end, copy_end = launch_ms, 0.0
    for rows in sizes:
        gemm_end += piece_gemm_ms(rows)
        copy_end = max(copy_end, gemm_end + handoff_ms) + rows * copy_ms_per_row + piece_ms
    return copy_end


def chunked_search(m: int = 8192, block: int = 128, max_pieces: int = 8) -> dict[int, tuple[float, list[int]]]:
    """pieces -> (best end ms, its sizes) over every nondecreasing layout of ``block``-row units."""
    units = m // block
    best: dict[int, tuple[float, list[int]]] = {}

    def walk(left: int, low: int, seq: list[int], depth: int) -> None:
        if left == 0:
            sizes = [u * block for u in seq]
            ms = chunked_to_host_ms(sizes)
            if len(seq) not in best or ms < best[len(seq)][0]:
                best[len(seq)] = (ms, sizes)
            return
        if depth == 0:
            return
        for u in range(low, left + 1):
            if depth == 1 and u != left:
                continue
            walk(left - u, u, seq + [u], depth - 1)

    for pieces in range(3, max_pieces + 1):
        walk(units, 1, [], pieces)
    return best


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
    ramp = [128, 256, 256, 512, 768, 1280, 1920, 3072]
    print(f"chunked ramp(8) {ramp}: {chunked_to_host_ms(ramp):.3f} ms")
    for pieces, (ms, sizes) in sorted(chunked_search().items()):
        print(f"chunked, best of {pieces} pieces: {ms:.3f} ms {sizes}")


if __name__ == "__main__":
    main()
