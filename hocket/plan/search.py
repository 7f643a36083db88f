"""Search: price the candidates, rank them, choose one that beats sequential by a margin.

:func:`select` is the solver and takes plain data (plans and their predicted times);
:func:`search` builds the space for a Site on a cluster and prices it with
``hocket.strategies.predict`` (or any ``cost_fn``); :func:`search_sites` plans many Sites,
searching once per group signature (same shapes on a structurally equal group).

Pricing walks each *family* (a plan minus its chunk count) up the chunk ladder and
stops once larger counts keep getting slower (``SearchConfig.chunk_patience``); the
skipped plans are listed with that reason. ``SearchConfig(exhaustive=True)`` prices
every candidate.

The rule that makes the planner safe: the sequential baseline is always a candidate,
and another plan is chosen only if it is predicted faster than sequential by more than
``margin`` (default 3%) of sequential's time *after* its predicted time is inflated by
the cost model's error for its class of plan (:mod:`hocket.plan.uncertainty`: larger
for mechanisms the model prices less well and for classes the calibration profile did
not measure).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from hocket.core.pieces import split_pattern
from hocket.core.plan import Plan
from hocket.core.site import Site
from hocket.plan.space import PlanSpace, Pruned, SpaceConfig, enumerate_plans, group_facts, simplicity
from hocket.plan.uncertainty import NO_UNCERTAINTY, Uncertainty, uncertainty_from_profile

DEFAULT_MARGIN = 0.03

CostFn = Callable[[Site, Plan], float]
"""Predicted milliseconds of ``plan`` on ``site`` (lower is better); a :class:`PricedMs` also
carries the call's host issue time, which the saving rule's host allowance reads."""


class PricedMs(float):
    """Predicted milliseconds that also carry ``host_ms``, the host's issue time for the call
    (the issue stages of ``hocket.cost.issue``; 0 where there is no issue chain)."""

    host_ms: float

    def __new__(cls, ms: float, *, host_ms: float = 0.0) -> PricedMs:
        value = super().__new__(cls, ms)
        value.host_ms = float(host_ms)
        return value


@dataclass(frozen=True, kw_only=True)
class Scored:
    """One priced candidate and why it was (not) chosen."""

    plan: Plan
    predicted_ms: float
    reason: str


@dataclass(frozen=True, kw_only=True)
class SearchResult:
    """The decision for one Site."""

    site: Site
    chosen: Plan
    chosen_ms: float
    sequential: Plan
    sequential_ms: float
    ranked: tuple[Scored, ...]
    """every priced candidate, fastest first (ties: simpler first)."""
    pruned: tuple[Pruned, ...]
    """plans the space or the cost model left out, each with its reason."""
    margin: float
    uncertainty: Uncertainty | None = None
    """the model-error allowance the choice was made with (None: the plain margin only)."""

    @property
    def saving_ms(self) -> float:
        return self.sequential_ms - self.chosen_ms

    @property
    def speedup(self) -> float:
        return self.sequential_ms / self.chosen_ms if self.chosen_ms > 0 else 1.0

    def top(self, k: int) -> tuple[Plan, ...]:
        """The ``k`` best-predicted plans (for autotuning)."""
        return tuple(s.plan for s in self.ranked[:k])

    def tuning_shortlist(self, k: int) -> tuple[Plan, ...]:
        """``k`` plans worth timing besides sequential (see :func:`tuning_shortlist`)."""
        return tuning_shortlist([s.plan for s in self.ranked], baseline=self.sequential, k=k)


def tuning_shortlist(ranked: Sequence[Plan], *, baseline: Plan, k: int) -> tuple[Plan, ...]:
    """``k`` plans worth measuring besides ``baseline``, from ``ranked`` (best predicted first).

    The plain top-k of a prediction tends to be one family at neighbouring chunk counts,
    all wrong the same way (the model under-prices per-piece costs: on 2xH200 host-staged
    ag_mm 4096x12288x24576 it ranked chunked(8) first, 4.20 vs 4.65 ms predicted for
    chunked(2), which measured 5.01 vs 3.75 ms), or one plan with a few ``comm_sms`` or
    order variants. So: the best plan; the same plan with half and a quarter of its pieces,
    when priced; then the best plan of each *class* (strategy and transport) not yet listed,
    in predicted order (a class the model misprices as a whole still gets one measurement:
    on 2xH200 the fastest measured plan of mm_rs 8192x14336x8192, chunked(1)/copy_engine, was ranked
    19th, benchmarks/results/validation/2026-12-01_measured-rules.md); then the best plan of each other family; then
    the rest of ``ranked``.
    Over ``host_staged`` the own-data-first order is a class of its own (:func:`plan_class`).
    """
    if isinstance(k, bool) or not isinstance(k, int) or k < 0:
        raise ValueError(f"k={k!r} must be an int >= 0 (plans to time besides sequential)")
    others = [p for p in ranked if p != baseline]
    if not others or k == 0:
        return ()
    best = others[0]
    picked = [best]
    if best.split_sizes is None:
        for fewer in (best.chunks // 2, best.chunks // 4):
            twin = best.with_(chunks=fewer) if fewer >= 1 else None
            if twin is not None and twin in others and twin not in picked:
                picked.append(twin)
    classes = {plan_class(p) for p in picked}
    for plan in others:
        if plan_class(plan) not in classes:
            classes.add(plan_class(plan))
            picked.append(plan)
    seen = {family_key(p) for p in picked}
    for plan in others:
        if family_key(plan) not in seen and plan not in picked:
            seen.add(family_key(plan))
            picked.append(plan)
    picked += [p for p in others if p not in picked]
    return tuple(picked[:k])


def _check_margin(margin: float) -> None:
    if not isinstance(margin, (int, float)) or not 0.0 <= margin < 1.0:
        raise ValueError(f"margin={margin!r} must be a fraction in [0, 1), e.g. {DEFAULT_MARGIN} for 3%")


def select(priced: Sequence[tuple[Plan, float]], *, baseline: Plan, margin: float = DEFAULT_MARGIN,
           uncertainty: Uncertainty | None = None) -> tuple[Plan, float, tuple[Scored, ...]]:
    """Choose among priced plans: ``(chosen, chosen_ms, ranked)``.

    ``priced`` must contain ``baseline``. Times that are not finite and positive are a
    cost-model bug and raise. A plan qualifies when its *pessimistic* time (its predicted
    time inflated by ``uncertainty``'s error for its class; with None, its predicted time)
    beats ``baseline`` by more than ``margin``; the qualifying plan with the lowest
    pessimistic time is chosen, else ``baseline``. ``ranked`` is ordered by predicted time.
    """
    _check_margin(margin)
    uncertainty = uncertainty or NO_UNCERTAINTY
    times: dict[Plan, float] = {}
    host: dict[Plan, float] = {}
    for plan, ms in priced:
        host[plan] = float(getattr(ms, "host_ms", 0.0))
        if not isinstance(ms, (int, float)) or not math.isfinite(ms) or ms <= 0:
            raise ValueError(f"predicted time {ms!r} ms for plan {plan.describe()} is not a positive finite number; "
                             f"the cost function must return milliseconds > 0")
        times[plan] = float(ms)
    if baseline not in times:
        raise ValueError(f"baseline {baseline.describe()} is missing from the priced plans; "
                         f"sequential must always be priced")
    order = sorted(times, key=lambda p: (times[p], simplicity(p)))
    seq_ms = times[baseline]
    limit_ms = seq_ms * (1.0 - margin)
    pessimistic = {p: (ms if p == baseline else uncertainty.pessimistic_ms(p, ms, host[p])) for p, ms in times.items()}
    eligible = [p for p in order if p != baseline and pessimistic[p] < limit_ms]
    chosen = min(eligible, key=lambda p: (pessimistic[p], simplicity(p))) if eligible else baseline
    chosen_ms = times[chosen]
    ranked = []
    for plan in order:
        ms = times[plan]
        error = uncertainty.error_of(plan)
        if plan == chosen:
            reason = "chosen" if plan != baseline or order[0] == baseline else \
                f"chosen: no plan beats sequential by more than the {margin:.0%} margin and its error"
        elif plan == baseline:
            reason = f"sequential baseline: {chosen.describe()} predicted {1 - chosen_ms / seq_ms:.1%} faster"
        elif ms >= seq_ms:
            reason = f"predicted {ms / seq_ms - 1:.1%} slower than sequential"
        elif ms >= limit_ms:
            reason = (f"predicted {1 - ms / seq_ms:.1%} faster than sequential, within the {margin:.0%} margin "
                      f"(not worth the risk)")
        elif pessimistic[plan] >= limit_ms and pessimistic[plan] > ms * (1.0 + error):
            reason = (f"predicted {1 - ms / seq_ms:.1%} faster than sequential, but on a host "
                      f"{uncertainty.host_spread:g}x slower it would be host-bound ({pessimistic[plan]:.4g} ms to issue)")
        elif pessimistic[plan] >= limit_ms:
            reason = (f"predicted {1 - ms / seq_ms:.1%} faster than sequential, but its class's model error "
                      f"({error:.1%}) leaves less than the {margin:.0%} margin")
        elif chosen != baseline and ms < chosen_ms:
            reason = (f"predicted {1 - ms / chosen_ms:.1%} faster than {chosen.describe()}, but slower once "
                      f"each plan's model error is counted ({error:.1%} vs {uncertainty.error_of(chosen):.1%})")
        else:
            reason = f"predicted {ms / chosen_ms - 1:.1%} slower than {chosen.describe()}"
        ranked.append(Scored(plan=plan, predicted_ms=ms, reason=reason))
    return chosen, chosen_ms, tuple(ranked)


@dataclass(frozen=True, kw_only=True)
class SearchConfig:
    """How the search prices the space."""

    margin: float = DEFAULT_MARGIN
    """a plan must be predicted faster than sequential by more than this fraction."""
    exhaustive: bool = False
    """price every candidate; otherwise the chunk ladder below may skip some (with a reason)."""
    chunk_patience: int = 2
    """within a family (a plan minus its chunk count), stop pricing larger chunk counts once the
    time has failed to improve this many times in a row; time over chunks is unimodal in practice."""
    uncertainty: Uncertainty | str | None = "profile"
    """the model-error allowance of the saving rule (:mod:`hocket.plan.uncertainty`):
    ``"profile"`` = the documented per-class errors, larger for classes the calibration
    profile did not measure; an ``Uncertainty`` = that one; None = the plain margin only."""
    steady_state: bool = False
    """price each candidate as one call of a loop with the host running ahead
    (:mod:`hocket.cost.steady`: the device-only makespan or the call's host issue time, whichever
    is longer), as a training step runs it; False prices a call that starts from an idle GPU
    (what a benchmark with a barrier before every call times). Applies when the search builds
    its own cost function (no ``cost_fn`` given)."""
    captured: bool = False
    """price each candidate as one call of a loop of CUDA graph replays (``hocket.ops.CapturedCall``):
    the steady state with no host issue cost but the replay's, so plans of many pieces are not held
    back by the host. Applies when the search builds its own cost function."""

    def __post_init__(self) -> None:
        _check_margin(self.margin)
        for name in ("steady_state", "captured"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"SearchConfig.{name}={getattr(self, name)!r} must be a bool (steady_state: price "
                                f"the steady state of a loop, else a call from an idle GPU; captured: of a loop "
                                f"of CUDA graph replays)")
        if not (self.uncertainty is None or self.uncertainty == "profile" or isinstance(self.uncertainty, Uncertainty)):
            raise ValueError(f"SearchConfig.uncertainty={self.uncertainty!r} must be 'profile', an "
                             f"hocket.plan.uncertainty.Uncertainty, or None (plain margin)")
        if isinstance(self.chunk_patience, bool) or not isinstance(self.chunk_patience, int) \
                or self.chunk_patience < 1:
            raise ValueError(f"SearchConfig.chunk_patience={self.chunk_patience!r} must be an int >= 1")


def resolve_uncertainty(config: SearchConfig, profile: object = None, *, world: int = 1) -> Uncertainty:
    """The Uncertainty ``config`` asks for, given the calibration profile predictions use and the
    site's rank count ``world``."""
    if config.uncertainty is None:
        return NO_UNCERTAINTY
    if isinstance(config.uncertainty, Uncertainty):
        return config.uncertainty
    return uncertainty_from_profile(profile, world=world)


def plan_class(plan: Plan) -> tuple:
    """What the shortlist measures at least once: strategy and transport, and over ``host_staged``
    whether the pipeline is own-data-first (one relay call for every piece) or not (a relay call per
    piece). The two run different executors and the model can misprice one as a whole: on 2xH200
    (slow link, CUDA graph replays; benchmarks/results/validation/2026-12-01_measured-rules.md) natural-order pieces
    cost ~25-40 us more each than
    predicted, so the five best predicted plans of ag_mm 8192x4096x1536 were natural-order ones
    (measured 1.06-1.32 ms) while chunked(8)[local_first] measured 0.905."""
    return plan.strategy, plan.transport, plan.transport == "host_staged" and plan.order == "local_first"


def family_key(plan: Plan) -> tuple:
    """A plan minus its chunk count (uneven splits keep their pattern: fill, drain, ...)."""
    return (plan.with_(chunks=1, split_sizes=None), split_pattern(plan.split_sizes))


def _price(space: PlanSpace, cost_fn: CostFn, config: SearchConfig
           ) -> tuple[list[tuple[Plan, float]], list[Pruned]]:
    families: dict[tuple, list[Plan]] = {}
    for plan in space.candidates:
        families.setdefault(family_key(plan), []).append(plan)
    priced: list[tuple[Plan, float]] = []
    skipped: list[Pruned] = []
    for members in families.values():
        members.sort(key=lambda p: p.chunks)
        best_ms, best_plan, misses = math.inf, None, 0
        for i, plan in enumerate(members):
            try:
                ms = cost_fn(space.site, plan)
            except ValueError as exc:  # the cost model does not cover this plan: say so, keep searching
                skipped.append(Pruned(plan=plan, reason=f"the cost model cannot price it: {exc}"))
                continue
            priced.append((plan, ms))
            if ms < best_ms:
                best_ms, best_plan, misses = ms, plan, 0
            else:
                misses += 1
            if not config.exhaustive and misses >= config.chunk_patience and i + 1 < len(members):
                reason = (f"not priced: in its family time stopped improving after chunks={best_plan.chunks} "
                          f"({best_ms:.4g} ms; {misses} larger counts were slower), so larger counts were "
                          f"skipped (SearchConfig(exhaustive=True) prices them)")
                skipped.extend(Pruned(plan=rest, reason=reason) for rest in members[i + 1:])
                break
    return priced, skipped


def drop_unmodelled_splits(priced: list[tuple[Plan, float]], skipped: list[Pruned]
                            ) -> tuple[list[tuple[Plan, float]], list[Pruned]]:
    """Leave out uneven plans priced exactly like their even twin: the cost model does not
    model their pieces, so they would only crowd the ranking (and autotune's top-k)."""
    even = {plan: ms for plan, ms in priced if plan.split_sizes is None}
    kept = []
    for plan, ms in priced:
        twin_ms = even.get(plan.with_(split_sizes=None)) if plan.split_sizes is not None else None
        if twin_ms is not None and ms == twin_ms:
            why = ("the cost model prices these uneven pieces exactly like even ones (it does not model "
                   "split_sizes), so nothing tells them apart")
            skipped.append(Pruned(plan=plan, reason=why))
        else:
            kept.append((plan, ms))
    return kept, skipped


def price_space(space: PlanSpace, cost_fn: CostFn, *, config: SearchConfig | None = None,
                profile: object = None) -> SearchResult:
    """Price the candidates of ``space`` with ``cost_fn`` and select (``profile``: the
    calibration profile ``cost_fn`` predicts with; it decides which classes count as measured)."""
    config = config or SearchConfig()
    uncertainty = resolve_uncertainty(config, profile, world=space.site.world)
    priced, skipped = _price(space, cost_fn, config)
    priced, skipped = drop_unmodelled_splits(priced, skipped)
    chosen, chosen_ms, ranked = select(priced, baseline=space.baseline, margin=config.margin,
                                       uncertainty=uncertainty)
    seq_ms = next(s.predicted_ms for s in ranked if s.plan == space.baseline)
    return SearchResult(site=space.site, chosen=chosen, chosen_ms=chosen_ms, sequential=space.baseline,
                        sequential_ms=seq_ms, ranked=ranked, pruned=space.pruned + tuple(skipped),
                        margin=config.margin, uncertainty=uncertainty)


def predict_cost_fn(cluster: object, profile: object = None, *, steady_state: bool = False,
                    captured: bool = False) -> CostFn:
    """A CostFn equal to ``hocket.strategies.predict(site, plan, cluster, profile, steady_state=..., captured=...).total_ms``.

    It runs predict's two steps itself (``pipeline_stages`` then ``schedule``) so that the
    calibration view and each group's topology are built once, not once per candidate;
    ``tests/unit/test_plan_search.py`` checks it against ``predict``.
    """
    from hocket.cost import schedule
    from hocket.cost.calibration import calibration_view
    from hocket.cost.comm import group_topology
    from hocket.cost.predict import prediction_from
    from hocket.cost.steady import host_issue_ms, steady_state_total
    from hocket.strategies import pipeline_stages

    view = calibration_view(profile)
    topologies: dict[tuple[int, ...], object] = {}
    steady_state = steady_state or captured

    def cost(site: Site, plan: Plan) -> float:
        ranks = site.group_ranks
        topology = topologies.get(ranks)
        if topology is None:
            topology = topologies[ranks] = group_topology(cluster, ranks)
        stages = pipeline_stages(site, plan, cluster, view, topology=topology, steady_state=steady_state,
                                 captured=captured)
        host_ms = host_issue_ms(stages) if steady_state else sum(s.duration_ms for s in stages if s.is_issue)
        if steady_state:
            return PricedMs(steady_state_total(stages)[0], host_ms=host_ms)
        return PricedMs(prediction_from(stages, schedule(stages)).total_ms, host_ms=host_ms)

    return cost


def search(site: Site, cluster: object, *, profile: object = None, config: SearchConfig | None = None,
           space_config: SpaceConfig | None = None, cost_fn: CostFn | None = None,
           free_memory_bytes: int | None = None) -> SearchResult:
    """Plan one Site on ``cluster`` (a ClusterSpec): enumerate, price, select.

    ``free_memory_bytes`` (measured on a live device) replaces the described device
    memory as the base of the default memory budget.
    """
    space = enumerate_plans(site, group_facts(site, cluster, free_memory_bytes=free_memory_bytes), space_config)
    config = config or SearchConfig()
    cost = cost_fn or predict_cost_fn(cluster, profile, steady_state=config.steady_state, captured=config.captured)
    return price_space(space, cost, config=config, profile=profile)


def group_signature(site: Site, cluster: object) -> tuple:
    """Sites with equal signatures get equal predictions: same shapes, and a group whose
    sub-cluster (devices, links, nodes) is the same, wherever in the cluster it sits."""
    bare = replace(site, ranks=(), name="", count=1).key
    try:
        return (bare, cluster.subcluster(site.group_ranks, name="group"))
    except ValueError:  # ranks not node-contiguous: no structural signature, use the exact key
        return (site.key, None)


def search_sites(sites: Iterable[Site], cluster: object, *, profile: object = None,
                 config: SearchConfig | None = None, space_config: SpaceConfig | None = None,
                 cost_fn: CostFn | None = None) -> Mapping[str, SearchResult]:
    """Plan many Sites, searching each distinct group signature once. Returns ``Site.key`` -> result."""
    config = config or SearchConfig()
    cost = cost_fn or predict_cost_fn(cluster, profile, steady_state=config.steady_state, captured=config.captured)
    by_signature: dict[tuple, SearchResult] = {}
    results: dict[str, SearchResult] = {}
    for site in sites:
        if site.key in results:
            continue
        signature = group_signature(site, cluster)
        found = by_signature.get(signature)
        if found is None:
            found = by_signature[signature] = search(site, cluster, profile=profile, config=config,
                                                     space_config=space_config, cost_fn=cost)
            results[site.key] = found
        else:
            results[site.key] = replace(found, site=site)
    return results
