"""``Prediction``: what the cost model says of one plan, from its stages and their schedule.

:func:`hocket.strategies.pricing.predict` (the entry point: it reads the strategy registry) builds the
plan's stages and schedules them; :func:`prediction_from` sums them up.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from hocket.cost.stages import Schedule, Stage


@dataclass(frozen=True, kw_only=True)
class Prediction:
    """Predicted time of one Site under one Plan (all ms, one occurrence of the site).

    ``compute_ms``/``comm_ms``: solo time of the compute stages / transfer stages (what
    they would take alone, chunking penalties included); ``exposed_comm_ms``: how much
    longer than its compute the site runs (communication not hidden, plus contention);
    ``busy_ms``: per resource (compute, link, copy_engine, host, issue), time spent running
    stages in the contended schedule (``issue``: the host issuing GPU work).
    """

    total_ms: float
    compute_ms: float
    comm_ms: float
    exposed_comm_ms: float
    busy_ms: Mapping[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"total_ms": self.total_ms, "compute_ms": self.compute_ms, "comm_ms": self.comm_ms,
                "exposed_comm_ms": self.exposed_comm_ms, "busy_ms": dict(self.busy_ms)}


def prediction_from(stages: list[Stage], timeline: Schedule, *, total_ms: float | None = None,
                    busy_ms: Mapping[str, float] | None = None) -> Prediction:
    """The Prediction of ``stages`` run as ``timeline`` (``total_ms``/``busy_ms`` override its
    makespan and busy times, e.g. for the steady state)."""
    compute = sum(s.duration_ms for s in stages if not s.is_transfer and not s.is_issue)
    comm = sum(s.duration_ms for s in stages if s.is_transfer)
    total = timeline.total_ms if total_ms is None else total_ms
    values = (total, compute, comm)
    if not all(math.isfinite(v) and v >= 0 for v in values):
        raise ValueError(f"internal: non-finite prediction {values} from {len(stages)} stages; please report")
    return Prediction(total_ms=total, compute_ms=compute, comm_ms=comm, exposed_comm_ms=max(0.0, total - compute),
                      busy_ms=dict(timeline.busy_ms if busy_ms is None else busy_ms))
