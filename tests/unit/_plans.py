"""A spread of the planner's candidates for tests that price or simulate many plans of one site."""

from __future__ import annotations

from hocket.plan.space import SpaceConfig, enumerate_plans, group_facts


def spread_of_plans(site, cluster, *, per_strategy: int = 6, config: SpaceConfig | None = None) -> list:
    """The baseline first, then up to ``per_strategy`` candidates of each strategy of ``site``'s plan space
    (``hocket.plan.space``), taken evenly through each strategy's list, so every strategy is priced without
    pricing every chunk count, order and piece shape."""
    space = enumerate_plans(site, group_facts(site, cluster), config)
    by_strategy: dict[str, list] = {}
    for plan in space.candidates[1:]:
        by_strategy.setdefault(plan.strategy, []).append(plan)
    plans = [space.baseline]
    for members in by_strategy.values():
        step = max(1, len(members) // per_strategy)
        plans.extend(members[::step][:per_strategy])
    return plans
