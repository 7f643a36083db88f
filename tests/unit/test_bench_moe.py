"""The pieces of ``hocket bench moe`` (hocket.bench.moe, hocket.cli.bench): layers, routing, plans, the
reference, scoring, the flags; and one tiny run on two gloo ranks (no timing asserted)."""

import pytest
import torch

from hocket.bench import moe
from hocket.cli import bench
from hocket.cli.main import build_parser


def _parse(*argv):
    return build_parser().parse_args(["bench", "moe", *argv])


# -- layers and presets --------------------------------------------------------------------------------------

def test_scaled_layer_rounds_widths_to_multiples_of_16_and_keeps_the_routing():
    layer = moe.MoeLayer(name="x", hidden=7168, ffn=2048, experts=256, topk=8, shared_ffn=2048)
    small = layer.scaled(16)
    assert (small.hidden, small.ffn, small.shared_ffn) == (448, 128, 128)
    assert (small.experts, small.topk, small.scale) == (256, 8, 16)
    assert layer.scaled(1) is layer
    assert moe.MoeLayer(name="x", hidden=64, ffn=24, experts=4, topk=1).scaled(8).ffn == moe.ALIGN  # never below


def test_layer_refuses_topk_above_experts_and_a_world_that_does_not_divide():
    with pytest.raises(ValueError, match="topk=5 is above experts=4"):
        moe.MoeLayer(name="x", hidden=16, ffn=16, experts=4, topk=5)
    with pytest.raises(ValueError, match="experts=6 does not divide over 4 ranks"):
        moe.MoeLayer(name="x", hidden=16, ffn=16, experts=6, topk=2).check_world(4)


@pytest.mark.parametrize("name,figures", [("mixtral-8x7b", (4096, 14336, 8, 2, 0)),
                                          ("qwen3-30b-a3b", (2048, 768, 128, 8, 0)),
                                          ("deepseek-v3", (7168, 2048, 256, 8, 2048))])
def test_presets_give_the_models_moe_layer(name, figures):
    from hocket.models.catalog import list_models

    if name not in list_models():
        pytest.skip(f"preset {name} not in this build")
    layer = moe.layer_from_preset(name)
    assert (layer.hidden, layer.ffn, layer.experts, layer.topk, layer.shared_ffn) == figures


def test_a_dense_preset_is_refused_naming_the_moe_ones():
    with pytest.raises(ValueError, match="has no MoE layers"):
        moe.layer_from_preset("llama3-8b")


# -- routing and operands ------------------------------------------------------------------------------------

@pytest.mark.parametrize("skew", ["uniform", "zipf:1.5"])
def test_routing_picks_distinct_experts_and_normalised_weights(skew):
    ids, weights = moe.draw_routing(300, 16, 4, skew, generator=torch.Generator().manual_seed(1))
    assert ids.shape == weights.shape == (300, 4)
    assert all(len(set(row)) == 4 for row in ids.tolist())
    assert int(ids.min()) >= 0 and int(ids.max()) < 16
    torch.testing.assert_close(weights.sum(1), torch.ones(300))


def test_zipf_routing_favours_the_first_experts():
    ids, _ = moe.draw_routing(2000, 32, 2, "zipf:1.5", generator=torch.Generator().manual_seed(0))
    counts = torch.bincount(ids.reshape(-1), minlength=32)
    assert counts[0] > 4 * counts[16:].float().mean()
    uniform, _ = moe.draw_routing(2000, 32, 2, "uniform", generator=torch.Generator().manual_seed(0))
    flat = torch.bincount(uniform.reshape(-1), minlength=32).float()
    assert flat.max() < 1.5 * flat.mean()


def test_operands_hold_this_ranks_experts_of_the_global_set():
    layer = moe.MoeLayer(name="x", hidden=16, ffn=16, experts=4, topk=2)
    a = moe.make_operands(layer, tokens=5, skew="uniform", rank=1, world=2, dtype=torch.float32,
                          device=torch.device("cpu"))
    gate_up, down = a.experts_of()
    assert a.w_gate_up.shape == (2, 16, 32) and a.w_down.shape == (2, 16, 16)
    torch.testing.assert_close(a.w_gate_up, gate_up[2:4])
    torch.testing.assert_close(a.w_down, down[2:4])


def test_reference_layer_is_the_weighted_sum_of_the_chosen_experts():
    layer = moe.MoeLayer(name="x", hidden=16, ffn=16, experts=4, topk=2, shared_ffn=16)
    ops = moe.make_operands(layer, tokens=6, skew="zipf:1.0", rank=0, world=1, dtype=torch.float32,
                            device=torch.device("cpu"), seed=3)
    gate_up, down = ops.experts_of()
    want = torch.zeros(6, 16)
    for t in range(6):
        for j in range(2):
            e = int(ops.topk_ids[t, j])
            h = ops.x[t:t + 1] @ gate_up[e]
            want[t] += ops.topk_weights[t, j] * (torch.nn.functional.silu(h[:, :16]) * h[:, 16:] @ down[e])[0]
    torch.testing.assert_close(moe.reference_layer(ops, with_shared=False), want, rtol=1e-5, atol=1e-5)
    shared = moe.shared_expert(ops)(ops.x)
    torch.testing.assert_close(moe.reference_layer(ops, with_shared=True), want + shared, rtol=1e-5, atol=1e-5)


# -- plans and scores ----------------------------------------------------------------------------------------

def test_bench_plans_cover_every_moe_strategy_at_its_chunk_counts():
    from hocket.strategies import spec, strategies_for

    plans = moe.bench_plans(chunks=(1, 2, 4), splits=("exchanged", "padded"))
    assert plans[-1] is None
    named = [p for p in plans if p is not None]
    assert {p["strategy"] for p in named} == set(strategies_for("a2a_mm"))
    for p in named:
        s = spec(p["strategy"])
        assert ("chunks" not in p) == s.fixed_chunks
        assert p.get("chunks", s.min_chunks) >= s.min_chunks
    assert {p["splits"] for p in named} == {"exchanged", "padded"}
    assert moe.plan_label({"strategy": "token_blocks", "chunks": 4, "splits": "padded"}) == "token_blocks(4) padded"
    with pytest.raises(ValueError, match="do not run MoE sites"):
        moe.bench_plans(("ring",))


def _result(times):
    return {"times": {k: {"median_ms": v, "p10_ms": v, "p90_ms": v, "n": 1} for k, v in times.items()},
            "errors": {k: 0.0 for k in times}, "skipped": {"token_blocks(2)": "refused"},
            "layer": {"name": "x", "hidden": 16, "ffn": 16, "experts": 4, "topk": 2, "shared_ffn": 0, "scale": 1},
            "tokens": 8, "skew": "uniform", "dtype": "bfloat16", "world": 2, "e_local": 2, "busiest_rank_rows": 9}


def test_score_uses_the_sequential_plan_and_the_two_alone_baselines():
    rows = {r["candidate"]: r for r in moe.score(_result({"sequential_ep": 12.0, "sequential": 10.0, "per_source": 7.0,
                                                          "torchtitan": 14.0, "compute_alone": 6.0,
                                                          "comm_alone": 4.0}))}
    assert set(rows) == {"sequential_ep", "sequential", "per_source", "torchtitan"}
    assert rows["per_source"]["overlap_efficiency"] == pytest.approx((10 - 7) / (10 - 6))
    assert rows["per_source"]["vs_sequential_ep"] == pytest.approx(12 / 7)
    assert rows["per_source"]["vs_torchtitan"] == pytest.approx(2.0)
    lines = moe.table_lines(_result({"sequential_ep": 12.0, "compute_alone": 6.0, "comm_alone": 4.0}))
    assert any("not run: refused" in line for line in lines)


# -- the flags -----------------------------------------------------------------------------------------------

def test_flags_build_a_scaled_spec():
    spec, world = bench.build_moe_spec(_parse("--hidden", "256", "--ffn", "512", "--experts", "8", "--topk", "2",
                                              "--scale", "4", "--tokens", "64", "--skew", "zipf:1.2",
                                              "--strategy", "sequential", "token_blocks", "--chunks", "2"))
    assert world == 2 and spec.tokens == 64 and spec.skew == "zipf:1.2" and spec.dtype == "bfloat16"
    assert (spec.layer.hidden, spec.layer.ffn, spec.layer.scale) == (64, 128, 4)
    assert [moe.plan_label(p) for p in spec.plans] == ["sequential", "token_blocks(2)", "plan=None"]


@pytest.mark.parametrize("argv,match", [
    (["--hidden", "64", "--ffn", "64", "--experts", "8"], r"missing \['--topk'\]"),
    (["--model", "llama3-8b"], "has no MoE layers"),
    (["--hidden", "64", "--ffn", "64", "--experts", "6", "--topk", "2", "--world", "4"], "does not divide"),
    (["--hidden", "64", "--ffn", "64", "--experts", "8", "--topk", "2", "--skew", "zipf:x"], "--skew"),
    (["--hidden", "64", "--ffn", "64", "--experts", "8", "--topk", "2", "--backend", "nccl"], "gloo ranks"),
])
def test_bad_flags_are_refused_naming_them(argv, match):
    with pytest.raises(ValueError, match=match):
        bench.build_moe_spec(_parse(*argv))


def test_model_and_sizes_together_are_refused(monkeypatch):
    from hocket.models.catalog import list_models

    if "mixtral-8x7b" not in list_models():
        pytest.skip("mixtral-8x7b preset not in this build")
    with pytest.raises(ValueError, match="fixes the layer"):
        bench.build_moe_spec(_parse("--model", "mixtral-8x7b", "--hidden", "64"))


def test_the_matrix_kinds_still_need_m_k_n():
    with pytest.raises(SystemExit):
        build_parser().parse_args(["bench", "ag_mm", "--k", "1", "--n", "1"])
    assert build_parser().parse_args(["bench", "moe", "--tokens", "4"]).m is None


# -- one tiny run on two ranks -------------------------------------------------------------------------------

@pytest.mark.dist
def test_a_tiny_run_checks_every_candidate_and_times_the_baselines():
    layer = moe.MoeLayer(name="tiny", hidden=32, ffn=16, experts=4, topk=2, shared_ffn=16)
    spec = moe.MoeBenchSpec(layer=layer, tokens=12, skew="zipf:1.0", plans=moe.bench_plans(("sequential",)),
                            torchtitan=False, iters=1, warmup=0)
    (result,) = moe.run_specs((spec,), world=2, timeout_s=240)
    assert {"sequential_ep", "compute_alone", "comm_alone"} <= set(result["times"])
    assert result["errors"]["sequential_ep"] < 0.05 and result["e_local"] == 2
    timed_or_skipped = set(result["times"]) | set(result["skipped"])
    assert {"sequential", "plan=None"} <= timed_or_skipped or "hocket plans" in result["skipped"]


@pytest.mark.dist
def test_torchtitan_and_the_backward_runs_match_the_reference():
    if moe.torchtitan_available() is not None:
        pytest.skip(f"torchtitan does not import here: {moe.torchtitan_available()}")
    layer = moe.MoeLayer(name="tiny", hidden=32, ffn=16, experts=4, topk=2)
    specs = tuple(moe.MoeBenchSpec(layer=layer, tokens=10, skew="uniform", plans=moe.bench_plans(("sequential",)),
                                   torchtitan=True, backward=bwd, iters=1, warmup=0) for bwd in (False, True))
    forward, backward = moe.run_specs(specs, world=2, timeout_s=280)
    assert (forward["direction"], backward["direction"]) == ("forward", "forward+backward")
    for result in (forward, backward):  # a candidate is timed only once it matched the reference
        assert {"sequential_ep", "torchtitan"} <= set(result["times"]), result["skipped"]
        assert result["errors"]["torchtitan"] < 0.05


def test_reference_grads_of_one_rank_are_autograd_of_the_whole_layer():
    layer = moe.MoeLayer(name="x", hidden=16, ffn=16, experts=2, topk=1)
    ops = moe.make_operands(layer, tokens=3, skew="uniform", rank=0, world=1, dtype=torch.float32,
                            device=torch.device("cpu"), seed=1)
    dx, dw, dgu, dd = moe.reference_grads(layer, ops, tokens=3, skew="uniform", rank=0, world=1, seed=1,
                                          with_shared=False)
    x = ops.x.clone().requires_grad_(True)
    w = ops.topk_weights.clone().requires_grad_(True)
    gu, d = (t.clone().requires_grad_(True) for t in ops.experts_of())
    y = moe._layer(x, ops.topk_ids, w, gu, d, None)
    want = torch.autograd.grad((y * moe.output_grad(layer, tokens=3, rank=0, seed=1)).sum(), [x, w, gu, d])
    for got, expected in zip((dx, dw, dgu, dd), want):
        torch.testing.assert_close(got, expected)
    assert float(dgu.abs().sum()) > 0 and float(dx.abs().sum()) > 0


def test_the_grid_script_builds_every_case_and_summarises_the_best_plan():
    from benchmarks import moe_bench

    specs = moe_bench.build_specs(moe_bench.parse_args(["--models", "mixtral-8x7b,deepseek-v3", "--skews",
                                                        "uniform,zipf:1.0", "--directions", "forward,backward"]))
    assert len(specs) == 8 and {s.backward for s in specs} == {False, True}
    assert {(s.layer.name, s.layer.scale) for s in specs} == {("mixtral-8x7b", 16), ("deepseek-v3", 16)}
    result = _result({"sequential_ep": 12.0, "sequential": 10.0, "per_source": 7.0, "plan=None": 8.0,
                      "torchtitan": 14.0, "compute_alone": 6.0, "comm_alone": 4.0})
    (header, _, row) = moe_bench.summary_lines([result])
    assert "per_source 7.0" in row and "| 8.0 |" in row and f"{12 / 7:.2f}x" in row and "0.75" in row
