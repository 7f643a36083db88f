"""hocket.search.run: the optimum on a toy cost table, determinism, the mixed-cluster grouping and the
interleaved schedule."""

from __future__ import annotations

import json

import pytest

from hocket.hardware import load_preset
from hocket.models.spec import ModelSpec
from hocket.search import ParallelSpace, search_parallel
from hocket.search import run as search_run
from hocket.search.report import format_table, launch_settings, to_json
from hocket.search.run import Table, _Costs
from hocket.sim.schedule_1f1b import interleaved_stage_order, makespan_slots, replay_slots, stage_order

TINY = ModelSpec(name="tiny", hidden_size=256, intermediate_size=512, num_attention_heads=4, num_key_value_heads=2,
                 num_hidden_layers=4, vocab_size=1000)
PLAIN = ParallelSpace(micro_batch_sizes=(1,), schedules=("1f1b",), shardings=("replicated",), recomputes=("none",),
                      cp_degrees=(1,))


def _toy(monkeypatch, per_device=None):
    """Forward of one layer = 1/tp + 0.2 (tp > 1) ms (times a per-device factor), backward twice that, nothing
    else costs anything."""
    factors = per_device or {}

    def table(self, device, tp, cp, mbs, recompute, ep=1):
        f = mbs * (1.0 / tp + (0.2 if tp > 1 else 0.0)) * factors.get(device, 1.0)
        return Table(layer_f=f, layer_b=2 * f, dense_f=f, dense_b=2 * f, dense_exposed=0.0, embed_f=0.0, embed_b=0.0,
                     head_f=0.0, head_b=0.0, layer_exposed=0.0, edge_exposed=0.0, act_bytes=0)

    monkeypatch.setattr(_Costs, "table", table)
    monkeypatch.setattr(_Costs, "comm_ms", lambda self, *a, **k: 0.0)
    monkeypatch.setattr(search_run, "OPTIMIZER_BYTES_PER_PARAM", 0)


def test_optimum_on_a_toy_cost_table(monkeypatch):
    _toy(monkeypatch)
    out = search_parallel(TINY, load_preset("h100x8"), seq=1024, global_batch=8, space=PLAIN, rerank=0, top=10)
    # step = m * slot + (pp - 1) * slot, slot = (4 / pp layers) * 3 * (1/tp + 0.2 [tp > 1]), m = 8 / dp
    expected = {(1, 1, 8): 1 * 12.0, (2, 1, 4): 2 * 8.4, (1, 2, 4): 2 * 6 + 6, (1, 4, 2): 4 * 3 + 3 * 3,
                (2, 2, 2): 4 * 4.2 + 4.2, (2, 4, 1): 8 * 2.1 + 3 * 2.1}
    got = {(p.candidate.tp, p.candidate.pp, p.candidate.dp): p.step_ms for p in out.ranked}
    assert got == pytest.approx(expected)
    assert [(p.candidate.tp, p.candidate.pp) for p in out.ranked][:3] == [(1, 1), (2, 1), (1, 2)]
    assert out.ranked[0].bubble_ms == 0.0 and out.ranked[2].bubble_ms == pytest.approx(6.0)


def test_same_input_same_ranking():
    kw = dict(seq=1024, global_batch=16, space=ParallelSpace(micro_batch_sizes=(1, 2), virtual_stages=(2,),
                                                              cp_degrees=(1,)), rerank=2, top=8)
    a = search_parallel(TINY, load_preset("h100x8"), **kw)
    b = search_parallel(TINY, load_preset("h100x8"), **kw)
    assert [(p.candidate, p.step_ms, p.simulated_ms) for p in a.ranked] == \
        [(p.candidate, p.step_ms, p.simulated_ms) for p in b.ranked]
    ja, jb = to_json(a), to_json(b)
    ja["search"].pop("seconds"), jb["search"].pop("seconds")
    assert json.dumps(ja, sort_keys=True) == json.dumps(jb, sort_keys=True)
    assert a.ranked[0].simulated_ms is not None and a.distinct_sites > 0
    assert "why" in format_table(a) or "best" in format_table(a)


def test_mixed_cluster_replicas_split_the_batch_by_speed(monkeypatch):
    cluster = load_preset("mixed-a100-h100")  # 16 A100 (ranks 0-15), then 16 H100
    _toy(monkeypatch, {"A100 SXM": 2.0})
    space = ParallelSpace(micro_batch_sizes=(1,), schedules=("1f1b",), shardings=("replicated",),
                          recomputes=("none",), cp_degrees=(1,))
    out = search_parallel(TINY, cluster, seq=1024, global_batch=48, space=space, rerank=0, top=1000)
    reps = {p.candidate.tp: p for p in out.ranked if p.candidate.grouping == "replicas" and p.candidate.pp == 1}
    # greedy: one micro-batch per replica of a block at a time, to the block that then finishes first (A100 2x
    # slower, ties to the first block). tp2: 8 replicas per block, 48 = 8 * 2 + 8 * 4
    assert reps[2].candidate.split == ((8, 2), (8, 4))
    slot_h = 4 * 3 * (1 / 2 + 0.2)
    assert reps[2].step_ms == pytest.approx(max(2 * 2 * slot_h, 4 * slot_h))
    # tp1: 16 replicas per block, 48 = 16 * 1 + 16 * 2
    assert reps[1].candidate.split == ((16, 1), (16, 2))
    # the stage grouping with tp2 pp2 dp8: stage 0 is the A100 block and takes fewer layers
    stages = [q for q in out.ranked if q.candidate.grouping == "stages" and q.candidate.pp == 2
              and q.candidate.tp == 2 and not q.candidate.order]
    assert stages and stages[0].stages[0] < stages[0].stages[1]
    # the other order of the two node groups is tried too: H100 first, so stage 0 now takes more layers
    flipped = [q for q in out.ranked if q.candidate.order == ("H100 SXM", "A100 SXM") and q.candidate.pp == 2
               and q.candidate.tp == 2]
    assert flipped and flipped[0].stages[0] > flipped[0].stages[1]
    assert out.evaluated == len(out.space.candidates) + sum(c.grouping == "stages" for c in out.space.candidates)


def test_launch_settings_name_both_frameworks():
    out = search_parallel(TINY, load_preset("h100x8"), seq=1024, global_batch=8, space=PLAIN, rerank=1, top=3)
    launch = launch_settings(out)
    c = out.winner.candidate
    assert launch["torchtitan"]["parallelism.tensor_parallel_degree"] == c.tp
    assert f"--pipeline-model-parallel-size {c.pp}" in launch["megatron"]
    assert any("torchtitan" in n for n in launch["not_expressible"])


def test_interleaved_schedule_bubble_is_divided_by_the_virtual_stages():
    for p, m, v in [(4, 8, 1), (4, 8, 2), (4, 16, 4), (2, 4, 2)]:
        assert replay_slots(p, m, v) / 3 == pytest.approx(makespan_slots(p, m, v))
    assert interleaved_stage_order(2, 2, 0, 1) == [(op, mb, 0) for op, mb in stage_order(2, 2, 0)]
    order = interleaved_stage_order(2, 4, 0, 2)
    assert len(order) == 2 * 4 * 2 and order[:4] == [("F", 0, 0), ("F", 1, 0), ("F", 0, 1), ("F", 1, 1)]
    with pytest.raises(ValueError, match="multiple of the stages"):
        interleaved_stage_order(4, 6, 0, 2)


def test_context_parallel_and_recompute_sites_in_the_step():
    from hocket.models.step import model_step_sites
    from hocket.sim.step import simulate_step

    cluster = load_preset("h100x8")
    graph = model_step_sites(TINY, tp=2, cp=2, dp=2, seq=4096, cluster=cluster, recompute="selective")
    stage = graph.stages[0]
    gathers = [n for n in stage.nodes if n.name.endswith("attn.cp_kv_all_gather")]
    # each layer gathers K and V of the whole sequence: 2 * seq * kv / tp bf16 values, over ranks 0 and 2
    assert len(gathers) == 2 * 4  # forward and selective recompute, 4 layers
    assert gathers[0].op.nbytes == 2 * 4096 * 128 // 2 * 2 and gathers[0].op.ranks == (0, 2)
    assert any(n.name == "L0.attn.cp_kv_reduce_scatter" for n in stage.nodes)
    assert stage.nodes[[n.name for n in stage.nodes].index("L0.attn.qkv")].op.m == 4096 // 2
    assert stage.dp_ranks == (0, 2, 4, 6)  # dp * cp ranks hold the same weights
    assert simulate_step(graph, cluster).step_ms > 0
    plain = model_step_sites(TINY, tp=2, dp=4, seq=4096, cluster=cluster)
    full = model_step_sites(TINY, tp=2, dp=4, seq=4096, cluster=cluster, recompute="full")
    assert len(full.stages[0].nodes) - len(plain.stages[0].nodes) == 4 * 9  # 9 forward nodes per layer again


def test_the_simulator_runs_interleaved_virtual_stages():
    from hocket.models.step import model_step_sites
    from hocket.sim.step import simulate_step

    cluster = load_preset("h100x8")
    model = ModelSpec(name="eight", hidden_size=256, intermediate_size=512, num_attention_heads=4,
                      num_key_value_heads=2, num_hidden_layers=8, vocab_size=1000)
    steps = {}
    for v in (1, 2):
        graph = model_step_sites(model, tp=2, pp=4, seq=1024, cluster=cluster, micro_batches=4, virtual=v,
                                 stages=[8 // (4 * v)] * (4 * v))
        assert len(graph.stages) == 4 * v and graph.stages[4 * v - 1].ranks == graph.stages[3].ranks
        steps[v] = simulate_step(graph, cluster).step_ms
    assert steps[2] < steps[1]  # the bubble shrinks from 3 to 1.5 slots
    with pytest.raises(ValueError, match="needs pp > 1"):
        model_step_sites(model, tp=2, pp=1, dp=4, seq=1024, virtual=2)


def test_price_candidate_prices_a_given_configuration():
    from hocket.search import Candidate
    from hocket.search.run import SearchError, price_candidate

    cand = Candidate(tp=2, cp=1, pp=2, dp=2, micro_batch=1, micro_batches=4, sharding="optimizer")
    p = price_candidate(TINY, load_preset("h100x8"), cand, seq=1024, global_batch=8, stages=[3, 1])
    assert p.stages == (3, 1) and p.simulated_ms > 0 and p.step_ms > 0 and len(p.memory) == 2
    with pytest.raises(ValueError, match="needs 4 devices but h100x8 has 8"):
        price_candidate(TINY, load_preset("h100x8"), Candidate(tp=2, cp=1, pp=2, dp=1, micro_batch=1,
                                                                micro_batches=4), seq=1024, global_batch=4)
    assert issubclass(SearchError, ValueError)
