"""``chunked``: rows cut into ``plan.chunks`` pieces; the collective of one piece runs while
another computes (see :mod:`hocket.ops._pipeline`). ``plan.split_sizes`` names uneven
pieces (:mod:`hocket.core.pieces`: e.g. a small first piece to fill the pipeline);
``bulk`` runs these executors with ``chunks=1`` and ignores them."""

from __future__ import annotations

from hocket.ops._pipeline import piece_bounds, run_pipeline
from hocket.ops.lowering.problems import AllReduceMatmul, GatherMatmul, ScatterMatmul
from hocket.ops.lowering.runtime import bind_executors
from hocket.strategies.pieces import bounds, pipeline_pieces

DEPTH = 2


def _pieces(rows: int, plan, chunks: int | None) -> list[tuple[int, int]]:
    """The plan's pieces over ``rows`` (:func:`hocket.strategies.pieces.pipeline_pieces`, as the cost model
    cuts them); a fixed ``chunks`` (bulk) cuts evenly."""
    if chunks is not None:
        return piece_bounds(rows, chunks)
    return bounds(pipeline_pieces(rows, plan)) if rows > 0 else []


def gather_matmul(A_shard, Bs, dim, need_A, rt, plan, *, chunks: int | None = None):
    w = rt.world
    g = GatherMatmul(A_shard, Bs, dim, w, rt.rank, need_A=need_A)
    pieces = _pieces(g.R, plan, chunks)
    whole = len(pieces) == 1

    def stage(i):
        lo, hi = pieces[i]
        if whole and g.A_c is not None and not g.k_gather:
            return g.A_c.view(w, g.R, g.Kc)  # one piece: gather straight into the output
        return rt.ctx.buffer(f"chunked.ag{i % DEPTH}", (w, hi - lo, g.Kc))

    def communicate(i):
        lo, hi = pieces[i]
        return rt.transport.all_gather(stage(i), g.local[lo:hi])

    def consume(i):
        lo, hi = pieces[i]
        st = stage(i)
        if g.k_gather:
            a_rows = g.A_c[lo:hi] if g.A_c is not None else rt.ctx.buffer(f"chunked.krows{i % DEPTH}",
                                                                           (hi - lo, w * g.Kc))
            a_rows.view(hi - lo, w, g.Kc).copy_(st.transpose(0, 1))
            g.compute_full_rows(lo, hi, a_rows)
            return
        for src in range(w):
            g.compute_rows(src, lo, hi, st[src])
            if g.A_c is not None and not whole:
                g.gathered_rows(src)[lo:hi].copy_(st[src])

    run_pipeline(len(pieces), communicate=communicate, consume=consume, depth=DEPTH)
    return g.finish()


def matmul_scatter(A, B, reduce_op, dim, rt, plan, *, chunks: int | None = None):
    w = rt.world
    s = ScatterMatmul(A, B, dim, w)
    pieces = _pieces(s.rows, plan, chunks)

    def stage(i):
        lo, hi = pieces[i]
        return rt.ctx.buffer(f"chunked.rs{i % DEPTH}", (w, hi - lo, s.cols))

    def produce(i):
        lo, hi = pieces[i]
        st = stage(i)
        for b in range(w):
            s.partial(b, lo, hi, st[b])

    def communicate(i):
        lo, hi = pieces[i]
        return rt.transport.reduce_scatter(s.out_c[lo:hi], stage(i))

    run_pipeline(len(pieces), produce=produce, communicate=communicate, depth=DEPTH)
    return s.finish(reduce_op)


def matmul_all_reduce(A, B, reduce_op, rt, plan, *, chunks: int | None = None):
    r = AllReduceMatmul(A, B, rt.world)
    pieces = _pieces(r.rows, plan, chunks)

    def produce(i):
        lo, hi = pieces[i]
        r.partial(lo, hi, r.out_c[lo:hi])

    def communicate(i):
        lo, hi = pieces[i]
        return rt.transport.all_reduce(r.out_c[lo:hi])

    run_pipeline(len(pieces), produce=produce, communicate=communicate, depth=DEPTH)
    return r.finish(reduce_op)


EXECUTORS = bind_executors(ag_mm=gather_matmul, mm_rs=matmul_scatter, mm_ar=matmul_all_reduce)
