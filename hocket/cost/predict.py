"""``predict(site, plan, cluster, profile=None) -> Prediction``: the cost model's entry point.

The prediction is the makespan of the plan's stage pipeline (``pipeline.py``) under
contention (``stages.schedule``): the same stages the simulator executes. By default it
prices one call from an idle GPU; ``steady_state=True`` prices one call of a loop with the
host ahead (``steady.py``), which is what a training step sees.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping

from hocket.cost.pipeline import pipeline_stages
from hocket.cost.stages import Schedule, Stage, schedule
from hocket.cost.steady import steady_state_total
from hocket.core.plan import Plan, as_plan
from hocket.core.site import Site


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


def predict(site: Site, plan: Plan | dict | str | None, cluster, profile=None, *,
            steady_state: bool = False, captured: bool = False) -> Prediction:
    """Price ``site`` under ``plan`` on ``cluster`` (a ``ClusterSpec``), optionally scaled
    by a calibration ``profile`` of that cluster. ``plan=None`` means sequential.
    ``steady_state``: one call of a loop with the host ahead (``hocket.cost.steady``), its
    GEMMs at the profile's sustained level (``hocket.cost.compute``), instead of one call from
    an idle GPU. ``captured``: one call of a loop of CUDA graph replays (``hocket.ops.CapturedCall``:
    no host issue cost but the replay's); implies ``steady_state``."""
    if not isinstance(site, Site):
        raise TypeError(f"site={site!r} must be a hocket.Site")
    plan = as_plan(plan) or Plan()
    if not hasattr(cluster, "group_transports"):
        raise TypeError(f"cluster={cluster!r} must be a ClusterSpec (hocket.hardware.load_cluster(name))")
    if not isinstance(steady_state, bool):
        raise TypeError(f"steady_state={steady_state!r} must be True or False")
    if not isinstance(captured, bool):
        raise TypeError(f"captured={captured!r} must be True or False")
    steady_state = steady_state or captured
    stages = pipeline_stages(site, plan, cluster, profile, steady_state=steady_state, captured=captured)
    if not steady_state:
        return prediction_from(stages, schedule(stages))
    total, busy, timeline = steady_state_total(stages)
    return prediction_from(stages, timeline, total_ms=total, busy_ms=busy)
