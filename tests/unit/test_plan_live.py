"""The plan=None planner: bucketed decisions, reuse, cache, fallbacks, executor filter."""

from __future__ import annotations

import random

import pytest

from hocket.core.plan import Plan
from hocket.core.site import Site
from hocket.ops.live import LiveConfig, LivePlanner, PlannerWarning
from hocket.plan.bucket import bucket_site
from hocket.plan.cache import CacheEnvironment, PlanCache

hardware = pytest.importorskip("hocket.hardware")

SUPPORTED = {"ag_mm": ("sequential", "bulk", "chunked", "ring", "bidir_ring"),
             "mm_rs": ("sequential", "chunked", "ring"),
             "mm_ar": ("sequential", "chunked", "substituted")}
ENV = CacheEnvironment(fingerprint="unit", hocket_version="0", torch_version="0")


def _planner(tmp_path, **config) -> LivePlanner:
    return LivePlanner(cluster=hardware.load_preset("h100x8"),
                       config=LiveConfig(**{"supported": SUPPORTED, **config}),
                       cache=PlanCache(ENV, tmp_path / "plans.json"))


def test_a_new_sequence_length_reuses_the_bucket_decision(tmp_path):
    planner = _planner(tmp_path)
    rng = random.Random()
    seq = 8 * rng.randint(993, 1024)  # 7944..8192 tokens: all in the 8192 bucket
    first = planner.decide(Site(kind="ag_mm", m=8192, k=8192, n=3584, world=8))
    again = planner.decide(Site(kind="ag_mm", m=seq, k=8192, n=3584, world=8))
    assert again is first and len(planner.known()) == 1
    assert first.source == "predicted" and first.search is not None
    assert first.plan == first.search.chosen
    assert first.plan.strategy in SUPPORTED["ag_mm"]
    other = planner.decide(Site(kind="ag_mm", m=8192 + 8 * rng.randint(1, 31), k=8192, n=3584, world=8))
    assert other is not first and len(planner.known()) == 2


def test_only_strategies_with_an_executor_are_considered(tmp_path):
    planner = _planner(tmp_path)
    for kind in ("ag_mm", "mm_rs", "mm_ar"):
        decision = planner.decide(Site(kind=kind, m=4096, k=4096, n=4096, world=8))
        assert {s.plan.strategy for s in decision.search.ranked} <= set(SUPPORTED[kind])


def test_plan_is_fitted_to_the_exact_shape(tmp_path):
    planner = _planner(tmp_path, supported={"ag_mm": ("sequential", "ring")})
    small = Site(kind="ag_mm", m=8 * 3, k=64, n=64, world=8)
    bucket = bucket_site(small)
    cached = Plan(strategy="ring", chunks=4, transport="p2p")
    planner.cache.put(bucket.key, cached, source="autotune")
    decision = planner.decide(small)
    assert decision.source == "cache" and decision.plan == cached
    assert planner.plan(small) == cached.with_(chunks=3)  # 3 rows per shard


def test_disable_forces_sequential(tmp_path, monkeypatch):
    monkeypatch.setenv("HOCKET_DISABLE", "1")
    decision = _planner(tmp_path).decide(Site(kind="mm_rs", m=8192, k=8192, n=8192, world=8))
    assert decision.plan == Plan() and decision.source == "disabled"


def test_group_larger_than_the_described_cluster_falls_back_with_a_warning(tmp_path):
    planner = _planner(tmp_path)
    with pytest.warns(PlannerWarning, match="HOCKET_CLUSTER"):
        decision = planner.decide(Site(kind="ag_mm", m=4096, k=128, n=128, world=16))
    assert decision.plan == Plan()


def test_autotune_without_a_runner_predicts(tmp_path, monkeypatch):
    monkeypatch.setenv("HOCKET_AUTOTUNE", "1")
    decision = _planner(tmp_path).decide(Site(kind="mm_ar", m=2048, k=1024, n=4096, world=8))
    assert decision.source == "predicted"


def test_cluster_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("HOCKET_CLUSTER", "h200x2")
    planner = LivePlanner(config=LiveConfig(supported=SUPPORTED), cache=PlanCache(ENV, tmp_path / "p.json"))
    assert planner.cluster.name == "h200x2" and planner.profile is None


def test_decision_reports_measured_sequential_and_chosen_times():
    from hocket.core.plan import SEQUENTIAL, Plan
    from hocket.ops.live import Decision

    ring = Plan(strategy="ring", chunks=1, transport="p2p")
    seq_p2p = Plan(strategy="sequential", transport="p2p")
    timings = {SEQUENTIAL.to_json(): 9.0, seq_p2p.to_json(): 7.5, ring.to_json(): 6.0}
    assert Decision(plan=ring, source="autotune", bucket_key="k", timings_ms=timings).measured_ms() == (7.5, 6.0)
    assert Decision(plan=ring, source="predicted", bucket_key="k").measured_ms() == (None, None)


def test_the_steady_state_is_priced_when_the_profile_measured_host_issue_costs(tmp_path, monkeypatch):
    from hocket.hardware.profile import CalibrationProfile
    from hocket.ops import live
    from hocket.plan.search import SearchConfig

    cluster = hardware.load_preset("h200x2")
    measured = CalibrationProfile(fingerprint="t", issue_us={"launch": random.uniform(5, 40), "entry": 150.0})
    unmeasured = CalibrationProfile(fingerprint="t")
    cases = [(measured, None, True), (unmeasured, None, False), (None, None, False),
             (measured, False, False), (unmeasured, True, True)]
    for profile, switch, steady in cases:
        planner = LivePlanner(cluster=cluster, profile=profile,
                              config=LiveConfig(autotune=False, use_disk_cache=False, steady_state=switch))
        assert planner.search_config().steady_state is steady, (profile, switch)
    explicit = LivePlanner(cluster=cluster, profile=unmeasured,
                           config=LiveConfig(use_disk_cache=False, search=SearchConfig(steady_state=True)))
    assert explicit.search_config().steady_state is True  # an explicit SearchConfig is kept

    seen = []
    real = live.search
    monkeypatch.setattr(live, "search", lambda *a, **kw: seen.append(kw["config"]) or real(*a, **kw))
    planner = LivePlanner(cluster=cluster, profile=measured, config=LiveConfig(autotune=False, use_disk_cache=False))
    planner.decide(Site(kind="ag_mm", m=8192, k=8192, n=7168, dtype="bfloat16", world=2))
    assert seen and seen[0].steady_state is True


def test_autotune_times_calls_back_to_back_where_the_steady_state_is_priced(monkeypatch):
    """AutotuneConfig(reps=None): the live planner times STEADY_REPS calls per sample when it prices one call
    of a loop (the steady state), one call otherwise; an explicit reps is kept. Checked on what the autotuner
    is handed."""
    from hocket.hardware.profile import CalibrationProfile
    from hocket.ops import live
    from hocket.plan.autotune import STEADY_REPS, AutotuneConfig, AutotuneResult

    cluster = hardware.load_preset("h200x2")
    measured = CalibrationProfile(fingerprint="t", issue_us={"launch": random.uniform(5, 40), "entry": 150.0})
    explicit = random.randint(2, 9)
    cases = [(measured, AutotuneConfig(), STEADY_REPS), (None, AutotuneConfig(), 1),
             (measured, AutotuneConfig(reps=explicit), explicit), (None, AutotuneConfig(reps=explicit), explicit)]
    site = Site(kind="ag_mm", m=8192, k=8192, n=7168, dtype="bfloat16", world=2)
    for profile, tuning, reps in cases:
        handed = []

        def fake_autotune(bucket, plans, runner, *, config, **_):
            handed.append(config)
            return AutotuneResult(site_key=bucket.key, chosen=plans[0], source="autotune", timings_ms={})

        monkeypatch.setattr(live, "autotune", fake_autotune)
        planner = LivePlanner(cluster=cluster, profile=profile,
                              config=LiveConfig(autotune=True, use_disk_cache=False, tuning=tuning))
        assert planner.tuning_config().reps == reps
        planner.decide(site, runners=lambda bucket: (lambda plan: (lambda: None)))
        assert [c.reps for c in handed] == [reps], (profile, tuning)
    with pytest.raises(ValueError, match="reps"):
        AutotuneConfig(reps=0)
