"""Executors for uneven shards (``Site.shard_rows``): ``ag_mm`` whose ranks hold different row counts,
``mm_rs`` whose ranks receive different row counts. (``mm_ar`` with a different local ``k`` per rank
moves the same ``[m, n]`` output on every rank, so every ``mm_ar`` executor serves it unchanged.)

The canonical form is :mod:`hocket.ops.lowering.problems`' with blocks of ``sizes[r]`` rows (or, along the
last dim, ``sizes[r]`` K columns gathered / N columns scattered), stacked in rank order. Executors register
here beside their strategy's even ones (:func:`register_uneven`); a strategy without one is refused by
:func:`uneven_executor`, naming the strategies that serve uneven shards.

* ``sequential``: one uneven collective (:mod:`hocket.transport.uneven`), one matmul.
* ``bulk`` / ``chunked`` (natural order): pieces cut over the largest shard's rows
  (:func:`hocket.strategies.pieces.pipeline_pieces`); piece ``i`` of rank ``r`` is its rows that fall in
  the piece (fewer, or none, for a smaller shard), so every rank issues the same collectives. The way
  (``Plan.splits``: None exact, ``"padded"``) picks the collective (:mod:`hocket.transport.uneven`).
  Along the last dim the pieces are row ranges of every rank's ``[R, K_r]`` shard, gathered (scattered)
  as the transposed ``[K_r, rows]`` blocks.
* ``ring`` / ``bidir_ring``: P2P rings whose every transfer carries the block in hand, whatever its size
  (:func:`hocket.ops.lowering.ring.uneven_ring_gather` / :func:`~hocket.ops.lowering.ring.uneven_ring_scatter`);
  rows only (the gather or scatter dim not the last).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from hocket.ops._layout import from_rows_first, rows_first
from hocket.ops._pipeline import piece_bounds, run_pipeline
from hocket.strategies.pieces import bounds, pipeline_pieces
from hocket.transport.uneven import all_gather_rows, offsets, reduce_scatter_rows, way_of

DEPTH = 2

_UNEVEN: dict[tuple[str, str], Callable] = {}


def register_uneven(strategy: str, kind: str, fn: Callable) -> None:
    """Make ``fn`` the uneven-shard executor of ``strategy`` for ``kind`` (``ag_mm`` or ``mm_rs``)."""
    _UNEVEN[(kind, strategy)] = fn


def uneven_strategies(kind: str) -> tuple[str, ...]:
    """Strategies with an uneven-shard executor for ``kind`` (``mm_ar``: every strategy, see the module)."""
    return tuple(sorted(s for k, s in _UNEVEN if k == kind))


def uneven_executor(kind: str, strategy: str, *, last_dim: bool = False, order: str = "natural",
                    transport: str = "collective") -> Callable:
    """The uneven executor of ``strategy`` for ``kind``, or a ValueError naming the ones that serve it."""
    fn = _UNEVEN.get((kind, strategy))
    reason = None
    if fn is None:
        reason = "has no uneven-shard executor"
    elif strategy in ("ring", "bidir_ring") and last_dim:
        reason = "passes row blocks; uneven shards along the last dim (K gathered, N scattered) need another"
    elif order != "natural":
        reason = f"runs order={order!r} over even shards only"
    if reason is not None:
        serve = [s for s in uneven_strategies(kind) if not (last_dim and s in ("ring", "bidir_ring"))]
        raise ValueError(f"strategy {strategy!r} {reason}: hocket.{_OPS[kind]} with uneven shards runs with "
                         f"{serve} (natural order)")
    if strategy in ("ring", "bidir_ring") and transport not in ("collective", "p2p"):
        raise ValueError(f"strategy {strategy!r} with uneven shards runs over transport 'collective' or 'p2p', "
                         f"not {transport!r}")
    return fn


_OPS = {"ag_mm": "all_gather_matmul", "mm_rs": "matmul_reduce_scatter", "mm_ar": "matmul_all_reduce"}


# -- canonical forms --------------------------------------------------------------------------

class UnevenGather:
    """``all_gather(A_shard, dim) @ B`` for each B with blocks of ``sizes[r]`` rows (K columns along the
    last dim), in canonical form; ``finish`` restores the caller's layout."""

    def __init__(self, A_shard: torch.Tensor, Bs: Sequence[torch.Tensor], dim: int, sizes: Sequence[int],
                 rank: int, dim_sizes: Sequence[int], *, need_A: bool) -> None:
        self.dim, self.rank, self.sizes = dim, rank, list(sizes)
        self.k_gather = dim == A_shard.dim() - 1
        self.Bs = list(Bs)
        self.local = rows_first(A_shard, 0 if self.k_gather else dim)
        self.starts = offsets(self.sizes)
        self.total = self.starts[-1]
        shape = list(A_shard.shape)
        shape[dim] = sum(dim_sizes)
        self.full_shape = shape
        empty = A_shard.new_empty
        if self.k_gather:
            self.R = self.local.shape[0]
            self.A_c = empty((self.R, self.total)) if need_A else None
            self.outs_c = [empty((self.R, B.shape[1])) for B in self.Bs]
        else:
            self.Kc = self.local.shape[1]
            self.A_c = empty((self.total, self.Kc)) if need_A else None
            self.outs_c = [empty((self.total, B.shape[1])) for B in self.Bs]

    def block(self, t: torch.Tensor, src: int, lo: int = 0, hi: int | None = None) -> torch.Tensor:
        """Rows ``lo:hi`` of rank ``src``'s block of a canonical ``[total, ...]`` tensor."""
        base = self.starts[src]
        stop = self.starts[src + 1] if hi is None else base + hi
        return t[base + lo:stop]

    def compute_rows(self, src: int, lo: int, hi: int, blk: torch.Tensor) -> None:
        for B, out in zip(self.Bs, self.outs_c):
            torch.mm(blk, B, out=self.block(out, src, lo, hi))

    def finish(self) -> tuple[torch.Tensor | None, list[torch.Tensor]]:
        if self.k_gather:
            lead = self.full_shape[:-1]
            A = self.A_c.view(self.full_shape) if self.A_c is not None else None
            return A, [out.view(*lead, out.shape[1]) for out in self.outs_c]
        A = from_rows_first(self.A_c, self.full_shape, self.dim) if self.A_c is not None else None
        outs = [from_rows_first(out, [*self.full_shape[:-1], out.shape[1]], self.dim) for out in self.outs_c]
        return A, outs


class UnevenScatter:
    """``reduce_scatter(A @ B, dim)`` with rank ``r`` receiving ``sizes[r]`` rows (N columns along the last
    dim), in canonical form."""

    def __init__(self, A: torch.Tensor, B: torch.Tensor, dim: int, sizes: Sequence[int], rank: int,
                 dim_sizes: Sequence[int]) -> None:
        self.dim, self.rank, self.sizes = dim, rank, list(sizes)
        self.n_scatter = dim == A.dim() - 1
        self.out_shape = [*A.shape[:-1], B.shape[1]]
        self.out_shape[dim] = dim_sizes[rank]
        self.A_c = rows_first(A, 0 if self.n_scatter else dim)
        self.B = B
        self.starts = offsets(self.sizes)
        own = self.sizes[rank]
        if self.n_scatter:
            self.rows, self.cols = self.A_c.shape[0], own
        else:
            self.rows, self.cols = own, B.shape[1]
        self.out_c = A.new_empty((self.rows, self.cols))

    def partial(self, b: int, lo: int, hi: int, out: torch.Tensor) -> None:
        """This rank's partial of destination block ``b``'s rows ``lo:hi`` (row scatter)."""
        base = self.starts[b]
        torch.mm(self.A_c[base + lo:base + hi], self.B, out=out)

    def finish(self, reduce_op: str, world: int) -> torch.Tensor:
        if reduce_op == "avg":
            self.out_c.div_(world)
        if self.n_scatter:
            return self.out_c.view(self.out_shape)
        return from_rows_first(self.out_c, self.out_shape, self.dim)


def _clip(lo: int, hi: int, size: int) -> tuple[int, int]:
    return min(lo, size), min(hi, size)


# -- sequential, bulk, chunked ----------------------------------------------------------------

def _pieces(rows: int, plan, chunks: int | None) -> list[tuple[int, int]]:
    if chunks is not None:
        return piece_bounds(rows, chunks)
    return bounds(pipeline_pieces(rows, plan)) if rows > 0 else []


def gather_matmul(A_shard, Bs, dim, need_A, rt, plan, sizes, dim_sizes, *, chunks: int | None = None):
    """All-gather + matmul of uneven shards, in pieces over the largest shard (``chunks=1``: one piece)."""
    w, rank = rt.world, rt.rank
    g = UnevenGather(A_shard, Bs, dim, sizes, rank, dim_sizes, need_A=need_A)
    way = way_of(plan.splits)
    if g.k_gather:
        return _gather_columns(g, rt, plan, way, chunks)
    pieces = _pieces(max(sizes), plan, chunks)
    whole = len(pieces) == 1

    def piece_sizes(i):
        lo, hi = pieces[i]
        return [max(0, b - a) for a, b in (_clip(lo, hi, s) for s in sizes)]

    def stage(i):
        if whole and g.A_c is not None:
            return g.A_c
        return rt.ctx.buffer(f"uneven.ag{i % DEPTH}", (sum(piece_sizes(i)), g.Kc))

    def communicate(i):
        lo, hi = pieces[i]
        a, b = _clip(lo, hi, sizes[rank])
        return all_gather_rows(rt.transport, stage(i), g.local[a:b], piece_sizes(i), way=way,
                               buffer=rt.ctx.buffer, tag=f"uneven.ag{i % DEPTH}")

    def consume(i):
        lo, hi = pieces[i]
        st, at = stage(i), offsets(piece_sizes(i))
        for src in range(w):
            a, b = _clip(lo, hi, sizes[src])
            if b <= a:
                continue
            blk = st[at[src]:at[src + 1]]
            g.compute_rows(src, a, b, blk)
            if g.A_c is not None and not whole:
                g.block(g.A_c, src, a, b).copy_(blk)

    run_pipeline(len(pieces), communicate=communicate, consume=consume, depth=DEPTH)
    return g.finish()


def _gather_columns(g: UnevenGather, rt, plan, way: str, chunks: int | None):
    """Gathering the last dim: row pieces of every rank's ``[R, K_r]`` shard travel transposed."""
    sizes = g.sizes
    pieces = _pieces(g.R, plan, chunks)

    def stage(i):
        lo, hi = pieces[i]
        return rt.ctx.buffer(f"uneven.agk{i % DEPTH}", (g.total, hi - lo))

    def communicate(i):
        lo, hi = pieces[i]
        mine = rt.ctx.buffer(f"uneven.agk_in{i % DEPTH}", (sizes[g.rank], hi - lo))
        mine.copy_(g.local[lo:hi].t())
        return all_gather_rows(rt.transport, stage(i), mine, sizes, way=way, buffer=rt.ctx.buffer,
                               tag=f"uneven.agk{i % DEPTH}")

    def consume(i):
        lo, hi = pieces[i]
        a_rows = stage(i).t()  # [rows, total K]
        for B, out in zip(g.Bs, g.outs_c):
            torch.mm(a_rows, B, out=out[lo:hi])
        if g.A_c is not None:
            g.A_c[lo:hi].copy_(a_rows)

    run_pipeline(len(pieces), communicate=communicate, consume=consume, depth=DEPTH)
    return g.finish()


def matmul_scatter(A, B, reduce_op, dim, rt, plan, sizes, dim_sizes, *, chunks: int | None = None):
    """Matmul + reduce-scatter to uneven blocks, in pieces over the largest block."""
    w, rank = rt.world, rt.rank
    s = UnevenScatter(A, B, dim, sizes, rank, dim_sizes)
    way = way_of(plan.splits)
    if s.n_scatter:
        return _scatter_columns(s, rt, plan, way, chunks, reduce_op)
    pieces = _pieces(max(sizes), plan, chunks)

    def piece_sizes(i):
        lo, hi = pieces[i]
        return [max(0, b - a) for a, b in (_clip(lo, hi, sz) for sz in sizes)]

    def stage(i):
        return rt.ctx.buffer(f"uneven.rs{i % DEPTH}", (sum(piece_sizes(i)), s.cols))

    def produce(i):
        lo, hi = pieces[i]
        st, at = stage(i), offsets(piece_sizes(i))
        for b in range(w):
            a, c = _clip(lo, hi, sizes[b])
            if c > a:
                s.partial(b, a, c, st[at[b]:at[b + 1]])

    def communicate(i):
        lo, hi = pieces[i]
        a, c = _clip(lo, hi, sizes[rank])
        return reduce_scatter_rows(rt.transport, s.out_c[a:c], stage(i), piece_sizes(i), way=way,
                                   buffer=rt.ctx.buffer, tag=f"uneven.rs{i % DEPTH}")

    run_pipeline(len(pieces), produce=produce, communicate=communicate, depth=DEPTH)
    return s.finish(reduce_op, w)


def _scatter_columns(s: UnevenScatter, rt, plan, way: str, chunks: int | None, reduce_op: str):
    """Scattering the last dim: row pieces of the product travel transposed (``[N, rows]``, N blocks)."""
    sizes = s.sizes
    pieces = _pieces(s.rows, plan, chunks)
    landed: dict[int, torch.Tensor] = {}

    def produce(i):
        lo, hi = pieces[i]
        prod = rt.ctx.buffer(f"uneven.rsn_prod{i % DEPTH}", (hi - lo, s.B.shape[1]))
        torch.mm(s.A_c[lo:hi], s.B, out=prod)
        stage = rt.ctx.buffer(f"uneven.rsn{i % DEPTH}", (s.B.shape[1], hi - lo))
        stage.copy_(prod.t())

    def communicate(i):
        lo, hi = pieces[i]
        stage = rt.ctx.buffer(f"uneven.rsn{i % DEPTH}", (s.B.shape[1], hi - lo))
        out = landed[i] = rt.ctx.buffer(f"uneven.rsn_out{i % DEPTH}", (sizes[s.rank], hi - lo))
        pending = reduce_scatter_rows(rt.transport, out, stage, sizes, way=way, buffer=rt.ctx.buffer,
                                      tag=f"uneven.rsn{i % DEPTH}")
        return _After(pending, lambda: s.out_c[lo:hi].copy_(out.t()))

    run_pipeline(len(pieces), produce=produce, communicate=communicate, depth=DEPTH)
    return s.finish(reduce_op, rt.world)


class _After:
    __slots__ = ("_pending", "_then")

    def __init__(self, pending, then) -> None:
        self._pending, self._then = pending, then

    def wait(self) -> None:
        self._pending.wait()
        self._then()


def sequential_gather(A_shard, Bs, dim, need_A, rt, plan, sizes, dim_sizes):
    return gather_matmul(A_shard, Bs, dim, need_A, rt, plan, sizes, dim_sizes, chunks=1)


def sequential_scatter(A, B, reduce_op, dim, rt, plan, sizes, dim_sizes):
    return matmul_scatter(A, B, reduce_op, dim, rt, plan, sizes, dim_sizes, chunks=1)


def run_uneven(prep, kind: str, *args):
    """Run an uneven ``ag_mm`` / ``mm_rs`` call prepared by :func:`hocket.ops.dispatch.prepare` (every rank
    has the same Site and Plan by then, so a refusal here is raised on every rank alike)."""
    from torch.profiler import record_function

    from hocket.transport.pending import set_current_call
    from hocket.transport.uneven import check_way

    plan, site = prep.plan, prep.site
    if plan.hierarchy is not None:
        raise ValueError(f"hocket.{_OPS[kind]}: hierarchy={plan.hierarchy!r} runs even shards only; leave "
                         f"Plan.hierarchy None for uneven shards (shard_rows={list(site.shard_rows)})")
    if plan.protocol is not None:
        raise ValueError(f"hocket.{_OPS[kind]}: protocol={plan.protocol!r} (a copy-engine peer protocol) runs even "
                         f"shards only; leave Plan.protocol None: uneven shards move through the transport's "
                         f"collectives")
    fn = uneven_executor(kind, plan.strategy, last_dim=site.dim == -1, order=plan.order, transport=plan.transport)
    if plan.strategy not in ("ring", "bidir_ring"):
        check_way(way_of(plan.splits), plan.transport, plan.strategy)
    set_current_call(prep.where)
    try:
        if torch.autograd._profiler_enabled():
            with record_function(prep.label + "[uneven]"):
                return fn(*args)
        return fn(*args)
    finally:
        set_current_call("")
