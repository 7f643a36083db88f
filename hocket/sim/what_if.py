"""What a hypothetical transport would save on a model's training step (``hocket simulate --what-if triggered``).

:func:`what_if_step` simulates the step twice on the same cluster, with the same plans for every site: as
planned, and with every site the hypothetical ``triggered`` transport serves (``hocket.cost.triggered``:
``mm_rs`` and ``mm_ar``, forward and backward) run as its triggered stage pipeline instead. The saving is
the difference of the two simulated step times; beside it, per site, the cost model's price of one
occurrence under its plan and under ``triggered``, and the sites it does not serve with the reason.

Only a cluster that declares the hardware (``ClusterSpec.what_if_transports``, e.g. the ``h200x8-triggered``
preset) can be asked; the result and everything printed from it is marked hypothetical. The triggered price
is a lower bound (``hocket.cost.triggered``), so the saving is an upper bound.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from hocket.core.plan import Plan
from hocket.core.site import Site
from hocket.cost.triggered import (
    LABEL,
    SERVED_KINDS,
    T3_SUBLAYER_SPEEDUP_GEOMEAN,
    T3_SUBLAYER_SPEEDUP_MAX,
    TRIGGERED,
    HypotheticalTransportError,
    price_triggered,
    triggered_reason,
    triggered_stages,
)
from hocket.sim.pricing import Pricer, SitePricing

WHAT_IFS = (TRIGGERED,)
"""The transports ``--what-if`` accepts (each hypothetical)."""


class _Hypothetical:
    """Stands for the plan of a site the what-if runs triggered (no Plan can name a hypothetical transport)."""

    hash = "hypothetical-triggered"

    @staticmethod
    def describe() -> str:
        return LABEL


class TriggeredPricer(Pricer):
    """A :class:`hocket.sim.pricing.Pricer` that runs every site ``triggered`` serves as its triggered stages."""

    def __init__(self, cluster, *, profile=None, choose_plan: Callable[[object], Plan]) -> None:
        super().__init__(cluster, profile=profile, choose_plan=choose_plan)
        self._triggered: dict[str, SitePricing] = {}

    def site(self, site, ranks: tuple[int, ...]) -> SitePricing:
        if not isinstance(site, Site) or site.kind not in SERVED_KINDS:
            return super().site(site, ranks)
        if ranks and tuple(site.group_ranks) != tuple(ranks):
            site = replace(site, ranks=tuple(ranks))
        hit = self._triggered.get(site.key)
        if hit is None:
            try:
                price = price_triggered(site, self.cluster, self.profile)
            except HypotheticalTransportError:
                return super().site(site, ranks)
            hit = self._triggered[site.key] = SitePricing(stages=tuple(triggered_stages(price)), plan=_Hypothetical())
        return hit


@dataclass(frozen=True, kw_only=True)
class SiteWhatIf:
    """One site of the step: its price under its plan and (where served) under ``triggered``, per occurrence."""

    name: str
    kind: str
    direction: str
    count: int
    """occurrences per step on one rank (micro-batches x layers of the busiest stage's kind)."""
    plan: str
    planned_ms: float
    triggered_ms: float | None
    reason: str = ""
    """why ``triggered`` does not serve it (empty where it does)."""

    def to_dict(self) -> dict:
        return {"name": self.name, "kind": self.kind, "direction": self.direction, "count": self.count,
                "plan": self.plan, "planned_ms": self.planned_ms, "triggered_ms": self.triggered_ms,
                "reason": self.reason, "hypothetical": self.triggered_ms is not None}


@dataclass(frozen=True, kw_only=True)
class WhatIf:
    """The step as planned and with the hypothetical transport (all ms, simulated)."""

    transport: str
    cluster: str
    step_ms: float
    what_if_step_ms: float
    sites: tuple[SiteWhatIf, ...]
    notes: tuple[str, ...] = field(default_factory=tuple)
    hypothetical: bool = True
    label: str = LABEL

    @property
    def saving_ms(self) -> float:
        return self.step_ms - self.what_if_step_ms

    @property
    def saving(self) -> float:
        return self.saving_ms / self.step_ms if self.step_ms > 0 else 0.0

    def to_dict(self) -> dict:
        return {"transport": self.transport, "label": self.label, "hypothetical": True, "cluster": self.cluster,
                "step_ms": self.step_ms, "what_if_step_ms": self.what_if_step_ms, "saving_ms": self.saving_ms,
                "saving": self.saving, "sites": [s.to_dict() for s in self.sites], "notes": list(self.notes),
                "reference": {"paper": "T3 (Pati et al., ASPLOS 2024, arXiv:2401.16677)",
                              "sublayer_speedup_geomean": T3_SUBLAYER_SPEEDUP_GEOMEAN,
                              "sublayer_speedup_max": T3_SUBLAYER_SPEEDUP_MAX}}


def _simulate(step, cluster, pricer: Pricer):
    """``hocket.sim.step.simulate_step`` with ``pricer`` pricing the sites (the same steps, in the same order)."""
    from hocket.sim import step as sim_step

    layout = sim_step.ParallelLayout(tp=step.tp, pp=step.pp, dp=step.dp * getattr(step, "cp", 1))
    layout.check_fits(cluster)
    classes = sim_step.rank_classes(cluster, layout, dtype=step.dtype, merge=True)
    builder = sim_step._StepBuilder(step=step, cluster=cluster, layout=layout, classes=classes, pricer=pricer,
                                    explicit=False)
    virtual = getattr(step, "virtual", 1)
    if virtual == 1:
        order = ((s, op, mb) for s, op, mb in sim_step.global_order(step.pp, step.micro_batches))
    else:
        order = ((chunk * step.pp + s, op, mb) for s, op, mb, chunk in
                 sim_step.interleaved_global_order(step.pp, step.micro_batches, virtual))
    for s, op, mb in order:
        for ci in range(len(classes)):
            builder.emit_phase(ci, s, "forward" if op == "F" else "backward", mb)
    for s in range(len(step.stages)):
        builder.emit_step_nodes(s)
    timeline = sim_step.simulate(builder.graph)
    return timeline.makespan_ms, tuple(dict.fromkeys(builder.notes))


def _step_sites(step) -> list[tuple[Site, int]]:
    """(site, occurrences per step on one rank) of the first pipeline stage that holds each site's shape."""
    seen: dict[str, list] = {}
    for stage in step.stages:
        for node in stage.nodes:
            op = node.op
            if isinstance(op, Site):
                key = f"{op.name or node.name}|{op.direction}|{op.key}"
                entry = seen.setdefault(key, [op, 0, stage.index])
                if entry[2] == stage.index:
                    entry[1] += op.count
    return [(site, count) for site, count, _ in seen.values()]


def what_if_step(step, cluster, *, plan=None, profile=None, transport: str = TRIGGERED,
                 baseline_ms: float | None = None) -> WhatIf:
    """Simulate ``step`` (a ``hocket.models`` StepGraph) on ``cluster`` as planned (``plan``: one plan, or a
    callable ``site -> Plan``, as ``hocket.sim.step.simulate_step`` takes) and with ``transport`` on every
    site it serves (module docstring). ``baseline_ms``: the planned step's simulated time when the caller has
    it (``hocket simulate`` does), else it is simulated here."""
    from hocket.sim.step import plan_chooser, simulate_step
    from hocket.strategies import predict

    if transport not in WHAT_IFS:
        raise ValueError(f"--what-if {transport!r} is unknown; hypothetical transports: {WHAT_IFS}")
    if not hasattr(cluster, "what_if_transports"):
        raise TypeError(f"cluster={cluster!r} must be a ClusterSpec (hocket.hardware.load_cluster(name))")
    if transport not in cluster.what_if_transports:
        raise ValueError(f"cluster {cluster.name!r} does not declare {transport!r} hardware: it is hypothetical, "
                         f"offered only where a cluster declares it; use a preset that does (h200x8-triggered) "
                         f"or add what_if: [{transport}] to a cluster file")
    chooser = plan_chooser(plan)
    if baseline_ms is None:
        baseline_ms = simulate_step(step, cluster, plan=chooser, profile=profile).step_ms
    what_if_ms, notes = _simulate(step, cluster, TriggeredPricer(cluster, profile=profile, choose_plan=chooser))
    rows = []
    for site, count in _step_sites(step):
        chosen = chooser(site)
        try:
            planned = predict(site, chosen, cluster, profile).total_ms
            label = chosen.describe()
        except ValueError:  # the plan does not apply here: the simulator ran the sequential baseline
            planned, label = predict(site, Plan(), cluster, profile).total_ms, Plan().describe()
        reason = triggered_reason(site, cluster) or ""
        triggered = None if reason else price_triggered(site, cluster, profile).total_ms
        rows.append(SiteWhatIf(name=site.name or site.kind, kind=site.kind, direction=site.direction, count=count,
                               plan=label, planned_ms=planned, triggered_ms=triggered, reason=reason))
    return WhatIf(transport=transport, cluster=cluster.name, step_ms=baseline_ms, what_if_step_ms=what_if_ms,
                  sites=tuple(rows), notes=notes)
