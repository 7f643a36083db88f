"""Offload sites' host link: the copies of ``h2d_mm`` / ``mm_d2h`` as stages (one device and its host link).

Pieces of one DMA copy stream at the whole copy's measured rate (:func:`stream_piece`); the strategies'
cost builders (``hocket.strategies``: ``sequential``, ``chunked``, ``tile_fused``) call :func:`host_link`
for the copy of one piece of rows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from hocket.cost import comm as comm_model


@dataclass(frozen=True)
class HostLink:
    """The host link of one offload site: ``to_host`` (``mm_d2h`` copies C out, else ``h2d_mm`` copies A
    in), the stage op of its copies, and ``copy(i, rows, deps=(), queued=True) -> stage index``."""

    to_host: bool
    op: str
    copy: Callable[..., int]


def host_link(b) -> HostLink:
    """The copies of ``b``'s offload site (``b``: a :class:`hocket.cost.builder.StageBuilder`); the plan must
    use ``transport="host_staged"``."""
    site, plan = b.site, b.plan
    if plan.transport != "host_staged":
        raise ValueError(f"a {site.kind} site moves data over the host link: use transport='host_staged', "
                         f"not {plan.transport!r}")
    to_host = site.kind == "mm_d2h"
    m, total = site.m, site.comm_bytes
    op = "copy_d2h" if to_host else "copy_h2d"
    # pieces of one copy stream at the whole copy's measured rate (see stream_piece)
    whole = comm_model.host_copy(total, b.topo, calibration=b.calibration)
    fixed_ms = comm_model.host_copy(0.0, b.topo).ms

    def copy(i: int, rows: int, deps=(), queued: bool = True) -> int:
        nbytes = total * rows / m
        piece = stream_piece(comm_model.host_copy(nbytes, b.topo), whole, fixed_ms=fixed_ms, share=rows / m)
        return b.add_transfer(f"{op}[{i}]", piece, deps=deps, piece=i, op=op, nbytes=nbytes, queued=queued)

    return HostLink(to_host=to_host, op=op, copy=copy)


def row_pieces(b, pieces) -> None:
    """Row pieces of an offload site, copy and GEMM each, in the executor's issue order
    (``hocket.ops.offload``): to host, each piece's GEMM then its copy; from host, each piece's copy then
    its GEMM. From host the executor issues every copy first (``host_staged.h2d_chunks``), but a copy there
    waits on no event and costs the host less than the one item ``host_copy`` prices (a side-stream copy
    *with* its event wait): priced in that order, every calibration site's chunked(32) ran 27-49% faster
    than predicted (``hocket validate --all-points``), so the pieces stay interleaved until the issue table
    tells the two apart."""
    link = host_link(b)
    for i, rows in enumerate(pieces):
        if link.to_host:
            link.copy(i, rows, deps=(b.add_gemm(f"gemm[{i}]", rows, piece=i),))
        else:
            b.add_gemm(f"gemm[{i}]", rows, deps=(link.copy(i, rows),), piece=i)


def stream_piece(piece: comm_model.Transfer, whole: comm_model.Transfer, *, fixed_ms: float,
                 share: float) -> comm_model.Transfer:
    """A piece of one DMA copy, cut into ``share`` of its bytes: its fixed part (call, setup,
    latency: the model's time at 0 bytes) plus its share of the whole copy's size-dependent time.
    A calibrated curve point of a small copy was timed alone, from an idle link: it holds a
    ramp (DMA descriptor setup, PCIe credit and TLP pipelining) that copies queued back to back
    on one engine do not pay again, so pieces stream at the rate measured for the whole copy
    (1xH200 calibration sites: h2d_mm 8192x8192x7168 cut in 32 copies moves at the whole copy's
    48 GB/s, ending 0.15 ms after the whole copy would; priced at the 3.7 MiB curve point's
    40 GB/s it ended 0.5 ms later)."""
    variable_ms = max(0.0, whole.ms - fixed_ms) * share
    return replace(piece, ms=fixed_ms + variable_ms)
