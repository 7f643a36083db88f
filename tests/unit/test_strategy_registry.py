"""The strategy registry is the one source of strategies: every name has a spec, every spec that runs on
CPU has an executor for each operator kind it serves, no executor exists without a spec, and the tables
of the plan space, the benchmarks and the live planner are the registry's."""

from __future__ import annotations

import random

import pytest

import hocket.ops  # noqa: F401  (registers the executors)
from hocket.core.plan import STRATEGIES, Plan
from hocket.core.site import Site
from hocket.hardware import load_preset
from hocket.ops.executors import register_executor, registered, supported, supported_table
from hocket.strategies import (
    OFFLOAD_KINDS,
    OPERATOR_KINDS,
    Registry,
    StrategySpec,
    planned_for,
    predict,
    spec,
    specs,
    strategies_for,
)

KINDS = OPERATOR_KINDS + OFFLOAD_KINDS


def test_every_strategy_name_has_one_spec_in_order():
    assert tuple(s.name for s in specs()) == STRATEGIES
    for name in STRATEGIES:
        assert spec(name).name == name
    with pytest.raises(ValueError, match="has no spec"):
        spec("warp")


def test_every_cpu_spec_has_an_executor_for_each_operator_kind_it_serves():
    table = registered()
    missing = [(s.name, kind) for s in specs() if s.runs_on_cpu for kind in s.kinds if kind in KINDS
               and (kind, s.name) not in table]
    assert not missing, f"specs serving kinds with no executor registered: {missing}"


def test_every_executor_belongs_to_a_spec_that_serves_its_kind():
    names = {s.name for s in specs()}
    for kind, name in registered():
        assert name in names, f"an executor is registered for {name!r}, which has no spec"
        assert kind in spec(name).kinds, f"{name!r} has an executor for {kind} but its spec does not serve it"


def test_registering_an_executor_without_a_spec_or_for_a_kind_not_served_is_refused():
    with pytest.raises(ValueError, match="has no spec"):
        register_executor("warp", "ag_mm", lambda *a: None)
    with pytest.raises(ValueError, match="does not serve ag_mm"):
        register_executor("substituted", "ag_mm", lambda *a: None)
    assert ("ag_mm", "substituted") not in registered()


def test_the_live_planner_and_the_plan_check_read_the_registered_executors():
    from hocket.ops.live import _default_supported
    from hocket.ops.planning import check_supported

    assert _default_supported() == supported_table()
    for kind in OPERATOR_KINDS:
        expected = tuple(s.name for s in specs() if (kind, s.name) in registered())
        assert supported(kind) == expected and expected[0] == "sequential"
        for name in STRATEGIES:
            if name in expected:
                assert check_supported(kind, Plan(strategy=name)).strategy == name
            else:
                with pytest.raises(ValueError, match="not available"):
                    check_supported(kind, Plan(strategy=name))


def test_the_bench_tables_are_the_registrys():
    from hocket.bench.plans import BENCH_STRATEGIES, PIPELINED, bench_plans

    for kind in OPERATOR_KINDS:
        assert BENCH_STRATEGIES[kind] == tuple(n for n in strategies_for(kind) if spec(n).runs_on_cpu)
        plans = bench_plans(kind, chunks=(2, 3))
        for name in BENCH_STRATEGIES[kind][1:]:
            counts = sorted(p.chunks for p in plans if p.strategy == name)
            assert counts == ([2, 3] if spec(name).pipelined else [1])
    assert PIPELINED == tuple(s.name for s in specs() if s.pipelined)


def test_the_plan_space_enumerates_what_the_specs_say():
    from hocket.plan.space import enumerate_plans, group_facts

    rng = random.Random()
    cluster = load_preset(rng.choice(["h200x8", "h100x8"]))
    for kind in OPERATOR_KINDS:
        site = Site(kind=kind, m=8192, k=4096, n=rng.choice([1536, 4096]), world=8, dtype="bfloat16")
        space = enumerate_plans(site, group_facts(site, cluster))
        enumerated = {p.strategy for p in space.candidates}
        assert enumerated <= set(planned_for(kind))
        for plan in space.candidates:
            assert plan.transport in spec(plan.strategy).transports
            assert plan.chunks >= spec(plan.strategy).min_chunks or spec(plan.strategy).single_piece(site, plan)
        for name in set(STRATEGIES) - set(planned_for(kind)):
            reasons = [p.reason for p in space.pruned if p.plan.strategy == name]
            assert reasons and f"does not apply to {kind}" in reasons[0]


def test_the_cost_model_prices_what_the_specs_price():
    cluster = load_preset("h200x2")
    for s in specs():
        for kind in KINDS:
            world = 1 if kind in OFFLOAD_KINDS else 2
            site = Site(kind=kind, m=4096, k=1024, n=1024, world=world, dtype="bfloat16")
            transport = "host_staged" if kind in OFFLOAD_KINDS else (s.transports or ("collective",))[0]
            plan = Plan(strategy=s.name, chunks=max(2, s.min_chunks), transport=transport)
            if kind in s.priced:
                assert predict(site, plan, cluster).total_ms > 0
            else:
                with pytest.raises(ValueError, match="does not apply"):
                    predict(site, plan, cluster)


def test_the_copy_engine_space_enumerates_the_peer_protocols():
    from hocket.core.peer_protocol import protocols_for
    from hocket.plan.space import SpaceConfig, enumerate_plans, group_facts

    cluster = load_preset("h200x2")
    for kind in OPERATOR_KINDS:
        site = Site(kind=kind, m=8192, k=4096, n=4096, world=2, dtype="bfloat16")
        default = enumerate_plans(site, group_facts(site, cluster)).candidates
        assert all(p.protocol is None for p in default)  # the automatic order unless variants are asked for
        candidates = enumerate_plans(site, group_facts(site, cluster), SpaceConfig(variants=True)).candidates
        assert set(default) <= set(candidates)
        for chunks in (1, 2):
            named = {p.protocol for p in candidates if p.strategy == "chunked" and p.transport == "copy_engine"
                     and p.chunks == chunks and p.split_sizes is None and p.order == "natural"}
            offered = protocols_for(kind, chunks)
            assert named == {None, *offered[1:]}, (kind, chunks)
            for protocol in offered[1:]:  # a named protocol is priced as its own pipeline
                plan = Plan(strategy="chunked", chunks=chunks, transport="copy_engine", protocol=protocol)
                assert predict(site, plan, cluster).total_ms > 0


def test_a_fresh_registry_takes_a_spec_once():
    registry = Registry()
    chunked = spec("chunked")
    registry.register(chunked)
    assert registry.specs() == (chunked,) and registry.strategies_for("mm_ar") == ("chunked",)
    with pytest.raises(ValueError, match="already has a spec"):
        registry.register(chunked)
    with pytest.raises(ValueError, match="not a strategy name"):
        StrategySpec(name="warp", summary="", kinds=("ag_mm",), cost=lambda b: None, workspace=lambda s, p: 0)
    with pytest.raises(ValueError, match="unknown kinds"):
        StrategySpec(name="bulk", summary="", kinds=("ag_xx",), cost=lambda b: None, workspace=lambda s, p: 0)


def test_specs_that_serve_uneven_shards_are_the_ones_with_uneven_executors():
    from hocket.ops.lowering.uneven import uneven_strategies
    from hocket.strategies import specs

    declared = {s.name for s in specs() if s.uneven}
    for kind in ("ag_mm", "mm_rs"):
        assert set(uneven_strategies(kind)) == declared, kind
    assert {s.name for s in specs() if s.uneven_padded} <= declared
