"""Split-K GEMM in Triton: a short product spread over every SM, summed in fp32.

An offload pipeline's exposed edge is a GEMM with few output tiles and a long k: the first
rows to host (their copy waits for them) and the last rows from host (nothing hides their
GEMM). A library GEMM gives such a piece a handful of full-k tiles, one SM each; the rest of
the GPU idles while the copy waits (128 x 8192 x 7168 bf16: 0.035 ms on an H200, where its
operands take ~0.025 ms to read). Here every (tile, k slice) pair is one program: a grid of
``tiles x splits`` programs, each adding its fp32 partial into a zeroed fp32 accumulator with
atomic adds; :func:`finish` rounds the accumulator into the output and zeroes it again for the
next call (one pass: the accumulator is zero between calls, no separate clear).

:func:`accumulate` may run several times into one accumulator before :func:`finish`: from host,
the last rows arrive a block of k at a time and each block's partial product is added as it lands.

:func:`split_count` is the rule (plain Python): the smallest number of k slices that fills the
SMs, each slice at least ``MIN_SLICE_K`` long and a multiple of the block's k.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from hocket.kernels.gemm_tile import tile_accumulate

BLOCK_M, BLOCK_N, BLOCK_K = 128, 128, 64
"""The programs' tile: 128x128 output, 64-deep k steps (4 warps, 4 stages)."""
MIN_SLICE_K = 256
"""A k slice shorter than this spends more on its tile's prologue and atomic adds than it saves."""
MAX_SPLITS = 16


def split_count(m: int, n: int, k: int, sm_count: int, *, block_m: int = BLOCK_M, block_n: int = BLOCK_N,
                block_k: int = BLOCK_K) -> int:
    """k slices for a ``[m, k] @ [k, n]`` product: enough that ``tiles * splits`` programs cover
    ``sm_count`` SMs, each slice a multiple of ``block_k`` and at least ``MIN_SLICE_K`` long."""
    for name, value in (("m", m), ("n", n), ("k", k), ("sm_count", sm_count)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}={value!r} must be a positive int")
    tiles = -(-m // block_m) * -(-n // block_n)
    want = max(1, -(-sm_count // tiles))
    most = max(1, k // max(MIN_SLICE_K, block_k))
    return max(1, min(want, most, MAX_SPLITS))


def slice_k(k: int, splits: int, block_k: int = BLOCK_K) -> int:
    """Length of each k slice (the last may be shorter): ``k / splits`` rounded up to ``block_k``."""
    return -(-(-(-k // splits)) // block_k) * block_k


@triton.jit
def _accumulate_kernel(a_ptr, b_ptr, acc_ptr, M, N, K, SLICE_K, stride_am, stride_ak, stride_bk, stride_bn,
                       stride_cm, stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                       BLOCK_K: tl.constexpr, EVEN_M: tl.constexpr, EVEN_N: tl.constexpr, EVEN_K: tl.constexpr,
                       INPUT_PRECISION: tl.constexpr, UPCAST: tl.constexpr):
    tile = tl.program_id(0)
    part = tl.program_id(1)
    tiles_n = tl.cdiv(N, BLOCK_N)
    pid_m = tile // tiles_n
    pid_n = tile % tiles_n
    k0 = part * SLICE_K
    k_len = tl.minimum(SLICE_K, K - k0)
    acc = tile_accumulate(a_ptr + k0 * stride_ak, b_ptr + k0 * stride_bk, pid_m, pid_n, M, N, k_len, stride_am,
                          stride_ak, stride_bk, stride_bn, BLOCK_M, BLOCK_N, BLOCK_K, EVEN_M, EVEN_N, EVEN_K,
                          INPUT_PRECISION, UPCAST)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ptrs = acc_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.atomic_add(ptrs, acc, mask=(offs_m[:, None] < M) & (offs_n[None, :] < N), sem="relaxed")


@triton.jit
def _finish_kernel(acc_ptr, out_ptr, M, N, stride_am, stride_an, stride_om, stride_on,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    a_ptrs = acc_ptr + offs_m[:, None] * stride_am + offs_n[None, :] * stride_an
    value = tl.load(a_ptrs, mask=mask, other=0.0)
    tl.store(out_ptr + offs_m[:, None] * stride_om + offs_n[None, :] * stride_on,
             value.to(out_ptr.dtype.element_ty), mask=mask)
    tl.store(a_ptrs, tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32), mask=mask)


def _interpreted() -> bool:
    import os

    return os.environ.get("TRITON_INTERPRET", "") == "1"


def _check(a: torch.Tensor, b: torch.Tensor, acc: torch.Tensor) -> None:
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"a {tuple(a.shape)} and b {tuple(b.shape)} must be [m, k] and [k, n]")
    if acc.dtype != torch.float32 or tuple(acc.shape) != (a.shape[0], b.shape[1]):
        raise ValueError(f"acc is {tuple(acc.shape)} {acc.dtype}; it must be [{a.shape[0]}, {b.shape[1]}] "
                         f"float32 (zeroed before the first accumulate)")
    if a.dtype != b.dtype or a.dtype not in (torch.bfloat16, torch.float16, torch.float32):
        raise ValueError(f"a is {a.dtype} and b is {b.dtype}; both must be one of bfloat16, float16, float32")
    if not (a.device == b.device == acc.device):
        raise ValueError(f"a on {a.device}, b on {b.device}, acc on {acc.device}: put them on one device")


def accumulate(a: torch.Tensor, b: torch.Tensor, acc: torch.Tensor, *, splits: int) -> None:
    """``acc += a @ b`` in fp32, ``k`` cut into ``splits`` slices (one program per tile and slice).

    ``acc``: fp32 ``[m, n]``, zero before the first accumulate of a product (as :func:`finish` leaves it).
    Slices are added in no fixed order: the sum equals ``a @ b`` to fp32 rounding.
    """
    _check(a, b, acc)
    if isinstance(splits, bool) or not isinstance(splits, int) or splits < 1:
        raise ValueError(f"splits={splits!r} must be an int >= 1")
    m, k = a.shape
    n = b.shape[1]
    if m == 0 or n == 0 or k == 0:
        return
    slice_len = slice_k(k, splits)
    parts = -(-k // slice_len)
    grid = (-(-m // BLOCK_M) * -(-n // BLOCK_N), parts)
    interp = _interpreted()
    _accumulate_kernel[grid](
        a, b, acc, m, n, k, slice_len, a.stride(0), a.stride(1), b.stride(0), b.stride(1), acc.stride(0),
        acc.stride(1), BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, EVEN_M=m % BLOCK_M == 0,
        EVEN_N=n % BLOCK_N == 0, EVEN_K=k % slice_len == 0 and slice_len % BLOCK_K == 0,
        INPUT_PRECISION="tf32" if a.dtype == torch.float32 and torch.backends.cuda.matmul.allow_tf32 else "ieee",
        UPCAST=interp and a.dtype != torch.float32, num_warps=4, num_stages=4)


def finish(acc: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """``out = acc`` rounded to ``out``'s dtype (a view is fine), and ``acc`` zeroed for the next product."""
    if acc.dtype != torch.float32 or acc.dim() != 2 or tuple(out.shape) != tuple(acc.shape):
        raise ValueError(f"acc {tuple(acc.shape)} {acc.dtype} and out {tuple(out.shape)}: acc must be float32 "
                         f"and both the same [m, n]")
    if acc.device != out.device:
        raise ValueError(f"acc on {acc.device} but out on {out.device}")
    m, n = acc.shape
    if m and n:
        grid = (-(-m // 64), -(-n // 128))
        _finish_kernel[grid](acc, out, m, n, acc.stride(0), acc.stride(1), out.stride(0), out.stride(1),
                             BLOCK_M=64, BLOCK_N=128, num_warps=4)
    return out


def split_k_gemm(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, acc: torch.Tensor, *,
                 splits: int) -> torch.Tensor:
    """``out = a @ b`` through ``acc`` (fp32 ``[m, n]``, zero; left zero): :func:`accumulate` then :func:`finish`."""
    accumulate(a, b, acc, splits=splits)
    return finish(acc, out)
