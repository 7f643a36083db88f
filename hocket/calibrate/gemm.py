"""GEMM throughput over a shape grid, whole and split into row chunks."""

from __future__ import annotations

from collections.abc import Callable

import torch

from hocket.hardware.profile import GemmPoint


def torch_dtype(name: str) -> torch.dtype:
    return getattr(torch, name)


def gemm_call(m: int, k: int, n: int, *, dtype: str, device: torch.device, chunks: int = 1) -> Callable[[], None]:
    """``out = A @ B`` for fresh random A[m,k], B[k,n], as ``chunks`` row-chunk GEMMs."""
    if chunks < 1 or chunks > m:
        raise ValueError(f"chunks={chunks} must be in 1..m={m} (rows per chunk >= 1)")
    dt = torch_dtype(dtype)
    a = torch.randn(m, k, device=device).to(dt)
    b = torch.randn(k, n, device=device).to(dt)
    return row_chunked_mm(a, b, torch.empty(m, n, device=device, dtype=dt), chunks=chunks)


def row_chunked_mm(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, *, chunks: int) -> Callable[[], None]:
    """A callable writing ``a @ b`` into ``out`` as ``chunks`` GEMMs over row blocks of ``a``."""
    m = a.shape[0]
    bounds = [(i * m) // chunks for i in range(chunks + 1)]
    pieces = [(a[lo:hi], out[lo:hi]) for lo, hi in zip(bounds, bounds[1:])]

    def run() -> None:
        for a_rows, out_rows in pieces:
            torch.mm(a_rows, b, out=out_rows)

    return run


def gemm_point(m: int, k: int, n: int, *, dtype: str, chunks: int, total_ms: float) -> GemmPoint:
    """The point of one row chunk: (m/chunks, k, n) at the measured per-chunk time."""
    rows = m // chunks
    ms = total_ms / chunks
    return GemmPoint(m=rows, k=k, n=n, dtype=dtype, tflops=2.0 * rows * k * n / (ms * 1e9), ms=ms)
