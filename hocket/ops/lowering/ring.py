"""``ring``: P2P send/recv around the group, ``world`` steps, computing on the shard in hand.

A *lane* is a direction (+1: send to rank+1, receive from rank-1; -1: the reverse) and a
range of rows; ``ring`` runs one lane over all rows, ``bidir_ring`` two lanes over the
two halves. Each lane's rows are cut into ``plan.chunks`` pieces, transferred and
computed piece by piece, so a piece can be forwarded and consumed as soon as it lands.

* all-gather + matmul: at step ``s`` a lane holds the shard of rank ``rank - d*s``,
  computes its output rows and passes it on (received shards land straight in the
  gathered ``A`` when it is returned, else in two rotating context buffers). Gathering
  K (last dim) accumulates ``shard @ B[k block]`` (in float32 for 16-bit dtypes).
* matmul + reduce-scatter: at step ``s`` a lane computes this rank's partial of block
  ``rank - d*(s+1)``, adds the running sum received from the previous rank and passes it
  on; after ``world`` steps the sum of block ``rank`` is complete here.
* matmul + all-reduce: the reduce-scatter ring over ``world`` row blocks (uneven when
  the rows do not divide), then an all-gather ring of the reduced blocks.

Both sides of every transfer derive the same piece layout from the (agreed) shapes, so
sends and receives always pair up, including empty and uneven blocks.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import torch

from hocket.ops._pipeline import block_bounds, piece_bounds
from hocket.ops.executors import register_executors
from hocket.ops.lowering.problems import LOW_PRECISION, AllReduceMatmul, GatherMatmul, ScatterMatmul
from hocket.ops.lowering.runtime import bind_executors
from hocket.ops.lowering.uneven import UnevenGather, UnevenScatter, register_uneven


@dataclass(frozen=True)
class Lane:
    direction: int
    lo: int
    hi: int
    """rows ``lo:hi`` of every block travel in this lane."""


def lanes_for(rows: int, bidirectional: bool) -> list[Lane]:
    if not bidirectional:
        return [Lane(1, 0, rows)]
    (a, b), (c, d) = block_bounds(rows, 2)
    return [Lane(1, a, b), Lane(-1, c, d)]


def _pieces(lane: Lane, chunks: int) -> list[tuple[int, int]]:
    return [(lane.lo + lo, lane.lo + hi) for lo, hi in piece_bounds(lane.hi - lane.lo, chunks)]


def _schedule(lanes: list[Lane], chunks: int) -> list[tuple[int, Lane, tuple[int, int]]]:
    """(lane index, lane, piece) in issue order: pieces of the lanes interleaved."""
    per_lane = [_pieces(lane, chunks) for lane in lanes]
    order = []
    for p in range(max((len(x) for x in per_lane), default=0)):
        for li, lane in enumerate(lanes):
            if p < len(per_lane[li]):
                order.append((li, lane, per_lane[li][p]))
    return order


# -- all-gather + matmul -------------------------------------------------------------------

def gather_matmul(A_shard, Bs, dim, need_A, rt, plan, *, bidirectional: bool):
    w, rank = rt.world, rt.rank
    g = GatherMatmul(A_shard, Bs, dim, w, rank, need_A=need_A)
    R, Kc = g.R, g.Kc
    direct = g.A_c is not None and not g.k_gather
    bufs = None if direct else [rt.ctx.buffer(f"ring.ag{i}", (R, Kc)) for i in range(2)]
    acc = _k_accumulators(g, rt) if g.k_gather else None

    def holder(step: int, src: int) -> torch.Tensor:
        if step == 0:
            return g.local
        return g.gathered_rows(src) if direct else bufs[step % 2]

    order = _schedule(lanes_for(R, bidirectional), plan.chunks)
    pending = {}
    for s in range(w):
        for li, lane, (lo, hi) in order:
            d = lane.direction
            src = (rank - d * s) % w
            cur = holder(s, src)
            prev = pending.pop((li, lo), None)
            if prev is not None:
                prev.wait()
            if s < w - 1:
                nxt = holder(s + 1, (rank - d * (s + 1)) % w)
                pending[(li, lo)] = rt.transport.exchange([(cur[lo:hi], (rank + d) % w)],
                                                          [(nxt[lo:hi], (rank - d) % w)])
            blk = cur[lo:hi]
            if g.k_gather:
                _k_accumulate(g, acc, src, lo, hi, blk, first=s == 0, rt=rt)
                if g.A_c is not None:
                    g.A_c[lo:hi, src * Kc:(src + 1) * Kc].copy_(blk)
            else:
                if direct and s == 0:
                    g.gathered_rows(src)[lo:hi].copy_(blk)
                g.compute_rows(src, lo, hi, blk)
    if acc is not None:
        for a, out in zip(acc, g.outs_c):
            if a is not out:
                out.copy_(a)
    return g.finish()


def _k_accumulators(g: GatherMatmul, rt) -> list[torch.Tensor]:
    """Where K-gather partial products are summed: the outputs, or float32 buffers for 16-bit dtypes."""
    if g.local.dtype not in LOW_PRECISION:
        return list(g.outs_c)
    return [rt.ctx.buffer(f"ring.kacc{i}", tuple(out.shape), torch.float32) for i, out in enumerate(g.outs_c)]


def _k_accumulate(g: GatherMatmul, acc, src, lo, hi, blk, *, first: bool, rt) -> None:
    for i, (B, a) in enumerate(zip(g.Bs, acc)):
        Bk = g.k_block(B, src)
        if a.dtype == blk.dtype:
            if first:
                torch.mm(blk, Bk, out=a[lo:hi])
            else:
                a[lo:hi].addmm_(blk, Bk)
            continue
        tmp = rt.ctx.buffer(f"ring.ktmp{i}", (hi - lo, Bk.shape[1]))
        torch.mm(blk, Bk, out=tmp)
        if first:
            a[lo:hi].copy_(tmp)
        else:
            a[lo:hi].add_(tmp)


# -- reduce-scatter rings ------------------------------------------------------------------

class BlockPieces:
    """The lane pieces of every block, in issue order: ``pieces(b, d)`` -> [(lo, hi)] (rows within block ``b``).

    Blocks may differ in size (uneven all-reduce blocks). Transfers are issued as one
    batch per piece index ``i``: this rank's send of piece ``i`` of the block it passes on
    together with its receive of piece ``i`` of the block that arrives. The peer's batch
    ``i`` holds the matching receive and send, so batches complete pairwise on every
    backend (NCCL runs a rank's P2P in issue order: a receive posted alone, ahead of
    the send its peer waits for, would deadlock).
    """

    def __init__(self, sizes: list[int], bidirectional: bool, chunks: int) -> None:
        self.directions = (1, -1) if bidirectional else (1,)
        self._by_block = []
        for size in sizes:
            by_dir = {d: [] for d in self.directions}
            for _, lane, piece in _schedule(lanes_for(size, bidirectional), chunks):
                by_dir[lane.direction].append(piece)
            self._by_block.append(by_dir)

    def __call__(self, b: int, d: int) -> list[tuple[int, int]]:
        return self._by_block[b][d]


def _at(pieces: list[tuple[int, int]], i: int) -> tuple[int, int] | None:
    return pieces[i] if i < len(pieces) else None


def reduce_ring(rt, pieces: BlockPieces, partial, block_rows: int, cols: int, final, *, tag: str) -> None:
    """Ring reduce-scatter with compute; block ``rank``'s sum lands in ``final(lo, hi)``.

    ``partial(b, lo, hi, out)`` writes this rank's part of rows ``lo:hi`` of block ``b``.
    Step ``s``: compute the partial of block ``rank - d*(s+1)`` while its running sum
    arrives from rank ``rank - d``, add, pass it on to ``rank + d`` (in the same batch as
    the receive of the next block's piece).
    """
    w, rank = rt.world, rt.rank
    # One buffer pair per direction: in a step the two lanes work on different blocks, and
    # with uneven blocks their row halves can overlap (a 3-row block's first half is rows
    # 0:2, a 2-row block's second half is row 1:2).
    send = {d: [rt.ctx.buffer(f"{tag}.send{d:+d}.{i}", (block_rows, cols)) for i in range(2)]
            for d in pieces.directions}
    recv = {d: [rt.ctx.buffer(f"{tag}.recv{d:+d}.{i}", (block_rows, cols)) for i in range(2)]
            for d in pieces.directions}
    pending: dict[tuple[int, int, int], object] = {}
    for s in range(w):
        for d in pieces.directions:
            b, b_next = (rank - d * (1 + s)) % w, (rank - d * (2 + s)) % w
            mine, nxt = pieces(b, d), (pieces(b_next, d) if s < w - 1 else [])
            for i in range(max(len(mine), len(nxt))):
                out_piece, in_piece = _at(mine, i), _at(nxt, i)
                sends = []
                if out_piece is not None:
                    lo, hi = out_piece
                    target = final(lo, hi) if s == w - 1 else send[d][s % 2][lo:hi]
                    partial(b, lo, hi, target)
                    if s > 0:
                        pending.pop((s - 1, d, i)).wait()
                        target.add_(recv[d][s % 2][lo:hi])
                    if s < w - 1:
                        sends = [(target, (rank + d) % w)]
                recvs = [(recv[d][(s + 1) % 2][in_piece[0]:in_piece[1]], (rank - d) % w)] if in_piece else []
                if sends or recvs:
                    pending[(s, d, i)] = rt.transport.exchange(sends, recvs)
        for key in [k for k in pending if k[0] == s - 1]:  # batches of step s-1 this step did not consume
            pending.pop(key).wait()
    for p in pending.values():
        p.wait()


def gather_ring(rt, pieces: BlockPieces, rows_of) -> None:
    """Ring all-gather of finished blocks in place: ``rows_of(b, lo, hi)`` is where block ``b``'s rows live.

    Step ``s`` passes block ``rank - d*s`` on (it arrived at step ``s-1``) and receives block
    ``rank - d*(s+1)``, one batch per piece index.
    """
    w, rank = rt.world, rt.rank
    pending: dict[tuple[int, int, int], object] = {}
    for s in range(w - 1):
        for d in pieces.directions:
            send_b, recv_b = (rank - d * s) % w, (rank - d * (s + 1)) % w
            outs, ins = pieces(send_b, d), pieces(recv_b, d)
            for i in range(max(len(outs), len(ins))):
                out_piece, in_piece = _at(outs, i), _at(ins, i)
                prev = pending.pop((s - 1, d, i), None)
                if prev is not None:
                    prev.wait()
                sends = [(rows_of(send_b, *out_piece), (rank + d) % w)] if out_piece else []
                recvs = [(rows_of(recv_b, *in_piece), (rank - d) % w)] if in_piece else []
                pending[(s, d, i)] = rt.transport.exchange(sends, recvs)
        for key in [k for k in pending if k[0] == s - 1]:
            pending.pop(key).wait()
    for p in pending.values():
        p.wait()


def matmul_scatter(A, B, reduce_op, dim, rt, plan, *, bidirectional: bool):
    s = ScatterMatmul(A, B, dim, rt.world)
    pieces = BlockPieces([s.rows] * rt.world, bidirectional, plan.chunks)
    reduce_ring(rt, pieces, s.partial, s.rows, s.cols, lambda lo, hi: s.out_c[lo:hi], tag="ring.rs")
    return s.finish(reduce_op)


def matmul_all_reduce(A, B, reduce_op, rt, plan, *, bidirectional: bool):
    w, rank = rt.world, rt.rank
    r = AllReduceMatmul(A, B, w)
    blocks = block_bounds(r.rows, w)
    pieces = BlockPieces([hi - lo for lo, hi in blocks], bidirectional, plan.chunks)

    def partial(b, lo, hi, out):
        r.partial(blocks[b][0] + lo, blocks[b][0] + hi, out)

    def rows_of(b, lo, hi):
        return r.out_c[blocks[b][0] + lo:blocks[b][0] + hi]

    block_rows = max(hi - lo for lo, hi in blocks)
    reduce_ring(rt, pieces, partial, block_rows, r.cols, lambda lo, hi: rows_of(rank, lo, hi), tag="ring.ar")
    gather_ring(rt, pieces, rows_of)
    return r.finish(reduce_op)


# -- uneven shards (hocket.ops.lowering.uneven) ------------------------------------------

def uneven_ring_gather(A_shard, Bs, dim, need_A, rt, plan, sizes, dim_sizes, *, bidirectional: bool):
    """Ring all-gather + matmul of uneven row blocks: at step ``s`` a lane computes on block
    ``rank - d*s`` while passing it on; every transfer carries that block's pieces, whatever its size."""
    w, rank = rt.world, rt.rank
    g = UnevenGather(A_shard, Bs, dim, sizes, rank, dim_sizes, need_A=need_A)
    pieces = BlockPieces(list(sizes), bidirectional, plan.chunks)
    direct = g.A_c is not None
    top = max(sizes)
    bufs = None if direct else {d: [rt.ctx.buffer(f"uneven.ring{d:+d}.{i}", (top, g.Kc)) for i in range(2)]
                                for d in pieces.directions}

    def holder(step: int, src: int, d: int) -> torch.Tensor:
        if step == 0:
            return g.local
        return g.block(g.A_c, src) if direct else bufs[d][step % 2]

    if direct:
        g.block(g.A_c, rank).copy_(g.local)
    pending: dict[int, list] = {d: [] for d in pieces.directions}
    for s in range(w):
        for d in pieces.directions:
            for p in pending[d]:  # every block of step s-1 landed and left before its buffer is reused
                p.wait()
            pending[d] = []
            src, nxt = (rank - d * s) % w, (rank - d * (s + 1)) % w
            cur = holder(s, src, d)
            mine = pieces(src, d)
            ins = pieces(nxt, d) if s < w - 1 else []
            if s < w - 1:
                dst = holder(s + 1, nxt, d)
                for i in range(max(len(mine), len(ins))):
                    sends = [(cur[mine[i][0]:mine[i][1]], (rank + d) % w)] if i < len(mine) else []
                    recvs = [(dst[ins[i][0]:ins[i][1]], (rank - d) % w)] if i < len(ins) else []
                    pending[d].append(rt.transport.exchange(sends, recvs))
            for lo, hi in mine:
                g.compute_rows(src, lo, hi, cur[lo:hi])
    for d in pieces.directions:
        for p in pending[d]:
            p.wait()
    return g.finish()


def uneven_ring_scatter(A, B, reduce_op, dim, rt, plan, sizes, dim_sizes, *, bidirectional: bool):
    """Ring matmul + reduce-scatter to uneven row blocks (:func:`hocket.ops.lowering.ring.reduce_ring`)."""
    s = UnevenScatter(A, B, dim, sizes, rt.rank, dim_sizes)
    pieces = BlockPieces(list(sizes), bidirectional, plan.chunks)
    reduce_ring(rt, pieces, s.partial, max(sizes), s.cols, lambda lo, hi: s.out_c[lo:hi], tag="uneven.ring.rs")
    return s.finish(reduce_op, rt.world)


EXECUTORS = bind_executors(ag_mm=gather_matmul, mm_rs=matmul_scatter, mm_ar=matmul_all_reduce,
                           bidirectional=False)

register_executors("ring", EXECUTORS)

register_uneven("ring", "ag_mm", partial(uneven_ring_gather, bidirectional=False))
register_uneven("ring", "mm_rs", partial(uneven_ring_scatter, bidirectional=False))
