"""benchmarks/bench_captured.py's summary and results lines on a synthetic row (no GPU)."""

from __future__ import annotations

import pytest

import benchmarks.bench_captured as bc
from hocket.bench.provenance import Provenance
from hocket.core.plan import Plan
from hocket.validate import lines as vl

SITE = {"kind": "ag_mm", "m": 8192, "k": 4096, "n": 1536, "dtype": "bfloat16", "world": 2}
LF8 = "chunked(8)/host_staged[local_first]"
LF4 = "chunked(4)/host_staged[local_first]"


def _t(ms: float) -> dict:
    return {"median_ms": ms, "p10_ms": ms * 0.99, "p90_ms": ms * 1.01, "n": 50}


def _row() -> dict:
    plan4 = Plan.from_dict(bc._plan_of(LF4)).to_dict()
    return {"site": SITE, "planner": {"eager": plan4, "captured": plan4}, "max_error": {f"{LF4} eager": 0.01},
            "eager": {"sequential": _t(1.5), "compute_alone": _t(0.14), "comm_host_staged@8MB": _t(1.0),
                      LF4: _t(1.1), LF8: _t(1.2), f"planner[eager] {LF4}": _t(1.1)},
            "captured": {"sequential": _t(1.4), "compute_alone": _t(0.15), "comm_host_staged@4MB": _t(0.9),
                         LF4: _t(0.95), LF8: _t(0.92), f"planner[captured] {LF4}": _t(0.95)}}


def test_scores_use_each_modes_sequential_and_the_fastest_baselines():
    got = bc.scores(_row())
    assert got["comm_ms"] == 0.9 and got["comm"] == "comm_host_staged@4MB captured"
    assert got["compute_ms"] == 0.14  # the faster compute alone of either mode
    ms, eff, name = got["planner_captured"]
    assert ms == 0.95 and name == "chunked(4)"
    assert eff == pytest.approx((1.4 - 0.95) / (1.4 - 0.9))  # against the captured sequential
    ms, eff, name = got["best_eager"]
    assert ms == 1.1 and eff == pytest.approx((1.5 - 1.1) / (1.5 - 0.9))
    assert got["best_captured"][0] == 0.92 and got["best_captured"][2] == "chunked(8)"
    assert bc.scores({**_row(), "eager": {}}) is None  # no baselines, no scores


def test_records_are_results_lines_per_plan_and_mode():
    prov = Provenance(hardware={"hash": "hw", "devices": {"H200": 2}}, environment={}, versions={}, git_hash="x",
                      command="test", extra={"reps": 4})
    lines = bc.records([_row()], prov)
    # sequential and two relay plans per mode; the planner's pick is the chunked(4) line, not a second one
    assert len(lines) == 6
    graph = [r for r in lines if vl.captured_line(r)]
    assert len(graph) == 3 and all(r.baselines.sequential_ms == 1.4 and r.baselines.comm_alone_ms == 0.9
                                   for r in graph)
    eager = [r for r in lines if not vl.captured_line(r)]
    assert {r.baselines.sequential_ms for r in eager} == {1.5}
    assert {vl.line_label(r) for r in graph} == {"sequential [graph]", f"{LF4} [graph]", f"{LF8} [graph]"}
    four = next(r for r in eager if r.plan.chunks == 4)
    assert four.max_error == 0.01 and four.plan.order == "local_first" and four.run["reps"] == 4
