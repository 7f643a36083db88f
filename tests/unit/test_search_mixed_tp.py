"""hocket.search's mixed_tp grouping: tensor-parallel groups over device types with uneven shards by speed, on a
two-type toy node (2 slow devices and 2 H100 SXM in one node) and the mixed presets."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from hocket.hardware import load_preset
from hocket.hardware.catalog import cluster_from_dict
from hocket.models.spec import ModelSpec
from hocket.plan.shards import RankPricer
from hocket.search import Candidate, ParallelSpace, enumerate_space, search_parallel
from hocket.search.memory import GIB, RESERVED_BYTES, stage_memory
from hocket.search.report import format_table, launch_settings, to_json, winner_plan
from hocket.search.run import _Costs, _Estimator, _Layout, _split_layers, price_candidate
from hocket.search.space import mixed_groups

TINY = ModelSpec(name="tiny", hidden_size=256, intermediate_size=512, num_attention_heads=4, num_key_value_heads=2,
                 num_hidden_layers=4, vocab_size=1000)
ONE = ModelSpec(name="one", hidden_size=1024, intermediate_size=4096, num_attention_heads=8, num_key_value_heads=4,
                num_hidden_layers=1, vocab_size=2048)
PLAIN = ParallelSpace(micro_batch_sizes=(1,), schedules=("1f1b",), shardings=("replicated",), recomputes=("none",),
                      cp_degrees=(1,))


def toy_node(slow_memory_gib: float = 80.0):
    """One node: 2 "Toy Slow" devices (250 bf16 TFLOP/s) and 2 H100 SXM, all on one NVLink-class fabric."""
    island = {"fabric": "switch", "link": "nvlink4-900", "transports": ["collective", "p2p"]}
    return cluster_from_dict({
        "name": "toy-mixed-node",
        "devices": {"toy-slow": {"vendor": "nvidia", "model": "Toy Slow", "probe_names": [],
                                 "peak_tflops": {"bfloat16": 250}, "memory_gib": slow_memory_gib,
                                 "memory_gbps": 1600, "sm_count": 108, "copy_engines": None, "power_limit_w": 300,
                                 "matmul_efficiency": 0.8}},
        "node_types": {"toy-node": {"islands": [{"device": "toy-slow", "count": 2, **island},
                                                {"device": "h100-sxm", "count": 2, **island}],
                                    "bridge": "nvlink4-900", "bridge_transports": ["collective", "p2p"],
                                    "host_link": "host-pcie5"}},
        "nodes": [{"node": "toy-node", "count": 1}]})


def test_groups_mix_the_device_types_of_a_node():
    cluster = load_preset("mixed-a100-h100-pcie")  # ranks 0-3 A100 PCIe, 4-7 H100 PCIe
    two = mixed_groups(cluster, 2)
    assert two.order == (0, 4, 1, 5, 2, 6, 3, 7) and two.mix == (("A100 PCIe", 1), ("H100 PCIe", 1))
    assert mixed_groups(cluster, 4).order == (0, 1, 4, 5, 2, 3, 6, 7)
    assert mixed_groups(cluster, 8).group(0) == tuple(range(8))
    assert "needs tp > 1" in mixed_groups(cluster, 1)
    # one device type per node: no group within a node mixes; across nodes (when allowed) they do
    assert "holds one device type" in mixed_groups(load_preset("mixed-a100-h100"), 2)
    across = mixed_groups(load_preset("mixed-a100-h100"), 2, across_nodes=True)
    assert across.group(0) == (0, 16) and across.mix == (("A100 SXM", 1), ("H100 SXM", 1))


def test_mixed_tp_candidates_are_hand_countable():
    space = enumerate_space(TINY, load_preset("mixed-a100-h100-pcie"), seq=1024, global_batch=8, space=PLAIN)
    mixed = sorted((c.tp, c.pp, c.dp) for c in space.candidates if c.grouping == "mixed_tp")
    # tp in {1, 2} (KV heads = 2); tp 2: pp in {1, 2, 4}, dp = 4 / pp; tp 1 mixes nothing
    assert mixed == [(2, 1, 4), (2, 2, 2), (2, 4, 1)]
    assert {c.tp_mix for c in space.candidates if c.grouping == "mixed_tp"} == {(("A100 PCIe", 1), ("H100 PCIe", 1))}
    assert space.pruned["mixed_tp needs tp > 1 (a group of one rank mixes nothing)"] == 3  # tp1 pp1, pp2, pp4
    assert "mixed_tp[1xA100+1xH100]" in next(c for c in space.candidates if c.grouping == "mixed_tp").label()
    # homogeneous nodes: not offered, with the reason, for every (tp, pp) point
    other = enumerate_space(TINY, load_preset("mixed-a100-h100"), seq=1024, global_batch=32, space=PLAIN)
    assert not [c for c in other.candidates if c.grouping == "mixed_tp"]
    assert any(r.startswith("mixed_tp: node group 0 (hgx-a100) holds one device type") for r in other.pruned)
    # a single-type cluster has no mixed groupings at all
    assert {c.grouping for c in enumerate_space(TINY, load_preset("h100x8"), seq=1024, global_batch=8,
                                                space=PLAIN).candidates} == {"uniform"}


def test_moe_models_are_not_offered_mixed_tp():
    from hocket.models.catalog import load_model

    space = enumerate_space(load_model("mixtral-8x7b"), load_preset("mixed-a100-h100-pcie"), seq=4096,
                            global_batch=8, space=PLAIN)
    assert not [c for c in space.candidates if c.grouping == "mixed_tp"]
    assert space.pruned["mixed_tp: MoE layers are not sized unevenly (dense models only)"] > 0


def test_sites_are_priced_at_the_slowest_rank_of_the_uneven_split(monkeypatch):
    """Every cost but the TP sites' set to zero: a layer's forward is the sum over its four sites of the slowest
    rank's time at the recommended sizes, as hocket.plan.shards.RankPricer (the cost model's stage builder on each
    rank's own device) prices it."""
    from hocket.sim.pricing import Priced as OpPriced
    from hocket.sim.pricing import Pricer

    zero = OpPriced(ms=0.0, resource="compute", kind="compute", slowdown_by={})
    monkeypatch.setattr(Pricer, "compute", lambda self, op, device: zero)
    monkeypatch.setattr(Pricer, "comm", lambda self, op, ranks, device: zero)
    cluster = toy_node()
    costs = _Costs(ONE, cluster, seq=2048, dtype="bfloat16", profile=None, site_space=search_run_site_space())
    cand = Candidate(tp=4, cp=1, pp=1, dp=1, micro_batch=1, micro_batches=1, grouping="mixed_tp",
                     tp_mix=(("Toy Slow", 2), ("H100 SXM", 2)))
    label = costs.mixed(cand)
    table = costs.table(label, 4, 1, 1, "none")
    shards = costs.mixed_shards(label, 1, 1)
    expected = 0.0
    for name in ("attn.qkv", "attn.out", "mlp.up", "mlp.down"):
        block, j = shards.where[name]
        rec = shards.recs[block]
        site, plan, sizes = rec.sites[j], rec.plans[j], rec.sizes(j)
        pricer = RankPricer(site, cluster)
        expected += max(pricer.price(i, plan, size).total_ms for i, size in enumerate(sizes))
    assert table.layer_f == pytest.approx(expected, rel=1e-12)
    # the H100s hold more of the MLP than the slow devices
    mlp = shards.recs["mlp"].sizes(0)
    assert min(mlp[2:]) > max(mlp[:2]) and sum(mlp) == ONE.intermediate_size
    assert sum(shards.shares["mlp"]) == pytest.approx(4.0)


def search_run_site_space():
    from hocket.search.run import SITE_SPACE

    return SITE_SPACE


def test_a_mix_the_cluster_cannot_form_is_refused():
    cand = Candidate(tp=4, cp=1, pp=1, dp=1, micro_batch=1, micro_batches=1, grouping="mixed_tp",
                     tp_mix=(("Toy Slow", 1), ("H100 SXM", 3)))
    with pytest.raises(ValueError, match=r"Candidate.tp_mix=.* but tp=4 groups on toy-mixed-node hold "
                                         r"\[\['Toy Slow', 2\], \['H100 SXM', 2\]\]"):
        price_candidate(ONE, toy_node(), cand, seq=2048, global_batch=1, simulate=False)
    with pytest.raises(ValueError, match="holds one device type"):
        price_candidate(ONE, load_preset("h100x8"), replace(cand, tp=8, tp_mix=()), seq=2048, global_batch=1,
                        simulate=False)


def test_memory_of_each_device_type_follows_its_shares():
    cluster = toy_node()
    cand = Candidate(tp=4, cp=1, pp=1, dp=1, micro_batch=1, micro_batches=1, grouping="mixed_tp",
                     tp_mix=(("Toy Slow", 2), ("H100 SXM", 2)))
    p = price_candidate(ONE, cluster, cand, seq=2048, global_batch=1, simulate=False)
    by_device = {m.device: m for m in p.memory}
    slow, fast = by_device["Toy Slow"], by_device["H100 SXM"]
    assert fast.weights > slow.weights and fast.activations > slow.activations
    # hand check of the slow device: its largest shares through stage_memory
    costs = _Costs(ONE, cluster, seq=2048, dtype="bfloat16", profile=None, site_space=search_run_site_space())
    shards = costs.mixed_shards(costs.mixed(cand), 1, 1)
    _, shares = shards.by_device()["Toy Slow"]
    assert shares[1] < 1.0  # less than the even MLP share
    mem = stage_memory(ONE, tp=4, cp=1, dp=1, pp=1, stage=0, layers=1, seq=2048, micro_batch=1, micro_batches=1,
                       sharding="replicated", recompute="none", device_bytes=80 * GIB, shares=shares)
    assert slow.total == pytest.approx(mem.total)
    even = stage_memory(ONE, tp=4, cp=1, dp=1, pp=1, stage=0, layers=1, seq=2048, micro_batch=1, micro_batches=1,
                        sharding="replicated", recompute="none", device_bytes=80 * GIB)
    assert slow.weights < even.weights < fast.weights


def test_the_small_device_overflowing_is_pruned_with_its_reason():
    cand = Candidate(tp=4, cp=1, pp=1, dp=1, micro_batch=1, micro_batches=1, grouping="mixed_tp",
                     tp_mix=(("Toy Slow", 2), ("H100 SXM", 2)))
    need = {m.device: m.total for m in price_candidate(ONE, toy_node(), cand, seq=2048, global_batch=1,
                                                       simulate=False).memory}
    # the slow device gets 90% of what its shard needs; the H100s keep 80 GiB
    cluster = toy_node(slow_memory_gib=(RESERVED_BYTES + 0.9 * need["Toy Slow"]) / GIB)
    costs = _Costs(ONE, cluster, seq=2048, dtype="bfloat16", profile=None, site_space=search_run_site_space())
    est = _Estimator(ONE, costs, seq=2048, global_batch=1)
    layout = _Layout(cand, costs, costs.blocks)
    reason, example, mem = est.price(cand, layout, _split_layers(ONE, cand, costs, layout.stage_devices()))
    assert reason == f"out of memory on Toy Slow in a mixed TP group (binding: {mem.binding()})"
    assert "uneven shards" in example and mem.device == "Toy Slow" and not mem.fits
    assert need["H100 SXM"] < 80 * GIB - RESERVED_BYTES


def test_mixed_tp_wins_where_its_step_is_faster():
    # one layer, one sequence: dp = pp = 1, so tp 4 over the whole node; the uneven split keeps the H100s busy
    out = search_parallel(ONE, toy_node(), seq=2048, global_batch=1, space=PLAIN, rerank=0, top=10)
    by_grouping = {p.candidate.grouping: p for p in out.ranked}
    assert set(by_grouping) == {"mixed_tp", "stages"}
    assert out.winner.candidate.grouping == "mixed_tp"
    assert by_grouping["mixed_tp"].step_ms < by_grouping["stages"].step_ms
    assert winner_plan(out) is None
    launch = launch_settings(out)
    assert any("uneven tensor-parallel shards cannot be expressed in torchtitan or Megatron-LM" in n
               for n in launch["not_expressible"])
    table = format_table(out)
    assert "mixed_tp[2xToy+2xH100]" in table and "mixed_tp: TP groups over device types" in table
    row = to_json(out)["search"]["ranked"][0]
    assert row["grouping"] == "mixed_tp" and row["tp_shards"]["mlp"]["devices"] == ["Toy Slow", "Toy Slow",
                                                                                     "H100 SXM", "H100 SXM"]


def test_mixed_tp_loses_where_another_grouping_is_faster():
    # four layers and eight sequences: data-parallel replicas split by speed beat TP over the node
    model = replace(ONE, num_hidden_layers=4)
    out = search_parallel(model, toy_node(), seq=2048, global_batch=8, space=PLAIN, rerank=0, top=100)
    mixed = [p for p in out.ranked if p.candidate.grouping == "mixed_tp"]
    assert len(mixed) == 3 and out.winner.candidate.grouping != "mixed_tp"
    assert min(p.step_ms for p in mixed) > out.winner.step_ms
    assert any(n.startswith("mixed_tp: 3 candidates") for n in out.notes)


def test_same_input_same_ranking():
    kw = dict(seq=2048, global_batch=4, space=PLAIN, rerank=1, top=20)
    a = search_parallel(replace(ONE, num_hidden_layers=2), toy_node(), **kw)
    b = search_parallel(replace(ONE, num_hidden_layers=2), toy_node(), **kw)
    assert [(p.candidate, p.step_ms, p.simulated_ms, p.shards) for p in a.ranked] == \
        [(p.candidate, p.step_ms, p.simulated_ms, p.shards) for p in b.ranked]
    ja, jb = to_json(a), to_json(b)
    ja["search"].pop("seconds"), jb["search"].pop("seconds")
    assert json.dumps(ja, sort_keys=True) == json.dumps(jb, sort_keys=True)
    # mixed_tp candidates are never simulated (the simulator runs even TP shards): their analytic figure stands
    assert all(p.simulated_ms is None for p in a.ranked if p.candidate.grouping == "mixed_tp")
