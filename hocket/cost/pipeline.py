"""Build the stage pipeline (``stages.Stage``) of one Site under one Plan.

Per strategy (``S`` = the site's collective buffer, ``p`` = world, ``C`` = plan.chunks):

* ``sequential``: collective then GEMM (ag_mm), or GEMM then collective (mm_rs, mm_ar).
The pipelines mirror the executors in ``hocket.ops.lowering`` (same pieces, same kernels):

* ``chunked``: ``C`` pieces of every shard's (ag_mm) or destination block's (mm_rs) rows,
  even or ``plan.split_sizes`` (``hocket.core.pieces.piece_sizes``, as the executors cut them);
  piece i's collective overlaps another piece's GEMMs, which run one per source or
  destination block (``p`` kernels of the piece's rows: each pays a launch and the
  small-GEMM efficiency of the wave model); mm_ar pieces are plain row ranges.
* ``bulk``: the one-piece pipeline the executors run (``chunked`` with one piece): ag_mm
  gathers once, then runs the per-source GEMMs; mm_rs runs the ``p`` per-block GEMMs into
  a staging buffer, then one reduce-scatter; mm_ar one GEMM, then one all-reduce. It
  overlaps nothing, but pays the executor's per-block kernels and issue overhead.
* ``ring``: ``p`` steps of P2P send/recv to the next rank, each shard in ``C`` sub-steps;
  ag_mm computes on the shard in hand, mm_rs computes the partial for the next
  destination, adds the received running sum and passes it on; mm_ar runs the
  reduce-scatter ring, then an all-gather ring.
* ``bidir_ring``: two lanes, half of every shard (block) each way: each step talks to
  both neighbours (a mesh carries both at once, a switched port shares its bandwidth).
* ``substituted``: mm_ar's all-reduce as per-piece reduce-scatter, with each piece's
  all-gather queued behind the next piece's reduce-scatter (``rs_ag``); ag_mm with
  ``ring_p2p`` is the ring.
* ``tile_fused``: one persistent kernel over ``C`` flag groups (even; offload kernels cut
  ``hocket.core.pieces.fused_offload_sizes``): one launch, the whole GEMM's
  wave efficiency at our Triton kernel's share of the vendor rate
  (``compute.FUSED_GEMM_EFFICIENCY``), a flag wait per group; with an SM-driven transport the kernel's grid is
  capped below the SM count (the SMs the transfer needs).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field, replace

from hocket.cost import comm as comm_model
from hocket.cost import replay
from hocket.cost.calibration import CalibrationView
from hocket.cost.compute import FUSED_BLOCK_M, FUSED_GEMM_EFFICIENCY, achievable_tflops, gemm_ms, launch_ms, memory_ms
from hocket.cost.contention import (SM_KINDS, SM_STARVED_SLOWDOWN, contention, default_contention, fills_device,
                                   sms_left_to_gemm)
from hocket.cost.issue import issue_ms, issue_table
from hocket.cost.local_first import ag_local_first, rs_own_block_last, runs_local_first
from hocket.cost.peer_pipelines import ag_peer, ar_peer, rs_peer, runs_peer_pipe
from hocket.cost.stages import Stage
from hocket.env import host_stage_piece_bytes, host_stage_signal
from hocket.core.pieces import fused_offload_sizes, piece_sizes

ENTRY_STAGE = "issue:entry"
FLAG_WAIT_US = 2.0
"""A persistent kernel's wait on one chunk flag (acquire load + spin exit) per group."""

_KIND_STRATEGIES = {
    "ag_mm": ("sequential", "bulk", "chunked", "ring", "bidir_ring", "tile_fused", "substituted"),
    "mm_rs": ("sequential", "bulk", "chunked", "ring", "bidir_ring", "tile_fused"),
    "mm_ar": ("sequential", "bulk", "chunked", "ring", "bidir_ring", "substituted"),
    "h2d_mm": ("sequential", "chunked", "tile_fused"),
    "mm_d2h": ("sequential", "chunked", "tile_fused"),
}


def split_even(total: int, parts: int) -> list[int]:
    """``total`` split into ``min(parts, total)`` near-equal positive parts."""
    parts = max(1, min(parts, total))
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def slowest_device(cluster, ranks, dtype: str):
    """The group's device with the lowest achievable peak for ``dtype`` (it gates every collective)."""
    devices = {}
    for r in comm_model._representatives(cluster, ranks):
        device = cluster.device(r)
        devices.setdefault(device, r)
    return min(devices, key=lambda d: (achievable_tflops(d, dtype), d.memory_gbps or 0.0))


def cores_per_rank(cluster, ranks) -> float | None:
    node = cluster.node(cluster.node_of(ranks[0]))
    if node.cpu_cores is None:
        return None
    return node.cpu_cores / max(1, node.size)


@dataclass(kw_only=True)
class _Builder:
    site: object
    plan: object
    device: object
    topo: comm_model.GroupTopology
    calibration: CalibrationView | None
    cores_per_rank: float | None
    stages: list = field(default_factory=list)
    rows: dict = field(default_factory=dict)
    """stage index -> output rows of a GEMM stage (for the SM-share contention factor)."""
    egress: dict = field(default_factory=dict)
    """stage index -> bytes a transfer stage sends (for its rate, hence memory contention)."""
    kernels: dict = field(default_factory=dict)
    """stage index -> GEMM kernels a GEMM stage runs one after another (its waves' end, replayed)."""
    sm_capped: bool = False
    """True when the compute kernels already run on fewer SMs (a capped persistent grid)."""
    issue: dict | None = None
    """Host issue costs (``hocket.cost.issue``) on GPU ranks; None on CPU ranks (no issue chain)."""
    host_queued: bool = False
    """Whether the host has issued anything but kernel launches yet (later items queue behind it)."""
    sustained: bool = False
    """GEMMs run at the profile's sustained level (steady state: ``compute.gemm_time(sustained=)``)."""
    captured: bool = False
    """the call is replayed from a CUDA graph (its copy-engine protocols close on a second barrier)."""
    issued: bool = False
    """Whether an issue stage other than the entry has been appended (the next call waits for the host)."""
    used: set = field(default_factory=set)
    """The resources of the stages appended so far (a transfer behind an earlier one queues)."""
    memo: dict = field(default_factory=dict)
    """Prices already computed for this candidate (a pipeline of equal chunks asks the same GEMM and
    transfer many times; site, plan, device and calibration are fixed for a builder)."""

    def append(self, stage: Stage) -> None:
        """Append ``stage`` as it is; every stage goes through here (``issued`` and ``used`` follow)."""
        self.stages.append(stage)
        self.used.add(stage.resource)
        if stage.is_issue and stage.name != ENTRY_STAGE:
            self.issued = True

    # -- pieces -------------------------------------------------------------
    @property
    def comm_sms(self) -> int | None:
        if self.device.sm_count is None:
            return None
        sms = self.plan.comm_sms if self.plan.comm_sms is not None else comm_model.DEFAULT_COMM_SMS
        return min(sms, self.device.sm_count - 1)

    def remembered(self, key: tuple, price):
        """``price()``, computed once per ``key`` for this candidate (``memo``)."""
        found = self.memo.get(key)
        if found is None:
            found = self.memo[key] = price()
        return found

    def gemm(self, rows: int, *, k: int | None = None, n: int | None = None, launches: int = 1,
             sms: int | None = None) -> float:
        site = self.site
        one = self.remembered(("gemm", rows, k, n, launches, sms), lambda: gemm_ms(
            self.device, m=rows, k=k or site.k, n=n or site.n, dtype=site.dtype, itemsize=site.itemsize,
            calibration=self.calibration, sms=sms, launches=launches, level_m=max(rows, site.m),
            sustained=self.sustained))
        return one * site.num_b

    def transfer_topology(self) -> comm_model.GroupTopology:
        if self.plan.transport in ("collective", "p2p"):
            return comm_model.with_sm_budget(self.topo, self.plan.comm_sms)
        return self.topo

    def add(self, stage: Stage, *, rows: int | None = None, egress: float | None = None,
            issue: tuple[tuple[str, int], ...] = (), issue_after: tuple[tuple[str, int], ...] = ()) -> int:
        """Append ``stage``; ``issue``: ``(op, count)`` pairs the host issues first on GPU ranks
        (an ``issue`` stage in program order that the stage waits for); ``issue_after``: what the
        host goes on issuing once the stage has started (a relay's later messages), which holds
        back whatever the host issues next but not the stage itself."""
        hold_ms = 0.0
        if self.issue is not None and issue:
            # the first item's host latency is already in its own time (launch / call overhead,
            # and calibrated curves were timed from an idle GPU), so the stage does not wait for it;
            # but the host is busy issuing it all the same, so whatever it issues next waits
            # (as in the steady state's issue chain, ``hocket.cost.steady``); later items queue behind the host.
            # A relay call issued after kernel launches only (an own-data-first pipeline launches
            # its GEMM first) still starts from an idle host: launches return in microseconds,
            # and the relay's own call time is in its price like a first item's
            relay = any(op in ("relay_call", "relay_call_host") for op, _ in issue)
            first = not (self.host_queued if relay else self.issued)
            self.host_queued = self.host_queued or any(op != "launch" for op, _ in issue)
            cost = issue_ms(issue, self.issue)
            hold_ms = cost if first and not relay else 0.0  # a relay call's host time is inside its curve's price
            self.append(Stage(name=f"issue:{stage.name}", resource="issue", kind="issue", op="issue",
                              duration_ms=0.0 if first else cost, piece=stage.piece,
                              steady_ms=cost if first else None))
            stage = stage.after(len(self.stages) - 1)
        self.append(stage)
        index = len(self.stages) - 1
        if self.issue is not None and (issue_after or hold_ms > 0.0):
            rest_ms = issue_ms(issue_after, self.issue) if issue_after else 0.0
            self.append(Stage(name=f"issue_rest:{stage.name}", resource="issue", kind="issue", op="issue",
                              duration_ms=hold_ms + rest_ms, piece=stage.piece,
                              steady_ms=rest_ms if hold_ms > 0.0 else None))
        if rows:
            self.rows[index] = rows
        if egress is not None:
            self.egress[index] = egress
        return index

    def add_host(self, name: str, items: tuple[tuple[str, int], ...]) -> None:
        """Host work with no device stage of its own (e.g. a protocol's bookkeeping): it holds
        back whatever the host issues next; on CPU ranks (no issue chain) it costs nothing here."""
        if self.issue is not None:
            self.append(Stage(name=f"issue:{name}", resource="issue", kind="issue", op="issue",
                              duration_ms=issue_ms(items, self.issue)))

    def add_gemm(self, name: str, rows: int, *, deps=(), piece: int = 0, launches: int = 1,
                 sms: int | None = None, k: int | None = None, n: int | None = None, count: int = 1) -> int:
        """``count`` GEMMs of ``rows`` rows, one after another (e.g. one per source block)."""
        site = self.site
        duration = count * self.gemm(rows, k=k, n=n, launches=launches, sms=sms)
        flops = 2.0 * count * rows * (k or site.k) * (n or site.n) * site.num_b
        index = self.add(Stage(name=name, resource="compute", duration_ms=duration, depends_on=tuple(deps),
                               piece=piece, flops=flops, op="gemm"), rows=rows, issue=(("launch", count * launches),))
        self.kernels[index] = count * site.num_b
        return index

    def add_memory(self, name: str, nbytes: float, *, deps=(), piece: int = 0, op: str = "reduce") -> int:
        return self.add(Stage(name=name, resource="compute", duration_ms=memory_ms(self.device, nbytes),
                              depends_on=tuple(deps), piece=piece, nbytes=nbytes, op=op), issue=(("launch", 1),))

    def add_transfer(self, name: str, transfer: comm_model.Transfer, *, deps=(), piece: int = 0, op: str,
                     nbytes: float, queued: bool = True, calls: int = 1, streamed: bool = False,
                     issue: tuple[tuple, tuple] | None = None) -> int:
        """``queued=False``: the transfer is released by a device-side flag (a stream wait on
        memory): issued ahead, but its latency starts at the flag, not behind the previous copy.
        ``calls``: host calls that issue it (a bidirectional ring step: one exchange per lane).
        ``streamed``: a piece of one call already priced as such (:func:`hocket.cost.local_first.relay_pieces`):
        no saving for queueing behind the piece before it, and ``issue`` (what the host issues before it starts,
        and while it runs: :meth:`issue_of`'s pair) replaces the call's own issue items."""
        duration = transfer.ms
        if not streamed and transfer.resource in self.used:  # behind an earlier one
            saving = comm_model.queued_saving_ms(transfer.kind, self.topo) + transfer.queued_saving_ms if queued \
                else comm_model.CALL_OVERHEAD_US[transfer.kind] / 1e3  # issued ahead, but starts at the flag
            duration -= min(0.9 * duration, saving)
        head, rest = self.issue_of(transfer, calls) if issue is None else issue
        return self.add(Stage(name=name, resource=transfer.resource, duration_ms=duration,
                              depends_on=tuple(deps), kind=transfer.kind, piece=piece, nbytes=nbytes, op=op),
                        egress=transfer.egress_bytes, issue=head, issue_after=rest)

    def issue_of(self, transfer: comm_model.Transfer, calls: int
                 ) -> tuple[tuple[tuple[str, int], ...], tuple[tuple[str, int], ...]]:
        """What the host issues for a transfer before it starts, and what it goes on issuing
        while it runs: a ring step is a P2P exchange per lane (or copy-engine copies); a
        host-staged collective is a relay call and its messages (the relay issues on the calling
        thread, every copy stream-ordered: the first message's copies start once it is issued,
        the later messages are issued while earlier ones move); a single device's host copy is a
        side-stream copy with its event waits."""
        transport = self.plan.transport
        if transfer.algorithm == "none" and self.plan.strategy == "sequential":
            return (), ()  # one rank: the sequential executor issues no collective (ops.lowering.sequential)
        if transport == "copy_engine":
            return (("copy_engine", calls),), ()
        if transport == "host_staged":
            if transfer.algorithm == "copy":
                return (("host_copy", calls),), ()
            rest = calls * max(0, transfer.messages - 1)
            call, message = ("relay_call", "relay_message") if host_stage_signal() == "device" else \
                ("relay_call_host", "relay_message_host")
            return ((call, calls), (message, calls)), (((message, rest),) if rest else ())
        return (("p2p" if transfer.algorithm == "ring_step" else "collective", calls),), ()

    def piece_issue(self, transfer: comm_model.Transfer
                    ) -> tuple[tuple[tuple[str, int], ...], tuple[tuple[str, int], ...]]:
        """:meth:`issue_of` one call, plus, for a relay call of an own-data-first pipeline of one call per
        piece (``HOCKET_HOST_STAGE_CALLS=piece``), that pipeline's own cost per piece (``relay_piece``)."""
        head, rest = self.issue_of(transfer, 1)
        if self.plan.transport == "host_staged" and transfer.algorithm != "copy":
            head += (("relay_piece" if host_stage_signal() == "device" else "relay_piece_host", 1),)
        return head, rest

    def collective(self, op: str, nbytes: float) -> comm_model.Transfer:
        return self.remembered(("collective", op, nbytes), lambda: comm_model.collective(
            op, nbytes, self.transfer_topology(), transport=self.plan.transport, hierarchy=self.plan.hierarchy,
            calibration=self.calibration, message_bytes=host_stage_piece_bytes()))

    def ring_step(self, nbytes: float, peers: int = 1) -> comm_model.Transfer:
        return self.remembered(("ring_step", nbytes, peers), lambda: comm_model.ring_step(
            nbytes, self.transfer_topology(), transport=self.plan.transport, peers=peers,
            calibration=self.calibration))

    # -- contention -------------------------------------------------------------
    def finish(self) -> list[Stage]:
        """Replace the placeholder tables by real contention factors."""
        rates: dict[str, float] = {}
        for index, stage in enumerate(self.stages):
            if stage.is_transfer:
                gbps = self.egress.get(index, 0.0) / (stage.duration_ms * 1e6) if stage.duration_ms > 0 else 0.0
                rates[stage.kind] = max(rates.get(stage.kind, 0.0), gbps)
        factors = {kind: contention(kind, self.device, transfer_gbps=gbps, cores_per_rank=self.cores_per_rank,
                                    calibration=self.calibration) for kind, gbps in rates.items()}
        sm_cache: dict[int, float] = {}
        # replayed from a graph, who waits for whom follows the launch order (Stage.waits_for_full_grid)
        ordered = self.captured and self.device.sm_count is not None
        starved = self.sm_starved() and not ordered
        sm_kinds = {s.kind for s in self.stages if s.is_transfer and s.kind in SM_KINDS}
        replay_ctas = max((replay.nccl_ctas(self, kind) for kind in sm_kinds), default=0)
        out = []
        for index, stage in enumerate(self.stages):
            if stage.is_issue:
                table = {}
            elif stage.is_transfer and ordered and stage.kind in SM_KINDS and not self.sm_capped:
                # beside a GEMM that started first it runs in the SMs that GEMM leaves (its last wave, a
                # small grid); launched before a GEMM it keeps its SMs and its solo speed, and the GEMM
                # slows instead (Stage.held_sms_by on the GEMM)
                table = {}
                stage = replace(stage, waits_for_full_grid=True)
            elif stage.is_transfer:
                table = {"compute": factors[stage.kind].transfer_slowdown} if stage.kind in factors else {}
                if starved and stage.kind in SM_KINDS and stage.duration_ms > 0:
                    # beside full-grid GEMMs it runs on about one SM's worth of copy throughput
                    gbps = self.egress.get(index, 0.0) / (stage.duration_ms * 1e6)
                    table["compute"] = max(table.get("compute", 1.0), min(SM_STARVED_SLOWDOWN,
                                                                          gbps / comm_model.PER_SM_COPY_GBPS))
            elif stage.op == "gemm":
                rows = self.rows.get(index, 0)
                if ordered and rows and replay.crowds_nccl(self, rows, replay_ctas):
                    stage = replace(stage, fills_device=True, last_wave_at=replay.last_wave_at(self, index, rows))
                table, held = {}, {}
                for kind, c in factors.items():
                    factor = c.gemm_slowdown
                    if ordered and kind in SM_KINDS and not self.sm_capped:
                        # replayed: the memory and power share always; the SMs only from a transfer
                        # that holds them when the GEMM launches
                        factor = default_contention(kind, self.device, transfer_gbps=rates[kind]).gemm_slowdown
                        if rows:
                            held[kind] = max(1.0, factor * replay.held_factor(self, rows, kind, sm_cache))
                    elif kind in SM_KINDS and rows and not self.sm_capped and not starved:
                        factor *= self._sm_factor(rows, sm_cache, measured=c.source == "profile")
                    table[kind] = max(1.0, factor)
                if held:
                    stage = replace(stage, held_sms_by=held)
            else:
                table = {kind: max(1.0, c.gemm_slowdown) for kind, c in factors.items()}
            stage.slowdown_by.update(table)  # each builder stage owns a fresh, still private dict
            out.append(stage)
        return out

    def sm_starved(self) -> bool:
        """Every GEMM of the pipeline leaves fewer SMs idle than an SM-driven transfer needs, and none
        is capped: such transfers beside them starve (``contention.SM_STARVED_SLOWDOWN``). A grid a few
        tiles short of the SM count counts too: the transfer finds too few idle SMs either way (were it
        to take the rest from the GEMM instead, one tile more would make the site cheaper)."""
        gemm_rows = [self.rows[i] for i, s in enumerate(self.stages) if s.op == "gemm" and i in self.rows]
        if self.sm_capped or self.device.sm_count is None or not gemm_rows:
            return False
        n = self.site.n * self.site.num_b
        crowded = self.device.sm_count - self.comm_sms + 1  # tiles at which fewer than comm_sms SMs idle
        return all(fills_device(rows, n, crowded) for rows in gemm_rows)

    def _sm_factor(self, rows: int, cache: dict, *, measured: bool) -> float:
        """GEMM slowdown from the SMs an SM-driven transfer holds (wave model)."""
        if self.device.sm_count is None:
            return 1.0
        if rows not in cache:
            full = self.gemm(rows)
            n = self.site.n * self.site.num_b
            left = sms_left_to_gemm(rows, n, self.device.sm_count, self.comm_sms)
            cache[rows] = self.gemm(rows, sms=left) / full if full > 0 else 1.0
            if measured:  # the profile's factor already holds the default budget's share
                default = min(comm_model.DEFAULT_COMM_SMS, self.device.sm_count - 1)
                base_sms = sms_left_to_gemm(rows, n, self.device.sm_count, default)
                base = self.gemm(rows, sms=base_sms) / full if full > 0 else 1.0
                cache[rows] = cache[rows] / base
        return cache[rows]


# -- strategies -------------------------------------------------------------------------
def _ag_mm(b: _Builder) -> None:
    site, plan = b.site, b.plan
    p, m = site.world, site.m
    total = site.comm_bytes
    strategy = plan.strategy
    if strategy == "substituted":
        if plan.substitute not in (None, "ring_p2p"):
            raise ValueError(f"plan.substitute={plan.substitute!r} does not apply to ag_mm; use 'ring_p2p' "
                             "(or strategy='ring')")
        strategy = "ring"
    shard_rows = math.ceil(m / p)
    if strategy == "sequential":
        t = b.add_transfer("all_gather", b.collective("all_gather", total), op="all_gather", nbytes=total)
        b.add_gemm("gemm", m, deps=(t,))
    elif strategy in ("bulk", "chunked"):
        # pieces cut every rank's shard rows; a piece is all-gathered, then multiplied one
        # source block at a time (p GEMMs of the piece's rows) and, with several pieces,
        # copied into the gathered A; bulk is the one-piece pipeline.
        if strategy == "chunked" and runs_peer_pipe(b):
            ag_peer(b, shard_rows)
            return
        pieces = [shard_rows] if strategy == "bulk" else list(piece_sizes(shard_rows, plan))
        if strategy == "chunked" and runs_local_first(b):
            ag_local_first(b, shard_rows, pieces)
            return
        for i, rows in enumerate(pieces):
            nbytes = total * rows / shard_rows
            t = b.add_transfer(f"all_gather[{i}]", b.collective("all_gather", nbytes), piece=i, op="all_gather",
                               nbytes=nbytes)
            g = b.add_gemm(f"gemm[{i}]", rows, deps=(t,), piece=i, count=p)
            if len(pieces) > 1:
                b.add_memory(f"copy_gathered[{i}]", 2.0 * nbytes, deps=(g,), piece=i, op="copy")
    elif strategy in ("ring", "bidir_ring"):
        _ag_ring(b, shard_rows, lanes=2 if strategy == "bidir_ring" else 1)
    elif strategy == "tile_fused":
        _tile_fused(b, producer=False)
    else:
        raise _not_for(site, plan)


def _ag_ring(b: _Builder, shard_rows: int, *, lanes: int) -> None:
    """``p`` steps: compute on the shard (rows) in hand while passing it on. ``lanes=2``
    (bidir_ring): half of every shard travels each way, two neighbours per step."""
    site, plan = b.site, b.plan
    p = site.world
    row_bytes = site.k * site.itemsize
    subs = split_even(math.ceil(shard_rows / lanes), plan.chunks)
    last_recv: list[int | None] = [None] * len(subs)
    for s in range(p):
        recv_ids: list[int | None] = [None] * len(subs)
        if s + 1 < p:  # forward what we hold while computing on it
            for j, rows in enumerate(subs):
                deps = () if last_recv[j] is None else (last_recv[j],)
                recv_ids[j] = b.add_transfer(f"send_recv[{s}.{j}]", b.ring_step(rows * row_bytes, peers=lanes),
                                             deps=deps, piece=s, op="send_recv", nbytes=rows * row_bytes * lanes,
                                             calls=lanes)
        for j, rows in enumerate(subs):
            deps = () if last_recv[j] is None else (last_recv[j],)
            b.add_gemm(f"gemm[{s}.{j}]", rows, deps=deps, piece=s, count=lanes)
        last_recv = recv_ids


def _mm_rs(b: _Builder) -> None:
    site, plan = b.site, b.plan
    p, m = site.world, site.m
    total = site.comm_bytes
    block_rows = math.ceil(m / p)
    if plan.strategy == "sequential":
        g = b.add_gemm("gemm", m)
        b.add_transfer("reduce_scatter", b.collective("reduce_scatter", total), deps=(g,), op="reduce_scatter",
                       nbytes=total)
    elif plan.strategy in ("bulk", "chunked"):
        # pieces cut every destination block's rows: p partial GEMMs into a staging buffer,
        # then the piece's reduce-scatter; bulk is the one-piece pipeline
        if plan.strategy == "chunked" and runs_peer_pipe(b):
            rs_peer(b, block_rows)
            return
        pieces = [block_rows] if plan.strategy == "bulk" else list(piece_sizes(block_rows, plan))
        if plan.strategy == "chunked" and runs_local_first(b):
            rs_own_block_last(b, block_rows, pieces)
            return
        for i, rows in enumerate(pieces):
            nbytes = total * rows / block_rows
            g = b.add_gemm(f"gemm[{i}]", rows, piece=i, count=p)
            b.add_transfer(f"reduce_scatter[{i}]", b.collective("reduce_scatter", nbytes), deps=(g,), piece=i,
                           op="reduce_scatter", nbytes=nbytes)
    elif plan.strategy in ("ring", "bidir_ring"):
        _rs_ring(b, block_rows, lanes=2 if plan.strategy == "bidir_ring" else 1)
    elif plan.strategy == "tile_fused":
        _tile_fused(b, producer=True)
    else:
        raise _not_for(site, plan)


def _rs_ring(b: _Builder, block_rows: int, *, lanes: int) -> list[int | None]:
    """``p`` steps: compute this rank's partial of the next destination block, add the
    running sum received from the previous rank, pass it on; after ``p`` steps our own
    block is complete. ``lanes=2``: half of every block goes each way. Returns the last
    stage of every sub-piece."""
    site, plan = b.site, b.plan
    p = site.world
    row_bytes = site.n * site.num_b * site.itemsize
    subs = split_even(math.ceil(block_rows / lanes), plan.chunks)
    prev_send: list[int | None] = [None] * len(subs)
    last: list[int | None] = [None] * len(subs)
    for s in range(p):
        sends: list[int | None] = [None] * len(subs)
        for j, rows in enumerate(subs):
            g = b.add_gemm(f"gemm[{s}.{j}]", rows, piece=s, count=lanes)
            last[j] = g
            if prev_send[j] is not None:
                last[j] = b.add_memory(f"reduce[{s}.{j}]", 3.0 * rows * lanes * row_bytes, deps=(g, prev_send[j]),
                                       piece=s)
            if s + 1 < p:
                nbytes = rows * row_bytes
                sends[j] = b.add_transfer(f"send_recv[{s}.{j}]", b.ring_step(nbytes, peers=lanes),
                                          deps=(last[j],), piece=s, op="send_recv", nbytes=nbytes * lanes, calls=lanes)
        prev_send = sends
    return last


def _tile_fused(b: _Builder, *, producer: bool) -> None:
    """One persistent kernel over flag groups, as :mod:`hocket.ops.lowering.tile_fused` runs it.
    ag_mm (consumer): this rank's shard is copied in and its flags raised before the kernel starts, so
    its tiles go first whatever the order; then each group of peer rows as it lands. mm_rs (producer):
    the peers' blocks in ring order, ``plan.chunks`` groups each, every group pushed to its owner as its
    flag rises; this rank's own block last (it stays), and the owner adds the pushed groups to it."""
    site, plan = b.site, b.plan
    p, m, total = site.world, site.m, site.comm_bytes
    op = "reduce_scatter" if producer else "all_gather"
    scale = p / (p - 1)  # the groups hold remote rows only: (p - 1) / p of a collective's buffer moves

    def transfer(i: int, rows: int, deps=(), queued: bool = True) -> int:
        nbytes = total * rows / m * scale
        # a producer's push waits on its group's flag: a spin-wait launch besides the copies
        issue = ((("copy_engine", 1), ("fused_push", 1)), ()) if producer else None
        return b.add_transfer(f"{op}[{i}]", b.collective(op, nbytes), deps=deps, piece=i, op=op, nbytes=nbytes,
                              queued=queued, issue=issue)

    # the call's own host work before the kernel: the pipe's barrier and flag resets, the workspace and
    # the Triton launch, the flag raises and waits, the error watch
    b.add_host("tile_fused", (("fused_call", 1),))
    if not producer:
        _fused_groups(b, consumer_of=transfer, local_rows=m // p)
        return
    block = split_even(m, p)
    per_block = [split_even(rows, plan.chunks) for rows in block]
    sizes = tuple(g for blk in per_block[:-1] for g in blk) + tuple(per_block[-1])  # own block last
    pushed = sum(len(blk) for blk in per_block[:-1])

    def push(i: int, rows: int, deps=(), queued: bool = True) -> int | None:
        return transfer(i, rows, deps, queued) if i < pushed else None  # the own block's groups stay

    _fused_groups(b, producer_for=push, sizes=sizes)
    # partial blocks land in symmetric memory; the owner sums the p of them once its own block is done
    # and the peers' groups are in (pushes are symmetric: this rank's last one ends as the peers' do)
    moves = tuple(i for i, stage in enumerate(b.stages) if stage.op == op)
    b.add_memory("reduce[final]", (p + 1) * total / p, deps=(len(b.stages) - 1, *moves))


def _fused_groups(b: _Builder, *, consumer_of=None, producer_for=None, local_rows: int = 0,
                  sizes: tuple[int, ...] | None = None) -> None:
    """The compute side of a persistent kernel: launched once before any data arrives,
    then one stage per flag group (``sizes`` rows each; default ``plan.chunks`` even groups).
    ``consumer_of(i, rows)`` adds the transfer group i waits for; ``producer_for(i, rows, deps)``
    adds the transfer group i feeds; ``local_rows`` are computed first without waiting. Each
    group is charged its marginal kernel time counted from the kernel's end (the last group
    carries the wave tail)."""
    site, plan = b.site, b.plan
    m = site.m
    sms = None
    if b.device.sm_count is not None and plan.transport in ("collective", "p2p"):
        sms = b.device.sm_count - b.comm_sms  # never occupy every SM beside an SM-driven transport
        b.sm_capped = True

    # our Triton kernel runs at a fraction of the vendor GEMM's rate (GPU ranks)
    efficiency = FUSED_GEMM_EFFICIENCY if b.device.sm_count is not None else 1.0

    def marginal(rows_done: int, rows: int) -> float:
        after = m - rows_done - rows
        kernel = b.gemm(m - rows_done, launches=0, sms=sms) - (b.gemm(after, launches=0, sms=sms) if after else 0.0)
        return kernel / efficiency

    def flops(rows: int) -> float:
        return 2.0 * rows * site.k * site.n * site.num_b

    groups = sizes or split_even(m - local_rows, plan.chunks)
    b.add(Stage(name="kernel.launch", resource="compute", duration_ms=launch_ms(b.device), op="launch"),
          issue=(("launch", 1),))
    if local_rows:
        b.add(Stage(name="gemm[local]", resource="compute", duration_ms=max(0.0, marginal(0, local_rows)),
                    op="gemm", flops=flops(local_rows)), rows=m)
    done = local_rows
    wait_ms = FLAG_WAIT_US / 1e3
    for i, rows in enumerate(groups):
        deps = (consumer_of(i, rows),) if consumer_of is not None else ()
        g = b.add(Stage(name=f"gemm[{i}]", resource="compute", duration_ms=max(0.0, marginal(done, rows)) + wait_ms,
                        depends_on=deps, op="gemm", piece=i, flops=flops(rows)), rows=m)
        done += rows
        if producer_for is not None:  # released by the group's flag, not set up ahead
            producer_for(i, rows, deps=(g,), queued=False)


def _mm_ar(b: _Builder) -> None:
    site, plan = b.site, b.plan
    m, total = site.m, site.comm_bytes
    if plan.strategy == "sequential":
        g = b.add_gemm("gemm", m)
        b.add_transfer("all_reduce", b.collective("all_reduce", total), deps=(g,), op="all_reduce", nbytes=total)
    elif plan.strategy in ("ring", "bidir_ring"):
        # the reduce-scatter ring over p row blocks, then an all-gather ring of the reduced blocks
        lanes = 2 if plan.strategy == "bidir_ring" else 1
        block_rows = math.ceil(m / site.world)
        last = _rs_ring(b, block_rows, lanes=lanes)
        row_bytes = site.n * site.num_b * site.itemsize
        for j, rows in enumerate(split_even(math.ceil(block_rows / lanes), plan.chunks)):
            prev = last[j]
            for s in range(site.world - 1):
                prev = b.add_transfer(f"all_gather_step[{s}.{j}]", b.ring_step(rows * row_bytes, peers=lanes),
                                      deps=(prev,) if prev is not None else (), piece=s, op="send_recv",
                                      nbytes=rows * row_bytes * lanes, calls=lanes)
    elif plan.strategy == "chunked" and runs_peer_pipe(b):
        ar_peer(b)
    elif plan.strategy in ("bulk", "chunked"):
        for i, rows in enumerate([m] if plan.strategy == "bulk" else piece_sizes(m, plan)):
            nbytes = total * rows / m
            g = b.add_gemm(f"gemm[{i}]", rows, piece=i)
            b.add_transfer(f"all_reduce[{i}]", b.collective("all_reduce", nbytes), deps=(g,), piece=i,
                           op="all_reduce", nbytes=nbytes)
    elif plan.strategy == "substituted":
        if plan.substitute not in (None, "rs_ag"):
            raise ValueError(f"plan.substitute={plan.substitute!r} does not apply to mm_ar; use 'rs_ag'")
        pieces = split_even(m, plan.chunks)
        pending_ag = None
        for i, rows in enumerate(pieces):
            nbytes = total * rows / m
            g = b.add_gemm(f"gemm[{i}]", rows, piece=i)
            rs = b.add_transfer(f"reduce_scatter[{i}]", b.collective("reduce_scatter", nbytes), deps=(g,), piece=i,
                                op="reduce_scatter", nbytes=nbytes)
            if pending_ag is not None:  # the previous piece's all-gather runs behind this reduce-scatter
                b.add_transfer(f"all_gather[{i - 1}]", b.collective("all_gather", pending_ag[1]),
                               deps=(pending_ag[0],), piece=i - 1, op="all_gather", nbytes=pending_ag[1])
            pending_ag = (rs, nbytes)
        b.add_transfer(f"all_gather[{len(pieces) - 1}]", b.collective("all_gather", pending_ag[1]),
                       deps=(pending_ag[0],), piece=len(pieces) - 1, op="all_gather", nbytes=pending_ag[1])
    else:
        raise _not_for(site, plan)


def _offload(b: _Builder) -> None:
    """One device and its host link: ``h2d_mm`` copies A in, ``mm_d2h`` copies C out,
    whole (sequential), in row pieces on two streams (chunked), or into/out of one
    persistent kernel's flag groups (tile_fused), as ``hocket.ops.offload`` runs them: the
    fused kernel's groups are ``hocket.core.pieces.fused_offload_sizes`` (a ramp from one row
    block at the exposed edge unless ``split_sizes`` says otherwise); to host, every chunked
    GEMM is issued before the first copy, as the executor does (stages are added in issue order)."""
    site, plan = b.site, b.plan
    if plan.transport != "host_staged":
        raise ValueError(f"a {site.kind} site moves data over the host link: use transport='host_staged', "
                         f"not {plan.transport!r}")
    to_host = site.kind == "mm_d2h"
    m, total = site.m, site.comm_bytes
    op = "copy_d2h" if to_host else "copy_h2d"

    # pieces of one copy stream at the whole copy's measured rate (see stream_piece)
    whole = comm_model.host_copy(total, b.topo, calibration=b.calibration)
    fixed_ms = comm_model.host_copy(0.0, b.topo).ms

    def copy(i: int, rows: int, deps=(), queued: bool = True) -> int:
        nbytes = total * rows / m
        piece = stream_piece(comm_model.host_copy(nbytes, b.topo), whole, fixed_ms=fixed_ms, share=rows / m)
        return b.add_transfer(f"{op}[{i}]", piece, deps=deps, piece=i, op=op, nbytes=nbytes, queued=queued)

    if plan.strategy in ("sequential", "chunked"):
        pieces = [m] if plan.strategy == "sequential" else list(piece_sizes(m, plan))
        if to_host:
            # the executor's issue order (hocket.ops.offload._to_host): each piece's GEMM, then its copy
            for i, rows in enumerate(pieces):
                copy(i, rows, deps=(b.add_gemm(f"gemm[{i}]", rows, piece=i),))
        else:
            # from host the executor issues every copy first too (host_staged.h2d_chunks), but a
            # copy there waits on no event and costs the host less than the one item "host_copy"
            # prices (a side-stream copy *with* its event wait): priced in that order, every
            # calibration site's chunked(32) ran 27-49% faster than predicted (validate_cost
            # --all-points), so the pieces stay interleaved until the issue table tells the two apart
            for i, rows in enumerate(pieces):
                b.add_gemm(f"gemm[{i}]", rows, deps=(copy(i, rows),), piece=i)
    elif plan.strategy == "tile_fused":
        # the executor's flag groups: split_sizes, else a ramp from one row block at the exposed edge
        sizes = fused_offload_sizes(m, plan, align=FUSED_BLOCK_M, direction="to_host" if to_host else "from_host")
        _fused_groups(b, consumer_of=None if to_host else copy, producer_for=copy if to_host else None, sizes=sizes)
    else:
        raise _not_for(site, plan)


def stream_piece(piece: comm_model.Transfer, whole: comm_model.Transfer, *, fixed_ms: float,
                 share: float) -> comm_model.Transfer:
    """A piece of one DMA copy, cut into ``share`` of its bytes: its fixed part (call, setup,
    latency: the model's time at 0 bytes) plus its share of the whole copy's size-dependent time.
    A calibrated curve point of a small copy was timed alone, from an idle link: it holds a
    ramp (DMA descriptor setup, PCIe credit and TLP pipelining) that copies queued back to back
    on one engine do not pay again, so pieces stream at the rate measured for the whole copy
    (1xH200 calibration sites: h2d_mm 8192x8192x7168 cut in 32 copies moves at the whole copy's
    48 GB/s, ending 0.15 ms after the whole copy would; priced at the 3.7 MiB curve point's
    40 GB/s it ended 0.5 ms later)."""
    variable_ms = max(0.0, whole.ms - fixed_ms) * share
    return replace(piece, ms=fixed_ms + variable_ms)


def _not_for(site, plan) -> ValueError:
    fits = sorted(kind for kind, strategies in _KIND_STRATEGIES.items() if plan.strategy in strategies)
    return ValueError(f"strategy={plan.strategy!r} does not apply to a {site.kind} site (it applies to "
                      f"{', '.join(fits) or 'no priced kind'}); use one of {_KIND_STRATEGIES.get(site.kind, ())}")


_BUILDERS = {"ag_mm": _ag_mm, "mm_rs": _mm_rs, "mm_ar": _mm_ar, "h2d_mm": _offload, "mm_d2h": _offload}


def check_site_on_cluster(site, plan, cluster) -> tuple[int, ...]:
    """The group's global ranks, after checking the site fits the cluster and the plan's transport exists."""
    if site.kind not in _BUILDERS:
        raise ValueError(f"site kind {site.kind!r} has no cost model yet; priced kinds: {sorted(_BUILDERS)}")
    cluster.check_world(site.world, arg="site.world")
    ranks = site.group_ranks
    for r in (ranks[0], ranks[-1], max(ranks)):
        if r >= cluster.world_size:
            raise ValueError(f"site.ranks contains rank {r}, outside cluster {cluster.name!r} "
                             f"({cluster.world_size} ranks)")
    if site.world > 1:
        offered = group_facts(cluster, ranks, site.dtype)[3]
        if plan.transport not in offered:
            raise ValueError(f"plan.transport={plan.transport!r} is not offered between ranks "
                             f"{ranks[:8]}{'...' if len(ranks) > 8 else ''} of {cluster.name!r}; "
                             f"offered: {sorted(offered)}")
    return ranks


@functools.lru_cache(maxsize=4096)
def group_facts(cluster, ranks: tuple[int, ...], dtype: str):
    """(topology, slowest device, cores per rank, offered transports) of a group; memoised
    because a planner prices many plans of the same group (clusters are frozen, hashable)."""
    offered = cluster.group_transports(ranks) if len(ranks) > 1 else None
    return (comm_model.group_topology(cluster, ranks), slowest_device(cluster, ranks, dtype),
            cores_per_rank(cluster, ranks), offered)


CAPTURED_REPLAY_US = 30.0
"""Host microseconds of one call replayed from a CUDA graph (``hocket.ops.CapturedCall``: the inputs'
copies and ``CUDAGraph.replay``), the only issue cost a captured call pays (an estimate: torch's
replay of a graph is ~10 us, and a copy launch ~10 us per input on the 2xH200 hosts)."""


def pipeline_stages(site, plan, cluster, profile=None, *, topology: comm_model.GroupTopology | None = None,
                    steady_state: bool = False, captured: bool = False) -> list[Stage]:
    """The stages of ``site`` run with ``plan`` on ``cluster`` (one rank's view; the group's
    slowest device computes, the group's bottleneck links carry). ``steady_state``: the GEMMs
    run at the profile's sustained level (``hocket.cost.compute``, "Sustained level").
    ``captured``: the call is replayed from a CUDA graph, so no item costs the host anything to
    issue; the entry stage holds the replay (``CAPTURED_REPLAY_US``)."""
    from hocket.cost.calibration import calibration_view

    ranks = check_site_on_cluster(site, plan, cluster)
    topo, device, cores, _ = group_facts(cluster, ranks, site.dtype)
    if topology is not None:
        topo = topology
    view = calibration_view(profile)
    if steady_state and view is not None:  # collectives timed back to back, where the profile has them
        view = view.for_steady_state()
    if captured and view is not None:  # and the relay replayed from a CUDA graph, where it has that
        view = view.for_captured()
    issue = issue_table(view) if device.sm_count is not None else None
    if issue is not None and captured:
        issue = dict.fromkeys(issue, 0.0)
    builder = _Builder(site=site, plan=plan, device=device, topo=topo, calibration=view, cores_per_rank=cores,
                       stages=[], issue=issue, sustained=steady_state, captured=captured)
    if builder.issue is not None:  # the operator's entry: the GPU idles until the first piece is issued
        entry_ms = CAPTURED_REPLAY_US / 1e3 if captured else \
            issue_ms((("entry", 1), ("group_entry", int(site.world > 1))), builder.issue)
        builder.append(Stage(name=ENTRY_STAGE, resource="issue", kind="issue", op="issue", duration_ms=entry_ms))
    _BUILDERS[site.kind](builder)
    return builder.finish()
