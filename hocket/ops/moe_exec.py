"""The executors of the two MoE halves, one per strategy, registered with :mod:`hocket.ops.executors`.

Signatures (what ``torch.ops.hocket.all_to_all_grouped_mm`` / ``grouped_mm_all_to_all`` run, layouts in
:mod:`hocket.ops.moe_layout`):

* ``a2a_mm(send, counts, w, wgrad_lhs, topk, rt, plan) -> (out, received, wgrad)``: dispatch ``send`` (the
  canonical send buffer), then ``out = received @ w[e]`` per expert; with ``wgrad_lhs`` (the backward of
  ``mm_a2a``) also ``wgrad[e] = wgrad_lhs_e^T @ received_e``, computed piece by piece after each piece's data
  GEMM while the next pieces are in flight;
* ``mm_a2a(x, counts, w, wgrad_lhs, wgrad_rhs, topk, rt, plan) -> (out, wgrad)``: ``x @ w[e]`` per expert,
  then combine it back to the senders' canonical send buffer; with ``wgrad_lhs``/``wgrad_rhs`` (the backward
  of ``a2a_mm``) also ``wgrad[e] = wgrad_lhs_e^T @ wgrad_rhs_e``, computed while the first combine is in
  flight (data-gradient GEMMs first, the weight-gradient GEMM in the all-to-all gap).

Orders (``issue``/``wait`` of a piece's all-to-all; ``gemm`` its grouped GEMM; ``side`` the shared expert of a
forward call when ``moe_experts`` got one, :func:`side_work`):

* ``sequential``: dispatch, wait, GEMM / GEMM, combine, wait (no side work: ``moe_experts`` computes the shared
  expert after the call);
* ``shared_overlap``: as sequential, with the side work between the dispatch's issue and wait;
* ``token_blocks`` (``Plan.chunks`` blocks): dispatch block i+1 issued before block i's GEMM, waited after it;
  combine of block i-1 waited after block i's GEMM;
* ``expert_groups`` (``min(Plan.chunks, e_local)`` groups of local experts): every group's dispatch issued
  first, groups computed in order as they land; combine of group g issued after its GEMM, waited after the
  next group's;
* ``per_source``: the peers' rounds issued first, this rank's own rows (no transfer) computed while they
  travel, then each source as it lands; combine: peers' rows computed and sent first, own rows last.

Row work per piece (maps: :mod:`hocket.ops.moe_layout`, built once per routing and shared by the four calls of a
step, :func:`_maps`): ``a2a_mm`` gathers the piece's send rows (nothing for a whole piece, a slice for a source
block), receives into a new buffer, permutes it once into expert-major order (not at all for one block), runs
the grouped GEMM on it, and for a piece writes ``out`` and ``received`` into the canonical buffers;
``mm_a2a`` gathers the piece's expert-major rows (nothing for a whole piece, a slice for an expert group under
``exchanged``), runs the grouped GEMM, permutes the result back into the order it travels in, sends it and
writes what arrives into the canonical send buffer. The canonical buffers a piece writes are left
uninitialised under ``exchanged`` (the pieces cover every row once) and are zeros with one spare row (the
padding rows' target) under ``padded``. The grouped GEMM zeroes its tail only where rows may follow the last
group (``padded``). Per-piece weight gradients of expert groups (disjoint experts) are concatenated, those of
token blocks and sources summed (on the CPU under ``exchanged`` inside the GEMMs, ``addmm_``). Outputs never
alias inputs: a gathered slice of an input feeds a transfer or a GEMM only.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

import torch

from hocket.core.plan import Plan
from hocket.ops.executors import register_executor
from hocket.ops.grouped_mm import grouped_mm, grouped_wgrad
from hocket.ops.moe_layout import (
    EXCHANGED,
    PADDED,
    MoeLayout,
    PieceMap,
    canvas,
    expert_major,
    from_expert_major,
    gather_rows,
    scatter_rows,
)
from hocket.ops.moe_trace import TracedTransport, note
from hocket.strategies import spec, strategies_for
from hocket.strategies.moe import MOE_TRANSPORTS
from hocket.transport.group import GroupHandle

MOE_STRATEGIES = strategies_for("a2a_mm")
"""the strategies this module runs (every spec that serves the MoE kinds: :mod:`hocket.strategies.moe`)."""


class SideWork:
    """One callable run once in a forward call's first dispatch gap (the shared expert); ``result`` holds its
    output, ``done`` whether it ran."""

    def __init__(self, fn: Callable[[], torch.Tensor]) -> None:
        self.fn = fn
        self.result: torch.Tensor | None = None
        self.done = False

    def run(self) -> None:
        if not self.done:
            self.done = True
            note("shared", "shared")
            self.result = self.fn()


_LOCAL = threading.local()


def side_work(work: SideWork | None) -> None:
    """Hand ``work`` to the next ``a2a_mm`` executor on this thread (None clears it)."""
    _LOCAL.side = work


def _take_side() -> SideWork | None:
    work = getattr(_LOCAL, "side", None)
    _LOCAL.side = None
    return work


@dataclass
class MoeRuntime:
    group: GroupHandle
    transport: object
    side: SideWork | None = None

    @property
    def world(self) -> int:
        return self.group.world

    @property
    def rank(self) -> int:
        return self.group.rank


class _Done:
    def wait(self) -> None:
        return None


def _splits(caps: tuple[int, ...]) -> list[int] | None:
    return None if len(set(caps)) == 1 else list(caps)


def _a2a(rt: MoeRuntime, label: str, out: torch.Tensor, inp: torch.Tensor, out_caps, in_caps):
    if rt.world == 1:
        out.copy_(inp)
        note("issue", label)
        note("wait", label)
        return _Done()
    transport = rt.transport.label(label) if isinstance(rt.transport, TracedTransport) else rt.transport
    return transport.all_to_all(out, inp.contiguous(), _splits(out_caps), _splits(in_caps))


def _gemm(rows: torch.Tensor, w: torch.Tensor, pm: PieceMap, label: str) -> torch.Tensor:
    """``rows`` (expert-major, ``pm``'s groups) times ``w[e]`` per expert; rows past the last group zero."""
    note("gemm", label)
    return grouped_mm(rows, w, pm.offs, end=rows.shape[0] if pm.exact else None)


def _wgrad(lhs: torch.Tensor, rhs: torch.Tensor, pm: PieceMap, label: str,
           total: torch.Tensor | None = None) -> torch.Tensor:
    """``lhs_e^T @ rhs_e`` per local expert of ``pm`` (both expert-major): ``[e_local, k', n']``, or only the
    piece's experts ``pm.experts`` when it names them; added into ``total`` when given."""
    note("wgrad", label)
    if pm.experts is not None:
        return grouped_wgrad(lhs, rhs, pm.offs[pm.experts[0]:pm.experts[1]])
    return grouped_wgrad(lhs, rhs, pm.offs, out=total, ends=pm.ends)


def mode_of(plan: Plan) -> str:
    return plan.splits or EXCHANGED


def layout_for(counts: torch.Tensor, rt: MoeRuntime, plan: Plan, rows: int, topk: int) -> MoeLayout:
    mode = mode_of(plan)
    return MoeLayout(counts, rank=rt.rank, world=rt.world, mode=mode,
                     block_rows=rows // rt.world if mode == PADDED else 0, topk=topk)


def _groups(e_local: int, n: int) -> list[tuple[int, int]]:
    n = max(1, min(n, e_local))
    bounds = [e_local * g // n for g in range(n + 1)]
    return [(bounds[g], bounds[g + 1]) for g in range(n)]


def pieces(lay: MoeLayout, plan: Plan) -> list[tuple[object, object, bool]]:
    """``(send selection, receive selection, local)`` of every all-to-all of ``plan`` (module docstring)."""
    s, r = lay.send, lay.recv
    if plan.strategy == "token_blocks":
        n = plan.chunks
        return [(lay.token_block(s, b, n), lay.token_block(r, b, n), False) for b in range(n)]
    if plan.strategy == "expert_groups":
        return [(lay.expert_group(s, g0, g1), lay.expert_group(r, g0, g1), False)
                for g0, g1 in _groups(lay.e_local, plan.chunks)]
    if plan.strategy == "per_source":
        w, me = lay.world, lay.rank
        return [(lay.source(s, (me + j) % w), lay.source(r, (me - j) % w), j == 0) for j in range(w)]
    return [(lay.whole(s), lay.whole(r), False)]


_MAPS: dict[tuple, tuple] = {}
MAPS_KEPT = 16
"""routings kept: a training step's four MoE op calls (two forward, two backward) share one entry"""


def _maps(counts: torch.Tensor, rt: MoeRuntime, plan: Plan, rows: int, topk: int, device: torch.device):
    """``(layout, [(send map, receive map, local)], whole receive map)`` of one call, built once per routing:
    cached by the counts (their values when on the CPU, the tensor itself on a device: no host sync) and what
    else the maps depend on (the rows only under ``padded``, where they are ``world * L`` for every call of a
    step), so the forward and backward calls of both ops share one entry."""
    ident = counts.numpy().tobytes() if counts.device.type == "cpu" else (id(counts), counts._version)
    mode = mode_of(plan)
    key = (ident, tuple(counts.shape), rt.rank, rt.world, mode, plan.strategy, plan.chunks,
           rows if mode == PADDED else 0, topk, str(device))
    hit = _MAPS.get(key)
    if hit is not None and (counts.device.type == "cpu" or hit[0] is counts):
        return hit[1:]
    lay = layout_for(counts, rt, plan, rows, topk)
    maps = [(lay.piece_map(lay.send, s).to(device), lay.piece_map(lay.recv, r).to(device), local)
            for s, r, local in pieces(lay, plan)]
    if len(maps) == 1 and maps[0][1].whole:
        whole = maps[0][1]
    else:
        whole = lay.piece_map(lay.recv, lay.whole(lay.recv)).to(device)
    if len(_MAPS) >= MAPS_KEPT:
        _MAPS.pop(next(iter(_MAPS)))
    _MAPS[key] = (counts, lay, maps, whole)
    return lay, maps, whole


# -- a2a_mm: dispatch + the first grouped GEMM --------------------------------------------------------------

def run_a2a_mm(send, counts, w, wgrad_lhs, topk, rt: MoeRuntime, plan: Plan):
    """The ``a2a_mm`` executor of every MoE strategy (the order is ``plan.strategy``'s, module docstring)."""
    lay, maps, _ = _maps(counts, rt, plan, send.shape[0], topk, send.device)
    k, n = w.shape[1], w.shape[2]
    rows = lay.recv.rows
    whole = len(maps) == 1 and maps[0][1].whole
    out = None if whole else canvas(send, rows, n, maps[0][1])
    received = None if whole else canvas(send, rows, k, maps[0][1])
    pending: dict[int, tuple] = {}
    result: dict[str, torch.Tensor] = {}
    parts: list[torch.Tensor] = []
    by_group = plan.strategy == "expert_groups"
    wgrad = None

    def issue(i: int) -> None:
        sm, rm, local = maps[i]
        sbuf = gather_rows(send, sm)
        if local:
            pending[i] = (_Done(), sbuf)
            return
        rbuf = send.new_empty((rm.rows, k))
        pending[i] = (_a2a(rt, f"dispatch:{i}", rbuf, sbuf, rm.caps, sm.caps), rbuf)

    def compute(i: int) -> None:
        nonlocal wgrad
        _, rm, _ = maps[i]
        handle, rbuf = pending.pop(i)
        handle.wait()
        em = expert_major(rbuf, rm)
        obuf = _gemm(em, w, rm, f"a2a_mm:{i}")
        if whole:
            result["out"], result["recv"] = obuf, em
        else:
            scatter_rows(out, rm, obuf)
            scatter_rows(received, rm, em)
        if wgrad_lhs is not None:  # expert groups hold disjoint experts: concatenated, never summed
            part = _wgrad(gather_rows(wgrad_lhs, rm), em, rm, f"a2a_mm:{i}", None if by_group else wgrad)
            if by_group:
                parts.append(part)
            else:
                wgrad = part

    side = rt.side if plan.strategy != "sequential" else None
    count = len(maps)
    if plan.strategy == "token_blocks":
        issue(0)
        if side:
            side.run()
        for i in range(count):
            if i + 1 < count:
                issue(i + 1)
            compute(i)
    elif plan.strategy == "per_source":
        for i in range(1, count):
            issue(i)
        issue(0)
        if side:
            side.run()
        for i in range(count):
            compute(i)
    else:
        for i in range(count):
            issue(i)
        if side:
            side.run()
        for i in range(count):
            compute(i)
    if parts:
        wgrad = parts[0] if len(parts) == 1 else torch.cat(parts)
    if whole:
        return result["out"], result["recv"], wgrad
    return out[:rows], received[:rows], wgrad


# -- mm_a2a: the second grouped GEMM + combine ----------------------------------------------------------------

def run_mm_a2a(x, counts, w, wgrad_lhs, wgrad_rhs, topk, rt: MoeRuntime, plan: Plan):
    """The ``mm_a2a`` executor of every MoE strategy (module docstring)."""
    lay, maps, whole_recv = _maps(counts, rt, plan, x.shape[0], topk, x.device)
    n = w.shape[2]
    rows = lay.send.rows
    whole = len(maps) == 1 and maps[0][0].whole
    out = None if whole else canvas(x, rows, n, maps[0][0])
    pending: dict[int, tuple] = {}
    result: dict[str, torch.Tensor] = {}
    wgrad: list = [None]

    def weight_grad() -> None:
        if wgrad_lhs is not None and wgrad[0] is None:
            wgrad[0] = _wgrad(wgrad_lhs, wgrad_rhs, whole_recv, "mm_a2a")

    def produce(i: int) -> None:
        sm, rm, local = maps[i]
        ybuf = from_expert_major(_gemm(gather_rows(x, rm), w, rm, f"mm_a2a:{i}"), rm)
        if local:
            pending[i] = (_Done(), ybuf)
            return
        sbuf = x.new_empty((sm.rows, n))
        pending[i] = (_a2a(rt, f"combine:{i}", sbuf, ybuf, sm.caps, rm.caps), sbuf)

    def finish(i: int) -> None:
        sm = maps[i][0]
        handle, sbuf = pending.pop(i)
        handle.wait()
        if whole:
            result["out"] = sbuf
        else:
            scatter_rows(out, sm, sbuf)

    count = len(maps)
    if plan.strategy in ("token_blocks", "expert_groups"):
        produce(0)
        weight_grad()
        for i in range(1, count):
            produce(i)
            finish(i - 1)
        finish(count - 1)
    elif plan.strategy == "per_source":
        for i in range(1, count):
            produce(i)
            weight_grad()
        produce(0)
        weight_grad()
        for i in range(count):
            finish(i)
    else:
        produce(0)
        weight_grad()
        finish(0)
    return (result["out"] if whole else out[:rows]), wgrad[0]


def register() -> None:
    for name in MOE_STRATEGIES:
        register_executor(name, "a2a_mm", run_a2a_mm)
        register_executor(name, "mm_a2a", run_mm_a2a)


register()


def check_moe_plan(plan: Plan) -> Plan:
    """``plan`` with ``splits`` filled in (``exchanged`` for None), or a ValueError naming the field and fix."""
    if plan.strategy not in MOE_STRATEGIES:
        raise ValueError(f"plan: strategy={plan.strategy!r} does not run hocket.ops.moe_experts; use one of "
                         f"{MOE_STRATEGIES}")
    if plan.transport not in MOE_TRANSPORTS:
        raise ValueError(f"plan: transport={plan.transport!r} does not run hocket.ops.moe_experts; use one of "
                         f"{MOE_TRANSPORTS}")
    found = spec(plan.strategy)
    if plan.chunks < found.min_chunks:
        raise ValueError(f"plan: strategy={plan.strategy!r} needs chunks >= {found.min_chunks} (got chunks="
                         f"{plan.chunks}); use e.g. {{'strategy': {plan.strategy!r}, 'chunks': {found.min_chunks}}} "
                         f"or strategy='sequential'")
    if found.fixed_chunks and plan.chunks != 1:
        raise ValueError(f"plan: strategy={plan.strategy!r} has no chunks (got chunks={plan.chunks}); leave "
                         f"chunks=1")
    if plan.order != "natural" or plan.substitute or plan.hierarchy or plan.split_sizes or plan.comm_sms:
        raise ValueError(f"plan {plan.describe()}: MoE plans take strategy, chunks, transport and splits only; "
                         f"leave order, substitute, hierarchy, split_sizes and comm_sms at their defaults")
    return plan if plan.splits else plan.with_(splits=EXCHANGED)
