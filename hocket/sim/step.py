"""A whole training step: a StepGraph under 1F1B, across rank classes, in one engine run.

For every replica class (``layout.rank_classes``) and pipeline stage, the stage's nodes of
one micro-batch (``hocket.models.StepGraph``) are repeated per micro-batch in 1F1B order:

* a ``Site`` becomes its plan's stage list (``hocket.strategies.pipeline_stages``), compute on
  the class's ``compute`` resource, transfers on ``link``/``copy_engine``/``host``; an expert-parallel
  ``MoeSite`` likewise (``hocket.strategies.moe.moe_stages_of``, priced on DP replica 0's EP group);
* a ``ComputeOp`` is one compute task; a TP-axis ``CommOp`` one task on ``link``;
* a pipeline ``send_recv`` is one task on the sender's ``pp.send_next``/``pp.send_prev``
  and the receiver's ``pp.recv_prev``/``pp.recv_next`` (so it starts when both ends are
  ready, and each direction keeps its micro-batch order);
* after the last backward, the stage's DP gradient collectives (``step_nodes``) run as
  one task across the ``dp`` resource of *every* class holding that stage: the slowest
  replica gates them.

Interleaved 1F1B (``StepGraph.virtual > 1``): the graph's ``pp * virtual`` stages are virtual stages,
virtual stage ``j`` run by the owners of pipeline stage ``j % pp`` in the order of
``schedule_1f1b.interleaved_global_order``; a pipeline transfer goes to the next or previous virtual
stage (from the last pipeline rank back to the first between chunks), and each virtual stage's
gradient sync runs on its pipeline rank's ``dp`` resource.

Class-reduced (default), an owner is a (replica class, stage) standing for all of its
ranks; with ``explicit_ranks=True`` every rank is its own owner (small jobs only; the
result is the same for identical ranks, which the tests check).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from hocket.core.moe import MoeSite
from hocket.core.plan import Plan, as_plan
from hocket.core.site import Site
from hocket.models.graph import CommOp, ComputeOp
from hocket.sim.engine import TaskGraph, Timeline, simulate
from hocket.sim.layout import ParallelLayout, ReplicaClass, rank_classes
from hocket.sim.pricing import Pricer
from hocket.sim.schedule_1f1b import global_order, interleaved_global_order
from hocket.sim.site import CompiledStages

EXPLICIT_RANK_LIMIT = 4096
"""Refuse explicit per-rank simulation above this many ranks (use the class reduction)."""


@dataclass(frozen=True, kw_only=True)
class StepSimulation:
    """The simulated step: timeline, who the owners stand for, and what was decided."""

    step: object
    cluster: object
    timeline: Timeline
    classes: tuple[ReplicaClass, ...]
    owner_ranks: Mapping[str, int]
    """ranks each owner stands for (1 per owner in the explicit simulation)."""
    owner_stage: Mapping[str, int]
    site_plans: Mapping[str, str]
    """site name -> the plan it ran (describe())."""
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def step_ms(self) -> float:
        return self.timeline.makespan_ms


def plan_chooser(plan) -> Callable[[object], Plan]:
    """Turn a Plan / dict / JSON / strategy name / None / callable into ``site -> Plan``."""
    if callable(plan) and not isinstance(plan, (Plan, str, dict)):
        return plan
    fixed = as_plan(plan) or Plan()
    return lambda site: fixed


def simulate_step(step, cluster, *, plan=None, profile=None, explicit_ranks: bool = False) -> StepSimulation:
    """Simulate one training step of ``step`` (a ``hocket.models.StepGraph``) on ``cluster``.

    ``plan``: one plan for every site, or a callable ``site -> Plan`` (e.g. from a planner
    JSON, see ``hocket.sim.plans``); a plan that does not apply to a site falls back to
    sequential and says so in ``notes``.
    """
    from hocket.models.graph import StepGraph

    if not isinstance(step, StepGraph):
        raise TypeError(f"step={type(step).__name__} must be a hocket.models StepGraph "
                        "(hocket.models.step.model_step_sites(model, tp=..., pp=..., dp=..., seq=...))")
    if not hasattr(cluster, "group_transports"):
        raise TypeError(f"cluster={cluster!r} must be a ClusterSpec (hocket.hardware.load_cluster(name))")
    # context-parallel ranks sit between tp and dp (hocket.models.step): as replicas of the stage's TP group they
    # are laid out as dp * cp; their K/V collectives are CommOps on the "cp" resource
    layout = ParallelLayout(tp=step.tp, pp=step.pp, dp=step.dp * getattr(step, "cp", 1))
    layout.check_fits(cluster)
    if explicit_ranks and layout.world > EXPLICIT_RANK_LIMIT:
        raise ValueError(f"explicit_ranks=True would simulate {layout.world} ranks one by one (limit "
                         f"{EXPLICIT_RANK_LIMIT}); leave it False: identical ranks are simulated once per class")
    classes = rank_classes(cluster, layout, dtype=step.dtype, merge=not explicit_ranks)
    pricer = Pricer(cluster, profile=profile, choose_plan=plan_chooser(plan))
    builder = _StepBuilder(step=step, cluster=cluster, layout=layout, classes=classes, pricer=pricer,
                           explicit=explicit_ranks)
    virtual = getattr(step, "virtual", 1)
    if virtual == 1:
        order = ((s, op, mb) for s, op, mb in global_order(step.pp, step.micro_batches))
    else:
        order = ((chunk * step.pp + s, op, mb) for s, op, mb, chunk in
                 interleaved_global_order(step.pp, step.micro_batches, virtual))
    for s, op, mb in order:
        for ci in range(len(classes)):
            builder.emit_phase(ci, s, "forward" if op == "F" else "backward", mb)
    for s in range(len(step.stages)):
        builder.emit_step_nodes(s)
    timeline = simulate(builder.graph)
    notes = tuple(dict.fromkeys(builder.notes))
    return StepSimulation(step=step, cluster=cluster, timeline=timeline, classes=classes,
                          owner_ranks=builder.owner_ranks, owner_stage=builder.owner_stage,
                          site_plans=builder.site_plans, notes=notes)


class _StepBuilder:
    def __init__(self, *, step, cluster, layout: ParallelLayout, classes, pricer: Pricer, explicit: bool) -> None:
        self.step = step
        self.cluster = cluster
        self.layout = layout
        self.classes = classes
        self.pricer = pricer
        self.explicit = explicit
        self.graph = TaskGraph()
        self.members: dict[tuple[int, int], tuple[str, ...]] = {}
        self.owner_ranks: dict[str, int] = {}
        self.owner_stage: dict[str, int] = {}
        self.site_plans: dict[str, str] = {}
        self.notes: list[str] = []
        self.node_exits: dict[tuple[int, int, int], dict[int, dict[str, tuple[int, ...]]]] = {}
        self.transfers: dict[tuple, tuple[int, ...]] = {}
        self.site_memo: dict[tuple, tuple] = {}
        self.compute_memo: dict[tuple, object] = {}
        self.mb_meta: dict[tuple, dict] = {}
        for ci, cls in enumerate(classes):
            for s, pos in enumerate(cls.stages):
                if explicit:
                    names = tuple(f"rank{r}" for r in pos.tp_ranks)
                    for name in names:
                        self.owner_ranks[name] = 1
                        self.owner_stage[name] = s
                else:
                    names = (cls.owner(s),)
                    self.owner_ranks[names[0]] = cls.count * len(pos.tp_ranks)
                    self.owner_stage[names[0]] = s
                self.members[(ci, s)] = names
                for name in names:  # fixed resource order per owner (trace threads, plot rows)
                    for kind in ("compute", "link"):
                        self.graph.resource(name, kind)

    # -- helpers -----------------------------------------------------------------
    def _device(self, ci: int, s: int, member_index: int):
        pos = self.classes[ci].stages[s]
        if self.explicit:
            return self.cluster.device(pos.tp_ranks[member_index])
        return pos.slowest

    def _class_rank(self, ci: int, rank: int) -> int:
        """The rank playing ``rank``'s role (given in DP replica 0) in class ``ci``'s representative replica."""
        t, _, s = self.layout.coords(rank)
        return self.layout.rank(tp=t, dp=self.classes[ci].replicas[0], pp=s)

    # -- one phase of one micro-batch -----------------------------------------------------
    def emit_phase(self, ci: int, s: int, phase: str, mb: int) -> None:
        stage = self.step.stages[s]
        members = self.members[(ci, s % self.layout.pp)]
        key = (ci, s, mb)
        exits = self.node_exits.setdefault(key, {})
        g = self.graph
        for idx, node in enumerate(stage.nodes):
            if node.phase != phase:
                continue
            after = {m: tuple(sorted({t for d in node.depends_on for t in exits[d][m]})) for m in members}
            op = node.op
            if isinstance(op, (Site, MoeSite)):
                exits[idx] = self._site(ci, s, node, after, mb)
            elif isinstance(op, ComputeOp):
                out = {}
                for i, m in enumerate(members):
                    memo_key = (ci, s, i, id(node))
                    priced = self.compute_memo.get(memo_key)
                    if priced is None:
                        priced = self.compute_memo[memo_key] = self.pricer.compute(
                            op, self._device(ci, s % self.layout.pp, i))
                    out[m] = (g.add(name=node.name, resources=[g.resource(m, "compute")], work_ms=priced.ms,
                                    deps=after[m], kind=priced.kind, slowdown_by=priced.slowdown_by,
                                    meta=self._mb_meta(mb, phase)),)
                exits[idx] = out
            elif isinstance(op, CommOp) and op.axis == "pp":
                exits[idx] = self._pipeline_transfer(ci, s, node, after, mb)
            elif isinstance(op, CommOp):
                ranks = self.classes[ci].stages[s % self.layout.pp].tp_ranks if op.axis == "tp" else tuple(op.ranks)
                priced = self.pricer.comm(op, ranks, self._device(ci, s % self.layout.pp, 0))
                resource = priced.resource if op.axis == "tp" else op.axis
                deps = sorted({t for m in members for t in after[m]})
                tid = g.add(name=node.name, resources=[g.resource(m, resource) for m in members], work_ms=priced.ms,
                            deps=deps, kind=priced.kind, slowdown_by=priced.slowdown_by,
                            meta={"mb": mb, "phase": phase, "bytes": op.nbytes})
                exits[idx] = {m: (tid,) for m in members}
            else:
                raise TypeError(f"StepGraph node {node.name!r} holds {type(op).__name__}; the simulator runs "
                                "Site, ComputeOp and CommOp nodes")
        if phase == "backward":
            del self.node_exits[key]

    def _site(self, ci: int, s: int, node, after, mb: int) -> dict[str, tuple[int, ...]]:
        pos = self.classes[ci].stages[s % self.layout.pp]
        members = self.members[(ci, s % self.layout.pp)]
        memo_key = (ci, s, id(node))
        compiled = self.site_memo.get(memo_key)
        if compiled is None:
            priced = self.pricer.site(node.op, pos.tp_ranks)
            if priced.note:
                self.notes.append(priced.note)
            label = node.op.name or node.name
            self.site_plans.setdefault(label, priced.plan.describe())
            extra = self.pricer.compute_slowdown(pos.slowest, gemm_like=True)
            compiled = self.site_memo[memo_key] = CompiledStages(
                priced.stages, prefix=f"{node.name}/", meta={"site": label, "plan": priced.plan.describe()},
                extra_slowdown=extra)
        ids = compiled.add(self.graph, members=members, after=after, meta=self._mb_meta(mb, node.phase))
        return {m: compiled.exits(ids, i) for i, m in enumerate(members)}

    def _mb_meta(self, mb: int, phase: str) -> dict:
        key = (mb, phase)
        meta = self.mb_meta.get(key)
        if meta is None:
            meta = self.mb_meta[key] = {"mb": mb, "phase": phase}
        return meta

    def _pipeline_transfer(self, ci: int, s: int, node, after, mb: int) -> dict[str, tuple[int, ...]]:
        op = node.op
        pp = self.layout.pp
        src_stage = self.layout.coords(op.ranks[0])[2]
        dst_stage = self.layout.coords(op.ranks[1])[2]
        # the virtual stages at either end: a transfer moves to the next stage (activations) or the previous one
        # (gradients); without interleaving virtual and pipeline stages are the same
        downstream = "activation" in op.name
        if dst_stage == s % pp and src_stage != s % pp:  # a receive: the sender made the transfer earlier
            src_v = s - 1 if downstream else s + 1
            tids = self.transfers.pop((ci, src_v, s, mb))
            return {m: (tids[i],) for i, m in enumerate(self.members[(ci, s % pp)])}
        if src_stage != s % pp:
            raise ValueError(f"pipeline op {node.name!r} on stage {s} moves data from stage {src_stage} to "
                             f"{dst_stage}; one end must be the stage itself")
        dst_v = s + 1 if downstream else s - 1
        forward = dst_v > s
        ranks = (self._class_rank(ci, op.ranks[0]), self._class_rank(ci, op.ranks[1]))
        priced = self.pricer.comm(op, ranks, self._device(ci, s % pp, 0))
        g = self.graph
        src_members, dst_members = self.members[(ci, s % pp)], self.members[(ci, dst_v % pp)]
        tids = []
        for i, m in enumerate(src_members):
            resources = [g.resource(m, "pp.send_next" if forward else "pp.send_prev"),
                         g.resource(dst_members[i], "pp.recv_prev" if forward else "pp.recv_next")]
            tids.append(g.add(name=node.name, resources=resources, work_ms=priced.ms, deps=after[m],
                              kind=priced.kind, slowdown_by=priced.slowdown_by,
                              meta={"mb": mb, "bytes": op.nbytes, "to_stage": dst_v}))
        self.transfers[(ci, s, dst_v, mb)] = tuple(tids)
        return {m: (tids[i],) for i, m in enumerate(src_members)}

    # -- once per step -----------------------------------------------------------------
    def emit_step_nodes(self, s: int) -> None:
        stage = self.step.stages[s]
        if not stage.step_nodes:
            return
        g = self.graph
        members = [m for ci in range(len(self.classes)) for m in self.members[(ci, s % self.layout.pp)]]
        tails = sorted({t for r, owner in enumerate(g.resource_owner)
                        if g.owner_names[owner] in members for t in (g.tail(r),) if t is not None})
        devices = [self.classes[ci].stages[s % self.layout.pp].slowest for ci in range(len(self.classes))]
        exits: dict[int, int] = {}
        for idx, node in enumerate(stage.step_nodes):
            op = node.op
            if not isinstance(op, CommOp):
                raise TypeError(f"step node {node.name!r} holds {type(op).__name__}; step nodes are CommOps")
            deps = [exits[d] for d in node.depends_on] if node.depends_on else tails
            priced = self.pricer.comm(op, tuple(op.ranks), devices[0])
            resource = op.axis if op.axis != "tp" else priced.resource
            exits[idx] = g.add(name=node.name, resources=[g.resource(m, resource) for m in members],
                               work_ms=priced.ms, deps=deps, kind=priced.kind, slowdown_by=priced.slowdown_by,
                               meta={"phase": "step", "bytes": op.nbytes, "group": len(op.ranks)})
