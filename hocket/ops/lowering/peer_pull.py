"""``chunked`` over ``transport="copy_engine"`` with the barrier protocols ``pull`` and ``put`` (see
:mod:`hocket.core.peer_protocol` for when each runs instead of the flag-driven push pipe).
The pull protocol is described here; ``put`` (:func:`gather_matmul_put`) swaps steps 1 and 3:
each rank copies its data straight into the peers' slots, then joins the barrier.

A :class:`PullPipe` owns, per operator shape class and group, a symmetric buffer of two
*slots* (call parity ``i % 2``), a copy stream and recycled CUDA events. One call:

1. this rank writes what its peers need into its slot of this call's parity (all-gather: its
   shard, by a copy on the copy stream; reduce-scatter: the peers' partial blocks, computed
   straight into the slot by the GEMMs on the caller's stream);
2. the copy stream joins one device-side barrier of the group (bounded by ``HOCKET_TIMEOUT_S``):
   after it every peer's slot holds this call's data;
3. the copy stream copies the peers' data out of their slots (DMA over NVLink, no SMs), an
   event after each piece; the caller's stream waits on a piece's event before its GEMM (or
   the final sum) and computes this rank's own part meanwhile.

Why two slots are enough: a rank writes slot ``p`` in call ``i`` only after its barrier of call
``i - 1`` completed (stream order), and that barrier completes only once every peer reached it,
i.e. after every peer's copies out of slot ``p`` in call ``i - 2``. The host never blocks: no
flags, no spin kernels, no error mirrors, so a call issues about half the host work of the
push pipe (on 2xH200 host time bounds the small copy-engine cases: benchmarks/results/h200x2/2026-12-01_probes.md).

Calls planned for CUDA graph replays (inside ``hocket.ops.CapturedCall``, whose warm-up and capture
run under :func:`hocket.ops.planning.captured_planning`) cannot alternate parities: a replay repeats
the parity it was captured with. They use a pipe of their own (eager calls never touch its slots),
always slot 0, and end with a second barrier once this rank has read every slot it reads
(:meth:`PullPipe.end_replayable`): no rank starts its next call, and so writes a slot again, before
every peer has finished reading it. A replay is launched after the previous one ended on its
stream, so the same holds between replays. That second barrier is the price of a replayable call.
"""

from __future__ import annotations

import functools

import torch

from hocket.core.site import canonical_dtype
from hocket.cost.epilogue import DEFAULT_GBPS, DEFAULT_TFLOPS, cluster_rates
from hocket.kernels.peer_schedule import receive_order, send_order
from hocket.ops.lowering.peer_pipe import REGISTRIES, PipeRegistry
from hocket.ops.lowering.problems import GatherMatmul, ScatterMatmul
from hocket.ops.planning import planning_captured
from hocket.strategies.pieces import PEER_MAX_PIECES, bounds, peer_pipe_pieces
from hocket.strategies.pieces import own_block_split as split_own_block
from hocket.transport.group import GroupHandle
from hocket.transport.stream_switch import on_stream
from hocket.transport.symm_mem import SymmBuffer

MAX_PIECES = PEER_MAX_PIECES
"""pieces one rank pulls from one peer in one call (each has its own event)."""


class PullPipe:
    """Slots, copy stream and events of one shape class on one group (module docstring)."""

    def __init__(self, *, group: GroupHandle, device: torch.device, slot_shape: tuple[int, ...],
                 dtype: torch.dtype, label: str = "") -> None:
        self.group = group
        self.rank, self.world = group.rank, group.world
        self.device = torch.device(device)
        self.label = label
        self.buf = SymmBuffer(group=group, device=self.device, regions=[("slots", (2, *slot_shape), dtype)])
        self.stream = torch.cuda.Stream(self.device)
        self.ready = torch.cuda.Event()
        self._events: list[torch.cuda.Event] = []
        self._slots: dict[tuple[int, int], torch.Tensor] = {}
        self.calls = 0
        self._closed = False
        self.buf.barrier(channel=0)  # every rank has its buffer before the first call's copies
        torch.cuda.synchronize(self.device)

    def next_parity(self) -> int:
        if self._closed:
            raise RuntimeError(f"pull pipe {self.label!r} was closed; close_peer_pipes() frees it, the next call "
                               f"builds a new one")
        parity = self.calls & 1
        self.calls += 1
        return parity

    def slot(self, rank: int, parity: int) -> torch.Tensor:
        """Slot ``parity`` of rank ``rank`` (this rank's own when ``rank`` is ours)."""
        key = (rank, parity)
        view = self._slots.get(key)
        if view is None:
            view = self._slots[key] = self.buf.peer(rank, "slots")[parity]
        return view

    def events(self, count: int) -> list[torch.cuda.Event]:
        """``count`` events, reused every call (a wait refers to the record made before it)."""
        while len(self._events) < count:
            self._events.append(torch.cuda.Event())
        return self._events[:count]

    def barrier(self) -> None:
        self.buf.barrier(channel=0)

    def end_replayable(self, cur: torch.cuda.Stream, read_on_cur: bool) -> None:
        """The closing barrier of a replayable call (module docstring) on the copy stream, after this
        rank's reads of the slots (``read_on_cur``: some of them were on the caller's stream, so the
        barrier waits for it); the caller's stream then waits for the barrier."""
        if read_on_cur:
            self.ready.record(cur)
            self.stream.wait_event(self.ready)
        with on_stream(self.stream):
            self.barrier()
        cur.wait_stream(self.stream)

    def close(self) -> None:
        if self._closed:
            return
        torch.cuda.synchronize(self.device)
        self._slots.clear()
        self.buf.close()
        self._closed = True


PULLS = PipeRegistry(PullPipe)
REGISTRIES.append(PULLS)  # hocket.ops.lowering.peer_pipe.close_peer_pipes closes them too


def own_block_split(s: ScatterMatmul, group: GroupHandle) -> tuple[int, int]:
    """``(plain, fused)`` rows of this rank's own block in a pull mm_rs of ``s`` on ``group``
    (:func:`hocket.strategies.pieces.own_block_split`, which the cost model calls too; the rates from
    the process planner's cluster description, the SM count of the output's device). Cached per block
    shape, dtype and group; benchmarks record it as the cut a line ran."""
    return _cut(s.rows, s.k, s.cols, s.out_c.dtype, group.ranks, group.rank, s.out_c.device.index)


@functools.lru_cache(maxsize=256)
def _cut(rows: int, k: int, cols: int, dtype: torch.dtype, ranks: tuple[int, ...], rank: int,
         device_index: int) -> tuple[int, int]:
    me = ranks[rank]
    tflops, gbps = _cluster_rates(me, ranks, canonical_dtype(dtype))
    sms = torch.cuda.get_device_properties(device_index).multi_processor_count
    return split_own_block(rows, k, cols, sources=len(ranks) - 1, itemsize=dtype.itemsize,
                           tflops=tflops, gbps=gbps, sms=sms)


def _cluster_rates(me: int, ranks: tuple[int, ...], dtype: str) -> tuple[float, float]:
    """(dense TFLOP/s, link GB/s) of global rank ``me``'s device and its links to ``ranks``, from the
    cluster description the process planner uses (``HOCKET_CLUSTER`` or the probed machine); the
    defaults of :mod:`hocket.cost.epilogue` where it has none or does not cover the group."""
    try:
        from hocket.ops.live import process_planner

        cluster = process_planner().cluster
    except (RuntimeError, ValueError, OSError):
        return DEFAULT_TFLOPS, DEFAULT_GBPS
    return cluster_rates(cluster, me, ranks, dtype)


def _pipe(rt, device, key: tuple, **kwargs) -> tuple[PullPipe, int, bool]:
    """(the pipe, this call's slot parity, whether the call is replayable): calls planned for CUDA
    graph replays get a pipe of their own and slot 0 (module docstring)."""
    replayable = planning_captured()
    pipe = PULLS.get(rt.group, device, key + (("replayable",) if replayable else ()), **kwargs)
    parity = pipe.next_parity()
    return pipe, (0 if replayable else parity), replayable


def gather_matmul(A_shard, Bs, dim, need_A, rt, plan):
    """All-gather (rows) + matmul: this rank's shard is multiplied while the peers' shards are
    pulled piece by piece; each piece's GEMM waits for its copy's event."""
    w, rank = rt.world, rt.rank
    g = GatherMatmul(A_shard, Bs, dim, w, rank, need_A=need_A)
    R = g.R
    dtype = g.local.dtype
    pipe, parity, replayable = _pipe(rt, g.local.device, ("ag", R, g.Kc, dtype), slot_shape=(R, g.Kc), dtype=dtype,
                                     label=f"all_gather_matmul pull [{w}x{R}, {g.Kc}] {dtype}")
    pieces = bounds(peer_pipe_pieces(R, plan.chunks))
    gathered = g.A_c if g.A_c is not None else rt.ctx.buffer("peer_pull.ag", (w * R, g.Kc))
    sources = receive_order(rank, w)
    events = pipe.events(len(sources) * len(pieces))
    cur = torch.cuda.current_stream(g.local.device)
    pipe.ready.record(cur)
    g.compute_rows(rank, 0, R, g.local)  # launched first: the device starts it while the host issues the pulls
    with on_stream(pipe.stream):
        pipe.stream.wait_event(pipe.ready)
        pipe.slot(rank, parity).copy_(g.local, non_blocking=True)
        pipe.barrier()
        k = 0
        for src in sources:
            remote = pipe.slot(src, parity)
            for lo, hi in pieces:
                gathered[src * R + lo:src * R + hi].copy_(remote[lo:hi], non_blocking=True)
                events[k].record(pipe.stream)
                k += 1
    k = 0
    for src in sources:
        for lo, hi in pieces:
            cur.wait_event(events[k])
            k += 1
            g.compute_rows(src, lo, hi, gathered[src * R + lo:src * R + hi])
    if g.A_c is not None:
        g.gathered_rows(rank).copy_(g.local)
    if replayable:
        pipe.end_replayable(cur, read_on_cur=False)  # the slots were read by the copy stream only
    return g.finish()


def matmul_scatter(A, B, reduce_op, dim, rt, plan):
    """Matmul + reduce-scatter in one piece: the peers' partial blocks are computed straight into
    this rank's slot, then pulled by their owners after the barrier while this rank computes its
    own block. The own block's *plain* rows (:func:`own_block_split`, :mod:`hocket.cost.epilogue`) are
    multiplied first, while the first source's partial of the *fused* rows is pulled straight into the output, whose GEMM (``addmm_``) then adds it in its epilogue; the
    plain rows' partials (and, on more than two ranks, the other sources' fused rows) are added in
    passes. Where the cut leaves no fused rows, the whole own block is multiplied first and every partial
    added after it."""
    w, rank = rt.world, rt.rank
    s = ScatterMatmul(A, B, dim, w)
    dtype = s.out_c.dtype
    device = s.out_c.device
    pipe, parity, replayable = _pipe(rt, device, ("rs", s.rows, s.cols, dtype), slot_shape=(w, s.rows, s.cols),
                                     dtype=dtype, label=f"matmul_reduce_scatter pull [{w}x{s.rows}, {s.cols}] {dtype}")
    mine = pipe.slot(rank, parity)
    for peer in send_order(rank, w):
        s.partial(peer, 0, s.rows, mine[peer])
    received = rt.ctx.buffer("peer_pull.rs", (w, s.rows, s.cols))
    sources = receive_order(rank, w)
    plain, fused = own_block_split(s, rt.group)
    fused_in, done = pipe.events(2)
    cur = torch.cuda.current_stream(device)
    pipe.ready.record(cur)
    with on_stream(pipe.stream):
        pipe.stream.wait_event(pipe.ready)
        pipe.barrier()
        if fused:  # the fused rows first: the first source's into the output, the others' beside it
            for i, src in enumerate(sources):
                dst = s.out_c[plain:] if i == 0 else received[src, plain:]
                dst.copy_(pipe.slot(src, parity)[rank, plain:], non_blocking=True)
            fused_in.record(pipe.stream)
        for src in sources:
            received[src, :plain].copy_(pipe.slot(src, parity)[rank, :plain], non_blocking=True)
        done.record(pipe.stream)
    s.partial(rank, 0, plain, s.out_c[:plain])
    if fused:
        cur.wait_event(fused_in)
        for src in sources[1:]:
            s.out_c[plain:].add_(received[src, plain:])
        s.accumulate(rank, plain, s.rows, s.out_c[plain:])
    cur.wait_event(done)
    for src in sources:
        s.out_c[:plain].add_(received[src, :plain])
    if replayable:
        pipe.end_replayable(cur, read_on_cur=False)  # the peers' slots were read by the copy stream only
    return s.finish(reduce_op)


def gather_matmul_put(A_shard, Bs, dim, need_A, rt, plan):
    """All-gather (rows) + matmul in one piece, the ``put`` protocol: this rank's shard is copied
    straight into every peer's slot (no staging copy), then the group's barrier tells every rank
    that its slot is full; the own shard is multiplied meanwhile, the peers' shards after it.
    (Safe with two slots for the same reason as the pull: a rank writes a peer's slot ``p`` in
    call ``i`` after its barrier of call ``i - 1``, which that peer reached only after its GEMMs of
    call ``i - 2`` had read slot ``p``.)"""
    w, rank = rt.world, rt.rank
    g = GatherMatmul(A_shard, Bs, dim, w, rank, need_A=need_A)
    R = g.R
    dtype = g.local.dtype
    pipe, parity, replayable = _pipe(rt, g.local.device, ("ag_put", R, g.Kc, dtype), slot_shape=(w, R, g.Kc),
                                     dtype=dtype, label=f"all_gather_matmul put [{w}x{R}, {g.Kc}] {dtype}")
    (done,) = pipe.events(1)
    cur = torch.cuda.current_stream(g.local.device)
    pipe.ready.record(cur)
    g.compute_rows(rank, 0, R, g.local)
    with on_stream(pipe.stream):
        pipe.stream.wait_event(pipe.ready)
        for peer in send_order(rank, w):
            pipe.slot(peer, parity)[rank].copy_(g.local, non_blocking=True)
        pipe.barrier()
        done.record(pipe.stream)
    cur.wait_event(done)
    mine = pipe.slot(rank, parity)
    for src in receive_order(rank, w):
        g.compute_rows(src, 0, R, mine[src])
        if g.A_c is not None:
            g.gathered_rows(src).copy_(mine[src])
    if replayable:
        pipe.end_replayable(cur, read_on_cur=True)  # this rank's GEMMs read its slot on the caller's stream
    if g.A_c is not None:
        g.gathered_rows(rank).copy_(g.local)
    return g.finish()
