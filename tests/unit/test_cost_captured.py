"""Pricing calls replayed from a CUDA graph (``captured``): no host issue cost but the replay's."""

from __future__ import annotations

from dataclasses import replace

import pytest

from hocket.core.plan import Plan
from hocket.core.site import Site
from hocket.cost import schedule
from hocket.cost.builder import CAPTURED_REPLAY_US
from hocket.cost.contention import held_gemm_sms, persistent_ctas
from hocket.cost.stages import Stage
from hocket.cost.steady import host_issue_ms
from hocket.hardware import load_preset
from hocket.plan.search import SearchConfig, predict_cost_fn
from hocket.strategies import pipeline_stages, predict

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


def test_held_gemm_sms_count_cluster_slots_and_idle_sms():
    h200 = load_preset("h200x2").device(0)
    assert h200.sm_count == 132
    assert held_gemm_sms(8192, 8192, h200, 24) == 132 - 48  # 2-CTA clusters: one pair per NCCL CTA
    assert held_gemm_sms(8192, 8192, h200, 16) == 132 - 32
    assert held_gemm_sms(256, 512, h200, 24) == 132  # 32 CTAs leave 100 SMs idle: the transfer takes those
    assert persistent_ctas(1024, 1536, 132) == 132  # 48 tiles of 128x256, but the library fills the SMs
    assert persistent_ctas(256, 512, 132) == 32 and persistent_ctas(1, 1, 132) == 1
    assert held_gemm_sms(1024, 1536, h200, 24) == 132 - 48
    a100 = load_preset("a100x8").device(0)
    assert held_gemm_sms(8192, 8192, a100, 24) == a100.sm_count - 24  # no clusters before Hopper


def test_replayed_nccl_launched_before_a_gemm_slows_it_and_one_released_with_the_next_gemm_waits():
    """Own-data-first ag_mm: the first all-gather is launched before the own-shard GEMM and holds its
    SMs, so that GEMM runs slower than its solo time. Own-block-last mm_rs: each piece's reduce-scatter
    is released by its GEMM's end together with the next GEMM (no fill kernel between them: the
    staging's own block stays zero), so that GEMM goes first at full speed and the piece waits for its
    last wave."""
    cluster = load_preset("h200x2")
    plan = Plan(strategy="chunked", chunks=2, order="local_first")
    site = Site(kind="ag_mm", m=8192, k=14336, n=8192, dtype="bfloat16", world=2)
    stages = pipeline_stages(site, plan, cluster, captured=True)
    t = schedule(stages)
    first = next(i for i, s in enumerate(stages) if s.kind == "sm_collective")
    own = next(j for j, s in enumerate(stages) if s.name == "gemm_own")
    assert t.start_ms[first] <= t.start_ms[own] < t.end_ms[first]
    # 24 NCCL CTAs idle 48 of 132 SMs: the GEMM loses >= 0.3 ms per ms it runs beside the piece
    assert t.end_ms[own] - t.start_ms[own] - stages[own].duration_ms >= 0.3 * stages[first].duration_ms

    site = Site(kind="mm_rs", m=8192, k=14336, n=8192, dtype="bfloat16", world=2)
    stages = pipeline_stages(site, plan, cluster, captured=True)
    t = schedule(stages)
    first = next(i for i, s in enumerate(stages) if s.kind == "sm_collective")
    gemm1 = next(j for j, s in enumerate(stages) if s.name == "gemm[1]")
    assert t.start_ms[gemm1] == pytest.approx(t.start_ms[first])
    last_wave = t.start_ms[gemm1] + stages[gemm1].last_wave_at * (t.end_ms[gemm1] - t.start_ms[gemm1])
    assert t.end_ms[first] >= last_wave + 0.9 * stages[first].duration_ms
    assert t.end_ms[gemm1] - t.start_ms[gemm1] < 1.05 * stages[gemm1].duration_ms  # no SMs lost to it
    with_fill = list(stages)  # a fill kernel before the next GEMM would let the piece race it instead
    gemm0 = next(j for j, s in enumerate(stages) if s.name == "gemm[0]")
    fill = Stage(name="fill", resource="compute", duration_ms=0.01, depends_on=(gemm0,))
    raced = schedule(with_fill[:gemm1] + [fill] + [replace(s, depends_on=tuple(d + (d >= gemm1) for d in s.depends_on))
                                                  for s in with_fill[gemm1:]])
    assert raced.total_ms > t.total_ms + 0.3 * stages[first].duration_ms


def test_a_gemm_piece_that_leaves_fewer_idle_sms_than_nccls_ctas_makes_the_next_piece_wait():
    """Replayed ag_mm 8192x4096x1536 in four own-data-first pieces: each 1024-row piece GEMM has only 48
    tiles of 128x256 but the library fills the SMs (run61: 128 CTAs), so an all-gather piece launched
    while it runs waits (fills_device); a GEMM of a few tiles leaves SMs idle and makes no one wait."""
    cluster = load_preset("h200x2")
    plan = Plan(strategy="chunked", chunks=4, order="local_first")
    site = Site(kind="ag_mm", m=8192, k=4096, n=1536, dtype="bfloat16", world=2)
    pieces = [s for s in pipeline_stages(site, plan, cluster, captured=True) if s.name.startswith("gemm[")]
    # under one wave of 128x256 tiles, the library spreads the piece over every SM in one balanced wave:
    # no SM idles before it ends (run61: the next piece started as the GEMM ended)
    assert len(pieces) == 4 and all(s.fills_device and s.last_wave_at == 1.0 for s in pieces)
    big = Site(kind="mm_rs", m=8192, k=2048, n=4096, dtype="bfloat16", world=2)
    own = next(s for s in pipeline_stages(big, plan, cluster, captured=True) if s.name == "gemm_own")
    assert own.fills_device and 0.7 < own.last_wave_at < 0.8  # 4096x4096: 512 tiles, its last wave at ~3/4 (run55)
    tiny = Site(kind="ag_mm", m=256, k=64, n=128, dtype="bfloat16", world=2)
    stages = pipeline_stages(tiny, plan, cluster, captured=True)
    assert not any(s.fills_device for s in stages if s.op == "gemm")
