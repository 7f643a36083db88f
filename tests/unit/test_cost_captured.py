"""Pricing calls replayed from a CUDA graph (``captured``): no host issue cost but the replay's."""

from __future__ import annotations

import pytest

from hocket.cost import pipeline_stages, predict, schedule
from hocket.cost.pipeline import CAPTURED_REPLAY_US
from hocket.cost.steady import host_issue_ms
from hocket.hardware import load_preset
from hocket.plan.plan import Plan
from hocket.plan.search import SearchConfig, predict_cost_fn
from hocket.site import Site

SITE = Site(kind="ag_mm", m=8192, k=4096, n=1536, dtype="bfloat16", world=2)
CLUSTER = load_preset("h200-host-staged")


@pytest.mark.parametrize("chunks", [1, 4, 16])
def test_a_captured_call_costs_the_host_one_replay_and_is_never_slower(chunks):
    plan = Plan(strategy="chunked", chunks=chunks, transport="host_staged", order="local_first")
    stages = pipeline_stages(SITE, plan, CLUSTER, steady_state=True, captured=True)
    assert host_issue_ms(stages) == pytest.approx(CAPTURED_REPLAY_US / 1e3)
    eager_host = host_issue_ms(pipeline_stages(SITE, plan, CLUSTER, steady_state=True))
    assert eager_host > 2 * CAPTURED_REPLAY_US / 1e3  # many items: the eager host pays for each
    captured, eager = (predict(SITE, plan, CLUSTER, captured=True).total_ms,
                       predict(SITE, plan, CLUSTER, steady_state=True).total_ms)
    assert 0 < captured <= eager
    assert predict_cost_fn(CLUSTER, captured=True)(SITE, plan) == pytest.approx(captured)


def test_many_pieces_pay_on_the_host_only_when_eager():
    # 16 pieces are host-bound when issued one by one, not when replayed
    many = Plan(strategy="chunked", chunks=16, transport="host_staged", order="local_first")
    eager = predict(SITE, many, CLUSTER, steady_state=True)
    captured = predict(SITE, many, CLUSTER, captured=True)
    assert captured.total_ms < eager.total_ms


def test_bad_captured_flags_are_refused():
    with pytest.raises(TypeError, match="captured=1 must be True or False"):
        predict(SITE, Plan(), CLUSTER, captured=1)
    with pytest.raises(TypeError, match="SearchConfig.captured"):
        SearchConfig(captured="yes")


@pytest.mark.parametrize("plan", [Plan(strategy="chunked", chunks=2, order="local_first"),
                                  Plan(strategy="chunked", chunks=2), Plan(strategy="ring")])
@pytest.mark.parametrize("kind", ["ag_mm", "mm_rs"])
def test_replayed_nccl_pieces_wait_only_for_full_grid_gemms_launched_before_them(plan, kind):
    """Replayed, an NCCL piece ready while an earlier full-grid GEMM runs starts no earlier than that
    GEMM's last wave; one that starts before the GEMMs is not slowed by them (hocket.cost.stages)."""
    site = Site(kind=kind, m=8192, k=4096, n=4096, dtype="bfloat16", world=2)
    cluster = load_preset("h200x2")
    stages = pipeline_stages(site, plan, cluster, captured=True)
    timeline = schedule(stages)
    nccl = [i for i, s in enumerate(stages) if s.kind == "sm_collective" or s.kind == "sm_p2p"]
    assert nccl and all(stages[i].waits_for_full_grid and not stages[i].slowdown_by for i in nccl)
    assert any(s.fills_device for s in stages)
    waited = 0
    for i in nccl:
        start, end = timeline.start_ms[i], timeline.end_ms[i]
        for j, s in enumerate(stages):
            if s.fills_device and timeline.start_ms[j] < start < timeline.end_ms[j]:
                # no progress before the GEMM's last wave began (it runs at most at its solo rate)
                last_wave = timeline.start_ms[j] + s.last_wave_at * s.duration_ms
                assert 0 < s.last_wave_at <= 1
                assert end >= last_wave + stages[i].duration_ms - 1e-9
                waited += 1
    if kind == "ag_mm" and plan.order == "local_first":
        assert waited  # the second piece is ready while the own-shard GEMM runs
    eager = pipeline_stages(site, plan, cluster)
    assert not any(s.waits_for_full_grid for s in eager)  # eager calls keep the calibrated factors
