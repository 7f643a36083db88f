"""The MoE sites of a training step (model_step_sites with ep), `hocket plan --ep`, `hocket simulate --ep`, the
degrees they refuse, and the parallel search's ep dimension."""

from __future__ import annotations

import json

import pytest

from hocket.cli.main import main
from hocket.core.moe import MoeSite
from hocket.hardware import load_cluster
from hocket.models import load_model, model_step_sites
from hocket.models.graph import ComputeOp
from hocket.models.step import check_tokens

MOE_NODES = ("moe.experts.up", "moe.experts.down", "moe.experts.down.grad", "moe.experts.up.grad")


def _layer_nodes(graph, layer):
    return [n for st in graph.stages for n in st.nodes if n.layer == layer]


def test_moe_sites_per_layer_shapes_and_counts():
    tp, dp, ep, seq, batch, micro = 2, 4, 4, 256, 2, 3
    graph = model_step_sites("deepseek-v3", tp=tp, pp=1, dp=dp, ep=ep, seq=seq, batch=batch, micro_batches=micro)
    model = load_model("deepseek-v3")
    assert graph.ep == ep and graph.world == tp * dp
    for layer in range(model.num_hidden_layers):
        nodes = _layer_nodes(graph, layer)
        moe = [n for n in nodes if isinstance(n.op, MoeSite)]
        if layer < 3:  # the dense layers: a TP MLP, no expert-parallel site
            assert not moe and {"mlp.up", "mlp.down"} <= {n.op.name for n in nodes if hasattr(n.op, "m")}
            continue
        assert [n.name for n in moe] == [f"L{layer}.{name}" for name in MOE_NODES]
        kinds = [(n.op.kind, n.op.direction, n.phase) for n in moe]
        assert kinds == [("a2a_mm", "forward", "forward"), ("mm_a2a", "forward", "forward"),
                         ("mm_a2a", "backward", "backward"), ("a2a_mm", "backward", "backward")]
        for n in moe:
            site = n.op
            assert site.tokens == batch * seq // tp  # the rank's sequence-parallel shard of the micro-batch
            assert (site.hidden, site.ffn, site.experts, site.topk) == (7168, 2048, 256, 8)
            assert site.world == ep and site.e_local == 256 // ep and site.count == micro
            assert site.group_ranks == tuple(tp * d for d in range(ep))  # one DP group's consecutive replicas
        # the shared expert rides with the first site of each direction
        assert [n.op.shared_ffn for n in moe] == [2048, 0, 2048, 0]
        assert not any(n.op.name == "mlp.up" for n in nodes if hasattr(n.op, "m"))
    sites = graph.moe_sites()
    assert sorted(s.name for s in sites) == sorted(MOE_NODES)
    assert all(s.count == micro * model.moe_layers for s in sites)


def test_moe_tokens_follow_batch_tp_and_cp():
    graph = model_step_sites("qwen3-30b-a3b", tp=4, pp=2, dp=2, cp=2, ep=2, seq=1024, batch=3)
    for site in graph.moe_sites():
        assert site.tokens == 3 * 1024 // (2 * 4) and site.world == 2 and site.experts == 128
        assert site.group_ranks[1] - site.group_ranks[0] == 4 * 2  # next dp coordinate: tp * cp ranks further
    stage1 = graph.stages[1]
    assert all(n.op.group_ranks[0] == stage1.ranks[0] for n in stage1.nodes if isinstance(n.op, MoeSite))


def test_expert_gradients_sync_over_the_ranks_holding_the_same_experts():
    tp, dp, ep = 2, 8, 4
    graph = model_step_sites("mixtral-8x7b", tp=tp, pp=1, dp=dp, ep=ep, seq=128)
    steps = {n.name: n.op for n in graph.stages[0].step_nodes}
    group = steps["dp.expert_grad_reduce_scatter"].ranks
    assert len(group) == tp * dp // ep and group == tuple(sorted(t + tp * d for t in range(tp)
                                                              for d in range(0, dp, ep)))
    model = load_model("mixtral-8x7b")
    experts = model.num_hidden_layers * (model.num_experts // ep) * model.expert_params()
    assert steps["dp.expert_grad_reduce_scatter"].nbytes == 4 * experts
    assert steps["dp.expert_param_all_gather"].nbytes == 2 * experts
    assert len(steps["dp.grad_reduce_scatter"].ranks) == dp


def test_ep1_prices_local_experts_as_gemms():
    tp, seq = 2, 512
    graph = model_step_sites("mixtral-8x7b", tp=tp, pp=1, dp=2, ep=1, seq=seq)
    assert not graph.moe_sites() and any("ep=1" in note for note in graph.notes)
    ops = {n.name: n.op for n in _layer_nodes(graph, 0)}
    up = ops["L0.moe.experts.up"]
    assert isinstance(up, ComputeOp) and up.flops == 2.0 * (seq // tp) * 2 * 4096 * 2 * 14336
    assert ops["L0.moe.experts.up.grad"].flops == 2 * up.flops


def test_mla_sites():
    graph = model_step_sites("deepseek-v3", tp=2, pp=1, dp=1, seq=128)
    by_name = {s.name: s for s in graph.sites()}
    assert by_name["attn.qkv"].n == 1536 + 512 + 64  # the down-projections, replicated over tp
    assert by_name["attn.out"].k == 128 * 128 // 2
    ops = {n.name for n in _layer_nodes(graph, 0)}
    assert {"L0.attn.qkv_up", "L0.attn.qkv_up.grad"} <= ops


def test_to_dict_lists_moe_sites():
    data = model_step_sites("mixtral-8x7b", tp=1, pp=1, dp=2, ep=2, seq=64).to_dict()
    assert data["parallel"]["ep"] == 2
    types = {n["op"]["type"] for st in data["stages"] for n in st["nodes"]}
    assert "moe_site" in types
    json.dumps(data)


@pytest.mark.parametrize("model, kw, match", [
    ("qwen3-30b-a3b", dict(dp=6, ep=4), "ep=4 does not divide dp=6"),
    ("mixtral-8x7b", dict(dp=16, ep=16), "ep=16 does not divide num_experts=8"),
    ("llama3-8b", dict(dp=2, ep=2), "dense model"),
    ("qwen3-30b-a3b", dict(dp=2, ep=0), "ep=0"),
])
def test_bad_degrees_are_refused(model, kw, match):
    with pytest.raises(ValueError, match=match):
        model_step_sites(model, tp=1, pp=1, seq=64, **kw)


def test_tokens_not_divisible_by_tp_refused_with_the_cli_message():
    with pytest.raises(ValueError) as from_step:
        model_step_sites("llama3-8b", tp=8, seq=1001, batch=1)
    with pytest.raises(ValueError) as from_check:
        check_tokens(8, 1001, 1)
    assert str(from_step.value) == str(from_check.value)
    assert "--seq 1001 with --batch 1 gives 1001 tokens, not divisible by --tp 8" in str(from_step.value)
    with pytest.raises(ValueError, match="context-parallel"):
        model_step_sites("llama3-8b", tp=8, cp=4, seq=1024 + 16, batch=1)  # 1040 / 4 = 260 tokens per cp rank


def test_simulate_step_runs_moe_sites():
    from hocket.sim import simulate_step

    cluster = load_cluster("h200x8")
    graph = model_step_sites("qwen3-30b-a3b", tp=1, pp=2, dp=4, ep=4, seq=512, cluster=cluster)
    sim = simulate_step(graph, cluster)
    assert sim.step_ms > 0 and set(MOE_NODES) <= set(sim.site_plans)
    fixed = simulate_step(graph, cluster, plan={"strategy": "chunked", "chunks": 2})
    assert any("moe.experts" in note and "sequential" in note for note in fixed.notes)


@pytest.fixture(scope="module")
def moe_report(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("moe") / "plan.json"
    assert main(["plan", "--model", "qwen3-30b-a3b", "--cluster", "h200x8", "--tp", "1", "--dp", "8", "--ep", "8",
                 "--seq", "512", "--json", str(out)]) == 0
    return json.loads(out.read_text())


def test_plan_ep_plans_the_moe_sites(moe_report):
    r = moe_report
    assert r["parallel"]["ep"] == 8
    assert sorted(e["name"] for e in r["moe_sites"]) == sorted(MOE_NODES)
    for e in r["moe_sites"]:
        assert e["world"] == 8 and e["tokens"] == 512 and e["count"] == 48
        assert e["predicted_ms"]["chosen"] <= e["predicted_ms"]["sequential"]
    stage = r["per_stage"][0]
    tp_sites = sum(e["count"] * e["predicted_ms"]["sequential"] for e in r["sites"])
    moe_sites = sum(e["count"] * e["predicted_ms"]["sequential"] for e in r["moe_sites"])
    assert stage["sites_ms"]["sequential"] == pytest.approx(tp_sites + moe_sites)


def test_simulate_ep_and_its_plan_file(moe_report, tmp_path, capsys):
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(moe_report))
    assert main(["simulate", "--plan", str(plan), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["parallel"]["ep"] == 8 and set(MOE_NODES) <= set(out["site_plans"])
    chosen = {e["name"]: e["plan_label"] for e in moe_report["moe_sites"]}
    assert all(out["site_plans"][name] == plan_label_of(moe_report, name) for name in chosen)
    assert main(["simulate", "--model", "mixtral-8x7b", "--cluster", "h200x8", "--tp", "2", "--dp", "4", "--ep",
                 "2", "--seq", "256", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["parallel"]["ep"] == 2


def plan_label_of(report: dict, name: str) -> str:
    from hocket.core.plan import Plan

    return Plan.from_dict(next(e["plan"] for e in report["moe_sites"] if e["name"] == name)).describe()


@pytest.mark.parametrize("cmd", ["plan", "simulate"])
@pytest.mark.parametrize("argv, match", [
    (["--model", "qwen3-30b-a3b", "--tp", "1", "--dp", "8", "--ep", "3"], "ep=3 does not divide dp=8"),
    (["--model", "mixtral-8x7b", "--tp", "1", "--dp", "16", "--ep", "16"], "ep=16 does not divide num_experts=8"),
    (["--model", "llama3-8b", "--tp", "1", "--dp", "8", "--ep", "2"], "dense model"),
])
def test_cli_refuses_bad_degrees(cmd, argv, match, capsys):
    assert main([cmd, *argv, "--cluster", "h200x8", "--seq", "128"]) == 2
    assert match in capsys.readouterr().err


def test_search_enumerates_ep_on_an_moe_model():
    from hocket.search import enumerate_space, search_parallel
    from hocket.search.space import ParallelSpace

    cluster = load_cluster("h200x8")
    space = ParallelSpace(micro_batch_sizes=(1,), schedules=("1f1b",), shardings=("full",), recomputes=("none",),
                          cp_degrees=(1,))
    mixtral = load_model("mixtral-8x7b")
    sp = enumerate_space(mixtral, cluster, seq=1024, global_batch=16, space=space)
    by_dp = {}
    for c in sp.candidates:
        by_dp.setdefault(c.dp, set()).add(c.ep)
    assert by_dp[8] == {1, 2, 4, 8} and by_dp[4] == {1, 2, 4} and by_dp[1] == {1}
    dense = enumerate_space(load_model("llama3-8b"), cluster, seq=1024, global_batch=16, space=space)
    assert {c.ep for c in dense.candidates} == {1}
    qwen = load_model("qwen3-30b-a3b")
    limited = enumerate_space(qwen, cluster, seq=1024, global_batch=16,
                              space=ParallelSpace(micro_batch_sizes=(1,), cp_degrees=(1,), ep_degrees=(3, 4)))
    assert {c.ep for c in limited.candidates} == {4} and limited.pruned["ep does not divide dp"] > 0
    out = search_parallel(mixtral, cluster, seq=1024, global_batch=16, space=space, rerank=1, top=50)
    assert {p.candidate.ep for p in out.ranked} > {1}
    assert any("expert parallelism searched" in note for note in out.notes)
    from hocket.search.report import launch_settings

    launch = launch_settings(out)
    assert launch["torchtitan"]["parallelism.expert_parallel_degree"] == out.winner.candidate.ep
    assert f"--expert-model-parallel-size {out.winner.candidate.ep}" in launch["megatron"]


def test_plan_search_refuses_ep_and_runs_on_an_moe_model(capsys):
    assert main(["plan", "--search", "--model", "mixtral-8x7b", "--cluster", "h200x8", "--seq", "1024",
                 "--ep", "2"]) == 2
    assert "--ep" in capsys.readouterr().err
    assert main(["plan", "--search", "--model", "mixtral-8x7b", "--cluster", "h200x8", "--seq", "1024",
                 "--global-batch", "16", "--rerank", "0", "--top", "3", "--json", "-"]) == 0
    report = json.loads(capsys.readouterr().out)["search"]
    assert report["ranked"] and "ep" in report["ranked"][0]["candidate"]


def test_zipf_routing_skews_the_sites_and_bad_exponents_are_refused(capsys):
    uniform = model_step_sites("qwen3-30b-a3b", tp=1, pp=1, dp=4, ep=4, seq=256)
    skewed = model_step_sites("qwen3-30b-a3b", tp=1, pp=1, dp=4, ep=4, seq=256, moe_zipf=1.0)
    for site in uniform.moe_sites():
        assert site.counts == () and site.skew_class == 1
    for site in skewed.moe_sites():
        assert len(site.counts) == 4 and all(sum(row) == 256 * 8 for row in site.counts)
        assert site.skew_class > 1 and max(site.expert_totals) == site.expert_totals[0]
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="moe_zipf"):
            model_step_sites("qwen3-30b-a3b", tp=1, pp=1, dp=4, ep=4, seq=256, moe_zipf=bad)
    assert main(["plan", "--model", "qwen3-30b-a3b", "--cluster", "h200x8", "--tp", "1", "--dp", "8", "--ep", "8",
                 "--seq", "256", "--moe-zipf", "-2"]) == 2
    assert "moe_zipf=-2.0" in capsys.readouterr().err
