"""Probe: stream-level offload pipelines with ramped pieces against the tile-fused kernels (one GPU).

A copy-bound offload (the PCIe copy is ~2x the GEMM on issue 5's large shapes) loses only
its fill (to host: until the first piece can be copied) and drain (from host: the GEMM of
the last piece), plus a few microseconds per piece. A library GEMM of a small first piece
uses the whole GPU (split-K / small tiles) where the tile-fused kernel's first group still
waits for one full-K tile, so a ``chunked`` pipeline whose pieces grow geometrically from
one row block (``plan.split_sizes``) may start the copy sooner. This probe measures, medians
of ``--iters`` CUDA-event-timed calls, every output checked first against ``torch.mm``:

* the library GEMM alone on row pieces of 128..1024 rows (what the fill costs);
* a copy whole and in 8 / 16 even pieces back to back (what each piece costs);
* ``chunked`` with ramped pieces (``hocket.kernels.schedule.ramp_row_offsets``) in both
  directions, beside even ``chunked(16)``, ``tile_fused(8)`` and sequential.

    python3 benchmarks/probe_offload_pieces.py --out $OUT/probe_offload_pieces.jsonl
"""

from __future__ import annotations

import torch

from probe_common import Rows, efficiency, operands, probe_args, run_probe  # the probes' timing, check and table

SHAPES = ((8192, 8192, 7168), (8192, 3584, 8192), (8192, 8192, 1280), (4096, 12288, 6144))
RAMPS = (6, 8, 10, 12, 16)
PIECE_ROWS = (128, 256, 512, 1024)


def _sizes(offsets) -> tuple[int, ...]:
    return tuple(b - a for a, b in zip(offsets, offsets[1:]))


def probe_shape(m: int, k: int, n: int, *, iters: int) -> list[dict]:
    from hocket.kernels.schedule import even_row_offsets, ramp_row_offsets
    from hocket.ops.offload import OffloadContext, matmul_from_host, matmul_to_host
    from hocket.ops.split_k import split_k_mm, split_k_parts
    from hocket.core.plan import Plan

    ops = operands(m, k, n)
    dev, A, B, ref = ops.dev, ops.A, ops.B, ops.ref
    c_dev, c_host, a_host, a_dev = ops.c_dev, ops.c_host, ops.a_host, ops.a_dev
    ctx = OffloadContext(dev)
    side = torch.cuda.Stream(dev)
    out = Rows(m, k, n, iters=iters, ref=ref, poison=(c_host, c_dev))
    add = out.add

    add("gemm", "mm", lambda: torch.mm(A, B, out=c_dev), check=lambda: c_dev)
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    for r in PIECE_ROWS:
        add("gemm", f"mm rows={r}", lambda r=r: torch.mm(A[:r], B, out=c_dev[:r]), extra={"rows": r})
        parts = split_k_parts(r, n, k, sms)
        if parts > 1:
            add("gemm", f"split-k({parts}) rows={r}", lambda r=r, p=parts: split_k_mm(A[:r], B, c_dev[:r], p),
                extra={"rows": r, "parts": parts})

    def copies(dst, src, pieces: int):
        offsets = even_row_offsets(m, pieces, align=128)
        with torch.cuda.stream(side):
            side.wait_stream(torch.cuda.current_stream())
            for a, b in zip(offsets, offsets[1:]):
                dst[a:b].copy_(src[a:b], non_blocking=True)
        torch.cuda.current_stream().wait_stream(side)

    for pieces in (1, 8, 16):
        add("to_host", f"copy pieces={pieces}", lambda p=pieces: copies(c_host, c_dev, p), extra={"pieces": pieces})
        add("from_host", f"copy pieces={pieces}", lambda p=pieces: copies(a_dev, a_host, p), extra={"pieces": pieces})

    add("to_host", "sequential", lambda: (torch.mm(A, B, out=c_dev), c_host.copy_(c_dev, non_blocking=True)),
        check=lambda: c_host)
    add("from_host", "sequential", lambda: (a_dev.copy_(a_host, non_blocking=True), torch.mm(a_dev, B, out=c_dev)),
        check=lambda: c_dev)
    plans = [("tile_fused(8)", Plan(strategy="tile_fused", chunks=8, transport="host_staged"), None),
             ("chunked(16) even", Plan(strategy="chunked", chunks=16, transport="host_staged"), None)]
    for c in RAMPS:
        up = _sizes(ramp_row_offsets(m, c, align=128))
        plans.append((f"chunked ramp({len(up)})", None, up))
    for label, plan, up in plans:
        to_plan = plan or Plan(strategy="chunked", chunks=len(up), split_sizes=up, transport="host_staged")
        from_plan = plan or Plan(strategy="chunked", chunks=len(up), split_sizes=tuple(reversed(up)),
                                 transport="host_staged")
        extra = {"split_sizes": list(up)} if up else {}
        add("to_host", label, lambda p=to_plan: matmul_to_host(A, B, out=c_host, plan=p, context=ctx,
                                                              non_blocking=True), check=lambda: c_host, extra=extra)
        add("from_host", label, lambda p=from_plan: matmul_from_host(a_host, B, out=c_dev, plan=p, context=ctx),
            check=lambda: c_dev, extra=extra)
    ctx.close()
    return out.rows


def _eff(rows: list[dict], r: dict) -> str:
    return efficiency(rows, r, copy_variant="copy pieces=1")


def main(argv: list[str] | None = None) -> int:
    args = probe_args(__doc__, SHAPES, iters=30).parse_args(argv)
    return run_probe("probe_offload_pieces", args, probe_shape, width=26, eff=_eff)


if __name__ == "__main__":
    raise SystemExit(main())
