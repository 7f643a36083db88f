"""Whole-step simulation: symmetry reduction, slowest participant, 1F1B order, plans, determinism."""

from __future__ import annotations

import math
import random

import pytest

from hocket.core.plan import Plan
from hocket.hardware.catalog import load_cluster
from hocket.models.spec import ModelSpec
from hocket.models.step import model_step_sites
from hocket.sim.metrics import owner_summaries
from hocket.sim.plans import PlanBook, parse_plan_file
from hocket.sim.schedule_1f1b import stage_order
from hocket.sim.step import simulate_step
from hocket.sim.trace import trace_json


def _tiny_model(rng: random.Random, layers: int = 4) -> ModelSpec:
    heads = rng.choice([16, 32])
    head_dim = rng.choice([32, 64])
    return ModelSpec(name="tiny", hidden_size=heads * head_dim, intermediate_size=heads * head_dim * rng.choice([2, 3]),
                     num_attention_heads=heads, num_key_value_heads=8, num_hidden_layers=layers,
                     vocab_size=rng.randint(1000, 4000))


def _step(rng, cluster, *, tp, pp, dp, micro=None, stages=None, layers=4):
    return model_step_sites(_tiny_model(rng, layers), tp=tp, pp=pp, dp=dp, seq=rng.choice([256, 512, 1024]),
                            batch=rng.randint(1, 2), micro_batches=micro or rng.randint(pp, 2 * pp + 1),
                            cluster=cluster, stages=stages)


def test_explicit_ranks_equal_class_reduced():
    rng = random.Random()
    cluster = load_cluster("h100x8")
    step = _step(rng, cluster, tp=2, pp=2, dp=2)
    plan = rng.choice([Plan(), Plan(strategy="chunked", chunks=2), Plan(strategy="chunked", chunks=4)])
    reduced = simulate_step(step, cluster, plan=plan)
    explicit = simulate_step(step, cluster, plan=plan, explicit_ranks=True)
    assert len(reduced.classes) == 1 and len(explicit.classes) == 2
    assert len(explicit.owner_ranks) == 8 and sum(reduced.owner_ranks.values()) == 8
    assert explicit.step_ms == pytest.approx(reduced.step_ms, rel=1e-12)
    red = {reduced.owner_stage[s.owner]: s for s in owner_summaries(reduced.timeline)}
    for summary in owner_summaries(explicit.timeline):
        twin = red[explicit.owner_stage[summary.owner]]
        assert summary.compute_ms == pytest.approx(twin.compute_ms, rel=1e-12)
        assert summary.exposed_comm_ms == pytest.approx(twin.exposed_comm_ms, rel=1e-9, abs=1e-12)
        assert summary.busy_ms == pytest.approx(twin.busy_ms, rel=1e-12)


def test_slowest_replica_gates_the_dp_collective():
    rng = random.Random()
    cluster = load_cluster("mixed-a100-h100")  # A100 nodes first, then H100 nodes
    step = _step(rng, cluster, tp=8, pp=1, dp=4, micro=rng.randint(1, 3))
    sim = simulate_step(step, cluster)
    assert len(sim.classes) == 2  # replicas 0-1 on A100, 2-3 on H100
    g, tl = sim.timeline.graph, sim.timeline
    last_compute = {}
    for t in range(len(g)):
        for r in g.resources[t]:
            if g.resource_kind[r] == "compute":
                owner = g.owner_names[g.resource_owner[r]]
                last_compute[owner] = max(last_compute.get(owner, 0.0), tl.end_ms[t])
    a100 = next(o for o in last_compute if "A100" in o)
    h100 = next(o for o in last_compute if "H100" in o)
    assert last_compute[a100] > last_compute[h100]  # the slower devices finish their backward later
    dp_tasks = [t for t in range(len(g)) if any(g.resource_kind[r] == "dp" for r in g.resources[t])]
    assert dp_tasks and all(len(g.resources[t]) == 2 for t in dp_tasks)  # one task across both classes
    first = min(dp_tasks)
    assert tl.start_ms[first] >= last_compute[a100] - 1e-9
    assert tl.start_ms[first] > last_compute[h100]


def test_compute_follows_1f1b_order():
    rng = random.Random()
    cluster = load_cluster("h100x8")
    pp = rng.choice([2, 4])
    step = _step(rng, cluster, tp=8 // pp, pp=pp, dp=1)
    sim = simulate_step(step, cluster)
    g, tl = sim.timeline.graph, sim.timeline
    seen: dict[str, list] = {}
    for t in sorted(range(len(g)), key=lambda t: (tl.start_ms[t], t)):
        meta = g.meta[t]
        parts = meta if isinstance(meta, tuple) else (meta,)
        info = {k: v for p in parts if p for k, v in p.items()}
        if "mb" not in info or info.get("phase") not in ("forward", "backward"):
            continue
        for r in g.resources[t]:
            if g.resource_kind[r] == "compute":
                key = ("F" if info["phase"] == "forward" else "B", info["mb"])
                order = seen.setdefault(g.owner_names[g.resource_owner[r]], [])
                if not order or order[-1] != key:
                    order.append(key)
    assert len(seen) == pp
    for owner, order in seen.items():
        assert order == stage_order(pp, step.micro_batches, sim.owner_stage[owner])


def test_uneven_stages_and_no_nan():
    rng = random.Random()
    cluster = load_cluster("h100x8")
    layers = rng.randint(4, 8)
    split = [layers - 1, 1]
    step = _step(rng, cluster, tp=4, pp=2, dp=1, stages=split, layers=layers)
    sim = simulate_step(step, cluster, plan=Plan(strategy="chunked", chunks=rng.choice([2, 4])))
    tl = sim.timeline
    assert all(math.isfinite(x) for x in tl.start_ms + tl.end_ms)
    by_stage = {sim.owner_stage[s.owner]: s for s in owner_summaries(tl)}
    assert by_stage[0].compute_ms > by_stage[1].compute_ms  # more layers, more work (stage 1 holds the head)
    assert sim.step_ms >= max(s.compute_ms for s in by_stage.values())


def test_step_trace_is_deterministic():
    seed = random.randrange(2**32)
    cluster = load_cluster("h100x8")
    traces = []
    for _ in range(2):
        rng = random.Random(seed)
        step = _step(rng, cluster, tp=4, pp=2, dp=1)
        traces.append(trace_json(simulate_step(step, cluster).timeline))
    assert traces[0] == traces[1]


def test_plan_file_chooses_plans_and_fixed_plan_falls_back():
    rng = random.Random()
    cluster = load_cluster("h100x8")
    step = _step(rng, cluster, tp=8, pp=1, dp=1)
    sites = step.sites()
    chosen = sites[0]
    plan_file = parse_plan_file({
        "model": "tiny", "cluster": "h100x8", "parallel": {"tp": 8},
        "sites": [{"name": chosen.name, "kind": chosen.kind, "m": chosen.m, "k": chosen.k, "n": chosen.n,
                   "num_b": chosen.num_b, "dtype": chosen.dtype, "world": chosen.world, "key": chosen.key,
                   "plan": {"strategy": "chunked", "chunks": 4}, "predicted_ms": 1.0}],
        "predicted_step_ms": {"chosen": 2.0, "sequential": 3.0}})
    book = PlanBook(plan_file)
    sim = simulate_step(step, cluster, plan=book)
    assert sim.site_plans[chosen.name] == "chunked(4)"
    assert book.misses  # the other sites ran the default
    shape = (chosen.kind, chosen.m, chosen.k, chosen.n, chosen.num_b, chosen.world)
    for site in sites:  # a site with the chosen one's shape shares its plan; the others ran the default
        expected = "chunked(4)" if (site.kind, site.m, site.k, site.n, site.num_b, site.world) == shape else "sequential"
        assert sim.site_plans[site.name] == expected, site.name
    # a fixed plan that does not fit every kind: the others fall back, with a note
    ring_gather = Plan(strategy="substituted", substitute="ring_p2p")  # prices ag_mm only
    fixed = simulate_step(step, cluster, plan=ring_gather)
    assert fixed.site_plans["attn.qkv"] == ring_gather.describe()
    assert fixed.site_plans["attn.out"] == "sequential"
    assert any("attn.out" in note for note in fixed.notes)


def test_bad_plan_file_is_a_clear_error():
    with pytest.raises(ValueError, match="sites"):
        parse_plan_file({"model": "x"})
    with pytest.raises(ValueError, match=r"sites\[0\] lacks"):
        parse_plan_file({"sites": [{"name": "a", "kind": "ag_mm"}]})
    with pytest.raises(ValueError, match="not a valid plan"):
        parse_plan_file({"sites": [{"kind": "ag_mm", "m": 8, "k": 8, "n": 8, "plan": {"strategy": "warp"}}]})


def test_degrees_must_match_the_cluster():
    rng = random.Random()
    cluster = load_cluster("h100x8")
    step = _step(rng, cluster, tp=4, pp=2, dp=1)
    with pytest.raises(ValueError, match="tp\\*pp\\*dp"):
        simulate_step(step, load_cluster("h200x2"))


def test_pipeline_between_vendors_goes_through_host_memory():
    rng = random.Random()
    cluster = load_cluster("mixed-nvidia-amd")  # 4 NVIDIA + 4 AMD GPUs: no peer path between them
    step = _step(rng, cluster, tp=4, pp=2, dp=1)
    sim = simulate_step(step, cluster)
    g = sim.timeline.graph
    pp_kinds = {g.kinds[t] for t in range(len(g)) if any(g.resource_kind[r].startswith("pp.")
                                                          for r in g.resources[t])}
    assert pp_kinds == {"host_link"}
    assert math.isfinite(sim.step_ms) and sim.step_ms > 0


def test_wrong_argument_types_are_named():
    cluster = load_cluster("h100x8")
    with pytest.raises(TypeError, match="StepGraph"):
        simulate_step({"tp": 8}, cluster)
    step = _step(random.Random(), cluster, tp=8, pp=1, dp=1)
    with pytest.raises(TypeError, match="ClusterSpec"):
        simulate_step(step, "h100x8")
