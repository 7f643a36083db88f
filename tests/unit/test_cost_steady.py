"""The steady-state price: a call of a loop with the host ahead (hocket.cost.steady)."""

from __future__ import annotations

import random

import pytest

from hocket.core.plan import Plan
from hocket.core.site import Site
from hocket.cost.stages import Stage, schedule
from hocket.cost.steady import steady_state_total
from hocket.hardware import load_cluster
from hocket.strategies import pipeline_stages, predict


def chain(issue_ms: list[float], gemm_ms: list[float]) -> list[Stage]:
    """Each GEMM piece waits for its issue stage; issues run in order on the host, GEMMs on the GPU."""
    stages: list[Stage] = []
    for i, (host, dev) in enumerate(zip(issue_ms, gemm_ms)):
        stages.append(Stage(name=f"issue{i}", resource="issue", kind="issue", op="issue", duration_ms=host))
        stages.append(Stage(name=f"gemm{i}", resource="compute", duration_ms=dev, depends_on=(len(stages) - 1,)))
    return stages


@pytest.mark.parametrize("seed", range(5))
def test_device_bound_calls_cost_their_device_work_and_host_bound_ones_their_issue_time(seed):
    rng = random.Random(seed)
    pieces = rng.randint(2, 6)
    gemm = [rng.uniform(0.2, 0.5) for _ in range(pieces)]
    host = [rng.uniform(0.01, 0.05) for _ in range(pieces)]
    cold = schedule(chain(host, gemm)).total_ms
    steady, busy, _ = steady_state_total(chain(host, gemm))
    assert steady == pytest.approx(sum(gemm))  # device-bound: the host's lead hides every issue
    assert cold > steady  # from an idle GPU the first issue is exposed
    assert busy["issue"] == pytest.approx(sum(host))
    slow_host = [h * 40 for h in host]  # now the host takes longer per call than the GPU
    steady_slow, _, _ = steady_state_total(chain(slow_host, gemm))
    assert steady_slow == pytest.approx(max(sum(gemm), sum(slow_host)))
    assert steady_slow == pytest.approx(sum(slow_host))


def test_predict_steady_state_never_exceeds_the_cold_call_and_is_a_bool_switch():
    cluster = load_cluster("h200x2")
    for kind, m, k, n in (("ag_mm", 8192, 4096, 1536), ("mm_rs", 8192, 2048, 4096), ("ag_mm", 4096, 12288, 24576)):
        site = Site(kind=kind, m=m, k=k, n=n, dtype="bfloat16", world=2)
        for plan in (Plan(), Plan(strategy="chunked", chunks=4), Plan(strategy="chunked", chunks=8, order="reverse")):
            cold = predict(site, plan, cluster).total_ms
            steady = predict(site, plan, cluster, steady_state=True).total_ms
            assert 0 < steady <= cold + 1e-9
    with pytest.raises(TypeError, match="steady_state"):
        predict(site, Plan(), cluster, steady_state="yes")


def test_more_pieces_can_make_a_small_site_issue_bound_in_the_steady_state():
    cluster = load_cluster("h200x2")
    site = Site(kind="ag_mm", m=512, k=512, n=512, dtype="bfloat16", world=2)  # microseconds of device work
    few = predict(site, Plan(strategy="chunked", chunks=2), cluster, steady_state=True)
    many = predict(site, Plan(strategy="chunked", chunks=32), cluster, steady_state=True)
    assert many.total_ms > few.total_ms
    assert many.total_ms == pytest.approx(many.busy_ms["issue"])  # the host is the bottleneck


def test_a_host_bound_cold_call_waits_for_its_first_launch_too():
    """From an idle GPU the first launch's latency is in the GEMM's own price, but the host still
    spends its time issuing it: whatever it issues next starts no earlier than in the steady state."""
    cluster = load_cluster("h200x2")
    site = Site(kind="mm_rs", m=8192, k=2048, n=4096, dtype="bfloat16", world=2)
    plan = Plan(strategy="chunked", chunks=8, order="reverse")
    stages = pipeline_stages(site, plan, cluster)
    timeline = schedule(stages)
    host_chain = sum(s.duration_ms if s.steady_ms is None else s.steady_ms for s in stages if s.is_issue)
    last_issue_end = max(e for s, e in zip(stages, timeline.end_ms) if s.is_issue)
    assert last_issue_end == pytest.approx(host_chain)
    assert timeline.total_ms > host_chain  # the last transfer runs after the host is done
