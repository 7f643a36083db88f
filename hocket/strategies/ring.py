"""``ring``: ``p`` steps of P2P send/recv to the next rank, each shard in ``plan.chunks`` sub-steps
(:mod:`hocket.ops.lowering.ring`): ag_mm computes on the shard in hand while passing it on; mm_rs
computes the partial for the next destination, adds the received running sum and passes it on; mm_ar
runs the reduce-scatter ring, then an all-gather ring. :func:`ring_cost` with ``lanes=2`` is
``bidir_ring``'s (half of every shard each way)."""

from __future__ import annotations

import math

from hocket.cost.builder import split_even
from hocket.strategies.memory import ceil_div
from hocket.strategies.spec import StrategySpec

RING_KIND_REASON = "a ring passes shards between peers; it needs a sharded operand (ag_mm or mm_rs)"


def ag_ring(b, shard_rows: int, *, lanes: int) -> None:
    """``p`` steps: compute on the shard (rows) in hand while passing it on. ``lanes=2``
    (bidir_ring): half of every shard travels each way, two neighbours per step."""
    site, plan = b.site, b.plan
    p = site.world
    row_bytes = site.k * site.itemsize
    subs = split_even(math.ceil(shard_rows / lanes), plan.chunks)
    last_recv: list[int | None] = [None] * len(subs)
    for s in range(p):
        recv_ids: list[int | None] = [None] * len(subs)
        if s + 1 < p:  # forward what we hold while computing on it
            for j, rows in enumerate(subs):
                deps = () if last_recv[j] is None else (last_recv[j],)
                recv_ids[j] = b.add_transfer(f"send_recv[{s}.{j}]", b.ring_step(rows * row_bytes, peers=lanes),
                                             deps=deps, piece=s, op="send_recv", nbytes=rows * row_bytes * lanes,
                                             calls=lanes)
        for j, rows in enumerate(subs):
            deps = () if last_recv[j] is None else (last_recv[j],)
            b.add_gemm(f"gemm[{s}.{j}]", rows, deps=deps, piece=s, count=lanes)
        last_recv = recv_ids


def rs_ring(b, block_rows: int, *, lanes: int) -> list[int | None]:
    """``p`` steps: compute this rank's partial of the next destination block, add the
    running sum received from the previous rank, pass it on; after ``p`` steps our own
    block is complete. ``lanes=2``: half of every block goes each way. Returns the last
    stage of every sub-piece."""
    site, plan = b.site, b.plan
    p = site.world
    row_bytes = site.n * site.num_b * site.itemsize
    subs = split_even(math.ceil(block_rows / lanes), plan.chunks)
    prev_send: list[int | None] = [None] * len(subs)
    last: list[int | None] = [None] * len(subs)
    for s in range(p):
        sends: list[int | None] = [None] * len(subs)
        for j, rows in enumerate(subs):
            g = b.add_gemm(f"gemm[{s}.{j}]", rows, piece=s, count=lanes)
            last[j] = g
            if prev_send[j] is not None:
                last[j] = b.add_memory(f"reduce[{s}.{j}]", 3.0 * rows * lanes * row_bytes, deps=(g, prev_send[j]),
                                       piece=s)
            if s + 1 < p:
                nbytes = rows * row_bytes
                sends[j] = b.add_transfer(f"send_recv[{s}.{j}]", b.ring_step(nbytes, peers=lanes),
                                          deps=(last[j],), piece=s, op="send_recv", nbytes=nbytes * lanes, calls=lanes)
        prev_send = sends
    return last


def ar_ring(b, *, lanes: int) -> None:
    """The reduce-scatter ring over ``p`` row blocks, then an all-gather ring of the reduced blocks."""
    site, plan = b.site, b.plan
    block_rows = math.ceil(site.m / site.world)
    last = rs_ring(b, block_rows, lanes=lanes)
    row_bytes = site.n * site.num_b * site.itemsize
    for j, rows in enumerate(split_even(math.ceil(block_rows / lanes), plan.chunks)):
        prev = last[j]
        for s in range(site.world - 1):
            prev = b.add_transfer(f"all_gather_step[{s}.{j}]", b.ring_step(rows * row_bytes, peers=lanes),
                                  deps=(prev,) if prev is not None else (), piece=s, op="send_recv",
                                  nbytes=rows * row_bytes * lanes, calls=lanes)


def ring_cost(b, *, lanes: int) -> None:
    """Uneven shards (``Site.shard_rows``): every step waits for the largest block, so the rows priced per
    step are the largest shard's."""
    site = b.site
    rows = site.max_shard if site.uneven and site.kind != "mm_ar" else math.ceil(site.m / site.world)
    if site.kind == "ag_mm":
        ag_ring(b, rows, lanes=lanes)
    elif site.kind == "mm_rs":
        rs_ring(b, rows, lanes=lanes)
    else:
        ar_ring(b, lanes=lanes)


def cost(b) -> None:
    ring_cost(b, lanes=1)


def ring_workspace(site, plan, *, lanes: int) -> int:
    """Two slots per lane of one shard piece (ag_mm's ``A`` rows, mm_rs's product rows); an all-reduce
    ring runs in place on the output."""
    if site.kind == "ag_mm":
        return 2 * lanes * ceil_div(site.m, site.world * plan.chunks) * site.k * site.itemsize
    if site.kind == "mm_rs":
        return 2 * lanes * ceil_div(site.m, site.world * plan.chunks) * site.n * site.num_b * site.itemsize
    return 0


def workspace(site, plan) -> int:
    return ring_workspace(site, plan, lanes=1)


def ring_gemm_rows(site, chunks: int) -> int:
    """A ring step over row shards multiplies one shard piece."""
    if site.dim != -1:
        return site.m // (site.world * chunks)
    return site.m // chunks


SPEC = StrategySpec(uneven=True, uneven_rows_only=True,
    error_class="ring",
    name="ring", summary="P2P ring: compute on the shard in hand while passing it to the next rank",
    kinds=("ag_mm", "mm_rs", "mm_ar"), cost=cost, workspace=workspace,
    planned_kinds=("ag_mm", "mm_rs"), kind_reason=RING_KIND_REASON, transports=("p2p",),
    ordered=True, gemm_rows=ring_gemm_rows,
)
