"""A Plan's chunk pipeline as stages on resources, and its makespan with contention.

This is the structure the cost model prices *and* the simulator executes (``hocket.sim``
adds ranks, other device speeds and whole-model scheduling), so one Plan gives one answer.

A ``Stage`` runs on one resource of one rank: ``compute`` (GEMMs, reductions), ``link``
(collectives and P2P: NCCL/gloo), ``copy_engine`` (DMA through symmetric memory),
``host`` (PCIe copies through pinned host memory) or ``issue`` (the host thread putting
GPU work on the queues: ``hocket.cost.issue``; an issue stage is neither compute nor a
transfer). Semantics (same as ``hocket.sim.engine``):

* each resource runs its stages one at a time, in list order (an in-order stream);
* a stage starts when all ``depends_on`` stages have ended and it is at the head of its
  resource;
* ``duration_ms`` is the solo time; while stages of other kinds run, a stage progresses at
  ``1 / prod(slowdown_by[kind])`` over the distinct kinds running beside it. Compute stages
  have ``kind="compute"`` and list a factor per transfer kind; transfer stages have their
  transfer kind (``sm_collective``, ``sm_p2p``, ``copy_engine``, ``host_link``, ``cpu_collective``) and
  list a factor for ``compute``;
* a stage with ``waits_for_full_grid`` (an SM-driven transfer in a replayed CUDA graph) that
  starts while ``fills_device`` compute stages run makes no progress until their last waves begin
  (``last_wave_at``: the block scheduler dispatches the running kernel's CTAs first, and SMs go idle
  only in its partial last wave); while it waits it holds no SMs, so it slows nothing. Once
  running it keeps its SMs: compute stages that start later do not stop it. A GEMM released by the
  same kernel's end as the transfer goes first. 2xH200 (benchmarks/results/validation/2026-12-01_measured-rules.md): an
  all-gather launched 15 us after a 1.5 ms full-grid GEMM of 15.5 waves ended with it (x12-17), one
  launched with it or before ran at its solo speed; a reduce-scatter released with the next
  4-wave GEMM started 67 us into its 89 us, as that GEMM's last wave began.
  A transfer that starts first, or with a full-grid GEMM (``Stage.held_sms_by``), keeps its SMs
  while the GEMM's persistent grid runs on the rest, and both slow: a replayed reduce-scatter
  of 24 CTAs, launched 6 us before a 2048x14336x8192 GEMM of 132 two-CTA clusters, ran x4.3 and the
  GEMM ran at 0.64 of its rate beside it (its clusters lost 24 two-SM pairs: 84 of 132 SMs left).
  A transfer released by a compute kernel's end that a full-grid GEMM follows within ``RACE_MS``
  (launched behind a short kernel, e.g. a zero fill) races it, and the order differs between
  ranks: on one the transfer holds its SMs and the GEMM slows, on the other the GEMM goes first and
  the transfer waits for its last wave; the collective ends with the later rank, so the pair is
  priced as both (2xH200: a reduce-scatter released 6 us before a 2048x14336x8192 GEMM ran 650 us,
  x7.5 its solo time, ending as the peer's GEMM's last wave would let it, and the GEMM beside it
  ran at 0.64 of its rate all that time).
  ``hocket.sim.engine``, which simulates eager steps, has no such flags.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

RESOURCES = ("compute", "link", "copy_engine", "host", "issue")
RACE_MS = 0.02
"""A transfer released by a compute kernel's end races a full-grid GEMM launched this soon after it
(through a short kernel such as a zero fill): the order is then decided per rank, and the worst rank
sets the time (module docstring)."""
BLOCKED_SLOWDOWN = 1e9
"""The slowdown of a stage that waits (``waits_for_full_grid``): no progress until its blockers'
last waves begin."""


@dataclass(frozen=True, kw_only=True)
class Stage:
    """One step of a pipeline (see the module docstring for the execution rules)."""

    name: str
    resource: str
    duration_ms: float
    depends_on: tuple[int, ...] = ()
    kind: str = "compute"
    slowdown_by: Mapping[str, float] = field(default_factory=dict)
    piece: int = 0
    flops: float = 0.0
    nbytes: float = 0.0
    op: str = ""
    """what runs: gemm, reduce, flag_wait, all_gather, reduce_scatter, all_reduce, send_recv, ..."""
    fills_device: bool = False
    """a compute stage whose grid has at least one tile per SM (``contention.fills_device``)."""
    last_wave_at: float = 1.0
    """the fraction of a ``fills_device`` stage's work after which its last wave runs and leaves SMs
    idle (1.0: the grid is a whole number of waves, no SM idles before the end)."""
    waits_for_full_grid: bool = False
    """a transfer that waits for the ``fills_device`` stages running when it starts (module docstring)."""
    held_sms_by: Mapping[str, float] | None = None
    """factors that replace ``slowdown_by``'s against a stage of that kind when the transfer of the pair
    started no later than the compute stage (replayed: it holds its SMs when the GEMM launches, the
    GEMM's persistent grid fills the rest; module docstring). None: ``slowdown_by`` applies alone."""
    steady_ms: float | None = None
    """an issue stage's host time in the steady state where it differs from ``duration_ms``: a call's
    first item costs its stage no wait from an idle GPU (its latency is in the item's own price), so its
    issue stage takes no time and the host time is charged to the ``issue_rest`` stage after it, which
    holds back only what the host issues next; the steady state counts it once per call
    (``hocket.cost.steady``)."""

    def __post_init__(self) -> None:
        if self.resource not in RESOURCES:
            raise ValueError(f"Stage {self.name!r}: resource={self.resource!r} is unknown; use one of {RESOURCES}")
        if not (math.isfinite(self.duration_ms) and self.duration_ms >= 0):
            raise ValueError(f"Stage {self.name!r}: duration_ms={self.duration_ms!r} must be finite and >= 0")
        for table in ("slowdown_by", "held_sms_by"):
            for other, factor in (getattr(self, table) or {}).items():
                if not (math.isfinite(factor) and factor >= 1.0):
                    raise ValueError(f"Stage {self.name!r}: {table}[{other!r}]={factor!r} must be finite and >= 1")
        if type(self.depends_on) is not tuple:
            object.__setattr__(self, "depends_on", tuple(self.depends_on))

    def after(self, index: int) -> Stage:
        """This stage, also depending on stage ``index`` (an earlier one: ``check_stages``). A copy
        without ``__post_init__``'s checks, which the copied fields passed already (the cost model
        builds ~100 stages per candidate, so this is on the planner's path)."""
        copy = object.__new__(Stage)
        copy.__dict__.update(self.__dict__)
        copy.__dict__["depends_on"] = self.depends_on + (index,)
        return copy

    @property
    def is_transfer(self) -> bool:
        return self.resource not in ("compute", "issue")

    @property
    def is_issue(self) -> bool:
        return self.resource == "issue"


@dataclass(frozen=True, kw_only=True)
class Schedule:
    """When each stage ran (ms from the pipeline's start) and how busy each resource was."""

    start_ms: tuple[float, ...]
    end_ms: tuple[float, ...]
    busy_ms: Mapping[str, float]

    @property
    def total_ms(self) -> float:
        return max(self.end_ms, default=0.0)


def check_stages(stages: Sequence[Stage]) -> None:
    """Dependencies must point to earlier stages (so the pipeline is acyclic)."""
    for i, stage in enumerate(stages):
        for d in stage.depends_on:
            if not (isinstance(d, int) and 0 <= d < i):
                raise ValueError(f"stage {i} ({stage.name!r}) depends on {d!r}; dependencies must be earlier stages")


def schedule(stages: Sequence[Stage]) -> Schedule:
    """Run the stages to completion with piecewise-constant contention rates."""
    check_stages(stages)
    n = len(stages)
    queues: dict[str, list[int]] = {}
    for i, stage in enumerate(stages):
        queues.setdefault(stage.resource, []).append(i)
    head = {r: 0 for r in queues}
    busy = {r: False for r in queues}
    pending = [len(s.depends_on) for s in stages]
    succs: list[list[int]] = [[] for _ in range(n)]
    for i, stage in enumerate(stages):
        for d in stage.depends_on:
            succs[d].append(i)
    start = [math.nan] * n
    end = [math.nan] * n
    remaining = [0.0] * n
    t0 = [0.0] * n
    rate = [1.0] * n
    version = [0] * n
    active: dict[int, None] = {}
    heap: list[tuple[float, int, int, bool]] = []
    now = 0.0

    blockers: dict[int, tuple[int, ...]] = {}
    released_at: dict[int, float] = {}
    """transfer (``waits_for_full_grid``) -> when a compute kernel's end released it (``RACE_MS``)."""
    raced: set[tuple[int, int]] = set()
    # per-stage fields read on every event, looked up once (the planner schedules ~100 stages per candidate)
    kinds = [s.kind for s in stages]
    tables = [s.slowdown_by for s in stages]
    helds = [s.held_sms_by for s in stages]
    gated = any(s.waits_for_full_grid for s in stages)
    """without such a stage nothing ever waits (``blockers`` stays empty)."""

    def before_last_wave(j: int) -> bool:
        """``j`` runs and has not reached its last wave (``Stage.last_wave_at``)."""
        if j not in active:
            return False
        total = stages[j].duration_ms
        left = remaining[j] - (now - t0[j]) * rate[j]
        return total > 0 and (total - left) < stages[j].last_wave_at * total - 1e-12

    def waiting(i: int) -> bool:
        return any(before_last_wave(j) for j in blockers.get(i, ()))

    def slowdown(i: int) -> float:
        if gated and waiting(i):
            return BLOCKED_SLOWDOWN
        table, held = tables[i], helds[i]
        if not table and not held:
            return 1.0
        by_kind: dict[str, float] = {}
        for j in active:
            if j == i or (gated and waiting(j) and (j, i) not in raced):
                continue
            kind = kinds[j]
            factor = table.get(kind, 1.0)
            if held and kind in held and ((j, i) in raced or holds_sms_first(i, j)):
                factor = held[kind]
            if factor > by_kind.get(kind, 1.0):
                by_kind[kind] = factor
        return math.prod(by_kind.values()) if by_kind else 1.0

    def holds_sms_first(i: int, j: int) -> bool:
        """Of the pair, the transfer started no later than the compute stage and did not wait for it
        (``Stage.held_sms_by``)."""
        transfer, compute = (i, j) if stages[i].is_transfer else (j, i)
        return start[transfer] <= start[compute] and compute not in blockers.get(transfer, ())

    def push(i: int) -> None:
        version[i] += 1
        heapq.heappush(heap, (t0[i] + remaining[i] / rate[i], i, version[i], False))
        if stages[i].fills_device and stages[i].last_wave_at < 1.0:  # when its last wave starts
            before = remaining[i] - (1.0 - stages[i].last_wave_at) * stages[i].duration_ms
            if before > 0:
                heapq.heappush(heap, (t0[i] + before / rate[i], i, version[i], True))

    def refresh() -> None:
        for j in active:
            new_rate = 1.0 / slowdown(j)
            if new_rate != rate[j]:
                remaining[j] = max(0.0, remaining[j] - (now - t0[j]) * rate[j])
                t0[j], rate[j] = now, new_rate
                push(j)

    def try_start(i: int) -> bool:
        stage = stages[i]
        if pending[i] or start[i] == start[i] or busy[stage.resource] or queues[stage.resource][head[stage.resource]] != i:
            return False
        busy[stage.resource] = True
        start[i] = now
        if stage.waits_for_full_grid:
            # a GEMM released by the same kernel's end goes first (candidates start compute first):
            # the collective's graph node launches microseconds later (2xH200 kernel timelines)
            released = any(stages[d].resource == "compute" and end[d] == now for d in stage.depends_on)
            blockers[i] = tuple(j for j in active if stages[j].fills_device
                                and (start[j] < now or (released and start[j] == now)))
            if released and not blockers[i]:
                released_at[i] = now
        elif stage.fills_device:
            # a transfer released just before by a compute kernel's end races this GEMM
            for j in active:
                if j in released_at and now - released_at[j] <= RACE_MS + 1e-12 and not waiting(j):
                    blockers[j] = blockers.get(j, ()) + (i,)
                    raced.add((j, i))
        active[i] = None
        remaining[i], t0[i], rate[i] = stage.duration_ms, now, 1.0 / slowdown(i)
        push(i)
        return True

    started = [try_start(q[0]) for q in queues.values()]
    if any(started):
        refresh()
    while heap:
        finish, i, ver, milestone = heapq.heappop(heap)
        if ver != version[i]:
            continue
        now = finish
        if milestone:  # a full grid's last wave began: SMs go idle, waiting transfers start
            refresh()
            continue
        end[i] = now
        del active[i]
        resource = stages[i].resource
        busy[resource] = False
        head[resource] += 1
        candidates = [queues[resource][head[resource]]] if head[resource] < len(queues[resource]) else []
        for s in succs[i]:
            pending[s] -= 1
            if pending[s] == 0:
                candidates.append(s)
        for c in sorted(set(candidates), key=lambda c: (stages[c].resource != "compute", c)):
            try_start(c)
        refresh()
    if any(e != e for e in end):
        stuck = next(i for i in range(n) if end[i] != end[i])
        raise ValueError(f"stage pipeline deadlocks at stage {stuck} ({stages[stuck].name!r}): "
                         "order each resource's stages consistently with their dependencies")
    busy_ms: dict[str, float] = {r: 0.0 for r in queues}
    for i, stage in enumerate(stages):
        busy_ms[stage.resource] += end[i] - start[i]
    return Schedule(start_ms=tuple(start), end_ms=tuple(end), busy_ms=busy_ms)
