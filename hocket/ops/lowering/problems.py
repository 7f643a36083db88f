"""The canonical 2-D form of each operator that every executor works on.

All-gather + matmul along any dim but the last is a gather of contiguous row blocks
(``[R, K]`` per rank, ``[world*R, K]`` gathered, rank-major); along the last dim it
gathers K (``[R, Kc]`` per rank, ``[R, world*Kc]`` gathered). Matmul + reduce-scatter
along any dim but the last sends row block ``b`` of ``A @ B`` to rank ``b``; along the
last dim it sends column block ``b``. Executors produce the canonical outputs and
:meth:`finish` restores the caller's layout (a view for dim 0 / the last dim, one copy
otherwise). Outputs are fresh tensors, never context buffers or views of inputs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from hocket.ops._layout import from_rows_first, gathered_shape, rows_first

LOW_PRECISION = (torch.bfloat16, torch.float16)


class GatherMatmul:
    """``all_gather(A_shard, dim) @ B`` for each B, in canonical form."""

    def __init__(self, A_shard: torch.Tensor, Bs: Sequence[torch.Tensor], dim: int, world: int, rank: int,
                 *, need_A: bool) -> None:
        self.shape = tuple(A_shard.shape)
        self.dim, self.world, self.rank = dim, world, rank
        self.k_gather = dim == A_shard.dim() - 1
        self.Bs = list(Bs)
        self.local = rows_first(A_shard, 0 if self.k_gather else dim)
        self.R, self.Kc = self.local.shape
        self.full_shape = gathered_shape(self.shape, dim, world)
        w, R, Kc = world, self.R, self.Kc
        empty = A_shard.new_empty
        self.A_c = (empty((R, w * Kc)) if self.k_gather else empty((w * R, Kc))) if need_A else None
        rows = R if self.k_gather else w * R
        self.outs_c = [empty((rows, B.shape[1])) for B in self.Bs]

    # -- gathering rows (dim != last) ----------------------------------------------------
    def gathered_rows(self, src: int) -> torch.Tensor:
        """Rows of ``A_c`` that hold rank ``src``'s shard (row gather, ``A_c`` allocated)."""
        return self.A_c[src * self.R:(src + 1) * self.R]

    def compute_rows(self, src: int, lo: int, hi: int, blk: torch.Tensor) -> None:
        """Outputs for rows ``lo:hi`` of rank ``src``'s shard, given those rows ``blk``."""
        base = src * self.R
        for B, out in zip(self.Bs, self.outs_c):
            torch.mm(blk, B, out=out[base + lo:base + hi])

    # -- gathering K (dim == last) -------------------------------------------------------
    def compute_full_rows(self, lo: int, hi: int, a_rows: torch.Tensor) -> None:
        """Outputs for rows ``lo:hi`` given those rows of the gathered A (``[hi-lo, world*Kc]``)."""
        for B, out in zip(self.Bs, self.outs_c):
            torch.mm(a_rows, B, out=out[lo:hi])

    def k_block(self, B: torch.Tensor, src: int) -> torch.Tensor:
        return B[src * self.Kc:(src + 1) * self.Kc]

    # -- back to the caller's layout -----------------------------------------------------
    def finish(self) -> tuple[torch.Tensor | None, list[torch.Tensor]]:
        if self.k_gather:
            lead = list(self.shape[:-1])
            A = self.A_c.view(self.full_shape) if self.A_c is not None else None
            return A, [out.view(*lead, out.shape[1]) for out in self.outs_c]
        A = from_rows_first(self.A_c, self.full_shape, self.dim) if self.A_c is not None else None
        outs = [from_rows_first(out, [*self.full_shape[:-1], out.shape[1]], self.dim) for out in self.outs_c]
        return A, outs


class ScatterMatmul:
    """``reduce_scatter(A @ B, dim)`` in canonical form: destination blocks of ``rows x cols``."""

    def __init__(self, A: torch.Tensor, B: torch.Tensor, dim: int, world: int) -> None:
        self.world, self.dim = world, dim
        self.n_scatter = dim == A.dim() - 1
        self.out_shape = [*A.shape[:-1], B.shape[1]]
        self.out_shape[dim] //= world
        self.A_c = rows_first(A, 0 if self.n_scatter else dim)
        self.B = B
        R = self.A_c.shape[0]
        if self.n_scatter:
            self.rows, self.cols = R, B.shape[1] // world
        else:
            self.rows, self.cols = R // world, B.shape[1]
        self.out_c = A.new_empty((self.rows, self.cols))

    def partial(self, b: int, lo: int, hi: int, out: torch.Tensor) -> None:
        """This rank's partial of destination block ``b``, rows ``lo:hi``, written into ``out``."""
        if self.n_scatter:
            torch.mm(self.A_c[lo:hi], self.B[:, b * self.cols:(b + 1) * self.cols], out=out)
        else:
            base = b * self.rows
            torch.mm(self.A_c[base + lo:base + hi], self.B, out=out)

    def accumulate(self, b: int, lo: int, hi: int, out: torch.Tensor) -> None:
        """``out += `` this rank's partial of destination block ``b``, rows ``lo:hi``, in the GEMM's
        epilogue (``addmm_``, beta = 1: no separate pass over ``out``)."""
        if self.n_scatter:
            out.addmm_(self.A_c[lo:hi], self.B[:, b * self.cols:(b + 1) * self.cols])
        else:
            base = b * self.rows
            out.addmm_(self.A_c[base + lo:base + hi], self.B)

    @property
    def k(self) -> int:
        """The GEMM's inner dimension."""
        return self.A_c.shape[1]

    def finish(self, reduce_op: str) -> torch.Tensor:
        if reduce_op == "avg":
            self.out_c.div_(self.world)
        if self.n_scatter:
            return self.out_c.view(self.out_shape)
        return from_rows_first(self.out_c, self.out_shape, self.dim)


class AllReduceMatmul:
    """``all_reduce(A @ B)`` in canonical form: ``[R, n]`` rows."""

    def __init__(self, A: torch.Tensor, B: torch.Tensor, world: int) -> None:
        self.world = world
        self.out_shape = [*A.shape[:-1], B.shape[1]]
        self.A_c = A.reshape(math.prod(A.shape[:-1]), A.shape[-1]).contiguous()
        self.B = B
        self.rows, self.cols = self.A_c.shape[0], B.shape[1]
        self.out_c = A.new_empty((self.rows, self.cols))

    def partial(self, lo: int, hi: int, out: torch.Tensor) -> None:
        torch.mm(self.A_c[lo:hi], self.B, out=out)

    def finish(self, reduce_op: str) -> torch.Tensor:
        if reduce_op == "avg":
            self.out_c.div_(self.world)
        return self.out_c.view(self.out_shape)
