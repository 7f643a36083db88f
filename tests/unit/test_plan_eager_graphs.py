"""HOCKET_EAGER_GRAPHS: the flag, the copies a replayed call pays, which plans replay, and plan=None
weighing each candidate replayed or issued (the graphs themselves run in tests/gpu)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from _slow_host import slow_host_planner, slow_host_profile

from hocket.core.site import Site
from hocket.env import eager_graphs
from hocket.hardware import load_preset
from hocket.ops import planning
from hocket.ops.eager_graph import max_graphs, set_max_graphs
from hocket.ops.executors import supported_table
from hocket.ops.live import LiveConfig, LivePlanner, eager_graphs_planner, set_process_planner
from hocket.plan import Plan
from hocket.plan.eager_graphs import eager_graph_cost_fn, graph_copy_bytes, graph_copy_ms, replayable
from hocket.plan.search import predict_cost_fn

SMALL = Site(kind="ag_mm", m=8192, k=4096, n=1536, dtype="bfloat16", world=2)
LARGE = Site(kind="mm_rs", m=8192, k=14336, n=8192, dtype="bfloat16", world=2)
RELAY4 = Plan(strategy="chunked", chunks=4, transport="host_staged", order="local_first")


@pytest.fixture
def slow_host():
    yield from slow_host_planner()


@pytest.mark.parametrize("raw,mode", [("", "off"), ("0", "off"), ("off", "off"), ("auto", "auto"), (" AUTO ", "auto"),
                                      ("1", "on"), ("on", "on"), ("true", "on")])
def test_the_flag_reads_its_modes(monkeypatch, raw, mode):
    monkeypatch.setenv("HOCKET_EAGER_GRAPHS", raw)
    assert eager_graphs() == mode


def test_bad_flags_name_the_variable_and_the_choices(monkeypatch):
    monkeypatch.setenv("HOCKET_EAGER_GRAPHS", "sometimes")
    with pytest.raises(ValueError, match=r"HOCKET_EAGER_GRAPHS='sometimes' must be one of \('off', 'auto', 'on'\)"):
        eager_graphs()
    with pytest.raises(ValueError, match=r"count=-3 must be a whole number of graphs >= 0 \(default 32\)"):
        set_max_graphs(-3)
    assert max_graphs() == 32
    previous = set_max_graphs(7)
    try:
        assert previous == 32 and max_graphs() == 7
    finally:
        set_max_graphs(None)
    assert max_graphs() == 32
    with pytest.raises(ValueError, match="eager_graphs='yes' must be one of"):
        LiveConfig(eager_graphs="yes")


def test_copy_bytes_count_every_input_in_and_output_out():
    # ag_mm: the shard of A (m/world x k) and B in, A @ B (m x n) out, bf16
    nbytes, copies = graph_copy_bytes(SMALL)
    assert nbytes == (4096 * 4096 + 4096 * 1536 + 8192 * 1536) * 2 and copies == 3
    two_b = Site(kind="ag_mm", m=100, k=10, n=7, dtype="float32", world=4, num_b=2)
    assert graph_copy_bytes(two_b) == ((25 * 10 + 2 * 10 * 7 + 2 * 100 * 7) * 4, 5)
    # mm_rs with rows that do not divide: the rank's block is the larger one
    rs = Site(kind="mm_rs", m=10, k=6, n=4, dtype="float32", world=3)
    assert graph_copy_bytes(rs) == ((10 * 6 + 6 * 4 + 4 * 4) * 4, 3)
    ar = Site(kind="mm_ar", m=10, k=6, n=4, dtype="bfloat16", world=3)
    assert graph_copy_bytes(ar) == ((10 * 6 + 6 * 4 + 10 * 4) * 2, 3)
    cluster = load_preset("h200x2")
    small, large = graph_copy_ms(SMALL, cluster), graph_copy_ms(LARGE, cluster)
    assert 0 < small < large and math.isfinite(large)
    # a few microseconds per MiB read and written on an H200 (4.8 TB/s datasheet)
    assert 0.01 < small < 0.2


def test_only_plans_a_graph_captures_replay():
    assert replayable(SMALL, RELAY4) and replayable(SMALL, Plan(strategy="sequential"))
    assert not replayable(SMALL, Plan(strategy="tile_fused", chunks=2, transport="copy_engine"))
    assert not replayable(LARGE, Plan(strategy="chunked", chunks=2, transport="copy_engine"))  # push protocol


def test_auto_prices_the_cheaper_way_and_on_always_replays():
    cluster, profile = load_preset("h200-host-staged"), slow_host_profile()
    eager = predict_cost_fn(cluster, profile, steady_state=True)
    replay = predict_cost_fn(cluster, profile, captured=True)
    auto = eager_graph_cost_fn(cluster, profile, steady_state=True, mode="auto")
    on = eager_graph_cost_fn(cluster, profile, steady_state=True, mode="on")
    for site in (SMALL, LARGE):
        replayed = replay(site, RELAY4) + graph_copy_ms(site, cluster)
        assert on(site, RELAY4) == pytest.approx(replayed) and on.replays(site, RELAY4)
        assert auto(site, RELAY4) == pytest.approx(min(replayed, eager(site, RELAY4)))
        assert auto.replays(site, RELAY4) == (replayed < eager(site, RELAY4))
    # a slow host: the small call's four pieces cost the host more than the replay and its copies
    assert auto.replays(SMALL, RELAY4)
    # a plan a graph cannot capture is priced as issued, in either mode
    fused = Plan(strategy="tile_fused", chunks=2, transport="copy_engine")
    nvlink = load_preset("h200x2")
    assert eager_graph_cost_fn(nvlink, mode="on")(SMALL, fused) == predict_cost_fn(nvlink)(SMALL, fused)
    assert not eager_graph_cost_fn(nvlink, mode="on").replays(SMALL, fused)


def test_a_large_call_the_host_keeps_up_with_is_not_replayed_under_auto():
    # 2xH200 NVLink, datasheet host costs: a 3 ms GEMM's sequential call is device-bound, and the copies
    # (A, B in, the block out: ~0.5 GB) would only add to it
    planner = LivePlanner(cluster=load_preset("h200x2"), config=LiveConfig(use_disk_cache=False, autotune=False))
    assert not planner.replays(LARGE, Plan(strategy="sequential"), "auto")
    assert planner.replays(LARGE, Plan(strategy="sequential"), "on")
    assert not planner.replays(LARGE, Plan(strategy="sequential"), "off")


def test_plan_none_under_eager_graphs_weighs_replays_and_caches_apart(slow_host):
    eager = planning.choose_plan(SMALL)
    auto = planning.choose_plan(SMALL, eager_graphs="auto")
    planner = eager_graphs_planner("auto")
    assert planner.config.eager_graphs == "auto" and not planner.config.use_disk_cache
    assert planner.cluster.name == "h200-host-staged"  # the process planner's cluster and profile
    decision = next(iter(planner.known().values()))
    # every candidate was priced the cheaper way: the chosen price is that of its own way
    cost = eager_graph_cost_fn(planner.cluster, planner.profile, steady_state=planner.search_config().steady_state,
                               mode="auto")
    assert decision.search.chosen_ms == pytest.approx(cost(decision.search.site, decision.plan))
    # on this slow host the replayed choice is at least as pipelined as the issued one, and priced lower
    assert auto.chunks >= eager.chunks or eager.strategy == "sequential"
    assert planning._CHOSEN[SMALL.key] == eager and planning._CHOSEN_GRAPHED[("auto", SMALL.key)] == auto
    set_process_planner(None)  # replacing the process planner drops the eager-graph planners too
    assert "eager_graphs:auto" not in __import__("hocket.ops.live", fromlist=["_PLANNERS"])._PLANNERS


def test_autotune_under_eager_graphs_also_times_the_issued_leaders(monkeypatch):
    from hocket.ops import live
    from hocket.plan.autotune import AutotuneResult
    from hocket.plan.search import search

    handed = []

    def fake_autotune(bucket, plans, runner, **_):
        handed.append(plans)
        return AutotuneResult(site_key=bucket.key, chosen=plans[0], source="autotune", timings_ms={})

    monkeypatch.setattr(live, "autotune", fake_autotune)
    cluster, profile = load_preset("h200-host-staged"), slow_host_profile()
    config = LiveConfig(autotune=True, use_disk_cache=False, supported=supported_table(), eager_graphs="auto")
    planner = LivePlanner(cluster=cluster, profile=profile, config=config)
    planner.decide(SMALL, runners=lambda bucket: (lambda plan: (lambda: None)))
    issued = search(SMALL, cluster, profile=profile, config=planner.search_config(),
                    space_config=planner._space_config(SMALL))
    (timed,) = handed
    assert set(issued.tuning_shortlist(2)) <= set(timed) and len(set(timed)) == len(timed)
    assert timed[0].strategy == "sequential"  # sequential first, as always
    # off: the plain shortlist only
    handed.clear()
    LivePlanner(cluster=cluster, profile=profile, config=replace(config, eager_graphs="off")).decide(
        SMALL, runners=lambda bucket: (lambda plan: (lambda: None)))
    assert len(handed) == 1 and len(handed[0]) <= 1 + config.tuning.top_k


def test_eager_graph_decisions_have_cache_keys_of_their_own(tmp_path):
    from hocket.plan.bucket import bucket_site
    from hocket.plan.cache import CacheEnvironment, PlanCache

    env = CacheEnvironment(fingerprint="abc123", hocket_version="0.1.0", torch_version="2.13.0")
    cache = PlanCache(env, tmp_path / "plans.json")
    cluster, profile = load_preset("h200-host-staged"), slow_host_profile()
    planner = LivePlanner(cluster=cluster, profile=profile, cache=cache,
                          config=LiveConfig(autotune=False, supported=supported_table(), eager_graphs="auto"))
    bucket = bucket_site(SMALL, planner.config.bucket)
    odd = Plan(strategy="chunked", chunks=3, transport="host_staged")
    cache.put(bucket.key, odd, source="autotune")  # an issued-calls decision: not this planner's
    assert planner.decide(SMALL).source == "predicted"
    planner.forget()
    cache.put(planner._cache_key(bucket), odd, source="autotune")
    decision = planner.decide(SMALL)
    assert decision.source == "cache" and decision.plan == odd
    assert planner._cache_key(bucket) == f"{bucket.key}|eager_graphs=auto"
    assert LivePlanner(cluster=cluster, config=LiveConfig())._cache_key(bucket) == bucket.key
