import random

import pytest

from hocket.bench.plans import BENCH_STRATEGIES, bench_plans


@pytest.mark.parametrize("kind", sorted(BENCH_STRATEGIES))
def test_all_means_every_strategy_with_sequential_first(kind):
    chunks = tuple(sorted(random.sample(range(2, 17), 3)))
    plans = bench_plans(kind, chunks=chunks)
    assert plans[0].strategy == "sequential"
    assert {p.strategy for p in plans} == set(BENCH_STRATEGIES[kind])
    for plan in plans:
        if plan.strategy in ("chunked", "substituted"):
            assert plan.chunks in chunks
    assert sorted(p.chunks for p in plans if p.strategy == "chunked") == list(chunks)
    assert len({p.hash for p in plans}) == len(plans)


def test_chosen_strategies_still_start_with_sequential():
    plans = bench_plans("ag_mm", strategies=("ring",))
    assert [p.strategy for p in plans] == ["sequential", "ring"]


def test_substituted_is_all_reduce_only():
    with pytest.raises(ValueError, match="substituted.*ag_mm"):
        bench_plans("ag_mm", strategies=("substituted",))


@pytest.mark.parametrize("kwargs, match", [
    ({"strategies": ("warp_speed",)}, "unknown"),
    ({"chunks": (0,)}, "chunks"),
    ({"chunks": ()}, "chunks"),
])
def test_bad_requests_name_the_problem(kwargs, match):
    with pytest.raises(ValueError, match=match):
        bench_plans("mm_rs", **kwargs)


def test_unknown_kind():
    with pytest.raises(ValueError, match="kind"):
        bench_plans("a2a_mm")
