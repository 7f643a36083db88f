"""One output tile of ``C = A @ B`` (full width or narrow): the Triton device code both tile-fused GEMMs share.

Operand tiles are loaded with pointer arithmetic, or (``TMA``) through tensor descriptors
that the Hopper Tensor Memory Accelerator serves (``hocket.kernels.descriptors`` builds them
on the host; out-of-range rows and columns read as zero, so no masks are needed).
"""

from __future__ import annotations

import triton
import triton.language as tl

from hocket.kernels.schedule import SPLIT_COLUMNS

_SPLIT_COLS = tl.constexpr(SPLIT_COLUMNS)


@triton.jit
def tile_accumulate(a_ptr, b_ptr, pid_m, pid_n, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                    EVEN_M: tl.constexpr, EVEN_N: tl.constexpr, EVEN_K: tl.constexpr,
                    INPUT_PRECISION: tl.constexpr, UPCAST: tl.constexpr, k_lo=0, k_hi=None):
    """fp32 accumulator of tile (pid_m, pid_n) over ``k_lo <= k < k_hi`` (default: all of K;
    ``k_lo`` a multiple of ``BLOCK_K``). Loads are masked only where a dim is uneven.

    ``UPCAST`` converts the operands to fp32 before ``tl.dot``: set only under Triton's
    interpreter, whose ``dot`` multiplies bfloat16's raw bits (the conversion is exact, so
    the result equals a bf16 dot with fp32 accumulation). Never set on a GPU.
    """
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    if k_hi is None:
        k_hi = K
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + (k_lo + offs_k[None, :]) * stride_ak
    b_ptrs = b_ptr + (k_lo + offs_k[:, None]) * stride_bk + offs_n[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for kk in range(0, tl.cdiv(k_hi - k_lo, BLOCK_K)):
        if EVEN_M and EVEN_K:
            a = tl.load(a_ptrs)
        else:
            a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < k_hi - k_lo - kk * BLOCK_K),
                        other=0.0)
        if EVEN_N and EVEN_K:
            b = tl.load(b_ptrs)
        else:
            b = tl.load(b_ptrs, mask=(offs_k[:, None] < k_hi - k_lo - kk * BLOCK_K) & (offs_n[None, :] < N),
                        other=0.0)
        if UPCAST:
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    return acc


@triton.jit
def descriptor_accumulate(a_desc, b_desc, off_m, off_n, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                          BLOCK_K: tl.constexpr, INPUT_PRECISION: tl.constexpr, UPCAST: tl.constexpr,
                          k_lo=0, k_hi=None):
    """fp32 accumulator of the tile at rows ``off_m`` and columns ``off_n`` over ``k_lo <= k < k_hi``
    (default: all of K), its A and B blocks loaded through descriptors of block shape
    ``[BLOCK_M, BLOCK_K]`` and ``[BLOCK_K, BLOCK_N]``."""
    if k_hi is None:
        k_hi = K
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for kk in range(k_lo // BLOCK_K, tl.cdiv(k_hi, BLOCK_K)):
        a = a_desc.load([off_m, kk * BLOCK_K])
        b = b_desc.load([kk * BLOCK_K, off_n])
        if UPCAST:
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)
    return acc


@triton.jit
def store_block(c_ptr, acc, offs_m, offs_n, M, N, stride_cm, stride_cn, EVEN_M: tl.constexpr, EVEN_N: tl.constexpr):
    """Round ``acc`` to C's dtype and store it at rows ``offs_m`` and columns ``offs_n`` (masked where uneven)."""
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    value = acc.to(c_ptr.dtype.element_ty)
    if EVEN_M and EVEN_N:
        tl.store(c_ptrs, value)
    else:
        tl.store(c_ptrs, value, mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


@triton.jit
def store_tile(c_ptr, acc, pid_m, pid_n, M, N, stride_cm, stride_cn,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, EVEN_M: tl.constexpr, EVEN_N: tl.constexpr):
    store_block(c_ptr, acc, pid_m * BLOCK_M + tl.arange(0, BLOCK_M), pid_n * BLOCK_N + tl.arange(0, BLOCK_N), M, N,
                stride_cm, stride_cn, EVEN_M, EVEN_N)



@triton.jit
def _accumulate(a_ptr, b_ptr, a_desc, b_desc, pid_m, pid_n, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_M: tl.constexpr,
                EVEN_N: tl.constexpr, EVEN_K: tl.constexpr, INPUT_PRECISION: tl.constexpr, UPCAST: tl.constexpr,
                TMA: tl.constexpr, k_lo=0, k_hi=None):
    """The tile's fp32 accumulator over ``k_lo <= k < k_hi``, loaded through descriptors (``TMA``) or pointers."""
    if TMA:
        acc = descriptor_accumulate(a_desc, b_desc, pid_m * BLOCK_M, pid_n * BLOCK_N, K, BLOCK_M, BLOCK_N, BLOCK_K,
                                    INPUT_PRECISION, UPCAST, k_lo, k_hi)
    else:
        acc = tile_accumulate(a_ptr, b_ptr, pid_m, pid_n, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                              BLOCK_M, BLOCK_N, BLOCK_K, EVEN_M, EVEN_N, EVEN_K, INPUT_PRECISION, UPCAST, k_lo, k_hi)
    return acc


@triton.jit
def _tile(a_ptr, b_ptr, c_ptr, a_desc, b_desc, pid_m, pid_n, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
          stride_cm, stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
          EVEN_M: tl.constexpr, EVEN_N: tl.constexpr, EVEN_K: tl.constexpr, INPUT_PRECISION: tl.constexpr,
          UPCAST: tl.constexpr, TMA: tl.constexpr):
    acc = _accumulate(a_ptr, b_ptr, a_desc, b_desc, pid_m, pid_n, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                      BLOCK_M, BLOCK_N, BLOCK_K, EVEN_M, EVEN_N, EVEN_K, INPUT_PRECISION, UPCAST, TMA)
    store_tile(c_ptr, acc, pid_m, pid_n, M, N, stride_cm, stride_cn, BLOCK_M, BLOCK_N, EVEN_M, EVEN_N)


@triton.jit
def gemm_tile(a_ptr, b_ptr, c_ptr, a_desc, b_desc, b_narrow_desc, pid_m, pid_n, narrow, M, N, K, stride_am, stride_ak,
              stride_bk, stride_bn, stride_cm, stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
              BLOCK_K: tl.constexpr, NARROW_N: tl.constexpr, EVEN_M: tl.constexpr, EVEN_N: tl.constexpr,
              EVEN_NARROW_N: tl.constexpr, EVEN_K: tl.constexpr, INPUT_PRECISION: tl.constexpr,
              UPCAST: tl.constexpr, TMA: tl.constexpr):
    """Compute and store tile (pid_m, pid_n): ``BLOCK_N`` wide, or ``NARROW_N`` wide when
    ``narrow`` is set (``NARROW_N == 0``: the kernel has no narrow tiles). With ``TMA`` the
    operands come through ``a_desc`` and ``b_desc`` (``b_narrow_desc`` for narrow tiles);
    without, those are None."""
    if NARROW_N > 0:
        if narrow != 0:
            _tile(a_ptr, b_ptr, c_ptr, a_desc, b_narrow_desc, pid_m, pid_n, M, N, K, stride_am, stride_ak, stride_bk,
                  stride_bn, stride_cm, stride_cn, BLOCK_M, NARROW_N, BLOCK_K, EVEN_M, EVEN_NARROW_N, EVEN_K,
                  INPUT_PRECISION, UPCAST, TMA)
        else:
            _tile(a_ptr, b_ptr, c_ptr, a_desc, b_desc, pid_m, pid_n, M, N, K, stride_am, stride_ak, stride_bk,
                  stride_bn, stride_cm, stride_cn, BLOCK_M, BLOCK_N, BLOCK_K, EVEN_M, EVEN_N, EVEN_K,
                  INPUT_PRECISION, UPCAST, TMA)
    else:
        _tile(a_ptr, b_ptr, c_ptr, a_desc, b_desc, pid_m, pid_n, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
              stride_cm, stride_cn, BLOCK_M, BLOCK_N, BLOCK_K, EVEN_M, EVEN_N, EVEN_K, INPUT_PRECISION, UPCAST, TMA)


# -- split-K units: one tile's K range cut into slices that run on different programs --------
@triton.jit
def split_bounds(split, splits, K, BLOCK_K: tl.constexpr):
    """``(k_lo, k_hi)`` of slice ``split`` of ``splits``: whole ``BLOCK_K`` steps, as even as possible."""
    per = tl.cdiv(tl.cdiv(K, BLOCK_K), splits) * BLOCK_K
    k_lo = split * per
    k_hi = tl.minimum(K, k_lo + per)
    return k_lo, k_hi


SUM_ROWS = 16
"""Rows of a split tile the last slice sums at a time (a 16 x 256 fp32 block is 16 registers a thread at
8 warps: the accumulator is dead by then, so the sum adds no register pressure to the K loop)."""

_SUM_ROWS = tl.constexpr(SUM_ROWS)


@triton.jit
def publish_partial(acc, part_ptr, count_ptr, slot, part_base, split, splits, BLOCK_M: tl.constexpr,
                    BLOCK_N: tl.constexpr, PART_STRIDE: tl.constexpr):
    """Store this slice's fp32 partial at row ``part_base + split`` of ``part_ptr`` (``PART_STRIDE``
    floats apart) and count it on the tile's counter ``count_ptr[slot]`` (acq_rel). Returns True
    for the slice that arrives last: every other partial is stored by then. Nobody waits, so
    the slices of one tile may run in any order on any programs."""
    offs = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    tl.store(part_ptr + (part_base + split) * PART_STRIDE + offs, acc)
    tl.debug_barrier()
    before = tl.atomic_add(count_ptr + slot, 1, sem="acq_rel", scope="gpu")
    return before == splits - 1


@triton.jit
def store_partials_sum(c_ptr, part_ptr, count_ptr, slot, part_base, splits, pid_m, pid_n, M, N, stride_cm,
                       stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, EVEN_M: tl.constexpr,
                       EVEN_N: tl.constexpr, PART_STRIDE: tl.constexpr):
    """The last slice: sum the tile's ``splits`` partials ``SUM_ROWS`` rows at a time, loaded past
    L1 (``.cg``), store the rounded sum into C and zero the tile's counter for the next launch."""
    tl.debug_barrier()
    cols = tl.arange(0, BLOCK_N)
    offs_n = pid_n * BLOCK_N + cols
    for r in range(0, BLOCK_M // _SUM_ROWS):
        rows = r * _SUM_ROWS + tl.arange(0, _SUM_ROWS)
        offs = rows[:, None] * BLOCK_N + cols[None, :]
        total = tl.zeros((_SUM_ROWS, BLOCK_N), dtype=tl.float32)
        for j in range(0, splits):
            total += tl.load(part_ptr + (part_base + j) * PART_STRIDE + offs, cache_modifier=".cg")
        store_block(c_ptr, total, pid_m * BLOCK_M + rows, offs_n, M, N, stride_cm, stride_cn, EVEN_M, EVEN_N)
    tl.atomic_xchg(count_ptr + slot, 0, sem="relaxed", scope="gpu")


@triton.jit
def _split_tile(a_ptr, b_ptr, c_ptr, a_desc, b_desc, pid_m, pid_n, split, splits, slot, part_base, part_ptr,
                count_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_M: tl.constexpr,
                EVEN_N: tl.constexpr, EVEN_K: tl.constexpr, INPUT_PRECISION: tl.constexpr, UPCAST: tl.constexpr,
                TMA: tl.constexpr, PART_STRIDE: tl.constexpr):
    k_lo, k_hi = split_bounds(split, splits, K, BLOCK_K)
    acc = _accumulate(a_ptr, b_ptr, a_desc, b_desc, pid_m, pid_n, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                      BLOCK_M, BLOCK_N, BLOCK_K, EVEN_M, EVEN_N, EVEN_K, INPUT_PRECISION, UPCAST, TMA, k_lo, k_hi)
    done = splits <= 1
    if splits > 1:
        done = publish_partial(acc, part_ptr, count_ptr, slot, part_base, split, splits, BLOCK_M, BLOCK_N,
                               PART_STRIDE)
        if done:
            store_partials_sum(c_ptr, part_ptr, count_ptr, slot, part_base, splits, pid_m, pid_n, M, N, stride_cm,
                               stride_cn, BLOCK_M, BLOCK_N, EVEN_M, EVEN_N, PART_STRIDE)
    else:
        store_tile(c_ptr, acc, pid_m, pid_n, M, N, stride_cm, stride_cn, BLOCK_M, BLOCK_N, EVEN_M, EVEN_N)
    return done


@triton.jit
def gemm_split_tile(a_ptr, b_ptr, c_ptr, a_desc, b_desc, b_narrow_desc, pid_m, pid_n, narrow, split_ptr, part_ptr,
                    count_ptr, t, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, NARROW_N: tl.constexpr,
                    EVEN_M: tl.constexpr, EVEN_N: tl.constexpr, EVEN_NARROW_N: tl.constexpr, EVEN_K: tl.constexpr,
                    INPUT_PRECISION: tl.constexpr, UPCAST: tl.constexpr, TMA: tl.constexpr,
                    PART_STRIDE: tl.constexpr):
    """``gemm_tile`` for a table entry that may be one K slice of its tile: the split table
    (``SPLIT_COLUMNS`` ints per entry: slice, slices, tile slot, first partial row) says which.
    Returns True where the tile is complete and stored (an unsplit tile, or its last slice)."""
    split = tl.load(split_ptr + _SPLIT_COLS * t)
    splits = tl.load(split_ptr + _SPLIT_COLS * t + 1)
    slot = tl.load(split_ptr + _SPLIT_COLS * t + 2)
    part_base = tl.load(split_ptr + _SPLIT_COLS * t + 3)
    if NARROW_N > 0:
        if narrow != 0:
            done = _split_tile(a_ptr, b_ptr, c_ptr, a_desc, b_narrow_desc, pid_m, pid_n, split, splits, slot,
                               part_base, part_ptr, count_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                               stride_cm, stride_cn, BLOCK_M, NARROW_N, BLOCK_K, EVEN_M, EVEN_NARROW_N, EVEN_K,
                               INPUT_PRECISION, UPCAST, TMA, PART_STRIDE)
        else:
            done = _split_tile(a_ptr, b_ptr, c_ptr, a_desc, b_desc, pid_m, pid_n, split, splits, slot, part_base,
                               part_ptr, count_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm,
                               stride_cn, BLOCK_M, BLOCK_N, BLOCK_K, EVEN_M, EVEN_N, EVEN_K, INPUT_PRECISION, UPCAST,
                               TMA, PART_STRIDE)
    else:
        done = _split_tile(a_ptr, b_ptr, c_ptr, a_desc, b_desc, pid_m, pid_n, split, splits, slot, part_base,
                           part_ptr, count_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm,
                           stride_cn, BLOCK_M, BLOCK_N, BLOCK_K, EVEN_M, EVEN_N, EVEN_K, INPUT_PRECISION, UPCAST,
                           TMA, PART_STRIDE)
    return done
