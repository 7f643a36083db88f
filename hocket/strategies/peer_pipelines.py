"""Stage pipelines of ``chunked`` over ``transport="copy_engine"`` on several ranks: the peer protocols
of :mod:`hocket.ops.lowering.peer_chunked` (``push``: :mod:`~hocket.ops.lowering.peer_pipe`; ``pull`` and
``put``: :mod:`~hocket.ops.lowering.peer_pull`), each priced as its executor runs it; which one a call
runs is :func:`hocket.core.peer_protocol.plan_protocol`'s answer (``Plan.protocol``, else the automatic
choice). ``b`` is a :class:`hocket.cost.builder.StageBuilder`; the pieces are
:func:`hocket.strategies.pieces.peer_pipe_pieces`, as the executors cut them."""

from __future__ import annotations

from hocket.core.peer_protocol import plan_protocol
from hocket.cost.builder import StageBuilder as Builder
from hocket.cost.compute import launch_ms, memory_ms
from hocket.cost.stages import Stage
from hocket.strategies.pieces import own_block_split as split_own_block
from hocket.strategies.pieces import peer_pipe, peer_pipe_pieces


def ag_peer(b: Builder, shard_rows: int) -> None:
    """All-gather + matmul with the protocol the call runs."""
    protocol = plan_protocol("ag_mm", b.plan)
    if protocol == "pull":
        _ag_peer_pull(b, shard_rows)
    elif protocol == "put":
        _ag_peer_put(b, shard_rows)
    else:
        _ag_peer_pipe(b, shard_rows)


def rs_peer(b: Builder, block_rows: int) -> None:
    """Matmul + reduce-scatter with the protocol the call runs."""
    if plan_protocol("mm_rs", b.plan) == "pull":
        _rs_peer_pull(b, block_rows)
    else:
        _rs_peer_pipe(b, block_rows)


def ar_peer(b: Builder) -> None:
    """Matmul + all-reduce: always the push pipe."""
    plan_protocol("mm_ar", b.plan)  # a plan naming another protocol is refused here, as by the executor
    _ar_peer_pipe(b)


def runs_peer_pipe(b: Builder) -> bool:
    """``chunked`` over ``copy_engine`` on several ranks runs :mod:`hocket.ops.lowering.peer_chunked`'s
    peer pipe (one DMA push per piece straight into each peer's symmetric region, a flag per
    piece), not the staged mailbox collectives of the plain chunked executor
    (:func:`hocket.strategies.pieces.peer_pipe`)."""
    return peer_pipe(b.plan, b.site.world)


PIPE_BEGIN_ISSUE = (("copy_engine", 1), ("launch", 2))
"""The peer pipe's ``begin`` on the host (``PeerPipe.begin``): stream and event waits, the flags'
reset and the group's device-side barrier (two launches), before the first push is issued."""
PIPE_END_ISSUE = (("host_copy", 1),)
"""``PeerPipe.end``: the caller's stream waits for the pushes and the error flags are copied
into a pinned mirror behind an event (a device->host copy with its event)."""
PIPE_WAIT_ISSUE = (("launch", 1),)
"""``PeerPipe.wait_flags``: one bounded spin kernel launched before a peer piece's GEMM."""


def _pushes(b: Builder, name: str, pieces: list[int], row_bytes: float, *, peers: int, after=None) -> list[list[int]]:
    """``peers`` x ``len(pieces)`` pushes on the copy stream, peer-major (``send_order``: the j-th
    peer this rank pushes to is the one whose j-th push reaches it, so push ``[j][i]`` stands for
    piece ``i`` arriving from the j-th source too); ``after(j, i)``: the stage a push waits for."""
    out = []
    for j in range(peers):
        row = []
        for i, rows in enumerate(pieces):
            nbytes = rows * row_bytes
            deps = () if after is None else (after(j, i),)
            row.append(b.add_transfer(f"{name}[{j}.{i}]", b.ring_step(nbytes), deps=deps, piece=i, op="push",
                                      nbytes=nbytes))
        out.append(row)
    return out


def _ag_peer_pipe(b: Builder, shard_rows: int) -> None:
    """This rank's shard pushed piece by piece into every peer's gathered A, its own rows
    multiplied beside the pushes, then every source's pieces as their flags rise."""
    site = b.site
    p = site.world
    pieces = peer_pipe_pieces(shard_rows, b.plan.chunks)
    row_bytes = site.comm_bytes / site.m
    _pipe_begin(b)
    pushed = _pushes(b, "push", pieces, row_bytes, peers=p - 1)
    b.add_gemm("gemm_own", shard_rows)
    for j in range(p - 1):
        for i, rows in enumerate(pieces):
            b.add_host(f"wait_flags[{j}.{i}]", PIPE_WAIT_ISSUE)
            b.add_gemm(f"gemm[{j}.{i}]", rows, deps=(pushed[j][i],), piece=i)
    b.add_host("pipe.end", PIPE_END_ISSUE)


def _pipe_begin(b: Builder) -> None:
    """The protocol's begin: host bookkeeping, then the flag reset and barrier on the device."""
    b.add_host("pipe.begin", PIPE_BEGIN_ISSUE)
    deps = (len(b.stages) - 1,) if b.issue is not None else ()
    b.add(Stage(name="pipe.begin", resource="compute", duration_ms=launch_ms(b.device), op="launch", depends_on=deps))


PULL_BEGIN_ISSUE = (("copy_engine", 1), ("launch", 1))
"""``peer_pull``'s start on the host: the copy stream's wait on the caller's stream (and, for the
all-gather, this rank's shard copied into its slot), then the group's device-side barrier."""


def _pull_barrier(b: Builder, deps: tuple[int, ...] = ()) -> int:
    """The pull protocol's host start, then its barrier on the copy stream (behind ``deps``)."""
    b.add_host("pull.begin", PULL_BEGIN_ISSUE)
    if b.issue is not None:
        deps = (*deps, len(b.stages) - 1)
    return b.add(Stage(name="pull.barrier", resource="copy_engine", kind="copy_engine", duration_ms=launch_ms(b.device),
                       depends_on=deps, op="barrier"))


def _closing_barrier(b: Builder, deps: tuple[int, ...]) -> None:
    """A replayed call's second barrier, after this rank's reads of the slots
    (``hocket.ops.lowering.peer_pull``: ``PullPipe.end_replayable``); eager calls have none."""
    if b.captured:
        b.add(Stage(name="pull.close", resource="copy_engine", kind="copy_engine", duration_ms=launch_ms(b.device),
                    depends_on=deps, op="barrier"))


def _ag_peer_pull(b: Builder, shard_rows: int) -> None:
    """``peer_pull``: the own shard's GEMM launched first; on the copy stream this rank's shard
    copied into its slot, the barrier, then every peer's pieces pulled (DMA) beside that GEMM;
    each peer piece's GEMM after its pull."""
    site = b.site
    p = site.world
    pieces = peer_pipe_pieces(shard_rows, b.plan.chunks)
    row_bytes = site.comm_bytes / site.m
    b.add_gemm("gemm_own", shard_rows)  # launched first, before the host issues the pulls
    b.add_host("pull.stage", (("launch", 1),))
    stage = b.add(Stage(name="pull.stage", resource="copy_engine", kind="copy_engine", op="copy",
                        duration_ms=memory_ms(b.device, 2.0 * shard_rows * row_bytes),
                        depends_on=(len(b.stages) - 1,) if b.issue is not None else ()))
    barrier = _pull_barrier(b, (stage,))
    pulls = [[b.add_transfer(f"pull[{j}.{i}]", b.ring_step(rows * row_bytes), deps=(barrier,), piece=i, op="pull",
                             nbytes=rows * row_bytes) for i, rows in enumerate(pieces)] for j in range(p - 1)]
    for j in range(p - 1):
        for i, rows in enumerate(pieces):
            b.add_gemm(f"gemm[{j}.{i}]", rows, deps=(pulls[j][i],), piece=i)
    _closing_barrier(b, tuple(pull for per_peer in pulls for pull in per_peer))


def _ag_peer_put(b: Builder, shard_rows: int) -> None:
    """``peer_pull.gather_matmul_put``: the own shard's GEMM launched first; on the copy stream the
    shard copied into every peer's slot, then the barrier; the peers' shards' GEMMs after it."""
    site = b.site
    p = site.world
    shard_bytes = site.comm_bytes / site.m * shard_rows
    b.add_gemm("gemm_own", shard_rows)
    puts = [b.add_transfer(f"put[{j}]", b.ring_step(shard_bytes), op="push", nbytes=shard_bytes)
            for j in range(p - 1)]
    barrier = _pull_barrier(b, tuple(puts))
    peers = b.add_gemm("gemm_peers", shard_rows, deps=(barrier,), count=p - 1)
    _closing_barrier(b, (peers,))


def own_block_split(b: Builder, block_rows: int) -> tuple[int, int]:
    """``(plain, fused)`` rows of the pull executor's own block, cut as the executor cuts them
    (:func:`hocket.strategies.pieces.own_block_split` from the device's peak, the group's link rate and
    SM count)."""
    site = b.site
    return split_own_block(block_rows, site.k, site.n, sources=site.world - 1, itemsize=site.itemsize,
                           tflops=b.device.peak(site.dtype), gbps=b.topo.ring_gbps, sms=b.device.sm_count)


def _rs_peer_pull(b: Builder, block_rows: int) -> None:
    """``peer_pull`` in one piece: the peers' partial blocks, the barrier, every peer's partial of
    this rank's block pulled while this rank's own block computes, then the sum: with the own block
    cut (:func:`own_block_split`), the fused rows' partials pulled first and added by their GEMM's
    epilogue, the plain rows' in a pass at the end."""
    site = b.site
    p = site.world
    row_bytes = site.n * site.num_b * site.itemsize
    plain, fused = own_block_split(b, block_rows)
    peers = b.add_gemm("gemm_peers", block_rows, count=p - 1)
    barrier = _pull_barrier(b, (peers,))
    first = [b.add_transfer(f"pull_fused[{j}]", b.ring_step(fused * row_bytes), deps=(barrier,), op="pull",
                            nbytes=fused * row_bytes) for j in range(p - 1)] if fused else []
    pulls = [b.add_transfer(f"pull[{j}]", b.ring_step(plain * row_bytes), deps=(barrier,), op="pull",
                            nbytes=plain * row_bytes) for j in range(p - 1)]
    own = b.add_gemm("gemm_own", plain)
    if fused:
        if p > 2:
            own = b.add_memory("reduce[fused]", 3.0 * (p - 2) * fused * row_bytes, deps=(own, *first))
        own = b.add_gemm("gemm_own_fused", fused, deps=(own, *first))
    b.add_memory("reduce[final]", 3.0 * (p - 1) * plain * row_bytes, deps=(own, *pulls))
    _closing_barrier(b, tuple(first + pulls))


def _rs_peer_pipe(b: Builder, block_rows: int) -> None:
    """Per peer (send order) and piece: the peer's partial GEMM, then its push; this rank's own
    block's partial last; then the received partials are added up."""
    site = b.site
    p = site.world
    pieces = peer_pipe_pieces(block_rows, b.plan.chunks)
    row_bytes = site.n * site.num_b * site.itemsize
    _pipe_begin(b)
    last = None
    for j in range(p - 1):
        for i, rows in enumerate(pieces):
            g = b.add_gemm(f"gemm[{j}.{i}]", rows, piece=i)
            last = b.add_transfer(f"push[{j}.{i}]", b.ring_step(rows * row_bytes), deps=(g,), piece=i, op="push",
                                  nbytes=rows * row_bytes)
    own = b.add_gemm("gemm_own", block_rows)
    block_bytes = block_rows * row_bytes
    for j in range(p - 1):
        b.add_host(f"wait_flags[{j}]", PIPE_WAIT_ISSUE)
    b.add_memory("reduce[final]", 3.0 * (p - 1) * block_bytes, deps=(own, last))
    b.add_host("pipe.end", PIPE_END_ISSUE)


def _ar_peer_pipe(b: Builder) -> None:
    """Per piece: its partial GEMM, then a push to every peer; once every peer's pieces landed
    (and this rank's pushes ended), the ``p`` partials are summed in rank order."""
    site = b.site
    p, m = site.world, site.m
    pieces = peer_pipe_pieces(m, b.plan.chunks)
    row_bytes = site.n * site.num_b * site.itemsize
    _pipe_begin(b)
    last = None
    for i, rows in enumerate(pieces):
        g = b.add_gemm(f"gemm[{i}]", rows, piece=i)
        for j in range(p - 1):
            last = b.add_transfer(f"push[{j}.{i}]", b.ring_step(rows * row_bytes), deps=(g,), piece=i, op="push",
                                  nbytes=rows * row_bytes)
    for j in range(p - 1):
        b.add_host(f"wait_flags[{j}]", PIPE_WAIT_ISSUE)
    b.add_host("pipe.end", PIPE_END_ISSUE)
    b.add_memory("reduce[final]", (p + 1) * m * row_bytes, deps=(last,))
