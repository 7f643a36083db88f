"""``chunked``: rows cut into ``plan.chunks`` pieces; the collective of one piece runs while
another computes (see :mod:`hocket.ops._pipeline`)."""

from __future__ import annotations

from hocket.ops._pipeline import piece_bounds, run_pipeline
from hocket.ops.lowering.problems import AllReduceMatmul, GatherMatmul, ScatterMatmul

DEPTH = 2


def gather_matmul(A_shard, Bs, dim, need_A, rt, pieces_wanted):
    w = rt.world
    g = GatherMatmul(A_shard, Bs, dim, w, rt.rank, need_A=need_A)
    pieces = piece_bounds(g.R, pieces_wanted)
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


def matmul_scatter(A, B, reduce_op, dim, rt, pieces_wanted):
    w = rt.world
    s = ScatterMatmul(A, B, dim, w)
    pieces = piece_bounds(s.rows, pieces_wanted)

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


def matmul_all_reduce(A, B, reduce_op, rt, pieces_wanted):
    r = AllReduceMatmul(A, B, rt.world)
    pieces = piece_bounds(r.rows, pieces_wanted)

    def produce(i):
        lo, hi = pieces[i]
        r.partial(lo, hi, r.out_c[lo:hi])

    def communicate(i):
        lo, hi = pieces[i]
        return rt.transport.all_reduce(r.out_c[lo:hi])

    run_pipeline(len(pieces), produce=produce, communicate=communicate, depth=DEPTH)
    return r.finish(reduce_op)


def ag_mm(A_shard, Bs, dim, need_A, rt, plan):
    return gather_matmul(A_shard, Bs, dim, need_A, rt, plan.chunks)


def mm_rs(A, B, reduce_op, dim, rt, plan):
    return matmul_scatter(A, B, reduce_op, dim, rt, plan.chunks)


def mm_ar(A, B, reduce_op, rt, plan):
    return matmul_all_reduce(A, B, reduce_op, rt, plan.chunks)


EXECUTORS = {"ag_mm": ag_mm, "mm_rs": mm_rs, "mm_ar": mm_ar}
