"""An SM-driven device copy with a chosen number of programs (Triton).

Stands in for an SM-driven transport (NCCL's kernels) in contention calibration: a GEMM's
slowdown beside it, as a function of the programs (SMs) the copy occupies.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from hocket.kernels.config import FP_FUSION

COPY_BLOCK = 4096


@triton.jit
def sm_copy_kernel(src_ptr, dst_ptr, n_elements, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    num_programs = tl.num_programs(0)
    for start in range(pid * BLOCK, n_elements, num_programs * BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < n_elements
        tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=mask), mask=mask)


def sm_copy(src: torch.Tensor, dst: torch.Tensor, *, programs: int) -> None:
    """``dst.copy_(src)`` (same shape and dtype, contiguous) with exactly ``programs`` programs."""
    if src.shape != dst.shape or src.dtype != dst.dtype:
        raise ValueError(f"src {tuple(src.shape)} {src.dtype} and dst {tuple(dst.shape)} {dst.dtype} must match")
    if not (src.is_contiguous() and dst.is_contiguous()):
        raise ValueError("src and dst must be contiguous")
    if not isinstance(programs, int) or programs < 1:
        raise ValueError(f"programs={programs!r} must be an int >= 1")
    sm_copy_kernel[(programs,)](src, dst, src.numel(), BLOCK=COPY_BLOCK, num_warps=8, **FP_FUSION)
