"""Measured autotune on real gloo ranks: rank 0 decides, every rank agrees, the cache is reused."""

from __future__ import annotations

import time
import warnings
from pathlib import Path

import torch.distributed as dist

from hocket.plan.autotune import AutotuneConfig, autotune
from hocket.plan.cache import CacheEnvironment, PlanCache
from hocket.core.plan import Plan
from hocket.core.site import Site

ENV = CacheEnvironment(fingerprint="dist-test", hocket_version="0", torch_version="0")
SEQ = Plan()
FAST = Plan(strategy="chunked", chunks=4)
SLOW = Plan(strategy="chunked", chunks=8)
QUICK = AutotuneConfig(warmup=1, iters=3, rounds=1)


def _site(m: int) -> Site:
    return Site(kind="ag_mm", m=m, k=64, n=32, world=dist.get_world_size())


class _Runners:
    """Runner factory whose plans take set times; counts how often each plan ran."""

    def __init__(self, sleep_ms: dict[Plan, float]) -> None:
        self.sleep_ms = sleep_ms
        self.calls: dict[str, int] = {}

    def __call__(self, plan: Plan):
        def run() -> None:
            self.calls[plan.describe()] = self.calls.get(plan.describe(), 0) + 1
            time.sleep(self.sleep_ms[plan] / 1e3)
        return run


def tune_and_reuse(cache_path: str, m: int) -> tuple[dict, dict, dict, dict]:
    cache = PlanCache(ENV, cache_path)
    # the slowest rank decides a plan's time: on rank 1, FAST is slow
    fast_ms = 2.0 if dist.get_rank() != 1 else 80.0
    runners = _Runners({SEQ: 40.0, FAST: fast_ms, SLOW: 60.0})
    first = autotune(_site(m), [SEQ, FAST, SLOW], runners, config=QUICK, cache=cache)
    again = _Runners({SEQ: 1.0, FAST: 1.0, SLOW: 1.0})
    second = autotune(_site(m), [SEQ, FAST, SLOW], again, config=QUICK, cache=PlanCache(ENV, cache_path))
    return ({"chosen": first.chosen.to_json(), "source": first.source, "timings": first.timings_ms},
            runners.calls, {"chosen": second.chosen.to_json(), "source": second.source}, again.calls)


def test_slowest_rank_counts_rank0_decides_and_the_cache_is_reused(pool, tmp_path):
    path = tmp_path / "plans.json"
    results = pool.run(tune_and_reuse, str(path), 64 * pool.world_size)
    firsts = [r[0] for r in results]
    assert all(f == firsts[0] for f in firsts)  # identical decisions and timings on every rank
    assert firsts[0]["source"] == "autotune"
    # rank 1 makes FAST the slowest (80 ms > 40 ms sequential): sequential wins
    assert Plan.from_json(firsts[0]["chosen"]) == SEQ
    timings = firsts[0]["timings"]
    assert timings[FAST.to_json()] >= 80.0 and timings[SEQ.to_json()] >= 40.0
    for calls in (r[1] for r in results):
        assert calls == {SEQ.describe(): 4, FAST.describe(): 4, SLOW.describe(): 4}
    for second, calls in ((r[2], r[3]) for r in results):
        assert second == {"chosen": firsts[0]["chosen"], "source": "cache"} and calls == {}
    cached = PlanCache(ENV, path).get(Site(kind="ag_mm", m=64 * pool.world_size, k=64, n=32,
                                           world=pool.world_size).key)
    assert cached is not None and cached.source == "autotune" and cached.plan == SEQ


def tune_clear_winner(cache_path: str) -> str:
    runners = _Runners({SEQ: 40.0, FAST: 2.0, SLOW: 60.0})
    return autotune(_site(128), [SEQ, SLOW, FAST], runners, config=QUICK,
                    cache=PlanCache(ENV, cache_path)).chosen.to_json()


def test_a_clearly_faster_plan_wins(pool2, tmp_path):
    chosen = pool2.run(tune_clear_winner, str(tmp_path / "plans.json"))
    assert chosen == [FAST.to_json()] * 2


def follow_rank0_cache(base: str) -> tuple[str, str, dict]:
    # every rank has its own cache file; only rank 0's holds a decision
    cache = PlanCache(ENV, Path(base) / f"rank{dist.get_rank()}.json")
    site = _site(256)
    if dist.get_rank() == 0:
        cache.put(site.key, SLOW, source="autotune", timings_ms={SLOW.to_json(): 1.0})
    elif dist.get_rank() == 1:
        cache.put(site.key, FAST, source="autotune")
    runners = _Runners({SEQ: 1.0, FAST: 1.0, SLOW: 1.0})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = autotune(site, [SEQ, FAST], runners, config=QUICK, cache=cache)
    return result.chosen.to_json(), result.source, runners.calls


def test_every_rank_follows_rank0s_cache(pool, tmp_path):
    results = pool.run(follow_rank0_cache, str(tmp_path))
    assert results == [(SLOW.to_json(), "cache", {})] * pool.world_size


# -- with the real operators ----------------------------------------------------------------

def _use_planner(cache_path: str, *, autotune: bool | None = None) -> None:
    from hocket.ops.live import LiveConfig, LivePlanner, set_process_planner

    set_process_planner(LivePlanner(config=LiveConfig(autotune=autotune, tuning=QUICK),
                                    cache=PlanCache(ENV, cache_path)))


def plan_none_matches_reference(cache_path: str, seed: int, m_per_rank: int, k: int, n: int) -> dict:
    import torch

    import hocket.ops as ops
    from hocket.launch.same_case import rank_generator, shared_generator
    from hocket.ops.reference import reference_all_gather_matmul as ref_ag
    from hocket.ops.reference import reference_matmul_reduce_scatter as ref_rs
    from hocket.ops.live import process_planner

    _use_planner(cache_path)
    world = dist.get_world_size()
    a = torch.randn(m_per_rank, k, generator=rank_generator(seed))
    b = torch.randn(k, n, generator=shared_generator(seed))
    _, (out,) = ops.all_gather_matmul(a, [b], 0, dist.group.WORLD, plan=None)
    _, (want,) = ref_ag(a, [b], 0, dist.group.WORLD)
    ops.assert_close(out, want, world=world)
    c = torch.randn(m_per_rank * world, n, generator=rank_generator(seed + 1))
    d = torch.randn(n, k, generator=shared_generator(seed + 1))
    got = ops.matmul_reduce_scatter(c, d, "sum", 0, dist.group.WORLD, plan=None)
    ops.assert_close(got, ref_rs(c, d, "sum", 0, dist.group.WORLD), world=world)
    decisions = process_planner().known()
    return {key: (d.plan.to_json(), d.source) for key, d in decisions.items()}


def test_plan_none_runs_the_planner_and_every_rank_agrees(pool, tmp_path):
    import random

    rng = random.Random()
    m = rng.randint(8, 40)
    results = pool.run(plan_none_matches_reference, str(tmp_path / "p.json"), rng.randrange(1 << 30), m,
                       rng.randint(16, 96), rng.randint(16, 96))
    assert all(r == results[0] for r in results)
    assert len(results[0]) == 2 and {src for _, src in results[0].values()} == {"predicted"}


def tune_real_ops(cache_path: str, m: int, k: int, n: int) -> tuple[str, str, str]:
    from hocket.ops.planning import choose_plan
    from hocket.ops.live import tune

    _use_planner(cache_path)
    site = Site(kind="mm_ar", m=m, k=k, n=n, world=dist.get_world_size(), dtype="float32")
    decision = tune(site, autotune=True)
    nearby = Site(kind="mm_ar", m=m - 3, k=k, n=n, world=dist.get_world_size(), dtype="float32")
    return decision.plan.to_json(), decision.source, choose_plan(nearby).to_json()


def test_tune_measures_real_operators_and_plan_none_reuses_it(pool2, tmp_path):
    results = pool2.run(tune_real_ops, str(tmp_path / "p.json"), 256, 128, 192)
    chosen, source, reused = results[0]
    assert all(r == results[0] for r in results)
    assert source == "autotune"
    entry = PlanCache(ENV, tmp_path / "p.json").entries()
    (cached,) = entry.values()
    assert cached.plan.to_json() == chosen and cached.source == "autotune"
    assert Plan().to_json() in cached.timings_ms and len(cached.timings_ms) >= 2
    assert Plan.from_json(reused).strategy == Plan.from_json(chosen).strategy  # same bucket, fitted


def tune_different_sites() -> str:
    runners = _Runners({SEQ: 1.0, FAST: 1.0})
    autotune(_site(64 * (1 + dist.get_rank())), [SEQ, FAST], runners, config=QUICK)
    return "unreachable"


def test_ranks_tuning_different_sites_all_raise(pool):
    pool.run_expect_error(tune_different_sites, exc_type=ValueError, match="different sites")


class _Alternating(_Runners):
    """FAST alternates between quick and slow calls: a better median, a worse p90 than sequential."""

    def __call__(self, plan: Plan):
        run = super().__call__(plan)
        if plan != FAST:
            return run

        def alternating() -> None:
            slow = self.calls.get(plan.describe(), 0) % 2 == 1
            self.calls[plan.describe()] = self.calls.get(plan.describe(), 0) + 1
            time.sleep((60.0 if slow else 2.0) / 1e3)
        return alternating


def tune_noisy(cache_path: str, clear_win: bool) -> str:
    runners = _Alternating({SEQ: 40.0, FAST: 2.0, SLOW: 80.0})
    config = AutotuneConfig(warmup=0, iters=6, rounds=1, clear_win=clear_win)
    return autotune(_site(96 * dist.get_world_size()), [SEQ, FAST, SLOW], runners, config=config,
                    cache=PlanCache(ENV, cache_path)).chosen.to_json()


def test_a_win_the_noise_explains_is_not_chosen(pool2, tmp_path):
    # FAST's median (about 31 ms) beats sequential's 40 ms, its p90 (60 ms) does not beat sequential's p10
    assert pool2.run(tune_noisy, str(tmp_path / "a.json"), True) == [SEQ.to_json()] * 2
    assert pool2.run(tune_noisy, str(tmp_path / "b.json"), False) == [FAST.to_json()] * 2


class _RareOutlier(_Runners):
    """FAST is 25% faster than sequential except one call in five (its p90 is the outlier, its p75 is not)."""

    def __call__(self, plan: Plan):
        run = super().__call__(plan)
        if plan != FAST:
            return run

        def mostly_fast() -> None:
            slow = self.calls.get(plan.describe(), 0) % 5 == 4
            self.calls[plan.describe()] = self.calls.get(plan.describe(), 0) + 1
            time.sleep((90.0 if slow else 30.0) / 1e3)
        return mostly_fast


def tune_rare_outlier(cache_path: str) -> str:
    runners = _RareOutlier({SEQ: 40.0, FAST: 30.0})
    config = AutotuneConfig(warmup=0, iters=10, rounds=1)
    return autotune(_site(112 * dist.get_world_size()), [SEQ, FAST], runners, config=config,
                    cache=PlanCache(ENV, cache_path)).chosen.to_json()


def test_one_slow_sample_in_five_does_not_veto_a_consistent_win(pool2, tmp_path):
    # p90 against p10 would keep sequential (the 90 ms call); the quartiles see 30 ms against 40 ms
    assert pool2.run(tune_rare_outlier, str(tmp_path / "c.json")) == [FAST.to_json()] * 2
