"""``substituted`` (matmul + all-reduce): the all-reduce replaced by reduce-scatter + all-gather.

The output rows are cut into ``plan.chunks`` pieces. Piece ``i``'s reduce-scatter runs
while piece ``i+1`` computes; once it lands, piece ``i``'s all-gather is issued and runs
behind the later pieces' reduce-scatters; all all-gathers are awaited at the end. A
piece is reduce-scattered as a flat run of ``rows * n`` elements, so its rows are a
multiple of ``world / gcd(n, world)``; leftover rows that cannot form such a piece are
all-reduced directly.
"""

from __future__ import annotations

import math

from hocket.ops._pipeline import piece_bounds, run_pipeline
from hocket.ops.executors import register_executors
from hocket.ops.lowering.problems import AllReduceMatmul
from hocket.ops.lowering.runtime import bind_executors

DEPTH = 2


def substituted_pieces(rows: int, cols: int, world: int, chunks: int) -> list[tuple[int, int, bool]]:
    """(lo, hi, scatterable) row pieces: scatterable ones hold a multiple of ``world`` elements."""
    unit = world // math.gcd(cols, world)
    units = rows // unit
    pieces = [(lo * unit, hi * unit, True) for lo, hi in piece_bounds(units, chunks)]
    if units * unit < rows:
        pieces.append((units * unit, rows, False))
    return pieces


def mm_ar(A, B, reduce_op, rt, plan):
    w = rt.world
    r = AllReduceMatmul(A, B, w)
    pieces = substituted_pieces(r.rows, r.cols, w, plan.chunks)
    shard_offsets, total = [], 0
    for lo, hi, scatterable in pieces:
        shard_offsets.append(total)
        total += (hi - lo) * r.cols // w if scatterable else 0
    shards = rt.ctx.buffer("substituted.shards", (max(total, 1),))
    gathers = []

    def shard(i):
        lo, hi, _ = pieces[i]
        return shards[shard_offsets[i]:shard_offsets[i] + (hi - lo) * r.cols // w]

    def produce(i):
        lo, hi, _ = pieces[i]
        r.partial(lo, hi, r.out_c[lo:hi])

    def communicate(i):
        lo, hi, scatterable = pieces[i]
        if scatterable:
            return rt.transport.reduce_scatter(shard(i), r.out_c[lo:hi])
        return rt.transport.all_reduce(r.out_c[lo:hi])

    def consume(i):
        lo, hi, scatterable = pieces[i]
        if scatterable:
            gathers.append(rt.transport.all_gather(r.out_c[lo:hi], shard(i)))

    run_pipeline(len(pieces), produce=produce, communicate=communicate, consume=consume, depth=DEPTH)
    for pending in gathers:
        pending.wait()
    return r.finish(reduce_op)


EXECUTORS = bind_executors(mm_ar=mm_ar)

register_executors("substituted", EXECUTORS)
