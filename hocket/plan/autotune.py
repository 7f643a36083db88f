"""Measured autotune on the live group: time the top-k predicted plans plus sequential.

Every rank of the group calls :func:`autotune` with the same site. Group rank 0 reads
the on-disk cache and sends every rank the decision (a hit) or the list of candidates
to time (a miss), so all ranks time the same plans in the same order. Each timing is
the maximum across ranks (``hocket.timing.timer``); rank 0 then picks the winner with
the same rule as prediction (:func:`hocket.plan.search.select`: it must beat measured
sequential by more than the margin), writes the cache and broadcasts it. Messages are
JSON in a uint8 tensor: nothing is pickled.

Every decision rank 0 broadcasts travels with its failure (:func:`broadcast_decision`): what rank 0
computes (the cache read, the candidates, the choice and the cache write) is sent as a result *or* as
an error, so a failure there raises the same :class:`DecisionError` on every rank at once instead of
leaving the other ranks waiting in the next collective; the warnings rank 0 raised meanwhile (a plan
cache that cannot be used, :class:`~hocket.plan.cache.PlanCacheWarning`) are raised on every rank too.
A runner that cannot be built on some rank is reported to every rank the same way before any timing.

Autotuning is off unless switched on: the API argument wins, else ``HOCKET_AUTOTUNE``
(see :func:`autotune_enabled`).
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from hocket.core.plan import Plan
from hocket.core.site import Site
from hocket.plan.cache import PlanCache, PlanCacheWarning
from hocket.plan.search import DEFAULT_MARGIN, SearchResult, select

RunnerFactory = Callable[[Plan], Callable[[], object]]
"""Given a plan, a no-argument callable that runs the operator once with it (on every rank)."""


STEADY_REPS = 4
"""Calls back to back per autotune sample when the planner prices the steady state (the issue-6 bench's
``--reps``)."""


@dataclass(frozen=True, kw_only=True)
class AutotuneConfig:
    """How much to measure."""

    top_k: int = 4
    """predicted-best candidates timed besides sequential."""
    warmup: int = 1
    iters: int = 6
    rounds: int = 8
    """interleaved rounds (machine drift spreads over all candidates; at most ``iters``). A host-bound
    plan reads its host's speed, and a host slows for seconds at a time: on 2xH200
    (``benchmarks/probe_autotune_timing.py``, 16 samples of 4 calls per plan) two rounds let such a spell fall
    on one plan and read it 20-60% slow in 7 of 64 timings (and keep sequential on a site where the pull plan
    ran 30% faster); eight rounds spread it over all, and no timing moved over 10% (benchmarks/results/)."""
    margin: float = DEFAULT_MARGIN
    """measured saving over sequential a plan needs to be chosen."""
    reps: int | None = None
    """calls back to back per timed sample (``hocket.timing.timer``): > 1 times the steady state. None: one
    call here; the live planner makes it ``STEADY_REPS`` when it prices candidates in the steady state (one
    call of a loop with the host ahead), so that it measures what it priced (``LivePlanner.tuning_config``)."""
    extra_rounds: int = 2
    """rounds more for the two front-runners while their quartile ranges overlap (the choice is then
    decided by noise: on 2xH200, 12 samples made a 19% slower plan look best on a noisy site;
    benchmarks/results/)."""
    clear_win: bool = True
    """a plan also needs its 75th percentile below sequential's 25th (besides a median ``margin`` faster):
    only a win the noise cannot explain is chosen (on a loaded 2-core machine, medians of 6 runs of a 3 ms
    site differed by 2x). Quartiles, not p90/p10: on 2xH200 p90 against p10 kept sequential where
    a plan was 4-7% faster in every other statistic (one slow sample in ten decides a p90). The margin
    applies to the medians, not on top of the quartiles: on 2xH200, mm_rs 4096x24576x12288, the
    copy-engine and relay plans measured 3.1% faster than sequential by median and the quartile rule with
    the margin added still kept sequential (benchmarks/results/)."""

    def __post_init__(self) -> None:
        for name, low in (("top_k", 1), ("warmup", 0), ("iters", 1), ("rounds", 1), ("reps", 1), ("extra_rounds", 0)):
            if name == "reps" and self.reps is None:
                continue
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"AutotuneConfig.{name}={value!r} must be an int >= {low}")
        if not isinstance(self.clear_win, bool):
            raise TypeError(f"AutotuneConfig.clear_win={self.clear_win!r} must be True or False")
        if not 0.0 <= self.margin < 1.0:
            raise ValueError(f"AutotuneConfig.margin={self.margin!r} must be a fraction in [0, 1), e.g. 0.03")


@dataclass(frozen=True, kw_only=True)
class AutotuneResult:
    """The decision for one site on the live group."""

    site_key: str
    chosen: Plan
    source: str
    """``autotune`` (measured now) or ``cache`` (decided by an earlier run)."""
    timings_ms: dict[str, float] = field(default_factory=dict)
    """median ms per timed plan (plan JSON -> ms), max across ranks."""


def autotune_enabled(switch: bool | None = None) -> bool:
    """Whether to autotune: the API ``switch`` if given, else ``HOCKET_AUTOTUNE``, else off."""
    if switch is not None:
        if not isinstance(switch, bool):
            raise TypeError(f"autotune={switch!r} must be True, False or None (None: follow HOCKET_AUTOTUNE)")
        return switch
    from hocket.env import autotune_env

    return bool(autotune_env())


def plans_to_time(result: SearchResult, top_k: int) -> tuple[Plan, ...]:
    """Sequential first, then ``top_k`` others: the best predicted, its twins with fewer pieces, the best
    of each other family (:meth:`SearchResult.tuning_shortlist`; a plain top-k is one family, wrong alike)."""
    return (result.sequential, *result.tuning_shortlist(top_k))


# -- messages between ranks ------------------------------------------------------------

def _is_distributed(group) -> bool:
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized() and dist.get_world_size(group) > 1


def _group_rank(group) -> int:
    import torch.distributed as dist

    return dist.get_rank(group) if _is_distributed(group) else 0


class DecisionError(RuntimeError):
    """What group rank 0 decides for every rank failed there; raised on every rank of the group alike."""


def _broadcast_bytes(data: bytes | None, *, group, device) -> bytes:
    import torch
    import torch.distributed as dist

    src = dist.get_global_rank(group, 0) if group is not None else 0
    device = torch.device(device)
    size = torch.tensor([len(data) if data is not None else 0], dtype=torch.int64, device=device)
    dist.broadcast(size, src=src, group=group)
    buffer = torch.zeros(int(size.item()), dtype=torch.uint8, device=device)
    if data:
        buffer.copy_(torch.frombuffer(bytearray(data), dtype=torch.uint8))
    dist.broadcast(buffer, src=src, group=group)
    return buffer.cpu().numpy().tobytes()


def broadcast_json(payload: object, *, group=None, device="cpu") -> object:
    """Group rank 0's ``payload`` (JSON-able) on every rank; others pass anything (ignored). A payload that
    cannot be encoded raises on every rank (:func:`broadcast_decision`)."""
    return broadcast_decision(lambda: payload, what="encoding the message", group=group, device=device)


_WARNING_CATEGORIES: dict[str, type[Warning]] = {"PlanCacheWarning": PlanCacheWarning}


def broadcast_decision(produce: Callable[[], object], *, what: str, group=None, device="cpu") -> object:
    """``produce()`` run on group rank 0 (JSON-able), returned on every rank; other ranks do not call it.

    The result travels with its failure: if ``produce()`` raises on rank 0 (or its result is not JSON),
    every rank raises the same :class:`DecisionError` naming ``what`` and rank 0's error, right after
    the broadcast, instead of waiting for a message that never comes. Warnings rank 0 raised in
    ``produce()`` are raised on every rank."""
    if not _is_distributed(group):
        return produce()
    if _group_rank(group) == 0:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                message: dict = {"ok": produce()}
                data = json.dumps(message, sort_keys=True).encode()
            except Exception as exc:  # noqa: BLE001 - sent to every rank and raised there
                message = {"error": f"{type(exc).__name__}: {exc}"}
                data = None
        message["warnings"] = [[w.category.__name__, str(w.message)] for w in caught]
        if data is None or message["warnings"]:
            data = json.dumps(message, sort_keys=True).encode()
    else:
        data = None
    received = json.loads(_broadcast_bytes(data, group=group, device=device).decode())
    for category, text in received.get("warnings", ()):
        warnings.warn(text, _WARNING_CATEGORIES.get(category, UserWarning), stacklevel=3)
    if "error" in received:
        raise DecisionError(f"hocket: {what} failed on group rank 0 ({received['error']}); every rank of the "
                            f"group raises this error")
    return received["ok"]


def gather_texts(text: str, *, group=None, device="cpu") -> list[str]:
    """Every rank's ``text`` on every rank (two all-gathers: lengths, then the bytes padded to the longest);
    ``[text]`` outside torch.distributed."""
    if not _is_distributed(group):
        return [text]
    import torch
    import torch.distributed as dist

    world = dist.get_world_size(group)
    data = text.encode()
    device = torch.device(device)
    sizes = [torch.zeros(1, dtype=torch.int64, device=device) for _ in range(world)]
    dist.all_gather(sizes, torch.tensor([len(data)], dtype=torch.int64, device=device), group=group)
    lengths = [int(t.item()) for t in sizes]
    width = max(max(lengths), 1)
    mine = torch.zeros(width, dtype=torch.uint8, device=device)
    if data:
        mine[:len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8).to(device)
    rows = [torch.zeros(width, dtype=torch.uint8, device=device) for _ in range(world)]
    dist.all_gather(rows, mine, group=group)
    return [rows[r][:lengths[r]].cpu().numpy().tobytes().decode() for r in range(world)]


def all_ranks_or_raise(error: BaseException | None, *, what: str, group, device) -> None:
    """Raise the same :class:`DecisionError` on every rank when ``error`` is set on any rank (``what``
    failed there), so that no rank goes on into a collective the failed one never joins."""
    if not _is_distributed(group):
        if error is not None:
            raise error
        return
    texts = gather_texts("" if error is None else f"{type(error).__name__}: {error}", group=group, device=device)
    failed = [(r, t) for r, t in enumerate(texts) if t]
    if failed:
        detail = "; ".join(f"rank {r}: {t}" for r, t in failed)
        raise DecisionError(f"hocket: {what} failed on group rank(s) {[r for r, _ in failed]} ({detail}); every "
                            f"rank of the group raises this error") from error


def _agree_on_site(same: bool, *, rank0_key: str, mine: str, group, device) -> None:
    """Raise the same error on every rank unless all ranks tune the same site."""
    if not _is_distributed(group):
        return
    import torch
    import torch.distributed as dist

    flag = torch.tensor([1 if same else 0], dtype=torch.int32, device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MIN, group=group)
    if int(flag.item()) == 0:
        raise ValueError(f"autotune was called for different sites on the ranks of the group (rank 0: {rank0_key}; "
                         f"this rank: {mine}); every rank must tune the same site in the same order")


# -- the autotuner ----------------------------------------------------------------------

def decide(samples: dict[str, list[float]], plans: Sequence[Plan], *, margin: float, clear_win: bool) -> Plan:
    """The plan autotuning chooses from its timed ``samples`` (by ``Plan.to_json()``; ``plans[0]`` is the
    sequential baseline): the fastest by median among those whose median beats the baseline's by more
    than ``margin``; under ``clear_win`` only plans whose 75th percentile is below the baseline's 25th
    take part (a win the noise cannot explain)."""
    import numpy as np

    def q(plan: Plan, percent: float) -> float:
        return float(np.percentile(np.asarray(samples[plan.to_json()], dtype=np.float64), percent))

    baseline = plans[0]
    floor = q(baseline, 25.0)
    eligible = [plan for plan in plans if plan == baseline or not clear_win or q(plan, 75.0) < floor]
    priced = [(plan, max(q(plan, 50.0), 1e-9)) for plan in eligible]
    return select(priced, baseline=baseline, margin=margin)[0]


def _overlapping_front_runners(samples: dict[str, list[float]], plans: list[Plan]) -> list[str]:
    """The two plans with the lowest median when their interquartile ranges overlap (which of them is
    faster is still noise), else none."""
    import numpy as np

    stats = {}
    for plan in plans:
        values = np.asarray(samples[plan.to_json()], dtype=np.float64)
        stats[plan.to_json()] = (float(np.median(values)), float(np.percentile(values, 25)),
                                 float(np.percentile(values, 75)))
    if len(stats) < 2:
        return []
    first, second = sorted(stats, key=lambda name: stats[name][0])[:2]
    return [first, second] if stats[first][2] >= stats[second][1] else []


def autotune(site: Site, candidates: Sequence[Plan], make_runner: RunnerFactory, *, group=None,
             device="cpu", config: AutotuneConfig | None = None, cache: PlanCache | None = None,
             cache_key: str | None = None, usable: Callable[[Plan], str | None] | None = None) -> AutotuneResult:
    """Measure ``candidates`` (``candidates[0]`` is the sequential baseline) on ``group``.

    Collective: every rank of ``group`` must call it with the same site. ``cache_key``
    (default ``site.key``; pass the bucketed site's key when shapes are bucketed) names
    the decision in ``cache``. ``usable(plan)``: why a cached plan cannot run here (None when it
    can); such an entry is skipped with a :class:`~hocket.plan.cache.PlanCacheWarning` naming the
    cache file, and the site is tuned afresh. A failure on group rank 0 (reading the cache, choosing,
    writing the cache) raises the same :class:`DecisionError` on every rank.
    """
    from hocket.timing.stats import summarize
    from hocket.timing.timer import TimingConfig, interleaved_samples_ms

    config = config or AutotuneConfig()
    key = cache_key or site.key
    if not candidates:
        raise ValueError("candidates is empty; give at least the sequential baseline (candidates[0])")
    def first_message() -> dict:
        hit = cache.get(key) if cache is not None else None
        refusal = usable(hit.plan) if hit is not None and usable is not None else None
        if refusal is not None:
            warnings.warn(f"plan cache {cache.path}: the cached plan {hit.plan.describe()} for {key} cannot run "
                          f"here ({refusal}); skipping it and tuning afresh", PlanCacheWarning, stacklevel=2)
            hit = None
        if hit is not None:
            return {"cached": hit.plan.to_dict(), "timings_ms": dict(hit.timings_ms), "site_key": key}
        return {"candidates": [p.to_dict() for p in dict.fromkeys(candidates)], "site_key": key}

    message = broadcast_decision(first_message, what=f"autotune of {key}: reading the plan cache", group=group,
                                 device=device)
    _agree_on_site(message["site_key"] == key, rank0_key=message["site_key"], mine=key, group=group, device=device)
    if "cached" in message:
        return AutotuneResult(site_key=key, chosen=Plan.from_dict(message["cached"]), source="cache",
                              timings_ms=message["timings_ms"])
    plans = [Plan.from_dict(d) for d in message["candidates"]]
    runners, error = {}, None
    try:
        runners = {plan.to_json(): make_runner(plan) for plan in plans}
    except Exception as exc:  # noqa: BLE001 - reported to every rank before any timing collective
        error = exc
    all_ranks_or_raise(error, what=f"autotune of {key}: preparing the candidates", group=group, device=device)
    reps = config.reps or 1
    timing = TimingConfig(warmup=config.warmup, iters=config.iters, reps=reps)
    samples = interleaved_samples_ms(runners, config=timing, rounds=config.rounds, group=group, device=device)
    per_round = TimingConfig(warmup=0, iters=max(1, -(-config.iters // config.rounds)), reps=reps)
    for _ in range(config.extra_rounds):
        contenders = broadcast_decision(lambda: _overlapping_front_runners(samples, plans),
                                        what=f"autotune of {key}: choosing the front-runners", group=group,
                                        device=device)
        if not contenders:
            break
        more = interleaved_samples_ms({name: runners[name] for name in contenders}, config=per_round, rounds=1,
                                      group=group, device=device)
        for name, values in more.items():
            samples[name] += values
    timings = {name: summarize(values).median_ms for name, values in samples.items()}

    def choose() -> dict:
        chosen = decide(samples, plans, margin=config.margin, clear_win=config.clear_win)
        if cache is not None:
            cache.put(key, chosen, source="autotune", timings_ms=timings)
        return chosen.to_dict()

    chosen = Plan.from_dict(broadcast_decision(choose, what=f"autotune of {key}: choosing and caching the plan",
                                               group=group, device=device))
    return AutotuneResult(site_key=key, chosen=chosen, source="autotune", timings_ms=timings)
