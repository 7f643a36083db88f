"""Host issue overhead (hocket.cost.issue) and pricing of bulk for mm_rs / mm_ar."""

from __future__ import annotations

import math
import random

import pytest

from hocket.core.plan import Plan
from hocket.core.site import Site
from hocket.cost import schedule
from hocket.cost.issue import DEFAULT_ISSUE_US, ISSUE_OPS, issue_ms, issue_table
from hocket.hardware import load_preset
from hocket.hardware.profile import CalibrationProfile
from hocket.strategies import pipeline_stages, predict

H200X2 = load_preset("h200x2")
CPU = load_preset("cpu-host")


def _profile(scale: float) -> CalibrationProfile:
    """A profile that only sets the host issue costs (``scale`` times the defaults)."""
    return CalibrationProfile(fingerprint="issue-test",
                              issue_us={op: us * scale for op, us in DEFAULT_ISSUE_US.items()})


def _small_site(rng: random.Random, kind: str) -> Site:
    return Site(kind=kind, m=2 * rng.randint(64, 512), k=rng.randint(256, 1024), n=rng.randint(256, 1024), world=2)


def test_issue_table_takes_measured_values_and_ignores_bad_ones():
    profile = CalibrationProfile(fingerprint="t", issue_us={"launch": 3.0, "p2p": 0.0})
    table = issue_table(profile)
    assert table["launch"] == 3.0 and table["p2p"] == 0.0
    assert table["collective"] == DEFAULT_ISSUE_US["collective"]  # not measured: the default
    assert issue_table(None) == dict(DEFAULT_ISSUE_US)
    # a NaN, a negative or an unknown op never reaches the model (profiles validate on load too)
    view = type("View", (), {"profile": type("P", (), {"issue_us": {"launch": math.nan, "entry": -1.0,
                                                                     "warp": 5.0}})()})()
    assert issue_table(view) == dict(DEFAULT_ISSUE_US)


def test_a_measured_entry_is_a_group_operators_whole_entry():
    # hocket calibrate's 'entry' times a multi-rank operator: it stands for entry + group_entry, and a
    # single-device operator keeps the (smaller) default entry
    measured = random.uniform(50.0, 500.0)
    table = issue_table(CalibrationProfile(fingerprint="t", issue_us={"entry": measured}))
    assert table["entry"] + table["group_entry"] == pytest.approx(measured)
    assert table["entry"] == DEFAULT_ISSUE_US["entry"]
    tiny = issue_table(CalibrationProfile(fingerprint="t", issue_us={"entry": 5.0}))
    assert tiny["entry"] == 5.0 and tiny["group_entry"] == 0.0
    both = issue_table(CalibrationProfile(fingerprint="t", issue_us={"entry": 300.0, "group_entry": 7.0}))
    assert (both["entry"], both["group_entry"]) == (300.0, 7.0)


def test_issue_ms_counts_items_and_rejects_unknown_ops():
    table = dict(DEFAULT_ISSUE_US)
    assert issue_ms((("launch", 3), ("collective", 2)), table) == pytest.approx(
        (3 * table["launch"] + 2 * table["collective"]) / 1e3)
    assert issue_ms((), table) == 0.0
    with pytest.raises(ValueError, match="issue op"):
        issue_ms((("warp", 1),), table)
    with pytest.raises(ValueError, match="count"):
        issue_ms((("launch", -1),), table)
    assert set(table) == set(ISSUE_OPS)


@pytest.mark.parametrize("kind", ["ag_mm", "mm_rs", "mm_ar"])
def test_slower_host_never_makes_a_plan_faster_and_stays_finite(kind):
    rng = random.Random()
    site = _small_site(rng, kind)
    plans = [Plan(), Plan(strategy="chunked", chunks=rng.choice([2, 4, 8])), Plan(strategy="ring", transport="p2p"),
             Plan(strategy="bidir_ring", transport="p2p"), Plan(strategy="bulk")]
    for plan in plans:
        times = [predict(site, plan, H200X2, _profile(scale)).total_ms for scale in (0.0, 1.0, 4.0)]
        assert all(math.isfinite(t) and t > 0 for t in times), (plan.describe(), times)
        assert times[0] <= times[1] <= times[2], (plan.describe(), times)


def test_many_small_pieces_are_issue_bound_and_lose_to_sequential():
    """Pieces whose GPU work is shorter than their issue time: the pipeline runs at the host's
    pace, so chunking a small site loses even where it overlaps on the GPU."""
    site = Site(kind="mm_rs", m=1024, k=512, n=512, world=2)
    sequential = Plan()
    chunked = Plan(strategy="chunked", chunks=16)
    no_host = _profile(0.0)
    assert predict(site, chunked, H200X2).total_ms > predict(site, sequential, H200X2).total_ms
    # the issue chain is what makes it lose: with a free host the loss shrinks
    loss_free = predict(site, chunked, H200X2, no_host).total_ms - predict(site, sequential, H200X2, no_host).total_ms
    loss = predict(site, chunked, H200X2).total_ms - predict(site, sequential, H200X2).total_ms
    assert loss > loss_free
    stages = pipeline_stages(site, chunked, H200X2)
    issue_total = sum(s.duration_ms for s in stages if s.is_issue)
    assert predict(site, chunked, H200X2).total_ms >= issue_total  # never faster than the host issues


def test_long_pieces_hide_the_issue_chain():
    site = Site(kind="ag_mm", m=8192, k=8192, n=7168, world=2)
    plan = Plan(strategy="chunked", chunks=4)
    with_host, free_host = predict(site, plan, H200X2).total_ms, predict(site, plan, H200X2, _profile(0.0)).total_ms
    entry_ms = (DEFAULT_ISSUE_US["entry"] + DEFAULT_ISSUE_US["group_entry"]) / 1e3
    assert with_host - free_host <= entry_ms + 0.02 * free_host  # the entry, and little else


def test_issue_stages_are_neither_compute_nor_transfer_and_cpu_ranks_have_none():
    site = Site(kind="ag_mm", m=1024, k=512, n=512, world=2)
    stages = pipeline_stages(site, Plan(strategy="chunked", chunks=4), H200X2)
    issue = [s for s in stages if s.is_issue]
    assert issue and all(not s.is_transfer and s.resource == "issue" and not s.slowdown_by for s in issue)
    # every GPU stage waits for its issue stage, which comes earlier in program order
    for i, stage in enumerate(stages):
        if not stage.is_issue:
            assert any(stages[d].is_issue for d in stage.depends_on), stage.name
    prediction = predict(site, Plan(strategy="chunked", chunks=4), H200X2)
    gpu_work = sum(s.duration_ms for s in stages if not s.is_issue and not s.is_transfer)
    assert prediction.compute_ms == pytest.approx(gpu_work)
    assert not any(s.is_issue for s in pipeline_stages(Site(kind="ag_mm", m=256, k=64, n=64, world=2),
                                                        Plan(strategy="chunked", chunks=4), CPU))


@pytest.mark.parametrize("kind", ["mm_rs", "mm_ar"])
def test_bulk_is_priced_for_mm_rs_and_mm_ar_and_overlaps_nothing(kind):
    site = Site(kind=kind, m=8192, k=4096, n=4096, world=2)
    bulk = predict(site, Plan(strategy="bulk"), H200X2)
    sequential = predict(site, Plan(), H200X2)
    assert math.isfinite(bulk.total_ms) and bulk.total_ms >= sequential.total_ms * (1 - 1e-9)
    stages = pipeline_stages(site, Plan(strategy="bulk"), H200X2)
    transfers = [s for s in stages if s.is_transfer]
    assert len(transfers) == 1  # one piece: one collective, after every GEMM
    timeline = schedule(stages)
    gemm_ends = [timeline.end_ms[i] for i, s in enumerate(stages) if s.op == "gemm"]
    start = timeline.start_ms[stages.index(transfers[0])]
    assert start >= max(gemm_ends) - 1e-12
    if kind == "mm_rs":  # the executor's per-destination-block GEMMs: one per rank
        assert len(gemm_ends) == 1 and stages[[s.op for s in stages].index("gemm")].flops == pytest.approx(site.flops)


def test_an_operator_on_a_group_pays_its_entry_once_before_the_gpu_starts():
    # group_entry (the schema dispatch, lookups and agreement check of a multi-rank operator) delays the
    # first device stage of every multi-rank plan by the same amount; a single-device site does not pay it
    from hocket.cost import schedule
    from hocket.cost.issue import DEFAULT_ISSUE_US
    from hocket.strategies import pipeline_stages
    h200x2, h200 = load_preset("h200x2"), load_preset("h200x1")
    for site, cluster, extra_us in ((Site(kind="ag_mm", m=4096, k=4096, n=4096, world=2), h200x2,
                                     DEFAULT_ISSUE_US["group_entry"]),
                                    (Site(kind="h2d_mm", m=4096, k=4096, n=4096, world=1), h200, 0.0)):
        plan = Plan(transport="host_staged") if site.world == 1 else Plan()
        stages = pipeline_stages(site, plan, cluster)
        first = min(t for s, t in zip(stages, schedule(stages).start_ms) if not s.is_issue)
        assert first == pytest.approx((DEFAULT_ISSUE_US["entry"] + extra_us) / 1e3)


def test_fused_items_follow_the_profiles_host_speed_unless_measured():
    from hocket.cost.issue import FUSED_REFERENCE_US, host_speed

    rng = random.Random(31)
    assert host_speed({}) == 1.0 and host_speed({"entry": 500.0}) == 1.0  # none of the reference items
    factor = rng.uniform(0.4, 2.5)
    same = {op: us * factor for op, us in FUSED_REFERENCE_US.items()}
    assert host_speed(same) == pytest.approx(factor)
    # the median: one wild item does not move it
    wild = {**same, "p2p": FUSED_REFERENCE_US["p2p"] * factor * 50}
    assert host_speed(wild) == pytest.approx(factor)
    table = issue_table(CalibrationProfile(fingerprint="t", issue_us=same))
    for op in ("fused_call", "fused_push"):
        assert table[op] == pytest.approx(DEFAULT_ISSUE_US[op] * factor)
    measured = issue_table(CalibrationProfile(fingerprint="t", issue_us={**same, "fused_call": 123.0}))
    assert measured["fused_call"] == 123.0 and measured["fused_push"] == pytest.approx(DEFAULT_ISSUE_US["fused_push"] * factor)


@pytest.mark.parametrize("kind", ["ag_mm", "mm_rs"])
def test_eager_tile_fused_is_host_bound_on_small_shapes_and_not_on_large_ones(kind):
    """A tile_fused call's own host work (pipe, Triton launch, flag watch) makes a small call host-bound,
    so the back-to-back price is at least that work and above sequential's; on a large shape it hides."""
    rng = random.Random(32 if kind == "ag_mm" else 33)
    fused = Plan(strategy="tile_fused", chunks=rng.choice([1, 2, 4]), transport="copy_engine")
    table = issue_table(None)
    small = Site(kind=kind, m=8192, k=rng.choice([2048, 4096]), n=rng.choice([1536, 4096]), world=2)
    steady = predict(small, fused, H200X2, steady_state=True)
    assert steady.total_ms >= table["fused_call"] / 1e3
    assert steady.total_ms > predict(small, Plan(), H200X2, steady_state=True).total_ms
    large = Site(kind=kind, m=8192, k=rng.choice([8192, 14336]), n=rng.choice([7168, 8192]), world=2)
    stages = pipeline_stages(large, fused, H200X2)
    host_ms = sum(s.duration_ms if s.steady_ms is None else s.steady_ms for s in stages if s.is_issue)
    assert predict(large, fused, H200X2, steady_state=True).total_ms > 2 * host_ms


def test_the_planner_never_picks_tile_fused_for_a_small_eager_site_on_a_slow_host():
    """Priced with its host work, an eager tile_fused call on a ~0.3 ms site is host-bound; on a host
    whose measured issue costs are 1-3x run69's, the search ranks it behind sequential and never picks it."""
    from hocket.cost.issue import FUSED_REFERENCE_US
    from hocket.plan.search import SearchConfig, search

    rng = random.Random(34)
    slow = rng.uniform(1.0, 3.0)
    profile = CalibrationProfile(fingerprint="slow-host",
                                 issue_us={op: us * slow for op, us in FUSED_REFERENCE_US.items()})
    for kind, k, n in (("ag_mm", 4096, 1536), ("mm_rs", 2048, 4096)):
        site = Site(kind=kind, m=8192, k=k, n=n, dtype="bfloat16", world=2)
        result = search(site, H200X2, profile=profile, config=SearchConfig(steady_state=True))
        assert result.chosen.strategy != "tile_fused"
        priced = {s.plan: s.predicted_ms for s in result.ranked}
        fused = [ms for plan, ms in priced.items() if plan.strategy == "tile_fused"]
        assert fused and min(fused) > priced[Plan()]


@pytest.mark.parametrize("kind", ["ag_mm", "mm_rs", "mm_ar"])
def test_one_rank_sequential_issues_no_collective(kind):
    """On one rank the sequential executor skips the collective (ops.lowering.sequential): its price is the
    operator's entry and the GEMM, the same for every kind, and a slower collective call changes nothing."""
    rng = random.Random(kind)
    site = Site(kind=kind, m=rng.randint(64, 4096), k=rng.randint(64, 4096), n=rng.randint(64, 4096),
                dtype="bfloat16", world=1)
    cluster = load_preset("h200x1")
    base = predict(site, Plan(), cluster)
    slow = {**DEFAULT_ISSUE_US, "collective": 50 * DEFAULT_ISSUE_US["collective"]}
    slow_collective = CalibrationProfile(fingerprint="issue-test", issue_us=slow)
    assert predict(site, Plan(), cluster, slow_collective).total_ms == pytest.approx(base.total_ms)
    mm = predict(Site(kind="mm_ar", m=site.m, k=site.k, n=site.n, dtype="bfloat16", world=1), Plan(), cluster)
    assert base.total_ms == pytest.approx(mm.total_ms) and base.comm_ms == 0.0
    two = Site(kind=kind, m=2 * site.m, k=site.k, n=site.n, dtype="bfloat16", world=2)
    assert predict(two, Plan(), load_preset("h200x2"), slow_collective).total_ms > \
        predict(two, Plan(), load_preset("h200x2")).total_ms  # where a collective runs, its call is paid
