"""``hocket plan``'s step totals: sites + non-communicating compute + 1F1B fill/drain."""

from __future__ import annotations

import random

import pytest

from hocket.core.plan import Plan
from hocket.hardware import load_cluster
from hocket.models.graph import ComputeOp
from hocket.models.step import model_step_sites
from hocket.sim.model_plan import plan_model, step_totals
from hocket.sim.pricing import Pricer


def _stage(stage: int, sites_seq: float, sites_chosen: float, per_mb: float, once: float, micro: int) -> dict:
    return {"stage": stage, "sites_ms": {"sequential": sites_seq, "chosen": sites_chosen},
            "compute_ms": {"per_micro_batch": per_mb, "per_step": per_mb * micro + once, "once_per_step": once},
            "step_ms": {"sequential": sites_seq + per_mb * micro + once,
                        "chosen": sites_chosen + per_mb * micro + once}}


def test_step_totals_on_a_hand_computed_pipeline():
    rng = random.Random()
    micro = rng.randint(2, 8)
    a = [rng.uniform(1, 5) for _ in range(4)]
    b = [rng.uniform(1, 5) for _ in range(4)]
    # stage sites (per step), chosen = 0.9 x sequential; compute per micro-batch; once per step
    stages = [_stage(0, a[0] * micro, 0.9 * a[0] * micro, a[1], a[2], micro),
              _stage(1, b[0] * micro, 0.9 * b[0] * micro, b[1], b[2], micro)]
    out = step_totals(stages, micro_batches=micro, pp=2)
    for which, f in (("sequential", 1.0), ("chosen", 0.9)):
        slot = max(f * a[0] + a[1], f * b[0] + b[1])
        busiest = max(micro * (f * a[0] + a[1]) + a[2], micro * (f * b[0] + b[1]) + b[2])
        assert out[which] == pytest.approx(busiest + slot)
    assert out["bubble_ms"] == pytest.approx(max(0.9 * a[0] + a[1], 0.9 * b[0] + b[1]))
    assert out["chosen"] <= out["sequential"]
    assert step_totals(stages, micro_batches=micro, pp=1)["bubble_ms"] == 0


def test_report_compute_is_every_compute_node_priced_like_the_simulator():
    cluster = load_cluster("h100-ib-2node")
    kwargs = dict(tp=8, pp=2, seq=1024, batch=1)
    report = plan_model("llama3-8b", cluster, **kwargs)
    graph = model_step_sites("llama3-8b", cluster=cluster, **kwargs)
    pricer = Pricer(cluster, choose_plan=lambda site: Plan())
    micro = report["parallel"]["micro_batches"]
    for stage, entry in zip(graph.stages, report["per_stage"]):
        device = cluster.device(stage.ranks[0])
        per_mb = sum(pricer.compute(n.op, device).ms for n in stage.nodes if isinstance(n.op, ComputeOp))
        assert per_mb > 0
        assert entry["compute_ms"]["per_micro_batch"] == pytest.approx(per_mb)
        assert entry["step_ms"]["sequential"] == pytest.approx(
            entry["sites_ms"]["sequential"] + entry["compute_ms"]["per_step"])
        assert entry["compute_ms"]["per_step"] >= per_mb * micro
    step = report["predicted_step_ms"]
    assert step["bubble_ms"] > 0
    assert step["sequential"] > step["sites_only"]["sequential"]
    assert step["chosen"] <= step["sequential"]
