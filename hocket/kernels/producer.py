"""Producer GEMM: output tiles in groups; a finished group raises its flag.

Tiles come group by group (``ProducerSchedule``). After storing a tile, the program
bumps its group's counter (acq_rel); the program that completes the group raises the
group's flag (release, system scope). The group's rows are then complete in the
row-major output, one contiguous region, so its transfer can start while later groups
compute. Tiles are taken with stride ``num_programs``. Tiles of the first rows may be narrow (``NARROW_N`` columns), so the first
group is ready after a fraction of a full tile's time. With ``SPLIT``, table entries may be K slices of one tile
(``split_ptr``: ``hocket.kernels.gemm_tile.gemm_split_tile``): the first group's tiles then run on several
programs each and are ready after a fraction of one K loop; a tile counts in its group once its last slice
has added the others' fp32 partials and stored it.
"""

from __future__ import annotations

import triton
import triton.language as tl

from hocket.kernels.flags import raise_flag
from hocket.kernels.gemm_tile import gemm_split_tile, gemm_tile
from hocket.kernels.schedule import TABLE_COLUMNS

_COLS = tl.constexpr(TABLE_COLUMNS)


@triton.jit
def _count_tile(table_ptr, counters_ptr, flags_ptr, t):
    """Count entry ``t``'s finished tile in its group; the group's last tile raises the group flag."""
    group = tl.load(table_ptr + _COLS * t + 3)
    tiles_in_group = tl.load(table_ptr + _COLS * t + 4)
    tl.debug_barrier()
    done_before = tl.atomic_add(counters_ptr + group, 1, sem="acq_rel", scope="gpu")
    if done_before == tiles_in_group - 1:
        raise_flag(flags_ptr + group)


@triton.jit
def producer_gemm_kernel(a_ptr, b_ptr, c_ptr, a_desc, b_desc, b_narrow_desc, table_ptr, counters_ptr, flags_ptr,
                         split_ptr, part_ptr, split_count_ptr,
                         M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                         num_tiles,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, NARROW_N: tl.constexpr,
                         EVEN_M: tl.constexpr, EVEN_N: tl.constexpr, EVEN_NARROW_N: tl.constexpr,
                         EVEN_K: tl.constexpr, SIGNAL: tl.constexpr, INPUT_PRECISION: tl.constexpr,
                         UPCAST: tl.constexpr, TMA: tl.constexpr,
                         SPLIT: tl.constexpr = False, PART_STRIDE: tl.constexpr = 0):
    num_programs = tl.num_programs(0)
    t = tl.program_id(0)
    while t < num_tiles:
        pid_m = tl.load(table_ptr + _COLS * t)
        pid_n = tl.load(table_ptr + _COLS * t + 1)
        narrow = tl.load(table_ptr + _COLS * t + 2)
        if SPLIT:
            complete = gemm_split_tile(a_ptr, b_ptr, c_ptr, a_desc, b_desc, b_narrow_desc, pid_m, pid_n, narrow,
                                       split_ptr, part_ptr, split_count_ptr, t, M, N, K, stride_am, stride_ak,
                                       stride_bk, stride_bn, stride_cm, stride_cn, BLOCK_M, BLOCK_N, BLOCK_K, NARROW_N,
                                       EVEN_M, EVEN_N, EVEN_NARROW_N, EVEN_K, INPUT_PRECISION, UPCAST, TMA,
                                       PART_STRIDE)
            if SIGNAL:
                if complete:
                    _count_tile(table_ptr, counters_ptr, flags_ptr, t)
        else:
            gemm_tile(a_ptr, b_ptr, c_ptr, a_desc, b_desc, b_narrow_desc, pid_m, pid_n, narrow, M, N, K, stride_am,
                      stride_ak, stride_bk, stride_bn, stride_cm, stride_cn, BLOCK_M, BLOCK_N, BLOCK_K, NARROW_N, EVEN_M,
                      EVEN_N, EVEN_NARROW_N, EVEN_K, INPUT_PRECISION, UPCAST, TMA)
            if SIGNAL:
                _count_tile(table_ptr, counters_ptr, flags_ptr, t)
        t += num_programs
