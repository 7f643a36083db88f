"""Search: price every candidate, rank them, choose one that beats sequential by a margin.

:func:`select` is the solver and takes plain data (plans and their predicted times);
:func:`search` builds the space for a Site on a cluster and prices it with
``hocket.cost.predict`` (or any ``cost_fn``); :func:`search_sites` plans many Sites,
pricing each distinct ``Site.key`` once.

The rule that makes the planner safe: the sequential baseline is always a candidate,
and another plan is chosen only if it is predicted faster than sequential by more than
``margin`` (default 3%) of sequential's time.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from hocket.plan.plan import Plan
from hocket.plan.space import PlanSpace, Pruned, SpaceConfig, enumerate_plans, group_facts, simplicity
from hocket.site import Site

DEFAULT_MARGIN = 0.03

CostFn = Callable[[Site, Plan], float]
"""Predicted milliseconds of ``plan`` on ``site`` (lower is better)."""


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

    @property
    def saving_ms(self) -> float:
        return self.sequential_ms - self.chosen_ms

    @property
    def speedup(self) -> float:
        return self.sequential_ms / self.chosen_ms if self.chosen_ms > 0 else 1.0

    def top(self, k: int) -> tuple[Plan, ...]:
        """The ``k`` best-predicted plans (for autotuning)."""
        return tuple(s.plan for s in self.ranked[:k])


def _check_margin(margin: float) -> None:
    if not isinstance(margin, (int, float)) or not 0.0 <= margin < 1.0:
        raise ValueError(f"margin={margin!r} must be a fraction in [0, 1), e.g. {DEFAULT_MARGIN} for 3%")


def select(priced: Sequence[tuple[Plan, float]], *, baseline: Plan, margin: float = DEFAULT_MARGIN
           ) -> tuple[Plan, float, tuple[Scored, ...]]:
    """Choose among priced plans: ``(chosen, chosen_ms, ranked)``.

    ``priced`` must contain ``baseline``. Times that are not finite and positive are a
    cost-model bug and raise. The fastest plan wins only if it beats ``baseline`` by
    more than ``margin``; otherwise ``baseline`` is chosen.
    """
    _check_margin(margin)
    times: dict[Plan, float] = {}
    for plan, ms in priced:
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
    best = order[0]
    chosen = best if best == baseline or times[best] < limit_ms else baseline
    chosen_ms = times[chosen]
    ranked = []
    for plan in order:
        ms = times[plan]
        if plan == chosen:
            reason = "chosen" if plan != baseline or best == baseline else \
                f"chosen: no plan beats sequential by more than the {margin:.0%} margin"
        elif plan == baseline:
            reason = f"sequential baseline: {chosen.describe()} predicted {1 - chosen_ms / seq_ms:.1%} faster"
        elif ms < seq_ms and ms >= limit_ms:
            reason = (f"predicted {1 - ms / seq_ms:.1%} faster than sequential, within the {margin:.0%} margin "
                      f"(not worth the risk)")
        elif ms >= seq_ms:
            reason = f"predicted {ms / seq_ms - 1:.1%} slower than sequential"
        else:
            reason = f"predicted {ms / chosen_ms - 1:.1%} slower than {chosen.describe()}"
        ranked.append(Scored(plan=plan, predicted_ms=ms, reason=reason))
    return chosen, chosen_ms, tuple(ranked)


def price_space(space: PlanSpace, cost_fn: CostFn, *, margin: float = DEFAULT_MARGIN) -> SearchResult:
    """Price every candidate of ``space`` with ``cost_fn`` and select."""
    priced = [(plan, cost_fn(space.site, plan)) for plan in space.candidates]
    chosen, chosen_ms, ranked = select(priced, baseline=space.baseline, margin=margin)
    seq_ms = next(s.predicted_ms for s in ranked if s.plan == space.baseline)
    return SearchResult(site=space.site, chosen=chosen, chosen_ms=chosen_ms, sequential=space.baseline,
                        sequential_ms=seq_ms, ranked=ranked, pruned=space.pruned, margin=margin)


def predict_cost_fn(cluster: object, profile: object = None) -> CostFn:
    """A CostFn backed by ``hocket.cost.predict`` (total predicted ms)."""
    from hocket.cost import predict

    def cost(site: Site, plan: Plan) -> float:
        return float(predict(site, plan, cluster, profile).total_ms)

    return cost


def search(site: Site, cluster: object, *, profile: object = None, margin: float = DEFAULT_MARGIN,
           config: SpaceConfig | None = None, cost_fn: CostFn | None = None) -> SearchResult:
    """Plan one Site on ``cluster`` (a ClusterSpec): enumerate, price, select."""
    space = enumerate_plans(site, group_facts(site, cluster), config)
    return price_space(space, cost_fn or predict_cost_fn(cluster, profile), margin=margin)


def search_sites(sites: Iterable[Site], cluster: object, *, profile: object = None,
                 margin: float = DEFAULT_MARGIN, config: SpaceConfig | None = None,
                 cost_fn: CostFn | None = None) -> Mapping[str, SearchResult]:
    """Plan many Sites; each distinct ``Site.key`` is searched once. Returns key -> result."""
    cost = cost_fn or predict_cost_fn(cluster, profile)
    results: dict[str, SearchResult] = {}
    for site in sites:
        if site.key not in results:
            results[site.key] = search(site, cluster, margin=margin, config=config, cost_fn=cost)
    return results
