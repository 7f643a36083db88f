"""The stage builder every strategy's cost builder writes against (``hocket.strategies``: one per
strategy, dispatched by :func:`hocket.strategies.pricing.pipeline_stages`).

A :class:`StageBuilder` holds one candidate (site, plan, the group's slowest device and bottleneck
topology, the calibration view, the host issue table) and appends ``stages.Stage`` items in issue
order: GEMMs (:meth:`StageBuilder.add_gemm`), memory passes (:meth:`StageBuilder.add_memory`),
transfers (:meth:`StageBuilder.add_transfer`, priced by :mod:`hocket.cost.comm`) and host work
(:meth:`StageBuilder.add_host`); :meth:`StageBuilder.finish` turns the placeholder contention tables
into the calibrated factors (:mod:`hocket.cost.contention`, :mod:`hocket.cost.replay` for replays).
:func:`new_builder` sets one up for a site on a cluster, with the operator's entry stage.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace

from hocket.core.sizes import HOST_STAGE_PIECE_BYTES
from hocket.cost import comm as comm_model
from hocket.cost import replay
from hocket.cost.calibration import CalibrationView
from hocket.cost.compute import achievable_tflops, gemm_ms, memory_ms
from hocket.cost.contention import (
    SM_KINDS,
    SM_STARVED_SLOWDOWN,
    contention,
    default_contention,
    fills_device,
    sms_left_to_gemm,
)
from hocket.cost.issue import issue_ms, issue_table
from hocket.cost.stages import Stage

ENTRY_STAGE = "issue:entry"
FLAG_WAIT_US = 2.0
"""A persistent kernel's wait on one chunk flag (acquire load + spin exit) per group."""

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
class StageBuilder:
    """One candidate's stages as they are appended (module docstring)."""

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
            relay = any(op == "relay_call" for op, _ in issue)
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
        ``streamed``: a piece of one call already priced as such (:func:`hocket.strategies.local_first.relay_pieces`):
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
        if transport == "copy_engine":
            return (("copy_engine", calls),), ()
        if transport == "host_staged":
            if transfer.algorithm == "copy":
                return (("host_copy", calls),), ()
            rest = calls * max(0, transfer.messages - 1)
            return (("relay_call", calls), ("relay_message", calls)), ((("relay_message", rest),) if rest else ())
        return (("p2p" if transfer.algorithm == "ring_step" else "collective", calls),), ()

    def collective(self, op: str, nbytes: float) -> comm_model.Transfer:
        return self.remembered(("collective", op, nbytes), lambda: comm_model.collective(
            op, nbytes, self.transfer_topology(), transport=self.plan.transport, hierarchy=self.plan.hierarchy,
            calibration=self.calibration, message_bytes=HOST_STAGE_PIECE_BYTES))

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


def check_site_on_cluster(site, plan, cluster) -> tuple[int, ...]:
    """The group's global ranks, after checking the site fits the cluster and the plan's transport exists."""
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



def new_builder(site, plan, cluster, profile=None, *, topology: comm_model.GroupTopology | None = None,
                steady_state: bool = False, captured: bool = False) -> StageBuilder:
    """A builder for ``site`` run with ``plan`` on ``cluster`` (one rank's view; the group's slowest device
    computes, the group's bottleneck links carry), holding the operator's entry stage on GPU ranks.
    ``steady_state``: the GEMMs run at the profile's sustained level (``hocket.cost.compute``, "Sustained
    level"). ``captured``: the call is replayed from a CUDA graph, so no item costs the host anything to
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
    builder = StageBuilder(site=site, plan=plan, device=device, topo=topo, calibration=view, cores_per_rank=cores,
                           stages=[], issue=issue, sustained=steady_state, captured=captured)
    if builder.issue is not None:  # the operator's entry: the GPU idles until the first piece is issued
        entry_ms = CAPTURED_REPLAY_US / 1e3 if captured else \
            issue_ms((("entry", 1), ("group_entry", int(site.world > 1))), builder.issue)
        builder.append(Stage(name=ENTRY_STAGE, resource="issue", kind="issue", op="issue", duration_ms=entry_ms))
    return builder
