"""The halo-exchange strategies of ``hocket.ops.stencil_steps`` (site kind ``halo``,
:class:`hocket.core.halo.HaloSite`), and their prices.

* ``sequential`` (its spec in :mod:`hocket.strategies.sequential` serves ``halo`` too, priced by
  :func:`hocket.cost.halo.sequential_stages`): exchange, then compute (Devito's ``basic``);
* ``overlap``: post the exchange, compute the interior, wait, compute the boundary shell (Devito's
  ``overlap``);
* ``deep_halo``: ``Plan.chunks = s``: one exchange ``s * radius`` wide every ``s`` steps, the overlap
  computed twice (``s`` from 2 up to the widest halo a block holds and the call's steps).

:func:`predict_halo` prices a plan of a halo site with the plan's spec (the compute of ``step_fn`` from a
:class:`hocket.cost.halo.HaloCompute`, measured by ``hocket.ops.stencil.time_step_fn``, else estimated).
"""

from __future__ import annotations

from hocket.core.halo import HALO_KIND, HaloSite
from hocket.core.plan import Plan, as_plan
from hocket.cost.builder import new_builder
from hocket.cost.halo import HaloCompute, deep_halo_stages, overlap_stages, with_compute
from hocket.cost.predict import Prediction, prediction_from
from hocket.cost.stages import schedule
from hocket.strategies.registry import REGISTRY
from hocket.strategies.spec import StrategySpec

__all__ = ["DEEP_HALO_SPEC", "HaloCompute", "OVERLAP_SPEC", "halo_stages", "predict_halo"]

HALO_KINDS = (HALO_KIND,)
NOT_HALO = "runs halo-exchange stencils (hocket.ops.stencil_steps) only"


def _padded_bytes(site: HaloSite, width: int) -> int:
    points = 1
    for d, b in enumerate(site.block):
        points *= b + 2 * width if d < site.split_dims else b
    return points


def _workspace_overlap(site, plan) -> int:
    """Two padded buffers per exchanged field, one more block per carried field, the messages twice."""
    if site.kind != HALO_KIND:
        return 0
    messages = 2 * sum(site.exchange_bytes(site.radius))
    return (2 * site.fields * _padded_bytes(site, site.radius) + site.carried * site.block_points) * site.itemsize \
        + messages


def _workspace_deep(site, plan) -> int:
    if site.kind != HALO_KIND:
        return 0
    w = plan.chunks * site.radius
    messages = 2 * sum(site.exchange_bytes(w))
    return (site.fields + site.carried) * 2 * _padded_bytes(site, w) * site.itemsize + messages


def _deep_reason(site) -> str | None:
    if site.kind != HALO_KIND:
        return None
    if site.steps < 2:
        return "a deep halo needs steps >= 2 per call (it exchanges every s >= 2 steps)"
    if site.max_depth() < 2:
        return f"the blocks {site.block} hold no halo 2 x radius {site.radius} wide"
    return None


OVERLAP_SPEC = StrategySpec(
    name="overlap", summary="post the halo exchange, compute the interior, wait, compute the boundary shell",
    kinds=HALO_KINDS, cost=overlap_stages, workspace=_workspace_overlap, planned_kinds=HALO_KINDS,
    kind_reason=NOT_HALO, transports=("p2p",), transport_reason="halo messages are torch.distributed P2P",
    fixed_chunks=True, comm_sms=False, host_staging=False, checks_gemm_rows=False,
)

DEEP_HALO_SPEC = StrategySpec(
    name="deep_halo", summary="one halo chunks x radius wide every chunks steps, the overlap recomputed",
    kinds=HALO_KINDS, cost=deep_halo_stages, workspace=_workspace_deep, planned_kinds=HALO_KINDS,
    kind_reason=NOT_HALO, transports=("p2p",), transport_reason="halo messages are torch.distributed P2P",
    min_chunks=2, comm_sms=False, host_staging=False, checks_gemm_rows=False, site_reason=_deep_reason,
    single_piece=lambda site, plan: False,
)


def halo_stages(site: HaloSite, plan: Plan, cluster, profile=None, *, compute: HaloCompute | None = None) -> list:
    """The stages of ``site`` under ``plan`` (its spec's cost builder, ``compute`` for ``step_fn``)."""
    if not isinstance(site, HaloSite):
        raise TypeError(f"site={site!r} must be a hocket.core.halo.HaloSite")
    found = REGISTRY.spec(plan.strategy)
    if HALO_KIND not in found.priced:
        raise ValueError(f"strategy={plan.strategy!r} does not apply to a halo site; use one of "
                         f"{REGISTRY.priced_for(HALO_KIND)}")
    builder = with_compute(new_builder(site, plan, cluster, profile), compute)
    found.cost(builder)
    return builder.finish()


def predict_halo(site: HaloSite, plan: Plan | dict | str | None, cluster, profile=None, *,
                 compute: HaloCompute | None = None) -> Prediction:
    """Price ``site`` under ``plan`` (None: sequential) on ``cluster``, one call of ``site.steps`` steps."""
    plan = as_plan(plan) or Plan()
    stages = halo_stages(site, plan, cluster, profile, compute=compute)
    return prediction_from(stages, schedule(stages))
