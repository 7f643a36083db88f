"""Probe: offload pipelines whose exposed edge is cut into 2D blocks (one GPU, copy engines).

A ramped row pipeline (``chunked`` with ``split_sizes`` growing from one 128-row block) still
loses its edge: to host, the first copy waits for the first rows' GEMM, which reads all of B
(128 x 8192 x 7168 bf16: 0.035-0.054 ms); from host, the last rows' GEMM runs after their copy.
Cut at the edge into column blocks (to host: the first rows are produced a block of output
columns at a time, each block reading only its slice of B, copied with one strided DMA,
``hocket.transport.copy_2d``) or k blocks (from host: the last rows arrive a block of A's
columns at a time, each partial product is added into an fp32 accumulator as it lands), the
exposed GEMM shrinks to one block's. This probe measures, against the ramp pipeline of the same
process (same schedule code, only the edge differs), medians of ``--iters`` CUDA-event-timed
calls, every output checked against ``torch.mm`` first (NaN poison).

    python3 benchmarks/probe_edge_blocks.py --out $OUT/probe_edge_blocks.jsonl
"""

from __future__ import annotations

import torch

from probe_common import Rows, efficiency, operands, probe_args, run_probe  # the probes' timing, check and table

SHAPES = ((8192, 8192, 7168), (8192, 3584, 8192))
RAMPS = (6, 8, 10)
EDGE_ROWS = (128, 256)
EDGE_BLOCKS = (2, 4, 7)


def _even(total: int, parts: int, align: int = 64) -> list[tuple[int, int]]:
    """``parts`` ranges covering ``[0, total)``, boundaries on ``align`` where possible."""
    cuts = [0] + [min(total, round(total * i / parts / align) * align) for i in range(1, parts)] + [total]
    return [(a, b) for a, b in zip(cuts, cuts[1:]) if b > a]


def _row_pieces(start: int, stop: int, ramp: int, *, reverse: bool) -> list[tuple[int, int]]:
    from hocket.core.pieces import ramp_row_offsets

    offs = ramp_row_offsets(stop - start, ramp, align=128, reverse=reverse)
    return [(start + a, start + b) for a, b in zip(offs, offs[1:])]


class Pipelines:
    """The two directions over one shape, with a side copy stream and per-block staging.

    The exposed GEMMs run in the library (``torch.mm``; k blocks: fp32-output ``torch.mm`` added
    into an fp32 accumulator). A Triton split-K kernel for them (commit c5f872f, results
    ``h200/run20_splitk``) was 2.5-3x slower per piece than the library and was removed.
    """

    def __init__(self, m: int, k: int, n: int) -> None:
        ops = operands(m, k, n)
        self.dev, self.A, self.B, self.ref = ops.dev, ops.A, ops.B, ops.ref
        self.c_dev, self.c_host, self.a_host, self.a_dev = ops.c_dev, ops.c_host, ops.a_host, ops.a_dev
        dt = torch.bfloat16
        self.stage = torch.empty(max(EDGE_ROWS) * max(n, k) * 2, device=self.dev, dtype=dt)
        self.acc = torch.empty(max(EDGE_ROWS) * n, device=self.dev, dtype=torch.float32)
        self.copy = torch.cuda.Stream(self.dev)
        self.m, self.k, self.n = m, k, n

    def _stage(self, offset: int, rows: int, cols: int) -> torch.Tensor:
        return self.stage[offset:offset + rows * cols].view(rows, cols)

    def _acc(self, rows: int, cols: int) -> torch.Tensor:
        return self.acc[:rows * cols].view(rows, cols)

    def to_host(self, edge_rows: int, blocks: int, ramp: int) -> None:
        """First ``edge_rows`` rows in ``blocks`` column blocks (0: a row piece of the ramp), the rest a ramp."""
        from hocket.transport.copy_2d import copy_2d_async

        cur = torch.cuda.current_stream()
        self.copy.wait_stream(cur)
        start, offset = 0, 0
        if blocks:
            for c0, c1 in _even(self.n, blocks):
                st = self._stage(offset, edge_rows, c1 - c0)
                offset += st.numel()
                torch.mm(self.A[:edge_rows], self.B[:, c0:c1], out=st)
                self.copy.wait_stream(cur)
                copy_2d_async(self.c_host[:edge_rows, c0:c1], st, self.copy)
            start = edge_rows
        for r0, r1 in _row_pieces(start, self.m, ramp, reverse=False):
            torch.mm(self.A[r0:r1], self.B, out=self.c_dev[r0:r1])
            self.copy.wait_stream(cur)
            with torch.cuda.stream(self.copy):
                self.c_host[r0:r1].copy_(self.c_dev[r0:r1], non_blocking=True)
        cur.wait_stream(self.copy)

    def from_host(self, edge_rows: int, blocks: int, ramp: int) -> None:
        """Last ``edge_rows`` rows in ``blocks`` k blocks (0: the ramp's last row piece), before them a
        reversed ramp."""
        from hocket.transport.copy_2d import copy_2d_async

        cur = torch.cuda.current_stream()
        self.copy.wait_stream(cur)
        stop = self.m - edge_rows if blocks else self.m
        for r0, r1 in _row_pieces(0, stop, ramp, reverse=True):
            with torch.cuda.stream(self.copy):
                self.a_dev[r0:r1].copy_(self.a_host[r0:r1], non_blocking=True)
            cur.wait_stream(self.copy)
            torch.mm(self.a_dev[r0:r1], self.B, out=self.c_dev[r0:r1])
        if blocks:
            acc = self._acc(edge_rows, self.n)
            offset = 0
            for i, (k0, k1) in enumerate(_even(self.k, blocks)):
                st = self._stage(offset, edge_rows, k1 - k0)
                offset += st.numel()
                copy_2d_async(st, self.a_host[stop:, k0:k1], self.copy)
                cur.wait_stream(self.copy)
                part = torch.mm(st, self.B[k0:k1], out_dtype=torch.float32)
                acc.copy_(part) if i == 0 else acc.add_(part)
            self.c_dev[stop:].copy_(acc)


def probe_shape(m: int, k: int, n: int, *, iters: int) -> list[dict]:
    p = Pipelines(m, k, n)
    out = Rows(m, k, n, iters=iters, ref=p.ref, poison=(p.c_host, p.c_dev), width=34)
    add = out.add
    A, B = p.A, p.B
    add("gemm", "mm", lambda: torch.mm(A, B, out=p.c_dev))
    for r in EDGE_ROWS:  # what the exposed edge costs: one block's GEMM
        for blocks in (1,) + EDGE_BLOCKS:
            (c0, c1), (k0, k1) = _even(n, blocks)[0], _even(k, blocks)[-1]
            st = p._stage(0, r, c1 - c0)
            add("gemm", f"mm rows={r} cols/{blocks}", lambda r=r, c1=c1, st=st: torch.mm(A[:r], B[:, :c1], out=st))
            if blocks > 1:
                a_blk = A[-r:, k0:k1].contiguous()
                add("gemm", f"mm rows={r} k/{blocks} fp32",
                    lambda a=a_blk, k0=k0, k1=k1: torch.mm(a, B[k0:k1], out_dtype=torch.float32))
    add("to_host", "copy", lambda: p.c_host.copy_(p.c_dev, non_blocking=True))
    add("from_host", "copy", lambda: p.a_dev.copy_(p.a_host, non_blocking=True))
    add("to_host", "sequential", lambda: (torch.mm(A, B, out=p.c_dev), p.c_host.copy_(p.c_dev, non_blocking=True)),
        check=lambda: p.c_host)
    add("from_host", "sequential", lambda: (p.a_dev.copy_(p.a_host, non_blocking=True),
                                            torch.mm(p.a_dev, B, out=p.c_dev)), check=lambda: p.c_dev)
    variants = [(0, 0)] + [(r, b) for r in EDGE_ROWS for b in EDGE_BLOCKS]
    for ramp in RAMPS:
        for r, b in variants:
            label = f"ramp({ramp})" + (f" edge {r}x{b}" if b else "")
            extra = {"ramp": ramp, "edge_rows": r, "edge_blocks": b}
            add("to_host", label, lambda r=r, b=b, ramp=ramp: p.to_host(r, b, ramp), check=lambda: p.c_host,
                extra=extra)
            add("from_host", label, lambda r=r, b=b, ramp=ramp: p.from_host(r, b, ramp), check=lambda: p.c_dev,
                extra=extra)
    return out.rows


def main(argv: list[str] | None = None) -> int:
    args = probe_args(__doc__, SHAPES, iters=50).parse_args(argv)
    return run_probe("probe_edge_blocks", args, probe_shape, width=34, eff=efficiency)


if __name__ == "__main__":
    raise SystemExit(main())
