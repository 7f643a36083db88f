"""The plan space and search of an expert-parallel MoE site (:class:`hocket.core.moe.MoeSite`).

Space (:func:`enumerate_moe_plans`): every strategy the registry plans for the site's kind (``sequential``,
``token_blocks``, ``per_source``, ``expert_groups``, ``shared_overlap``) x both split modes (``exchanged``,
``padded``) x the transports of :data:`MOE_TRANSPORTS` the cluster offers between the group's ranks x the chunk
counts: ``token_blocks`` at ``2, 4, 8, 16`` blocks up to the rank's tokens, ``expert_groups`` at ``2, 4, 8, 16``
groups and the local expert count, up to it. The baseline is ``sequential`` with ``exchanged`` splits over the
collective transport. Every plan left out is listed with its reason (a strategy for other kinds, a strategy the
site cannot use, a transport the cluster does not offer, more pieces than tokens or experts).

Search (:func:`search_moe`): every candidate priced by :func:`hocket.strategies.moe.predict_moe` (with
``layer=True`` by :func:`hocket.strategies.moe.predict_moe_layer`: both halves of the layer, as one plan runs
both; what ``plan=None`` and autotune use), then
:func:`hocket.plan.search.select`: a plan is chosen only if predicted faster than the baseline by more than the
margin (default 3%), so the choice is never predicted slower than sequential. A candidate the cost model cannot
price on the cluster is pruned with the error.

``plan=None`` (:func:`choose_moe_plan`, given the layer's ``a2a_mm`` site): the layer search's choice, kept per
``(site.key, cluster, profile)`` for the process (the key holds the routing's skew class, not its counts: every
rank holding the same global counts computes the same key, hence the same choice). Without a cluster, the local one, as the other ``plan=None``
paths obtain it: ``HOCKET_CLUSTER`` (a preset or YAML), else ``hocket.hardware.probe()`` with the job's ranks
as CPU ranks; its calibration profile is this machine's (``hocket.hardware.profile.load_profile``) unless
``HOCKET_CLUSTER`` names the cluster. ``HOCKET_DISABLE`` gives sequential, and so does a cluster that does not
cover the group (with a :class:`MoePlanWarning`).

Autotune (:func:`tune_moe`): the search's shortlist (sequential first, :func:`hocket.plan.autotune.plans_to_time`)
timed on the live group by :func:`hocket.plan.autotune.autotune` (collective over the group; rank 0 reads and
writes the plan cache), given a runner factory from the operator (``plan`` -> a no-argument callable running
one ``moe_experts`` call with that plan); the measured choice replaces the predicted one for the site's key.
``group`` is the torch.distributed process group (``hocket.plan.autotune``'s convention).
"""

from __future__ import annotations

import warnings

from hocket.core.moe import MOE_KINDS, MoeSite
from hocket.core.plan import Plan
from hocket.cost.moe import GroupedGemmRule
from hocket.plan.search import DEFAULT_MARGIN, SearchResult, select
from hocket.plan.space import PlanSpace, Pruned
from hocket.strategies import specs
from hocket.strategies.moe import MOE_TRANSPORTS, layer_sites, predict_moe, predict_moe_layer

SPLIT_MODES = ("exchanged", "padded")
CHUNK_LADDER = (2, 4, 8, 16)
"""token blocks and expert groups enumerated (and the local expert count for expert groups)."""
MAX_MOE_CHUNKS = 16
BASELINE = Plan(splits="exchanged")
"""``sequential`` with exchanged split sizes: what every other MoE plan must beat."""

_CHOSEN: dict[tuple, Plan] = {}


class MoePlanWarning(UserWarning):
    """An MoE site could not be planned on the cluster (it runs the baseline)."""


_LOCAL: list = []


def _offered(site: MoeSite, cluster) -> tuple[frozenset[str] | None, str]:
    if cluster is None:
        return None, ""
    ranks = site.group_ranks
    if site.world <= 1:
        return frozenset(MOE_TRANSPORTS), ""
    try:
        return cluster.group_transports(ranks), ""
    except (ValueError, IndexError) as exc:
        return frozenset(), f"{exc}"


def _chunk_counts(site: MoeSite, strategy: str) -> tuple[list[int], list[tuple[int, str]]]:
    """(chunk counts to enumerate, [(chunks, reason)] left out) of a pipelined MoE strategy."""
    if strategy == "token_blocks":
        top, what = site.tokens, f"tokens={site.tokens} per rank"
        ladder = list(CHUNK_LADDER)
    else:
        top, what = site.e_local, f"{site.e_local} local experts"
        ladder = sorted(set(CHUNK_LADDER) | ({site.e_local} if 2 <= site.e_local <= MAX_MOE_CHUNKS else set()))
    keep = [c for c in ladder if c <= top]
    left = [(c, f"{strategy}({c}) cuts into more pieces than the {what}") for c in ladder if c > top]
    return keep, left


def enumerate_moe_plans(site: MoeSite, cluster=None, *, splits: str | None = None) -> PlanSpace:
    """The candidates for ``site`` (the baseline first) and the pruned plans with their reasons (module
    docstring). ``cluster``: only its offered transports (None: the collective transport only). ``splits``: only
    that split mode (``padded``: what a CUDA graph captures; its baseline is ``sequential`` padded)."""
    if splits is not None and splits not in SPLIT_MODES:
        raise ValueError(f"splits={splits!r} must be one of {SPLIT_MODES} or None (both)")
    modes = SPLIT_MODES if splits is None else (splits,)
    baseline = BASELINE if splits in (None, "exchanged") else BASELINE.with_(splits=splits)
    if not isinstance(site, MoeSite):
        raise TypeError(f"site={site!r} must be a hocket.core.moe.MoeSite")
    offered, failure = _offered(site, cluster)
    candidates: list[Plan] = [baseline]
    pruned: list[Pruned] = []
    for s in specs():
        if site.kind not in s.planned_kinds:
            pruned.append(Pruned(plan=s.head(), reason=f"{s.name} {s.kind_reason or f'does not apply to {site.kind}'}"))
            continue
        if site.kind not in s.priced:  # planned for the kind by name only: no cost builder prices it
            pruned.append(Pruned(plan=s.head(), reason=f"{s.name} has no executor or price for {site.kind} sites "
                                                       f"(it serves {s.kinds})"))
            continue
        reason = s.site_reason(site) if s.site_reason else None
        if reason:
            pruned.append(Pruned(plan=s.head().with_(splits="exchanged"), reason=reason))
            continue
        transports = [t for t in s.transports if t in MOE_TRANSPORTS]
        for transport in transports:
            if offered is None and transport != "collective":
                pruned.append(Pruned(plan=s.head().with_(transport=transport, splits="exchanged"),
                                     reason=f"transport {transport!r}: no cluster given (collective only)"))
                continue
            if offered is not None and transport not in offered:
                why = failure or (f"transport {transport!r} is not offered between ranks "
                                  f"{list(site.group_ranks)[:8]} of {getattr(cluster, 'name', '?')!r}")
                pruned.append(Pruned(plan=s.head().with_(transport=transport, splits="exchanged"), reason=why))
                continue
            if s.fixed_chunks:
                counts, left = [1], []
            else:
                counts, left = _chunk_counts(site, s.name)
            for mode in modes:
                for chunks, why in left:
                    pruned.append(Pruned(plan=Plan(strategy=s.name, chunks=chunks, transport=transport,
                                                   splits=mode), reason=why))
                for chunks in counts:
                    plan = Plan(strategy=s.name, chunks=chunks, transport=transport, splits=mode)
                    if plan not in candidates:
                        candidates.append(plan)
    return PlanSpace(site=site, baseline=baseline, candidates=tuple(candidates), pruned=tuple(pruned),
                     memory_budget_bytes=None)


def search_moe(site: MoeSite, cluster, *, profile=None, margin: float = DEFAULT_MARGIN,
               grouped: GroupedGemmRule | None = None, steady_state: bool = False,
               layer: bool = False, splits: str | None = None) -> SearchResult:
    """Price every candidate of ``site`` on ``cluster`` and choose (module docstring). ``layer``: price each plan
    on both halves of the site's layer (:func:`hocket.strategies.moe.predict_moe_layer`; the space is its
    ``a2a_mm`` site's), as one plan runs both. ``splits``: one split mode only (:func:`enumerate_moe_plans`)."""
    if layer:
        site = layer_sites(site)[0]
    price = predict_moe_layer if layer else predict_moe
    space = enumerate_moe_plans(site, cluster, splits=splits)
    priced, pruned = [], list(space.pruned)
    for plan in space.candidates:
        try:
            ms = price(site, plan, cluster, profile, steady_state=steady_state, grouped=grouped).total_ms
        except ValueError as exc:
            if plan == space.baseline:
                raise
            pruned.append(Pruned(plan=plan, reason=f"the cost model cannot price it here: {exc}"))
            continue
        priced.append((plan, ms))
    chosen, chosen_ms, ranked = select(priced, baseline=space.baseline, margin=margin)
    return SearchResult(site=site, chosen=chosen, chosen_ms=chosen_ms, sequential=space.baseline,
                        sequential_ms=dict(priced)[space.baseline], ranked=ranked, pruned=tuple(pruned),
                        margin=margin)


def local_cluster():
    """(cluster, profile) of this process, as the other ``plan=None`` paths obtain them (module docstring);
    found once per process."""
    if not _LOCAL:
        _LOCAL.append(_find_local())
    return _LOCAL[0]


def _find_local():
    from hocket.env import cluster_env
    from hocket.hardware import load_cluster, probe

    name = cluster_env()
    if name:
        return load_cluster(name), None
    import torch.distributed as dist

    ranks = dist.get_world_size() if dist.is_available() and dist.is_initialized() else None
    from hocket.hardware.profile import load_profile

    return probe(cpu_ranks=ranks), load_profile()


def _cache_key(site: MoeSite, cluster, profile) -> tuple:
    """A decision's key: the site's key, the cluster (a frozen, hashable spec) and the profile's machine."""
    mark = None if profile is None else (getattr(profile, "fingerprint", None) or id(profile))
    return (site.key, cluster, mark)


def choose_moe_plan(site: MoeSite, cluster=None, profile=None, *, splits: str | None = None) -> Plan:
    """The plan a ``plan=None`` call of ``site`` runs (module docstring): deterministic in ``site.key``,
    the cluster and the profile, so every rank passing the same site chooses the same plan. ``splits="padded"``:
    among padded plans only (a call to be captured in a CUDA graph), never predicted slower than sequential
    padded."""
    if not isinstance(site, MoeSite):
        raise TypeError(f"site={site!r} must be a hocket.core.moe.MoeSite")
    if site.kind not in MOE_KINDS:
        raise ValueError(f"site.kind={site.kind!r} is not an MoE kind {MOE_KINDS}")
    from hocket.env import disabled

    baseline = BASELINE if splits in (None, "exchanged") else BASELINE.with_(splits=splits)
    if disabled():
        return baseline
    if cluster is None:
        cluster, found = local_cluster()
        profile = profile if profile is not None else found
    key = (*_cache_key(site, cluster, profile), splits)
    chosen = _CHOSEN.get(key)
    if chosen is None:
        try:
            chosen = search_moe(site, cluster, profile=profile, layer=True, splits=splits).chosen
        except ValueError as exc:  # a cluster description that does not cover the group: sequential
            warnings.warn(f"hocket could not plan {site.key} on cluster {getattr(cluster, 'name', '?')!r} ({exc}); "
                          f"running it sequentially. Describe the cluster with HOCKET_CLUSTER=<preset or YAML> if "
                          f"this machine's probe does not cover the group.", MoePlanWarning, stacklevel=2)
            chosen = baseline
        _CHOSEN[key] = chosen
    return chosen


def tune_moe(site: MoeSite, make_runner, *, group=None, device="cpu", cluster=None, profile=None,
             top_k: int = 4, config=None, cache=None):
    """Measure the search's shortlist of ``site`` on the live ``group`` (collective: every rank calls it with
    the same site) and keep the measured choice for later ``plan=None`` calls; returns the
    :class:`hocket.plan.autotune.AutotuneResult`. ``make_runner(plan)`` returns a no-argument callable that runs
    one call of the site with ``plan``."""
    from hocket.plan.autotune import AutotuneConfig, autotune, plans_to_time

    if cluster is None:
        cluster, found = local_cluster()
        profile = profile if profile is not None else found
    result = search_moe(site, cluster, profile=profile, layer=True)
    shortlist = plans_to_time(result, top_k)
    tuned = autotune(site, shortlist, make_runner, group=group, device=device, config=config or AutotuneConfig(),
                     cache=cache, cache_key=site.key)
    _CHOSEN[(*_cache_key(site, cluster, profile), None)] = tuned.chosen
    return tuned


def forget_moe_plans() -> None:
    """Drop the process's MoE decisions and its local cluster (tests; a new cluster description)."""
    _CHOSEN.clear()
    _LOCAL.clear()
