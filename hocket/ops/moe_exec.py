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


def _pm_to(pm: PieceMap, device: torch.device) -> PieceMap:
    if pm.src.device == device:
        return pm
    return PieceMap(pm.src.to(device), None if pm.perm is None else pm.perm.to(device), pm.offs.to(device),
                    pm.caps, pm.canonical_rows, pm.whole, pm.padding)


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


def _gemm(buf: torch.Tensor, w: torch.Tensor, pm: PieceMap, label: str) -> torch.Tensor:
    note("gemm", label)
    rows = expert_major(buf, pm)
    end = None if pm.padding else rows.shape[0]  # exact layouts: every row is some expert's (offs[-1] == rows)
    return from_expert_major(grouped_mm(rows, w, pm.offs, end=end), pm)


def _wgrad(lhs: torch.Tensor, rhs: torch.Tensor, pm: PieceMap, label: str) -> torch.Tensor:
    note("wgrad", label)
    return grouped_wgrad(expert_major(lhs, pm), expert_major(rhs, pm), pm.offs)


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
"""layouts kept: a training step's four MoE op calls (two forward, two backward) share one routing"""


def _maps(counts: torch.Tensor, rt: MoeRuntime, plan: Plan, rows: int, topk: int, device: torch.device):
    """``(layout, [(send map, receive map, local)], whole receive map)`` of one call, cached by the counts (their
    values when on the CPU, the tensor itself on a device: no host sync) and everything else they depend on."""
    ident = counts.numpy().tobytes() if counts.device.type == "cpu" else (id(counts), counts._version)
    key = (ident, tuple(counts.shape), rt.rank, rt.world, mode_of(plan), plan.strategy, plan.chunks, rows, topk,
           str(device))
    hit = _MAPS.get(key)
    if hit is not None and (counts.device.type == "cpu" or hit[0] is counts):
        return hit[1:]
    lay = layout_for(counts, rt, plan, rows, topk)
    maps = [(_pm_to(lay.piece_map(lay.send, s), device), _pm_to(lay.piece_map(lay.recv, r), device), local)
            for s, r, local in pieces(lay, plan)]
    whole = _pm_to(lay.piece_map(lay.recv, lay.whole(lay.recv)), device)
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
    out_ext = None if whole else send.new_zeros((rows + 1, n))
    recv_ext = None if whole else send.new_zeros((rows + 1, k))
    wgrad = None if wgrad_lhs is None else send.new_zeros((lay.e_local, wgrad_lhs.shape[1], k))
    pending: dict[int, tuple] = {}
    result: dict[str, torch.Tensor] = {}

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
        obuf = _gemm(rbuf, w, rm, f"a2a_mm:{i}")
        if whole:
            result["out"], result["recv"] = obuf, rbuf
        else:
            scatter_rows(out_ext, rm, obuf)
            scatter_rows(recv_ext, rm, rbuf)
        if wgrad is not None:
            wgrad += _wgrad(gather_rows(wgrad_lhs, rm), rbuf, rm, f"a2a_mm:{i}")

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
    if whole:
        return result["out"], result["recv"], wgrad
    return out_ext[:rows], recv_ext[:rows], wgrad


# -- mm_a2a: the second grouped GEMM + combine ----------------------------------------------------------------

def run_mm_a2a(x, counts, w, wgrad_lhs, wgrad_rhs, topk, rt: MoeRuntime, plan: Plan):
    """The ``mm_a2a`` executor of every MoE strategy (module docstring)."""
    lay, maps, whole_recv = _maps(counts, rt, plan, x.shape[0], topk, x.device)
    n = w.shape[2]
    rows = lay.send.rows
    whole = len(maps) == 1 and maps[0][0].whole
    out_ext = None if whole else x.new_zeros((rows + 1, n))
    pending: dict[int, tuple] = {}
    result: dict[str, torch.Tensor] = {}
    wgrad: list = [None]

    def weight_grad() -> None:
        if wgrad_lhs is not None and wgrad[0] is None:
            wgrad[0] = _wgrad(wgrad_lhs, wgrad_rhs, whole_recv, "mm_a2a")

    def produce(i: int) -> None:
        sm, rm, local = maps[i]
        ybuf = _gemm(gather_rows(x, rm), w, rm, f"mm_a2a:{i}")
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
            scatter_rows(out_ext, sm, sbuf)

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
    out = result["out"] if whole else out_ext[:rows]
    return out, wgrad[0]


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
