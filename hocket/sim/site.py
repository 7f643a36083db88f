"""One Site under one Plan: the cost model's stage pipeline, run by the engine.

``add_stages`` puts a stage list (``hocket.strategies.pipeline_stages``) into a TaskGraph for a
group of owners: each compute stage runs on every member's ``compute`` resource, each
transfer stage is *one* task across every member's transfer resource (so the slowest
member gates it). With one member standing for a class of identical ranks, the result
is the class-reduced simulation; with one member per rank, the explicit one.
``simulate_site`` does this for one site; the whole-step simulator inserts a
``CompiledStages`` (the same, prepared once) for every site occurrence.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from hocket.sim.engine import TaskGraph, Timeline, simulate


class CompiledStages:
    """A stage list prepared once for repeated insertion (a site occurs per layer and
    micro-batch): task names, contention tables and static metadata are built here and
    shared by every occurrence."""

    def __init__(self, stages: Sequence, *, prefix: str = "", meta: Mapping[str, object] | None = None,
                 extra_slowdown: Mapping[str, float] | None = None) -> None:
        self.stages = tuple(stages)
        self.names = tuple(f"{prefix}{stage.name}" for stage in self.stages)
        slows = []
        metas = []
        for i, stage in enumerate(self.stages):
            slow = dict(stage.slowdown_by)
            for kind, factor in (extra_slowdown or {}).items():
                if kind != stage.kind:
                    slow.setdefault(kind, factor)
            slows.append(slow)
            task_meta = dict(meta or {})
            task_meta.update({"stage": i, "op": stage.op or stage.name})
            if stage.piece:
                task_meta["piece"] = stage.piece
            metas.append(task_meta)
        self.slowdown_by = tuple(slows)
        self.metas = tuple(metas)
        needed = set(range(len(self.stages)))
        for stage in self.stages:
            needed.difference_update(stage.depends_on)
        self.sinks = tuple(sorted(needed))

    def add(self, graph: TaskGraph, *, members: Sequence[str],
            after: Mapping[str, Sequence[int]] | Sequence[int] = (),
            meta: Mapping[str, object] | None = None) -> list[tuple[int, ...]]:
        """Insert one occurrence for the owners ``members``; return the task ids of each stage.

        ``after``: tasks every entry stage (one without dependencies) waits for, either one
        list for all members or a list per member; ``meta``: per-occurrence metadata
        (e.g. the micro-batch) shown in traces beside the static metadata.
        """
        if not members:
            raise ValueError("add_stages: members is empty; give at least one owner (a rank or a rank class)")
        per_member = isinstance(after, Mapping)
        if per_member:
            missing = [m for m in members if m not in after]
            if missing:
                raise ValueError(f"add_stages: after has no entry for members {missing}")
            shared_after = tuple(sorted({d for m in members for d in after[m]}))
        else:
            shared_after = tuple(after)
        ids: list[tuple[int, ...]] = []
        add = graph.add
        resource = graph.resource
        for i, stage in enumerate(self.stages):
            task_meta = (self.metas[i], meta) if meta else self.metas[i]
            slow = self.slowdown_by[i]
            if stage.resource == "compute":
                row = []
                for j, member in enumerate(members):
                    if stage.depends_on:
                        deps = tuple(_member_task(ids[d], j) for d in stage.depends_on)
                    else:
                        deps = tuple(after[member]) if per_member else shared_after
                    row.append(add(name=self.names[i], resources=(resource(member, "compute"),),
                                   work_ms=stage.duration_ms, deps=deps, kind=stage.kind, slowdown_by=slow,
                                   meta=task_meta))
                ids.append(tuple(row))
            else:
                if stage.depends_on:
                    deps = tuple(sorted({t for d in stage.depends_on for t in ids[d]}))
                else:
                    deps = shared_after
                ids.append((add(name=self.names[i], resources=tuple(resource(m, stage.resource) for m in members),
                                work_ms=stage.duration_ms, deps=deps, kind=stage.kind, slowdown_by=slow,
                                meta=task_meta),))
        return ids

    def exits(self, ids: list[tuple[int, ...]], member_index: int) -> tuple[int, ...]:
        """The tasks a member must finish before the occurrence is done (stages nothing depends on)."""
        return tuple(_member_task(ids[i], member_index) for i in self.sinks)


def add_stages(
    graph: TaskGraph,
    stages: Sequence,
    *,
    members: Sequence[str],
    after: Mapping[str, Sequence[int]] | Sequence[int] = (),
    prefix: str = "",
    meta: Mapping[str, object] | None = None,
    extra_slowdown: Mapping[str, float] | None = None,
) -> list[tuple[int, ...]]:
    """Add ``stages`` once for the owners ``members``; return the task ids of each stage.

    ``extra_slowdown``: contention factors for transfer kinds the stage list does not
    mention (e.g. a DP collective running beside a site's GEMM in a training step); a
    stage's own factors win. See ``CompiledStages`` for repeated insertion.
    """
    compiled = CompiledStages(stages, prefix=prefix, meta=meta, extra_slowdown=extra_slowdown)
    return compiled.add(graph, members=members, after=after)


def _member_task(stage_ids: tuple[int, ...], member_index: int) -> int:
    """A member's copy of a stage: its own for compute stages, the shared one for transfers."""
    return stage_ids[member_index] if len(stage_ids) > 1 else stage_ids[0]


@dataclass(frozen=True, kw_only=True)
class SiteSimulation:
    """The simulated timeline of one site occurrence."""

    site: object
    plan: object
    stages: tuple
    timeline: Timeline
    members: tuple[str, ...]

    @property
    def total_ms(self) -> float:
        return self.timeline.makespan_ms

    def busy_ms(self) -> dict[str, float]:
        """Busy time per resource kind of one member (the first)."""
        g = self.timeline.graph
        owner = g.owner(self.members[0])
        busy = self.timeline.busy_ms()
        return {g.resource_kind[r]: busy[name] for r, name in enumerate(g.resource_names)
                if g.resource_owner[r] == owner}


def simulate_site(site, plan, cluster, profile=None, *, explicit_ranks: bool = False) -> SiteSimulation:
    """Simulate ``site`` under ``plan`` on ``cluster``.

    By default the group's ranks form one class (they run the same stages); with
    ``explicit_ranks=True`` every rank of the group is simulated as its own owner and the
    transfers span all of them (same answer for identical ranks; slower, for checking).
    """
    from hocket.core.plan import Plan, as_plan
    from hocket.core.site import Site
    from hocket.strategies import pipeline_stages

    if not isinstance(site, Site):
        raise TypeError(f"site={site!r} must be a hocket.Site")
    if not hasattr(cluster, "group_transports"):
        raise TypeError(f"cluster={cluster!r} must be a ClusterSpec (hocket.hardware.load_cluster(name))")
    plan = as_plan(plan) or Plan()
    stages = tuple(pipeline_stages(site, plan, cluster, profile))
    ranks = site.group_ranks
    if explicit_ranks:
        members = tuple(f"rank{r}" for r in ranks)
    else:
        models = sorted({cluster.device(r).model for r in ranks})
        members = (f"{site.name or site.kind} group [{'+'.join(models)} x{len(ranks)}]",)
    graph = TaskGraph()
    meta = {"site": site.name or site.kind, "plan": plan.describe()}
    add_stages(graph, stages, members=members, meta=meta)
    return SiteSimulation(site=site, plan=plan, stages=stages, timeline=simulate(graph), members=members)
