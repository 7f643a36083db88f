"""The cost model's entry points over the registry: a site's stages are its plan's spec's cost builder
run on a :class:`hocket.cost.builder.StageBuilder`.

``predict(site, plan, cluster, profile=None) -> Prediction`` prices one plan: the makespan of the
plan's stage pipeline (:func:`pipeline_stages`) under contention (``hocket.cost.stages.schedule``),
the same stages the simulator executes. By default it prices one call from an idle GPU;
``steady_state=True`` prices one call of a loop with the host ahead (``hocket.cost.steady``), which is
what a training step sees.
"""

from __future__ import annotations

from hocket.core.plan import Plan, as_plan
from hocket.core.site import Site
from hocket.cost import comm as comm_model
from hocket.cost.builder import new_builder
from hocket.cost.predict import Prediction, prediction_from
from hocket.cost.stages import Stage, schedule
from hocket.cost.steady import steady_state_total
from hocket.strategies.registry import REGISTRY


def priced_kinds() -> tuple[str, ...]:
    """Site kinds some strategy's cost builder prices."""
    return tuple(dict.fromkeys(kind for s in REGISTRY.specs() for kind in s.priced))


def _spec_for(site, plan):
    if site.kind not in priced_kinds():
        raise ValueError(f"site kind {site.kind!r} has no cost model yet; priced kinds: {sorted(priced_kinds())}")
    found = REGISTRY.spec(plan.strategy)
    if site.kind not in found.priced:
        fits = sorted(found.priced)
        raise ValueError(f"strategy={plan.strategy!r} does not apply to a {site.kind} site (it applies to "
                         f"{', '.join(fits) or 'no priced kind'}); use one of {REGISTRY.priced_for(site.kind)}")
    return found


def pipeline_stages(site, plan, cluster, profile=None, *, topology: comm_model.GroupTopology | None = None,
                    steady_state: bool = False, captured: bool = False) -> list[Stage]:
    """The stages of ``site`` run with ``plan`` on ``cluster`` (one rank's view; the group's
    slowest device computes, the group's bottleneck links carry): the plan's spec's cost builder
    (``StrategySpec.cost``) on :func:`hocket.cost.builder.new_builder`'s builder. ``steady_state``: the
    GEMMs run at the profile's sustained level (``hocket.cost.compute``, "Sustained level").
    ``captured``: the call is replayed from a CUDA graph, so no item costs the host anything to
    issue; the entry stage holds the replay (``hocket.cost.builder.CAPTURED_REPLAY_US``)."""
    found = _spec_for(site, plan)
    builder = new_builder(site, plan, cluster, profile, topology=topology, steady_state=steady_state,
                          captured=captured)
    found.cost(builder)
    return builder.finish()


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
