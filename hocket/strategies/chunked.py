"""``chunked``: rows cut into ``plan.chunks`` pieces, piece i's transfer overlapping another piece's GEMMs
(:mod:`hocket.ops.lowering.peer_chunked`, :mod:`hocket.ops.lowering.chunked`).

Over a collective transport each shard's (ag_mm) or destination block's (mm_rs) rows are cut, even or
``plan.split_sizes`` (:func:`hocket.strategies.pieces.pipeline_pieces`, as the executors cut them); the
GEMMs run one per source or destination block (``p`` kernels of the piece's rows, each paying a launch
and the small-GEMM efficiency of the wave model); mm_ar pieces are plain row ranges. With
``order="local_first"`` the own-data-first pipelines run (:mod:`hocket.strategies.local_first`); over
``copy_engine`` on several ranks the peer protocols (:mod:`hocket.strategies.peer_pipelines`,
``Plan.protocol``). An offload site copies and multiplies row pieces on two streams.
"""

from __future__ import annotations

import math

from hocket.core.peer_protocol import BARRIER_PROTOCOLS, PROTOCOL_KINDS, plan_protocol, protocols_for
from hocket.cost import uneven as uneven_cost
from hocket.cost.offload import row_pieces
from hocket.strategies.local_first import ag_local_first, rs_own_block_last, runs_local_first
from hocket.strategies.memory import ceil_div, full_bytes, row_bytes, signalled_bytes
from hocket.strategies.peer_pipelines import ag_peer, ar_peer, rs_peer, runs_peer_pipe
from hocket.strategies.pieces import bounds, own_data_first_pieces, peer_pipe, pipeline_pieces
from hocket.strategies.spec import StrategySpec


def ag_pieces(b, shard_rows: int, pieces) -> None:
    """Each piece all-gathered, then multiplied one source block at a time (``p`` GEMMs of the piece's
    rows) and, with several pieces, copied into the gathered ``A``."""
    site = b.site
    p, total = site.world, site.comm_bytes
    for i, rows in enumerate(pieces):
        nbytes = total * rows / shard_rows
        t = b.add_transfer(f"all_gather[{i}]", b.collective("all_gather", nbytes), piece=i, op="all_gather",
                           nbytes=nbytes)
        g = b.add_gemm(f"gemm[{i}]", rows, deps=(t,), piece=i, count=p)
        if len(pieces) > 1:
            b.add_memory(f"copy_gathered[{i}]", 2.0 * nbytes, deps=(g,), piece=i, op="copy")


def rs_pieces(b, block_rows: int, pieces) -> None:
    """Per piece, ``p`` partial GEMMs into a staging buffer, then the piece's reduce-scatter."""
    site = b.site
    p, total = site.world, site.comm_bytes
    for i, rows in enumerate(pieces):
        nbytes = total * rows / block_rows
        g = b.add_gemm(f"gemm[{i}]", rows, piece=i, count=p)
        b.add_transfer(f"reduce_scatter[{i}]", b.collective("reduce_scatter", nbytes), deps=(g,), piece=i,
                       op="reduce_scatter", nbytes=nbytes)


def ar_pieces(b, pieces) -> None:
    """Per piece of the output's rows, its GEMM, then its all-reduce."""
    site = b.site
    m, total = site.m, site.comm_bytes
    for i, rows in enumerate(pieces):
        nbytes = total * rows / m
        g = b.add_gemm(f"gemm[{i}]", rows, piece=i)
        b.add_transfer(f"all_reduce[{i}]", b.collective("all_reduce", nbytes), deps=(g,), piece=i,
                       op="all_reduce", nbytes=nbytes)


def uneven_pieces(b, pieces) -> None:
    """An uneven ag_mm / mm_rs (``Site.shard_rows``) as :mod:`hocket.ops.lowering.uneven` runs it: row pieces
    cut over the largest shard (over every rank's rows along the last dim), each piece one uneven
    collective priced at the pace of its largest block (:mod:`hocket.cost.uneven`), the GEMMs over the
    real rows; ag_mm gathers then multiplies, mm_rs multiplies then reduce-scatters."""
    site, plan = b.site, b.plan
    sizes, p = site.shard_rows, site.world
    gather = site.kind == "ag_mm"
    cols = site.dim == -1
    width = site.n * site.num_b if not gather else site.k
    for i, (lo, hi) in enumerate(bounds(pieces)):
        if cols:  # every rank's rows lo:hi, uneven columns
            block, unit, rows = list(sizes), (hi - lo) * site.itemsize, hi - lo
        else:
            block = uneven_cost.clipped(sizes, lo, hi)
            unit, rows = width * site.itemsize, sum(uneven_cost.clipped(sizes, lo, hi))
        pace = uneven_cost.pace_bytes(block, unit)
        op = "all_gather" if gather else "reduce_scatter"
        padded = uneven_cost.way(plan.splits) == "padded"
        if not gather:
            g = b.add_gemm(f"gemm[{i}]", max(1, rows // (1 if cols else p)), piece=i, count=1 if cols else p)
        deps = () if gather else (g,)
        if padded and not gather:
            deps = (b.add_memory(f"pad[{i}]", uneven_cost.padding_copy_bytes(block, unit) / 2, deps=deps, piece=i,
                                 op="copy"),)
        extra = uneven_cost.extra_calls(block, plan.splits)
        if extra:
            b.add_host(f"uneven_calls[{i}]", (("collective", extra),))
        t = b.add_transfer(f"{op}[{i}]", b.collective(op, pace), deps=deps, piece=i, op=op, nbytes=pace)
        if padded and gather:
            t = b.add_memory(f"unpad[{i}]", uneven_cost.padding_copy_bytes(block, unit) / 2, deps=(t,), piece=i,
                             op="copy")
        if gather:
            b.add_gemm(f"gemm[{i}]", max(1, rows // (1 if cols else p)), deps=(t,), piece=i, count=1 if cols else p)


def uneven_rows(site) -> int:
    """Rows an uneven pipeline cuts: the largest shard's, or every rank's rows along the last dim."""
    return site.m if site.dim == -1 else site.max_shard


def cost(b) -> None:
    site, plan = b.site, b.plan
    m, p = site.m, site.world
    if site.uneven and site.kind in ("ag_mm", "mm_rs"):
        uneven_pieces(b, pipeline_pieces(uneven_rows(site), plan))
        return
    if site.kind in ("h2d_mm", "mm_d2h"):
        row_pieces(b, list(pipeline_pieces(m, plan)))
    elif site.kind == "ag_mm":
        shard_rows = math.ceil(m / p)
        if runs_peer_pipe(b):
            ag_peer(b, shard_rows)
        elif runs_local_first(b):
            ag_local_first(b, shard_rows, list(own_data_first_pieces(shard_rows, plan)))
        else:
            ag_pieces(b, shard_rows, pipeline_pieces(shard_rows, plan))
    elif site.kind == "mm_rs":
        block_rows = math.ceil(m / p)
        if runs_peer_pipe(b):
            rs_peer(b, block_rows)
        elif runs_local_first(b):
            rs_own_block_last(b, block_rows, list(own_data_first_pieces(block_rows, plan)))
        else:
            rs_pieces(b, block_rows, pipeline_pieces(block_rows, plan))
    elif runs_peer_pipe(b):
        ar_peer(b)
    else:
        ar_pieces(b, pipeline_pieces(m, plan))


def workspace(site, plan) -> int:
    """Two staged pieces (one in flight, one being multiplied) of ag_mm's ``A`` or mm_rs's product; with
    uneven pieces, slots of each distinct size (largest and smallest); an all-reduce runs in place."""
    if site.kind not in ("ag_mm", "mm_rs"):
        return 0
    if plan.split_sizes is not None:
        total = max(1, sum(plan.split_sizes))
        largest, smallest = max(plan.split_sizes), min(plan.split_sizes)
        full = full_bytes(site)
        return 2 * ceil_div(full * largest, total) + 2 * ceil_div(full * smallest, total)
    return 2 * ceil_div(site.m, plan.chunks) * row_bytes(site)


def symmetric(site, plan) -> int:
    """Over ``copy_engine``: the collective's buffer and its flags; the barrier protocols keep two slots
    (call parity) instead: pull stages this rank's shard (all-gather) or its partials for every rank
    (reduce-scatter), put receives every peer's shard."""
    if plan.transport != "copy_engine":
        return 0
    full = full_bytes(site)
    if site.world > 1 and site.kind in PROTOCOL_KINDS:
        protocol = plan_protocol(site.kind, plan)
        if protocol == "pull":
            return 2 * (ceil_div(full, site.world) if site.kind == "ag_mm" else full)
        if protocol == "put":
            return 2 * full
    return signalled_bytes(site, plan)


def capture_refusal(site, plan, default: str) -> str | None:
    """The copy-engine barrier protocols capture (inside ``hocket.ops.CapturedCall``); the push protocol
    and the last-dim mailbox pipeline do not."""
    if plan.transport != "copy_engine" or site.kind not in PROTOCOL_KINDS:
        return default
    if site.kind == "ag_mm" and site.dim == -1:
        return ("copy_engine gathering the last dim (K) runs the mailbox pipeline, which is not captured; "
                "gather rows (dim 0) or use a NCCL transport")
    if plan_protocol(site.kind, plan) in BARRIER_PROTOCOLS:
        return None
    return (f"copy_engine {site.kind} with chunks={plan.chunks} runs the push protocol, whose flag timeouts "
            f"are checked from the host; the barrier protocols ({', '.join(BARRIER_PROTOCOLS)}) capture: "
            f"all-gather by rows, or reduce-scatter with chunks=1")


def single_piece(site, plan) -> bool:
    """``chunks=1`` is a pipeline of its own (not ``bulk``) where the executor multiplies this rank's own
    data beside the transfer: the copy-engine peer protocols and ``order="local_first"`` (2xH200:
    chunked(1)/copy_engine is the fastest plan of ag_mm 8192x8192x7168 and mm_rs 8192x14336x8192,
    benchmarks/results/h200x2/2026-12-01_nvlink-eager.md)."""
    return site.world > 1 and (plan.transport == "copy_engine" or plan.order == "local_first")


def order_reason(site, plan) -> str | None:
    if peer_pipe(plan, site.world):
        return ("the copy-engine peer pipe (hocket.ops.lowering.peer_chunked) runs one order whatever "
                "plan.order says: its other orders are the natural plan again")
    return None


def variants(site, plan) -> tuple:
    """Over ``copy_engine`` on several ranks, one candidate per peer protocol of the call
    (:func:`hocket.core.peer_protocol.protocols_for`): the plan without a protocol (the automatic choice,
    the first) and each other protocol named; gathering the last dim runs none of them."""
    if not peer_pipe(plan, site.world) or site.kind not in PROTOCOL_KINDS or (site.kind == "ag_mm"
                                                                               and site.dim == -1):
        return (plan,)
    return (plan, *(plan.with_(protocol=p) for p in protocols_for(site.kind, plan.chunks)[1:]))


SPEC = StrategySpec(uneven=True, uneven_padded=True,
    name="chunked", summary="rows in pieces: one piece's transfer overlaps another's GEMMs",
    kinds=("ag_mm", "mm_rs", "mm_ar", "h2d_mm", "mm_d2h"), cost=cost, workspace=workspace,
    planned_kinds=("ag_mm", "mm_rs", "mm_ar", "a2a_mm", "mm_a2a"),
    transports=("collective", "copy_engine", "host_staged"),
    min_chunks=2, ordered=True, hierarchical=True, split=True,
    single_piece=single_piece, order_reason=order_reason, variants=variants,
    symmetric=symmetric, capture_refusal=capture_refusal,
)
