"""Consumer GEMM: one persistent launch over A whose row chunks arrive while it runs.

Each program walks the schedule table (``ConsumerSchedule``) with stride ``num_programs``
(program ``p`` takes tiles ``p, p + P, ...``). A tile first waits (bounded,
acquire) on the flags of every chunk its rows overlap, then computes (with ``TMA``, after an
async-proxy fence, so descriptor loads see the landed rows). Tiles are in arrival order,
so compute starts as soon as the first chunk lands;
tiles of the last-arriving rows may be narrow (``NARROW_N`` columns), so the drain after
the last chunk lands is a fraction of a full tile. With ``SPLIT``, table entries may be K slices of
one tile (``hocket.kernels.gemm_tile.gemm_split_tile``): the last-arriving rows' tiles then run on
several programs each, so the drain is a fraction of one K loop.
"""

from __future__ import annotations

import triton
import triton.language as tl

from hocket.kernels.errors import CONSUMER_SLOT
from hocket.kernels.flags import async_proxy_fence, wait_flag
from hocket.kernels.gemm_tile import gemm_split_tile, gemm_tile
from hocket.kernels.schedule import TABLE_COLUMNS

_SLOT = tl.constexpr(CONSUMER_SLOT)
_COLS = tl.constexpr(TABLE_COLUMNS)


@triton.jit(do_not_specialize=["max_spins"])
def consumer_gemm_kernel(a_ptr, b_ptr, c_ptr, a_desc, b_desc, b_narrow_desc, table_ptr, flags_ptr, err_ptr,
                         split_ptr, part_ptr, split_count_ptr,
                         M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                         num_tiles, max_spins,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, NARROW_N: tl.constexpr,
                         EVEN_M: tl.constexpr, EVEN_N: tl.constexpr, EVEN_NARROW_N: tl.constexpr,
                         EVEN_K: tl.constexpr, WAIT: tl.constexpr, INPUT_PRECISION: tl.constexpr,
                         UPCAST: tl.constexpr, TMA: tl.constexpr,
                         PROXY_FENCE: tl.constexpr, SPLIT: tl.constexpr = False, PART_STRIDE: tl.constexpr = 0):
    num_programs = tl.num_programs(0)
    t = tl.program_id(0)
    while t < num_tiles:
        pid_m = tl.load(table_ptr + _COLS * t)
        pid_n = tl.load(table_ptr + _COLS * t + 1)
        narrow = tl.load(table_ptr + _COLS * t + 2)
        if WAIT:
            first_chunk = tl.load(table_ptr + _COLS * t + 3)
            last_chunk = tl.load(table_ptr + _COLS * t + 4)
            for chunk in range(first_chunk, last_chunk + 1):
                wait_flag(flags_ptr + chunk, err_ptr + _SLOT, chunk + 1, max_spins)
            if PROXY_FENCE:
                narrow = async_proxy_fence(narrow)
        if SPLIT:
            gemm_split_tile(a_ptr, b_ptr, c_ptr, a_desc, b_desc, b_narrow_desc, pid_m, pid_n, narrow, split_ptr,
                            part_ptr, split_count_ptr, t, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                            stride_cm, stride_cn, BLOCK_M, BLOCK_N, BLOCK_K, NARROW_N, EVEN_M, EVEN_N, EVEN_NARROW_N,
                            EVEN_K, INPUT_PRECISION, UPCAST, TMA, PART_STRIDE)
        else:
            gemm_tile(a_ptr, b_ptr, c_ptr, a_desc, b_desc, b_narrow_desc, pid_m, pid_n, narrow, M, N, K, stride_am,
                      stride_ak, stride_bk, stride_bn, stride_cm, stride_cn, BLOCK_M, BLOCK_N, BLOCK_K, NARROW_N, EVEN_M,
                      EVEN_N, EVEN_NARROW_N, EVEN_K, INPUT_PRECISION, UPCAST, TMA)
        t += num_programs
