"""The plan space and search of a halo site (:class:`hocket.core.halo.HaloSite`), as for the matrix sites.

Space: the registry's strategies planned for kind ``halo`` (``sequential``, ``overlap``, ``deep_halo``), each
packed and ``per_face`` (``Plan.packing``) where the two differ;
``deep_halo`` with ``chunks = s`` for every ``s`` from 2 up to the smaller of the call's steps and the
widest halo its blocks hold (:meth:`HaloSite.max_depth`), at most ``MAX_DEPTH``; each plan left out is
pruned with its reason. Search: every candidate priced by :func:`hocket.strategies.halo.predict_halo`
(``step_fn``'s compute from a :class:`HaloCompute` when one is given), then
:func:`hocket.plan.search.select`: a plan is chosen only if predicted faster than ``sequential`` by more
than the margin (default 3%).
"""

from __future__ import annotations

from hocket.core.halo import HALO_KIND, HaloSite
from hocket.core.plan import Plan
from hocket.cost.halo import HaloCompute
from hocket.plan.search import DEFAULT_MARGIN, SearchResult, select
from hocket.plan.space import PlanSpace, Pruned
from hocket.strategies import spec, specs
from hocket.strategies.halo import predict_halo

MAX_DEPTH = 8
"""the widest deep halo enumerated, in multiples of the radius."""


def enumerate_halo_plans(site: HaloSite) -> PlanSpace:
    """The candidates for ``site`` (``sequential`` first) and the pruned plans with their reasons."""
    if not isinstance(site, HaloSite):
        raise TypeError(f"site={site!r} must be a hocket.core.halo.HaloSite")
    candidates, pruned = [Plan()], []
    for s in specs():
        if s.name == "sequential":
            continue
        if HALO_KIND not in s.planned_kinds:
            pruned.append(Pruned(plan=s.head(), reason=f"{s.name} {s.kind_reason or 'does not apply to halo'}"))
            continue
        reason = s.site_reason(site) if s.site_reason else None
        if reason:
            pruned.append(Pruned(plan=s.head().with_(transport=s.transports[0]), reason=reason))
            continue
        transport = s.transports[0] if s.transports else "collective"
        if s.fixed_chunks:
            candidates.append(Plan(strategy=s.name, transport=transport))
            continue
        top = min(site.steps, site.max_depth(), MAX_DEPTH)
        for chunks in range(s.min_chunks, top + 1):
            candidates.append(Plan(strategy=s.name, chunks=chunks, transport=transport))
        for chunks in range(top + 1, min(MAX_DEPTH, site.steps) + 1):
            pruned.append(Pruned(plan=Plan(strategy=s.name, chunks=chunks, transport=transport),
                                 reason=f"a halo {chunks} x radius {site.radius} is wider than the blocks "
                                        f"{site.block}"))
    if site.split_dims == 1 or site.fields + site.carried > 1:  # per_face differs from packed
        candidates += [p.with_(packing="per_face") for p in candidates]
    else:
        pruned.append(Pruned(plan=Plan(packing="per_face"),
                             reason="per_face sends what packed sends: one field, no contiguous face"))
    return PlanSpace(site=site, baseline=Plan(), candidates=tuple(candidates), pruned=tuple(pruned),
                     memory_budget_bytes=None)


def search_halo(site: HaloSite, cluster, *, profile=None, compute: HaloCompute | None = None,
                margin: float = DEFAULT_MARGIN) -> SearchResult:
    """Price every candidate of ``site`` and choose (module docstring)."""
    space = enumerate_halo_plans(site)
    priced = [(plan, predict_halo(site, plan, cluster, profile, compute=compute).total_ms)
              for plan in space.candidates]
    chosen, chosen_ms, ranked = select(priced, baseline=space.baseline, margin=margin)
    sequential_ms = dict(priced)[space.baseline]
    return SearchResult(site=site, chosen=chosen, chosen_ms=chosen_ms, sequential=space.baseline,
                        sequential_ms=sequential_ms, ranked=ranked, pruned=space.pruned, margin=margin)


def halo_spec_names() -> tuple[str, ...]:
    """The strategies the space enumerates for halo sites."""
    return tuple(s.name for s in specs() if HALO_KIND in s.planned_kinds) or (spec("sequential").name,)
