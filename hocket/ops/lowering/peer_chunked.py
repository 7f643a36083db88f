"""``chunked`` over ``transport="copy_engine"``: vendor GEMMs per piece, data moved by copy engines
through symmetric memory. The protocol is the plan's (``Plan.protocol``), else the automatic choice of
:mod:`hocket.core.peer_protocol` (``put`` for the one-piece all-gather, ``pull`` for the others and the
one-piece reduce-scatter, ``push`` elsewhere). ``put`` and ``pull`` run :mod:`hocket.ops.lowering.peer_pull`;
``push`` pushes the data into the peers' memory, one flag per landed piece (:mod:`hocket.ops.lowering.peer_pipe`):

* all-gather + matmul: every rank pushes its shard to every peer in ``plan.chunks`` pieces
  while it multiplies its own shard (no wait at all), then multiplies each peer's pieces as
  their flags rise (a one-program wait on the compute stream before each piece's GEMM).
* matmul + reduce-scatter: the peers' blocks are computed first, piece by piece, each piece
  pushed to its owner as soon as its GEMM ends (an event orders the copy after it); this
  rank's own block is computed last, then the pieces the peers pushed are added to it.
* matmul + all-reduce: pieces of the whole output, each pushed to every peer when done;
  every rank then sums all ranks' partials in rank order (the same bits on every rank).

Gathering the last dim (K) runs the stream-level pipeline of :mod:`hocket.ops.lowering.chunked`
over the copy-engine transport's collectives instead. Other transports run that pipeline too,
except with ``plan.order == "local_first"`` (:func:`local_first_gather`, :func:`own_block_last_scatter`):
every piece's collective is issued at once and this rank's own data is multiplied first (all-gather)
or last (reduce-scatter), so the first (last) GEMM hides the first (last) transfers. Over
``host_staged`` (whose issue waits on the host for the peers) the GEMM that hides the transfer is
launched *before* it is issued, and all pieces travel in *one* relay call whose messages end on the
pieces' edges (:func:`hocket.strategies.pieces.one_relay_call`): an all-gather's piece GEMM waits on the
event after the piece's last message, a reduce-scatter's piece leaves once its partials' event fired,
and the host pays one call's cost instead of one per piece. The pieces are
:func:`hocket.strategies.pieces.own_data_first_pieces` / :func:`~hocket.strategies.pieces.peer_pipe_pieces`,
the ones the cost model prices.
"""

from __future__ import annotations

import torch

from hocket.core.peer_protocol import plan_protocol
from hocket.ops.executors import register_executors
from hocket.ops.lowering import chunked, peer_pull, uneven
from hocket.ops.lowering.peer_pipe import PIPES, PeerPipe
from hocket.ops.lowering.problems import AllReduceMatmul, GatherMatmul, ScatterMatmul
from hocket.ops.lowering.runtime import bind_executors
from hocket.ops.lowering.uneven import register_uneven
from hocket.strategies.pieces import (
    bounds,
    one_relay_call,
    own_data_first,
    own_data_first_pieces,
    peer_pipe,
    peer_pipe_pieces,
)


def uses_peer_pipe(rt, plan) -> bool:
    return peer_pipe(plan, rt.world)


def _pieces(rows: int, chunks: int) -> list[tuple[int, int]]:
    return bounds(peer_pipe_pieces(rows, chunks))


def gather_pipe(rt, g: GatherMatmul) -> PeerPipe:
    """Pipe of a row all-gather: region ``A`` is the gathered ``[world * R, K]`` operand."""
    w, dtype, device = rt.world, g.local.dtype, g.local.device
    return PIPES.get(rt.group, device, ("ag", g.R, g.Kc, dtype), regions=[("A", (w * g.R, g.Kc), dtype)],
                     label=f"all_gather_matmul [{w}x{g.R}, {g.Kc}] {dtype}")


def partials_pipe(rt, rows: int, cols: int, dtype: torch.dtype, device: torch.device, *, what: str) -> PeerPipe:
    """Pipe whose region ``partials`` holds one ``[rows, cols]`` slot per source rank."""
    return PIPES.get(rt.group, device, (what, rows, cols, dtype), regions=[("partials", (rt.world, rows, cols), dtype)],
                     label=f"{what} [{rows}, {cols}] {dtype}")


def push_shard(pipe: PeerPipe, local: torch.Tensor, pieces, send_to) -> None:
    """Push this rank's shard rows, piece by piece, into every peer's gathered ``A``."""
    R, rank = local.shape[0], pipe.rank
    for peer in send_to:
        dst = pipe.peer(peer, "A")
        for i, (lo, hi) in enumerate(pieces):
            pipe.push(local[lo:hi], dst[rank * R + lo:rank * R + hi], peer=peer, piece=i)


def local_first_gather(A_shard, Bs, dim, need_A, rt, plan):
    """All-gather + matmul over a collective transport, own shard first: the all-gathers of all
    the plan's row pieces are issued at once, this rank's shard is multiplied while they run,
    then each piece's peer rows as it lands (over ``host_staged``: in one relay call)."""
    w, rank = rt.world, rt.rank
    g = GatherMatmul(A_shard, Bs, dim, w, rank, need_A=need_A)
    pieces = bounds(own_data_first_pieces(g.R, plan))
    if one_relay_call(plan):
        return _local_first_gather_one_call(g, rt, pieces or [(0, 0)])
    stages = [rt.ctx.buffer(f"local_first.ag{i}", (w, hi - lo, g.Kc)) for i, (lo, hi) in enumerate(pieces)]
    pending = [rt.transport.all_gather(st, g.local[lo:hi]) for st, (lo, hi) in zip(stages, pieces)]
    g.compute_rows(rank, 0, g.R, g.local)
    for st, (lo, hi), p in zip(stages, pieces, pending):
        p.wait()
        for src in range(w):
            if src != rank:
                g.compute_rows(src, lo, hi, st[src])
                if g.A_c is not None:
                    g.gathered_rows(src)[lo:hi].copy_(st[src])
    if g.A_c is not None:
        g.gathered_rows(rank).copy_(g.local)
    return g.finish()


def _local_first_gather_one_call(g: GatherMatmul, rt, pieces) -> tuple:
    """:func:`local_first_gather` in one relay call: the own-shard GEMM is launched first, then the
    call (every piece's messages), then each piece's peer rows, each GEMM waiting on the event after
    its piece's last message. The gathered ``A`` (when asked for) is the call's output itself."""
    w, rank = g.world, g.rank
    stage = g.A_c.view(w, g.R, g.Kc) if g.A_c is not None else rt.ctx.buffer("local_first.ag", (w, g.R, g.Kc))
    ready = torch.cuda.current_stream(g.local.device.index).record_event()
    g.compute_rows(rank, 0, g.R, g.local)
    landed = rt.transport.all_gather_split(stage, g.local, pieces, ready=ready, own_rows=g.A_c is not None)
    for (lo, hi), pending in zip(pieces, landed):  # the last one is the call's end (own rows in A too)
        pending.wait()
        for src in range(w):
            if src != rank:
                g.compute_rows(src, lo, hi, stage[src, lo:hi])
    return g.finish()


def own_block_last_scatter(A, B, reduce_op, dim, rt, plan):
    """Matmul + reduce-scatter over a collective transport, own block last: per row piece, the peers'
    partials are computed and reduce-scattered (this rank's block of the piece is zero), all pieces
    in flight at once; this rank's own partial is computed while they travel and added at the end
    (over ``host_staged``: in one relay call). The staging's own blocks are zeroed once, when the
    buffers are made, and never written: no fill kernel between a piece's GEMM and the next, which
    would let the piece's collective race that GEMM for the SMs (``hocket.cost.stages.RACE_MS``)."""
    w, rank = rt.world, rt.rank
    s = ScatterMatmul(A, B, dim, w)
    pieces = bounds(own_data_first_pieces(s.rows, plan))
    if one_relay_call(plan):
        return _own_block_last_scatter_one_call(s, reduce_op, rt, pieces or [(0, 0)])
    pending = []
    for i, (lo, hi) in enumerate(pieces):
        st = rt.ctx.buffer(f"own_last.rs{i}", (w, hi - lo, s.cols), zeroed=True)
        for b in range(w):
            if b != rank:
                s.partial(b, lo, hi, st[b])
        pending.append(rt.transport.reduce_scatter(s.out_c[lo:hi], st))
    own = rt.ctx.buffer("own_last.own", (s.rows, s.cols))
    s.partial(rank, 0, s.rows, own)
    for p in pending:
        p.wait()
    s.out_c.add_(own)
    return s.finish(reduce_op)


def _own_block_last_scatter_one_call(s: ScatterMatmul, reduce_op, rt, pieces):
    """:func:`own_block_last_scatter` in one relay call: every piece's peer partials are launched
    (an event after each piece), then this rank's own partial (into its block of the same staging
    buffer), then the call, whose messages of a piece wait on that piece's event; the call's final
    sum adds the own partial once it is done (no separate pass)."""
    w, rank = rt.world, rt.rank
    stage = rt.ctx.buffer("own_last.rs", (w, s.rows, s.cols))
    cur = torch.cuda.current_stream(stage.device.index)
    written = []
    for lo, hi in pieces:
        for b in range(w):
            if b != rank:
                s.partial(b, lo, hi, stage[b, lo:hi])
        written.append(cur.record_event())
    s.partial(rank, 0, s.rows, stage[rank])
    own = cur.record_event()
    rt.transport.reduce_scatter_split(s.out_c, stage, pieces, written, own_ready=own).wait()
    return s.finish(reduce_op)


def gather_matmul(A_shard, Bs, dim, need_A, rt, plan):
    if not uses_peer_pipe(rt, plan):
        if own_data_first(plan, rt.world) and dim != A_shard.dim() - 1:
            return local_first_gather(A_shard, Bs, dim, need_A, rt, plan)
        return chunked.gather_matmul(A_shard, Bs, dim, need_A, rt, plan)
    from hocket.kernels.peer_schedule import receive_order, send_order

    w, rank = rt.world, rt.rank
    g = GatherMatmul(A_shard, Bs, dim, w, rank, need_A=need_A)
    if g.k_gather:
        return chunked.gather_matmul(A_shard, Bs, dim, need_A, rt, plan)
    protocol = plan_protocol("ag_mm", plan)
    if protocol == "pull":
        return peer_pull.gather_matmul(A_shard, Bs, dim, need_A, rt, plan)
    if protocol == "put":
        return peer_pull.gather_matmul_put(A_shard, Bs, dim, need_A, rt, plan)
    pipe = gather_pipe(rt, g)
    pieces = _pieces(g.R, plan.chunks)
    gathered = pipe.local("A")
    pipe.begin(len(pieces))
    push_shard(pipe, g.local, pieces, send_order(rank, w))
    g.compute_rows(rank, 0, g.R, g.local)
    for src in receive_order(rank, w):
        for i, (lo, hi) in enumerate(pieces):
            pipe.wait_flags(src, 1, first=i)
            g.compute_rows(src, lo, hi, gathered[src * g.R + lo:src * g.R + hi])
    if g.A_c is not None:
        g.A_c.copy_(gathered)
        g.gathered_rows(rank).copy_(g.local)
    pipe.end()
    return g.finish()


def matmul_scatter(A, B, reduce_op, dim, rt, plan):
    if not uses_peer_pipe(rt, plan):
        if own_data_first(plan, rt.world):
            return own_block_last_scatter(A, B, reduce_op, dim, rt, plan)
        return chunked.matmul_scatter(A, B, reduce_op, dim, rt, plan)
    from hocket.kernels.peer_schedule import receive_order, send_order

    if plan_protocol("mm_rs", plan) == "pull":
        return peer_pull.matmul_scatter(A, B, reduce_op, dim, rt, plan)
    w, rank = rt.world, rt.rank
    s = ScatterMatmul(A, B, dim, w)
    pipe = partials_pipe(rt, s.rows, s.cols, s.out_c.dtype, s.out_c.device, what="matmul_reduce_scatter")
    pieces = _pieces(s.rows, plan.chunks)
    work = rt.ctx.buffer("peer.rs.partials", (w, s.rows, s.cols))
    cur = torch.cuda.current_stream()
    pipe.begin(len(pieces))
    for peer in send_order(rank, w):
        dst = pipe.peer(peer, "partials")[rank]
        for i, (lo, hi) in enumerate(pieces):
            s.partial(peer, lo, hi, work[peer, lo:hi])
            pipe.push(work[peer, lo:hi], dst[lo:hi], peer=peer, piece=i, after=cur.record_event())
    s.partial(rank, 0, s.rows, s.out_c)
    received = pipe.local("partials")
    for src in receive_order(rank, w):
        pipe.wait_flags(src, len(pieces))
        s.out_c.add_(received[src])
    pipe.end()
    return s.finish(reduce_op)


def sum_in_rank_order(out: torch.Tensor, own: torch.Tensor, received: torch.Tensor, rank: int, scratch) -> None:
    """``out = sum_r partial_r`` over ranks in rank order, ``own`` being this rank's partial
    (``out`` may be ``own``). Every rank adds the same values in the same order, so every
    rank gets the same bits. ``scratch(dtype)`` gives an accumulator the shape of ``out``
    (float32 for 16-bit dtypes)."""
    world = received.shape[0]
    parts = [own if r == rank else received[r] for r in range(world)]
    if world == 2:  # one rounding of a commutative sum: identical on both ranks
        torch.add(parts[0], parts[1], out=out)
        return
    acc = scratch(torch.float32 if out.dtype in (torch.bfloat16, torch.float16) else out.dtype)
    acc.copy_(parts[0])
    for part in parts[1:]:
        acc.add_(part)
    out.copy_(acc)


def matmul_all_reduce(A, B, reduce_op, rt, plan):
    if not uses_peer_pipe(rt, plan):
        return chunked.matmul_all_reduce(A, B, reduce_op, rt, plan)
    from hocket.kernels.peer_schedule import receive_order, send_order

    plan_protocol("mm_ar", plan)  # push is the all-reduce's one protocol: a plan naming another is refused
    w, rank = rt.world, rt.rank
    r = AllReduceMatmul(A, B, w)
    pipe = partials_pipe(rt, r.rows, r.cols, r.out_c.dtype, r.out_c.device, what="matmul_all_reduce")
    pieces = _pieces(r.rows, plan.chunks)
    cur = torch.cuda.current_stream()
    pipe.begin(len(pieces))
    for i, (lo, hi) in enumerate(pieces):
        r.partial(lo, hi, r.out_c[lo:hi])
        done = cur.record_event()
        for peer in send_order(rank, w):
            pipe.push(r.out_c[lo:hi], pipe.peer(peer, "partials")[rank, lo:hi], peer=peer, piece=i, after=done)
    for src in receive_order(rank, w):
        pipe.wait_flags(src, len(pieces))
    pipe.end()  # the pushes read out_c: finish them before it becomes the sum
    sum_in_rank_order(r.out_c, r.out_c, pipe.local("partials"), rank,
                      lambda dtype: rt.ctx.buffer("peer.ar.acc", (r.rows, r.cols), dtype))
    return r.finish(reduce_op)


EXECUTORS = bind_executors(ag_mm=gather_matmul, mm_rs=matmul_scatter, mm_ar=matmul_all_reduce)

register_executors("chunked", EXECUTORS)

register_uneven("chunked", "ag_mm", uneven.gather_matmul)
register_uneven("chunked", "mm_rs", uneven.matmul_scatter)
