"""Plans and time estimates for the graph pass: one :class:`GraphPlanner` per ``hocket.compile`` call.

Sites found in a graph are planned like ``plan=None`` operator calls (the planner of
:mod:`hocket.ops.live`: bucketed, cached, never predicted slower than sequential), on
the cluster given to ``hocket.compile`` or else this machine's probe. The pass also
asks it for rough times (a collective alone, a matmul) to decide how much independent
compute to move into a collective's gap.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from hocket.core.plan import SEQUENTIAL, Plan, as_plan
from hocket.core.site import Site
from hocket.graph.outside import global_rank, run_outside_compiler
from hocket.ops.live import LivePlanner, process_planner, tune
from hocket.ops.planning import check_supported
from hocket.plan.bucket import fit_plan

PlanFor = Callable[[Site], object]
"""A user's own choice: Site -> Plan (or dict/JSON/strategy name); None defers to the planner."""


class AutotuneFailed(Exception):
    """Measuring plans while compiling failed (collective, so it is never swallowed by the pass)."""


@dataclass(frozen=True, kw_only=True)
class Choice:
    """The plan for one site and what the cost model predicts for it (ms per occurrence)."""

    plan: Plan
    source: str
    """``predicted``, ``cache``, ``autotune``, ``plan_for`` or ``disabled``."""
    sequential_ms: float | None
    chosen_ms: float | None
    note: str = ""
    measured_sequential_ms: float | None = None
    """measured on the live group (autotune, or its cached result); None when not measured."""
    measured_chosen_ms: float | None = None
    alike: tuple[Plan, ...] = ()
    """the other candidates the cost model priced alike with ``plan`` (``hocket.graph.report.priced_alike``)"""

    @property
    def saving_ms(self) -> float | None:
        if self.sequential_ms is None or self.chosen_ms is None:
            return None
        return self.sequential_ms - self.chosen_ms

    @property
    def measured_saving_fraction(self) -> float | None:
        """Share of the measured sequential time the chosen plan saved alone (None when not measured)."""
        if not self.measured_sequential_ms or self.measured_chosen_ms is None:
            return None
        return (self.measured_sequential_ms - self.measured_chosen_ms) / self.measured_sequential_ms


def _resolve_group(group_name: str) -> object:
    from torch.distributed.distributed_c10d import _resolve_process_group

    return _resolve_process_group(group_name)


def group_ranks(group_name: str) -> tuple[int, ...]:
    """Global ranks of the process group called ``group_name`` (empty when unknown)."""
    import torch.distributed as dist

    try:
        return tuple(dist.get_process_group_ranks(_resolve_group(group_name)))
    except (RuntimeError, ValueError, KeyError):
        return ()


class GraphPlanner:
    """Chooses plans for the sites of one compiled model (see module docstring)."""

    def __init__(self, *, cluster: object = None, autotune: bool = False, plan_for: PlanFor | None = None) -> None:
        if not isinstance(autotune, bool):
            raise TypeError(f"autotune={autotune!r} must be True or False")
        if plan_for is not None and not callable(plan_for):
            raise TypeError(f"plan_for={plan_for!r} must be a function Site -> Plan (or None)")
        self._cluster_arg = cluster
        self._planner: LivePlanner | None = None
        self.autotune = autotune
        self.plan_for = plan_for

    @property
    def planner(self) -> LivePlanner:
        if self._planner is None:
            if self._cluster_arg is None:
                self._planner = process_planner()
            else:
                from hocket.hardware import load_cluster

                self._planner = LivePlanner(cluster=load_cluster(self._cluster_arg))
        return self._planner

    @property
    def cluster(self) -> object:
        return self.planner.cluster

    def predict_ms(self, site: Site, plan: Plan) -> float | None:
        from hocket.strategies import predict

        try:
            return predict(site, plan, self.cluster, self.planner.profile).total_ms
        except ValueError:  # the cluster does not describe this group
            return None

    def choose(self, site: Site, *, group_name: str) -> Choice:
        """The plan for ``site`` (collective over the group only when autotuning)."""
        from hocket.env import disabled

        if disabled():
            return Choice(plan=SEQUENTIAL, source="disabled", sequential_ms=None, chosen_ms=None,
                          note="HOCKET_DISABLE=1")
        source, note = "plan_for", ""
        measured: tuple[float | None, float | None] = (None, None)
        alike: tuple[Plan, ...] = ()
        plan = as_plan(self.plan_for(site)) if self.plan_for is not None else None
        if plan is None:
            if self.autotune:
                decision = self._tune(site, group_name)
            else:
                decision = self.planner.decide(site)
            plan, source, measured = fit_plan(decision.plan, site), decision.source, decision.measured_ms()
            if decision.search is not None and source == "predicted":
                alike = _alike(decision.search, decision.plan, site)
        try:
            plan = check_supported(site.kind, plan)
        except ValueError as exc:
            plan, note = SEQUENTIAL, str(exc)
        return Choice(plan=plan, source=source, sequential_ms=self.predict_ms(site, SEQUENTIAL),
                      chosen_ms=self.predict_ms(site, plan), note=note, measured_sequential_ms=measured[0],
                      measured_chosen_ms=measured[1], alike=alike)

    def _tune(self, site: Site, group_name: str) -> object:
        """Measure ``site`` on the live group, on a clean thread (see :mod:`hocket.graph.outside`), bounded."""
        from hocket.env import wait_timeout_s

        group = _resolve_group(group_name)
        planner = self.planner
        try:
            return run_outside_compiler(lambda: tune(site, group=group, autotune=True, planner=planner),
                                        what=f"hocket.compile(autotune=True) measuring {site.key} on group "
                                             f"{group_name!r}", timeout_s=wait_timeout_s())
        except (RuntimeError, ValueError) as exc:
            # collective: a failure here must stop every rank, never leave one rank's graph unrewritten
            raise AutotuneFailed(f"hocket.compile(autotune=True) could not measure {site.key} on group "
                                 f"{group_name!r} (rank {global_rank()}): {exc}") from exc

    # -- rough times for reordering --------------------------------------------------------
    def collective_ms(self, site: Site) -> float | None:
        """Predicted time of the collective of ``site`` alone (its comm stages, sequential)."""
        from hocket.strategies import predict

        try:
            return predict(site, SEQUENTIAL, self.cluster, self.planner.profile).comm_ms
        except ValueError:
            return None

    def matmul_ms(self, *, m: int, k: int, n: int, dtype: str, rank: int = 0) -> float | None:
        from hocket.core.site import DTYPE_BYTES
        from hocket.cost.compute import gemm_ms

        try:
            device = self.cluster.device(rank)
            return gemm_ms(device, m=m, k=k, n=n, dtype=dtype, itemsize=DTYPE_BYTES[dtype])
        except (ValueError, KeyError):
            return None


def _alike(search: object, chosen: Plan, site: Site) -> tuple[Plan, ...]:
    """The candidates of ``search`` priced alike with ``chosen`` (fitted to ``site``), ``chosen`` left out."""
    from hocket.graph.report import priced_alike

    plans = [s.plan for s in search.ranked]
    if chosen not in plans:
        return ()
    groups = priced_alike([(s.predicted_ms,) for s in search.ranked])
    head = groups[plans.index(chosen)]
    return tuple(fit_plan(p, site) for p, g in zip(plans, groups) if g == head and p != chosen)
