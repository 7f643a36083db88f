"""Per-rank shard sizes from device speed: what a tensor-parallel group that mixes devices should give each rank.

An output of planning, not a Plan field: :func:`recommend_shards` says how many columns (``ag_mm``) or how
much of the inner dimension (``mm_rs``, ``mm_ar``) each rank of a site's group should hold, so that the
slowest rank's compute plus its exposed communication is as small as the cost model can make it.

What is sized. A site's GEMM work per rank is set by its share of the weight: the column-parallel weight's
columns for ``ag_mm`` (``n`` per rank: every rank multiplies the whole gathered ``A``), the row-parallel
weight's rows for ``mm_rs`` and ``mm_ar`` (``k`` per rank). The bytes communicated do not depend on that
split (``A``'s rows for the gather, ``[m, n]`` partial sums for the reductions), so the activation rows stay
even; sizing them apart would move no GEMM work. One split serves a whole MLP or attention block (the up
projection's columns are the down projection's rows): :func:`recommend_block_shards` sizes several sites
with one split.

The objective. Rank ``r`` holding ``s_r`` is priced as the site with ``n = s_r`` (or ``k = s_r``) under the
plan on *its own* device (``DeviceSpec`` of the ClusterSpec; calibration GEMM ratios only for ranks of the
device model the profile was measured on) with the group's bottleneck links: the same stage builder and
schedule as ``hocket.strategies.predict``, whose stages take the group's slowest device instead. A rank
holding nothing only takes part in the collective (the plan's transfers alone). Collectives synchronise the
group, so the site takes at least ``max_r T_r(s_r)``; :func:`minimise_slowest` minimises it over sizes that are
multiples of the granularity and add up to the total: greedy unit by unit, exact when per-rank times do not
fall as a rank gets more work and the start lies at or below an optimum (the start is one unit under each
rank's rate-proportional share), then single-unit moves off the slowest rank while they help (they repair a
start above the optimum and times that do fall). Beside it,
:meth:`RankPricer.lockstep_ms` prices the ranks in lock step (every stage at its longest rank's duration and
contention: a collective piece waits for every rank's GEMM piece), an upper estimate of the same group; on the
mixed presets the two differ by under 1% (benchmarks/results/cpu/2026-12-01_uneven-shards-predicted.md).

Granularity (:func:`shard_multiple`): ``SHARD_MULTIPLE`` = 64 columns or rows per unit, the smallest tile
edge of ``hocket.cost.compute.GPU_TILES`` (a shard of whole units adds no partial tile of that size);
``SMALL_SHARD_MULTIPLE`` = 16 (a tensor-core fragment edge) when the even share is below ``SMALL_SHARE`` = 256,
so a small problem keeps enough units to move; halved further until it divides the total. Callers with a structural unit (whole
attention heads) pass ``multiple=``.

The bound beside it (:func:`compute_bound`): the most uneven shards can gain on compute alone, the sum of
the group's device rates over the slowest rate times the group size (``hocket.cost.compute.achievable_tflops``).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from hocket.core.plan import Plan, as_plan
from hocket.core.site import Site

SHARD_MULTIPLE = 64
"""Columns or rows per unit of a shard: the smallest GEMM tile edge of ``hocket.cost.compute.GPU_TILES``."""
SMALL_SHARD_MULTIPLE = 16
"""Unit when the even share per rank is below ``SMALL_SHARE`` (a tensor-core fragment edge)."""
SMALL_SHARE = 256
SIZED_KINDS = ("ag_mm", "mm_rs", "mm_ar")
_SEQUENTIAL_TRANSPORTS = ("collective", "copy_engine", "host_staged")
"""Transports a sequential plan runs its collective over (a rank holding nothing is priced so)."""
CANDIDATE_PLANS = 3
"""Best-predicted plans of the even site that :func:`recommend_shards` sizes under (plus sequential)."""


def block_units(model) -> dict[str, dict[str, int]]:
    """Per block of a model's layer that shares one uneven split, its sites (forward and input gradient) in step
    order and each site's unit: the attention in whole GQA groups (``(q/kv + 2) x head_size`` columns of
    ``attn.qkv``, ``q/kv x head_size`` rows of ``attn.out``), the MLP in :data:`SHARD_MULTIPLE` FFN columns
    (``mlp_up_matrices`` times that for ``mlp.up``'s input gradient), the LM head in :func:`shard_multiple` columns
    (0 here). ``model``: a :class:`hocket.models.spec.ModelSpec`."""
    group = model.num_attention_heads // model.num_key_value_heads
    head = model.head_size
    return {"attn": {"attn.qkv": (group + 2) * head, "attn.out": group * head, "attn.out.grad_input": group * head,
                     "attn.qkv.grad_input": (group + 2) * head},
            "mlp": {"mlp.up": SHARD_MULTIPLE, "mlp.down": SHARD_MULTIPLE, "mlp.down.grad_input": SHARD_MULTIPLE,
                    "mlp.up.grad_input": SHARD_MULTIPLE * model.mlp_up_matrices},
            "head": {"lm_head": 0, "lm_head.grad_input": 0}}


def shard_dim(site: Site) -> str:
    """The per-rank dimension that carries the site's GEMM share: ``n`` for ``ag_mm``, ``k`` for ``mm_rs``/``mm_ar``."""
    if site.kind not in SIZED_KINDS:
        raise ValueError(f"site.kind={site.kind!r} has no tensor-parallel weight split to size; "
                         f"use one of {SIZED_KINDS}")
    return "n" if site.kind == "ag_mm" else "k"


def shard_multiple(total: int, world: int) -> int:
    """The unit sizes are multiples of (module docstring): 64, or 16 when the even share is below 256;
    halved until it divides ``total``."""
    _positive("total", total)
    _positive("world", world)
    unit = SHARD_MULTIPLE if total // world >= SMALL_SHARE else SMALL_SHARD_MULTIPLE
    while unit > 1 and total % unit:
        unit //= 2
    return unit


def compute_bound(rates: Sequence[float]) -> float:
    """The compute-only gain of sizing by speed: ``sum(rates) / (min(rates) * len(rates))``."""
    rates = [float(r) for r in rates]
    if not rates or any(not (r > 0 and math.isfinite(r)) for r in rates):
        raise ValueError(f"rates={rates!r} must be positive, finite device rates (TFLOP/s), one per rank")
    return sum(rates) / (min(rates) * len(rates))


def minimise_slowest(costs: Sequence[Callable[[int], float]], units: int, *,
                     start: Sequence[int] | None = None) -> tuple[int, ...]:
    """Units per rank (adding up to ``units``) minimising ``max_r costs[r](units_r)``.

    Greedy: from ``start`` (default all zero), each next unit goes to the rank whose time after taking it is
    smallest (ties: the lower rank), which is optimal when every ``costs[r]`` is non-decreasing and ``start``
    lies below an optimum; then single units move off the slowest rank while the maximum strictly falls."""
    world = len(costs)
    if world < 1:
        raise ValueError("costs is empty; give one cost function per rank")
    if isinstance(units, bool) or not isinstance(units, int) or units < 0:
        raise ValueError(f"units={units!r} must be an int >= 0 (shard units to hand out)")
    sizes = [0] * world if start is None else [int(s) for s in start]
    if len(sizes) != world or any(s < 0 for s in sizes) or sum(sizes) > units:
        raise ValueError(f"start={start!r} must give {world} counts >= 0 adding up to at most units={units}")
    memo: dict[tuple[int, int], float] = {}

    def cost(r: int, s: int) -> float:
        key = (r, s)
        if key not in memo:
            memo[key] = float(costs[r](s))
        return memo[key]

    heap = [(cost(r, sizes[r] + 1), r) for r in range(world)]
    heapq.heapify(heap)
    for _ in range(units - sum(sizes)):
        _, r = heapq.heappop(heap)
        sizes[r] += 1
        heapq.heappush(heap, (cost(r, sizes[r] + 1), r))
    for _ in range(world * max(1, units)):
        worst = max(range(world), key=lambda r: (cost(r, sizes[r]), -r))
        if sizes[worst] == 0:
            break
        now = max(cost(r, sizes[r]) for r in range(world))
        best, target = now, None
        for r in range(world):
            if r == worst:
                continue
            after = max(cost(q, sizes[q] + (1 if q == r else -1 if q == worst else 0)) for q in range(world))
            if after < best:
                best, target = after, r
        if target is None:
            break
        sizes[worst] -= 1
        sizes[target] += 1
    return tuple(sizes)


@dataclass(frozen=True, kw_only=True)
class RankTime:
    """One rank's predicted time at its shard size (ms, one occurrence of the site)."""

    rank: int
    device: str
    size: int
    total_ms: float
    compute_ms: float
    exposed_comm_ms: float

    def to_dict(self) -> dict:
        return {"rank": self.rank, "device": self.device, "size": self.size, "total_ms": self.total_ms,
                "compute_ms": self.compute_ms, "exposed_comm_ms": self.exposed_comm_ms}


@dataclass(frozen=True, kw_only=True)
class ShardRecommendation:
    """Per-rank sizes for one site (or one block of sites sharing a split), with even shards beside them."""

    sites: tuple[Site, ...]
    cluster: str
    dims: tuple[str, ...]
    """per site, the dimension sized (:func:`shard_dim`)."""
    totals: tuple[int, ...]
    """per site, the split total (per-rank size times world)."""
    multiples: tuple[int, ...]
    """per site, the elements of one unit."""
    units: tuple[int, ...]
    """units per rank, recommended."""
    even_units: tuple[int, ...]
    plans: tuple[Plan, ...]
    """the plan each site is priced under with the recommended sizes."""
    even_plans: tuple[Plan, ...]
    """the plan each site is priced under with even sizes (the best of the same candidates there)."""
    uneven_ms: float
    """sum over the sites of the slowest rank's own time at the recommended sizes."""
    even_ms: float
    uneven_lockstep_ms: float
    """the same with every site's ranks in lock step (:meth:`RankPricer.lockstep_ms`): an upper estimate."""
    even_lockstep_ms: float
    ranks: tuple[tuple[RankTime, ...], ...]
    """per site, each rank at the recommended sizes."""
    even_ranks: tuple[tuple[RankTime, ...], ...]
    rates_tflops: tuple[float, ...]
    transports: tuple[str, ...]
    """transports the group offers (``ClusterSpec.group_transports``)."""

    def sizes(self, site: int = 0) -> tuple[int, ...]:
        """Elements per rank of site ``site``'s split dimension, recommended."""
        return tuple(u * self.multiples[site] for u in self.units)

    def even_sizes(self, site: int = 0) -> tuple[int, ...]:
        return tuple(u * self.multiples[site] for u in self.even_units)

    @property
    def gain(self) -> float:
        """Predicted speed-up of the recommended sizes over even ones."""
        return self.even_ms / self.uneven_ms if self.uneven_ms > 0 else 1.0

    @property
    def lockstep_gain(self) -> float:
        """The gain with the ranks in lock step (both sides priced so)."""
        return self.even_lockstep_ms / self.uneven_lockstep_ms if self.uneven_lockstep_ms > 0 else 1.0

    @property
    def bound(self) -> float:
        """The compute-only gain (:func:`compute_bound`)."""
        return compute_bound(self.rates_tflops)

    @property
    def uneven(self) -> bool:
        return self.units != self.even_units

    def to_dict(self) -> dict:
        return {"sites": [s.name or s.kind for s in self.sites], "kinds": [s.kind for s in self.sites],
                "cluster": self.cluster, "dims": list(self.dims), "totals": list(self.totals),
                "multiples": list(self.multiples), "units": list(self.units), "even_units": list(self.even_units),
                "sizes": [list(self.sizes(j)) for j in range(len(self.sites))],
                "even_sizes": [list(self.even_sizes(j)) for j in range(len(self.sites))],
                "plans": [p.to_dict() for p in self.plans], "even_plans": [p.to_dict() for p in self.even_plans],
                "plan_labels": [p.describe() for p in self.plans],
                "even_plan_labels": [p.describe() for p in self.even_plans],
                "uneven_ms": self.uneven_ms, "even_ms": self.even_ms, "gain": self.gain, "bound": self.bound,
                "uneven_lockstep_ms": self.uneven_lockstep_ms, "even_lockstep_ms": self.even_lockstep_ms,
                "lockstep_gain": self.lockstep_gain,
                "rates_tflops": list(self.rates_tflops), "transports": list(self.transports),
                "ranks": [[t.to_dict() for t in site] for site in self.ranks],
                "even_ranks": [[t.to_dict() for t in site] for site in self.even_ranks]}


# -- one rank's price ---------------------------------------------------------------------------------------------
def _profile_models(profile) -> frozenset[str]:
    view_profile = getattr(profile, "profile", profile)  # a CalibrationView holds its profile
    data = getattr(view_profile, "fingerprint_data", None) or {}
    devices = data.get("devices") if isinstance(data, dict) or hasattr(data, "get") else None
    return frozenset(devices) if devices else frozenset()


def rank_profile(profile, device):
    """The profile as it applies to a rank on ``device``: whole where the profile was measured on that device
    model (or names none), without its GEMM points (the model's GEMM level) on any other device."""
    if profile is None:
        return None
    models = _profile_models(profile)
    if not models or device.model in models:
        return profile
    base = getattr(profile, "profile", profile)
    try:
        return replace(base, gemm=(), gemm_sustained=None)
    except TypeError:  # not a dataclass profile (a hand-made stand-in): the model's GEMM level
        return None


class RankPricer:
    """Prices ``site`` with a rank's shard size on that rank's device (module docstring), memoised per
    (device, plan, size): ranks of one device model share their prices."""

    def __init__(self, site: Site, cluster, profile=None, *, steady_state: bool = False) -> None:
        self.site, self.cluster, self.profile, self.steady_state = site, cluster, profile, steady_state
        self.dim = shard_dim(site)
        self.ranks = tuple(site.group_ranks)
        self.devices = tuple(cluster.device(r) for r in self.ranks)
        self._memo: dict[tuple, RankTime] = {}
        self._stages: dict[tuple, list] = {}

    def price(self, index: int, plan: Plan, size: int) -> RankTime:
        """Rank ``self.ranks[index]`` holding ``size`` of the split dimension, under ``plan``."""
        device = self.devices[index]
        key = (device, plan, size)
        hit = self._memo.get(key)
        if hit is None:
            hit = self._memo[key] = self._price(device, plan, size)
        return replace(hit, rank=self.ranks[index])

    def lockstep_ms(self, plan: Plan, sizes: Sequence[int]) -> float:
        """The group's time with every rank in lock step: each stage of the plan's pipeline takes its longest
        rank's duration and contention (the ranks holding work share one stage structure; a rank holding
        nothing only joins the transfers, which the others already carry). At least ``max`` of the ranks'
        own times (:meth:`price`): a collective piece waits for every rank's GEMM piece."""
        from hocket.cost.stages import schedule
        from hocket.cost.steady import steady_state_total

        working = [i for i, size in enumerate(sizes) if size > 0]
        if not working:
            return max(self.price(i, plan, 0).total_ms for i in range(len(sizes)))
        lists = []
        for i in working:
            self.price(i, plan, sizes[i])
            lists.append(self._stages[(self.devices[i], plan, sizes[i])])
        base = lists[0]
        if any(len(other) != len(base) or any(a.resource != b.resource or a.depends_on != b.depends_on
                                                for a, b in zip(base, other)) for other in lists[1:]):
            raise ValueError(f"internal: the ranks' pipelines of {plan.describe()} differ in structure; please report")
        merged = []
        for index, stage in enumerate(base):
            slowdown: dict[str, float] = {}
            for other in lists:
                for kind, factor in other[index].slowdown_by.items():
                    slowdown[kind] = max(slowdown.get(kind, 1.0), factor)
            merged.append(replace(stage, duration_ms=max(other[index].duration_ms for other in lists),
                                  slowdown_by=slowdown))
        total = steady_state_total(merged)[0] if self.steady_state else schedule(merged).total_ms
        idle = max((self.price(i, plan, 0).total_ms for i, size in enumerate(sizes) if size == 0), default=0.0)
        return max(total, idle)

    def _price(self, device, plan: Plan, size: int) -> RankTime:
        from hocket.cost.builder import new_builder
        from hocket.cost.predict import prediction_from
        from hocket.cost.stages import schedule
        from hocket.cost.steady import steady_state_total
        from hocket.strategies.registry import REGISTRY

        if size == 0:  # the rank computes nothing: the plan's transfers alone (sequential over its transport)
            offered = self.cluster.group_transports(self.ranks)
            usable = [t for t in (plan.transport, *_SEQUENTIAL_TRANSPORTS) if t in _SEQUENTIAL_TRANSPORTS and t in offered]
            site, plan = self.site, Plan(transport=usable[0] if usable else "collective")
        else:
            site = replace(self.site, **{self.dim: size})
        builder = new_builder(site, plan, self.cluster, rank_profile(self.profile, device),
                              steady_state=self.steady_state)
        builder.device = device
        spec = REGISTRY.spec(plan.strategy)
        if site.kind not in spec.priced:
            raise ValueError(f"strategy={plan.strategy!r} does not price a {site.kind} site")
        spec.cost(builder)
        stages = builder.finish()
        self._stages[(device, plan, size)] = stages
        if self.steady_state:
            total, busy, timeline = steady_state_total(stages)
            pred = prediction_from(stages, timeline, total_ms=total, busy_ms=busy)
        else:
            pred = prediction_from(stages, schedule(stages))
        if size == 0:
            return RankTime(rank=-1, device=device.model, size=0, total_ms=pred.comm_ms, compute_ms=0.0,
                            exposed_comm_ms=pred.comm_ms)
        return RankTime(rank=-1, device=device.model, size=size, total_ms=pred.total_ms, compute_ms=pred.compute_ms,
                        exposed_comm_ms=pred.exposed_comm_ms)


def _positive(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name}={value!r} must be a positive int")
    return value


def _check_block(sites: Sequence[Site], multiple) -> tuple[int, tuple[int, ...], tuple[int, ...], int]:
    """(world, per-site totals, per-site units, units) of one block: the sites share a group and a number of
    units (``total_j / multiple_j``)."""
    if not sites:
        raise ValueError("sites is empty; give the sites that share one split (e.g. mlp.up and mlp.down)")
    for s in sites:
        if not isinstance(s, Site):
            raise TypeError(f"sites must hold hocket.Site objects, got {type(s).__name__}")
        shard_dim(s)
    world, ranks = sites[0].world, sites[0].group_ranks
    if any(s.world != world or s.group_ranks != ranks for s in sites):
        raise ValueError(f"sites {[s.name or s.kind for s in sites]} run on different groups; a block shares one "
                         f"group (same world and ranks)")
    totals = tuple(getattr(s, shard_dim(s)) * s.world for s in sites)
    if multiple is None:
        if len(set(totals)) != 1:
            raise ValueError(f"sites {[s.name or s.kind for s in sites]} split different totals {list(totals)} "
                             f"(per-rank n for ag_mm, k for mm_rs/mm_ar, times world); give multiple= one unit "
                             f"per site so that they share a number of units")
        multiples = (shard_multiple(totals[0], world),) * len(sites)
    elif isinstance(multiple, int):
        multiples = (_positive("multiple", multiple),) * len(sites)
    else:
        multiples = tuple(_positive("multiple[...]", m) for m in multiple)
        if len(multiples) != len(sites):
            raise ValueError(f"multiple has {len(multiples)} entries for {len(sites)} sites; give one per site")
    for site, total, unit in zip(sites, totals, multiples):
        if total % unit:
            raise ValueError(f"multiple={unit} does not divide {site.name or site.kind}'s split total {total}; "
                             f"give a divisor of {total}")
    units = {total // unit for total, unit in zip(totals, multiples)}
    if len(units) != 1:
        raise ValueError(f"sites {[s.name or s.kind for s in sites]} give different unit counts {sorted(units)} "
                         f"(totals {list(totals)} over multiples {list(multiples)}); a block shares one split")
    return world, totals, multiples, units.pop()


def _candidate_plans(site: Site, cluster, profile, steady_state: bool, plans) -> tuple[Plan, tuple[Plan, ...]]:
    """(the planner's plan for the even site, the plans to size under: it first)."""
    if plans is not None:
        plans = tuple(as_plan(p) or Plan() for p in plans)
        if not plans:
            raise ValueError("plans is empty; give at least one plan (or None for the planner's best)")
        return plans[0], plans
    from hocket.plan.search import SearchConfig, predict_cost_fn, search

    result = search(site, cluster, profile=profile, config=SearchConfig(steady_state=steady_state),
                    cost_fn=predict_cost_fn(cluster, profile, steady_state=steady_state))
    chosen = result.chosen
    shortlist = [chosen] + [s.plan for s in result.ranked[:CANDIDATE_PLANS] if s.plan != chosen]
    if result.sequential not in shortlist:
        shortlist.append(result.sequential)
    return chosen, tuple(shortlist)


def recommend_block_shards(sites: Sequence[Site], cluster, profile=None, *, plans: Sequence | None = None,
                           multiple: int | Sequence[int] | None = None, steady_state: bool = False,
                           min_units: int = 0) -> ShardRecommendation:
    """One split for ``sites`` (one group, one number of units: e.g. an MLP's up and down projections and
    their input gradients) minimising the sum over the sites of their slowest rank's time. Each site is priced
    under the planner's best few plans for its even site and sequential (``plans``: one plan list for every
    site instead), the even baseline under the best of the same plans at even sizes, so the gain is the
    sizing's alone. ``multiple``: the unit of a shard, one for all sites or one per site (default
    :func:`shard_multiple`; sites whose totals differ need one each, e.g. whole GQA groups of heads);
    ``min_units``: units every rank keeps at least."""
    sites = tuple(_even(s) for s in sites)
    if not hasattr(cluster, "group_transports"):
        raise TypeError(f"cluster={cluster!r} must be a ClusterSpec (hocket.hardware.load_cluster(name))")
    world, totals, multiples, units = _check_block(sites, multiple)
    if world < 2:
        raise ValueError(f"site.world={world}: a group of one rank has nothing to share; size a group of >= 2")
    cluster.check_world(world, arg="site.world")
    if isinstance(min_units, bool) or not isinstance(min_units, int) or min_units < 0 or min_units * world > units:
        raise ValueError(f"min_units={min_units!r} must be an int in 0..{units // world} (units {units} over "
                         f"{world} ranks)")
    pricers = [RankPricer(s, cluster, profile, steady_state=steady_state) for s in sites]
    from hocket.cost.compute import achievable_tflops

    rates = tuple(achievable_tflops(d, sites[0].dtype) for d in pricers[0].devices)
    candidates = [_candidate_plans(s, cluster, profile, steady_state, plans) for s in sites]

    def slowest(j: int, plan: Plan, sizes: Sequence[int]) -> float:
        return max(pricers[j].price(i, plan, u * multiples[j]).total_ms for i, u in enumerate(sizes))

    def per_site_best(j: int, sizes: Sequence[int]) -> tuple[Plan, float]:
        return min(((p, slowest(j, p, sizes)) for p in candidates[j][1]), key=lambda pair: pair[1])

    # even baseline: each site's best candidate plan at even sizes (so the gain is the sizing's alone)
    even = _near_even(units, world)
    even_picked = [per_site_best(j, even) for j in range(len(sites))]
    even_plans = tuple(p for p, _ in even_picked)
    even_ms = sum(ms for _, ms in even_picked)
    best_sizes, best_ms, best_plans = even, even_ms, even_plans
    # the j-th best plan of every site, for each j: one plan per site while the split is sized
    plan_sets = dict.fromkeys(tuple(c[1][min(j, len(c[1]) - 1)] for c in candidates)
                              for j in range(max(len(c[1]) for c in candidates)))
    total_rate = sum(rates)
    start = [max(min_units, math.floor(units * r / total_rate) - 1) for r in rates]
    while sum(start) > units:  # min_units pushed the start past the total: back off the largest
        start[start.index(max(start))] -= 1
    for chosen in plan_sets:
        costs = [(lambda u, i=i, chosen=chosen: sum(pricers[j].price(i, chosen[j], u * multiples[j]).total_ms
                                                    if u >= min_units else math.inf for j in range(len(sites))))
                 for i in range(world)]
        sizes = minimise_slowest(costs, units, start=start)
        picked = [per_site_best(j, sizes) for j in range(len(sites))]
        ms = sum(ms for _, ms in picked)
        if ms < best_ms - 1e-12:
            best_sizes, best_ms, best_plans = sizes, ms, tuple(p for p, _ in picked)
    transports = tuple(sorted(cluster.group_transports(sites[0].group_ranks)))

    def lockstep(plans_: Sequence[Plan], units_: Sequence[int]) -> float:
        return sum(p.lockstep_ms(plans_[j], [u * multiples[j] for u in units_]) for j, p in enumerate(pricers))

    return ShardRecommendation(
        sites=sites, cluster=cluster.name, dims=tuple(p.dim for p in pricers), totals=totals, multiples=multiples,
        units=tuple(best_sizes), even_units=tuple(even), plans=best_plans, even_plans=even_plans,
        uneven_ms=best_ms, even_ms=even_ms, uneven_lockstep_ms=lockstep(best_plans, best_sizes),
        even_lockstep_ms=lockstep(even_plans, even),
        ranks=tuple(tuple(p.price(i, best_plans[j], u * multiples[j]) for i, u in enumerate(best_sizes))
                    for j, p in enumerate(pricers)),
        even_ranks=tuple(tuple(p.price(i, even_plans[j], u * multiples[j]) for i, u in enumerate(even))
                         for j, p in enumerate(pricers)),
        rates_tflops=rates, transports=transports)


def recommend_shards(site: Site, cluster, profile=None, *, plan: Plan | dict | str | None = None,
                     multiple: int | None = None, steady_state: bool = False,
                     min_units: int = 0) -> ShardRecommendation:
    """Per-rank sizes of ``site``'s split dimension (module docstring) on ``cluster``; ``plan``: price under
    this plan only (default: the planner's best few plans of the even site, and sequential)."""
    plans = None if plan is None else (as_plan(plan) or Plan(),)
    return recommend_block_shards((site,), cluster, profile, plans=plans, multiple=multiple,
                                  steady_state=steady_state, min_units=min_units)


def _even(site):
    """``site`` with even shards: a Site carrying ``shard_rows`` is sized from its even form. ``mm_ar``'s
    ``shard_rows`` are the local ``k`` this module sizes (their sum is the total); ``ag_mm``'s and ``mm_rs``'s
    split the activation rows (or the gathered / scattered columns), which sizing leaves as they are."""
    rows = getattr(site, "shard_rows", ()) if isinstance(site, Site) else ()
    if not rows:
        return site
    if site.kind != "mm_ar":
        return replace(site, shard_rows=())
    total = sum(rows)
    if total % site.world:
        raise ValueError(f"site.shard_rows={list(rows)} add up to k={total}, not a multiple of world={site.world}; "
                         f"size a split whose total divides by the group (pad k to {total + (-total) % site.world})")
    return replace(site, k=total // site.world, shard_rows=())


def _near_even(units: int, world: int) -> tuple[int, ...]:
    base, extra = divmod(units, world)
    return tuple(base + (1 if i < extra else 0) for i in range(world))


def shard_lines(rec: ShardRecommendation) -> list[str]:
    """Plain-text lines of one recommendation (``hocket predict``/``plan``/``explain`` print them)."""
    names = ", ".join(s.name or s.kind for s in rec.sites)
    first = rec.sites[0]
    by_device: dict[str, list[int]] = {}
    for t in rec.ranks[0]:
        by_device.setdefault(t.device, []).append(t.size)
    shares = "; ".join(f"{dev}: {', '.join(str(s) for s in sizes)}" for dev, sizes in by_device.items())
    lines = [f"shards of {names}: {first.name or first.kind} {rec.dims[0]} = {list(rec.sizes(0))} per rank "
             f"(total {rec.totals[0]}, multiples of {rec.multiples[0]})"
             + ("" if rec.uneven else " = even: no uneven split is predicted faster"),
             f"  per device: {shares}",
             f"  predicted {rec.uneven_ms:.4f} ms uneven [{', '.join(p.describe() for p in rec.plans)}] vs "
             f"{rec.even_ms:.4f} ms even [{', '.join(p.describe() for p in rec.even_plans)}]: {rec.gain:.3f}x "
             f"(ranks in lock step {rec.lockstep_gain:.3f}x; compute-only bound {rec.bound:.3f}x); transports offered: "
             f"{', '.join(rec.transports)}"]
    return lines
