"""The expert-parallel MoE strategies (site kinds ``a2a_mm`` / ``mm_a2a``, :class:`hocket.core.moe.MoeSite`).

Executors in :mod:`hocket.ops.moe_exec`; one plan runs both halves of a layer (``hocket.ops.moe_experts``).

* ``sequential`` (its spec in :mod:`hocket.strategies.sequential` serves the MoE kinds too): the whole
  all-to-all, then the grouped GEMM (``a2a_mm``), or the grouped GEMM, then the whole all-to-all (``mm_a2a``);
  the shared expert after the routed experts;
* ``token_blocks``: ``Plan.chunks`` token blocks; block i+1's dispatch issued before block i's grouped GEMM and
  waited after it; block i-1's combine waited after block i's GEMM (Lancet's partition);
* ``per_source``: one all-to-all round per shift of the pairwise exchange; the peers' rounds issued first,
  the rank's own rows computed while they travel, then each source as it lands (combine: the peers' rows
  computed and sent first, its own last);
* ``expert_groups``: ``min(Plan.chunks, e_local)`` groups of local experts, every group's dispatch issued first
  and the groups computed in order as they land (Comet's order); combine as ``token_blocks``;
* ``shared_overlap``: the whole all-to-all in flight while the shared expert computes.

Every strategy but ``sequential`` runs the shared expert in the first dispatch's gap. Every plan carries
``Plan.splits`` (``exchanged`` or ``padded``, :data:`hocket.core.plan.SPLITS`). The stages are
:func:`hocket.cost.moe.moe_stages`'s; :func:`predict_moe` prices a plan of one site like ``predict_halo``,
:func:`predict_moe_layer` a layer's two sites under one plan (what ``plan=None`` chooses by). A strategy that does
not apply to a site (token blocks of fewer than 2 tokens, expert groups of one local expert, per-source ordering
on one rank, shared overlap with no shared expert or on ``mm_a2a``) is left out by its ``site_reason``.
"""

from __future__ import annotations

from hocket.core.moe import MOE_KINDS, MoeSite
from hocket.core.plan import Plan, as_plan
from hocket.cost.builder import new_builder
from hocket.cost.moe import GroupedGemmRule, moe_stages, with_grouped_rule, workspace_bytes
from hocket.cost.predict import Prediction, prediction_from
from hocket.cost.stages import schedule
from hocket.cost.steady import steady_state_total
from hocket.strategies.registry import REGISTRY
from hocket.strategies.spec import StrategySpec

__all__ = ["EXPERT_GROUPS_SPEC", "PER_SOURCE_SPEC", "SHARED_OVERLAP_SPEC", "SPECS", "TOKEN_BLOCKS_SPEC",
           "layer_sites", "moe_plan", "moe_stages_of", "predict_moe", "predict_moe_layer"]

NOT_MOE = "runs expert-parallel MoE sites (hocket.ops.moe_experts) only"


def _workspace(site, plan) -> int:
    """The call's send, receive and GEMM-output rows (:func:`hocket.cost.moe.workspace_bytes`)."""
    return workspace_bytes(site, plan) if isinstance(site, MoeSite) else 0


def _token_reason(site) -> str | None:
    if isinstance(site, MoeSite) and site.tokens < 2:
        return f"token blocks need tokens >= 2 per rank (tokens={site.tokens})"
    return None


def _group_reason(site) -> str | None:
    if isinstance(site, MoeSite) and site.e_local < 2:
        return (f"expert groups need >= 2 local experts (experts={site.experts} over world={site.world} ranks: "
                f"{site.e_local} each)")
    return None


def _source_reason(site) -> str | None:
    if isinstance(site, MoeSite) and site.world < 2:
        return "per-source ordering needs world >= 2 (one rank has no peers)"
    return None


def _shared_reason(site) -> str | None:
    if not isinstance(site, MoeSite):
        return None
    if site.kind == "mm_a2a":
        return ("an mm_a2a site computes no shared expert (the layer's a2a_mm runs it in its dispatch gap): "
                "shared_overlap runs it as sequential")
    if site.shared_ffn <= 0:
        return "the site has no shared expert (shared_ffn=0) to compute during the all-to-all"
    return None


MOE_TRANSPORTS = ("collective", "host_staged")
"""the transports an MoE plan runs over (``hocket.ops.moe_experts``; ``host_staged`` on gloo is the collective)."""


def _moe_spec(name: str, summary: str, site_reason, **chunking) -> StrategySpec:
    """A spec of the MoE kinds (priced by :func:`hocket.cost.moe.moe_stages`); ``chunking``: ``min_chunks`` or
    ``fixed_chunks``."""
    return StrategySpec(name=name, summary=summary, kinds=MOE_KINDS, cost=moe_stages, workspace=_workspace,
                        planned_kinds=MOE_KINDS, kind_reason=NOT_MOE, transports=MOE_TRANSPORTS, comm_sms=False,
                        checks_gemm_rows=False, site_reason=site_reason, **chunking)


TOKEN_BLOCKS_SPEC = _moe_spec(
    "token_blocks", "token blocks pipelined: block i+1's all-to-all in flight while block i computes",
    _token_reason, min_chunks=2)
PER_SOURCE_SPEC = _moe_spec(
    "per_source", "own rows first while the peers' arrive, then each source rank as it lands",
    _source_reason, fixed_chunks=True)
EXPERT_GROUPS_SPEC = _moe_spec(
    "expert_groups", "the all-to-all split by expert group; arrived experts computed first",
    _group_reason, min_chunks=2)
SHARED_OVERLAP_SPEC = _moe_spec(
    "shared_overlap", "one all-to-all in flight while the shared expert computes",
    _shared_reason, fixed_chunks=True)
SPECS = (TOKEN_BLOCKS_SPEC, PER_SOURCE_SPEC, EXPERT_GROUPS_SPEC, SHARED_OVERLAP_SPEC)


def moe_plan(plan: Plan | dict | str | None) -> Plan:
    """``plan`` as a Plan of an MoE site (None: sequential; ``splits`` None read as ``exchanged``)."""
    plan = as_plan(plan) or Plan()
    return plan if plan.splits is not None else plan.with_(splits="exchanged")


def moe_stages_of(site: MoeSite, plan: Plan, cluster, profile=None, *, steady_state: bool = False,
                  grouped: GroupedGemmRule | None = None) -> list:
    """The stages of ``site`` under ``plan`` (its spec's cost builder; ``grouped`` overrides the grouped-GEMM
    rule of :mod:`hocket.cost.moe`)."""
    if not isinstance(site, MoeSite):
        raise TypeError(f"site={site!r} must be a hocket.core.moe.MoeSite")
    found = REGISTRY.spec(plan.strategy)
    if site.kind not in found.priced:
        raise ValueError(f"strategy={plan.strategy!r} does not apply to an MoE site ({site.kind}); use one of "
                         f"{REGISTRY.priced_for(site.kind)}")
    builder = with_grouped_rule(new_builder(site, plan, cluster, profile, steady_state=steady_state), grouped)
    found.cost(builder)
    return builder.finish()


def predict_moe(site: MoeSite, plan: Plan | dict | str | None, cluster, profile=None, *,
                steady_state: bool = False, grouped: GroupedGemmRule | None = None) -> Prediction:
    """Price one call of ``site`` under ``plan`` (None: sequential) on ``cluster`` (module docstring).
    ``steady_state``: one call of a loop with the host ahead (``hocket.cost.steady``), as ``predict`` prices it."""
    plan = moe_plan(plan)
    stages = moe_stages_of(site, plan, cluster, profile, steady_state=steady_state, grouped=grouped)
    if not steady_state:
        return prediction_from(stages, schedule(stages))
    total, busy, timeline = steady_state_total(stages)
    return prediction_from(stages, timeline, total_ms=total, busy_ms=busy)


def layer_sites(site: MoeSite) -> tuple[MoeSite, MoeSite]:
    """``(a2a_mm, mm_a2a)`` of ``site``'s layer (same routing and direction; the shared expert on ``a2a_mm``)."""
    from dataclasses import replace

    first = site if site.kind == "a2a_mm" else replace(site.pair(), shared_ffn=site.shared_ffn)
    return first, replace(first.pair(), shared_ffn=0)


def predict_moe_layer(site: MoeSite, plan: Plan | dict | str | None, cluster, profile=None, *,
                      steady_state: bool = False, grouped: GroupedGemmRule | None = None) -> Prediction:
    """Both halves of ``site``'s layer (:func:`layer_sites`) under one plan, one after the other: each field the
    sum of the two sites' (``busy_ms`` per resource)."""
    parts = [predict_moe(x, plan, cluster, profile, steady_state=steady_state, grouped=grouped)
             for x in layer_sites(site)]
    busy: dict[str, float] = {}
    for part in parts:
        for name, ms in part.busy_ms.items():
            busy[name] = busy.get(name, 0.0) + ms
    return Prediction(total_ms=sum(p.total_ms for p in parts), compute_ms=sum(p.compute_ms for p in parts),
                      comm_ms=sum(p.comm_ms for p in parts), exposed_comm_ms=sum(p.exposed_comm_ms for p in parts),
                      busy_ms=busy)
