"""What measuring one site produced, before it becomes results lines."""

from __future__ import annotations

from dataclasses import dataclass

from hocket.bench.efficiency import OverlapScore, overlap_score
from hocket.core.plan import Plan
from hocket.core.site import Site
from hocket.timing.stats import Summary


@dataclass(frozen=True, kw_only=True)
class PlanOutcome:
    """One plan on one site: its correctness check and (when correct) its time."""

    plan: Plan
    max_error: float
    """largest |result - reference| over ranks, divided by the reference's largest magnitude."""
    tolerance: float
    passed: bool
    timing: Summary | None = None
    """None when the check failed or the plan raised: wrong results are never timed."""
    error: str | None = None
    """the operator's error message, when it refused the plan."""


@dataclass(frozen=True, kw_only=True)
class SiteOutcome:
    """Every plan measured on one site, with the baselines from the same run."""

    site: Site
    compute_alone: Summary
    comm_alone: Summary
    """the fastest transport's time for the collective alone."""
    plans: tuple[PlanOutcome, ...]
    comm_transport: str = "collective"
    """which transport gave ``comm_alone``."""

    @property
    def passed(self) -> bool:
        return all(p.passed for p in self.plans)

    @property
    def sequential(self) -> PlanOutcome | None:
        for outcome in self.plans:
            if outcome.plan.strategy == "sequential" and outcome.timing is not None:
                return outcome
        return None

    def score(self, outcome: PlanOutcome) -> OverlapScore | None:
        """Overlap efficiency of ``outcome`` (None without a time or a sequential time)."""
        sequential = self.sequential
        if outcome.timing is None or sequential is None:
            return None
        return overlap_score(measured_ms=outcome.timing.median_ms, sequential_ms=sequential.timing.median_ms,
                             compute_alone_ms=self.compute_alone.median_ms, comm_alone_ms=self.comm_alone.median_ms)

    def best(self) -> PlanOutcome | None:
        timed = [p for p in self.plans if p.timing is not None]
        return min(timed, key=lambda p: p.timing.median_ms) if timed else None
