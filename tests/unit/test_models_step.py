"""Model presets and the Sites of one training step (Megatron TP+SP, PP, DP)."""

from __future__ import annotations

import json
import random

import pytest

from hocket.core.site import Site
from hocket.hardware import load_preset
from hocket.models import ComputeOp, list_models, load_model, model_step_sites
from hocket.models.partition import balance_layers


def test_presets_load_with_their_published_sizes():
    assert {"llama3-8b", "llama3-70b", "llama3-405b", "gpt3-175b"} <= set(list_models())
    assert load_model("llama3-405b").num_hidden_layers == 126
    params = {name: load_model(name).total_params() / 1e9 for name in ("llama3-8b", "llama3-70b", "llama3-405b",
                                                                         "gpt3-175b")}
    assert params["llama3-8b"] == pytest.approx(8.03, abs=0.01)
    assert params["llama3-70b"] == pytest.approx(70.55, abs=0.01)
    assert params["llama3-405b"] == pytest.approx(405.85, abs=0.01)
    assert params["gpt3-175b"] == pytest.approx(174.6, abs=0.1)


def test_llama3_70b_tp8_sites_match_hand_computed_shapes():
    seq = random.choice([2048, 4096, 8192])
    batch = random.choice([1, 2])
    graph = model_step_sites("llama3-70b", tp=8, seq=seq, batch=batch)
    t = seq * batch
    by_name = {s.name: s for s in graph.sites()}
    # hidden 8192, 64 heads of 128, 8 KV heads, FFN 28672, tp 8
    expected = {
        "attn.qkv": ("ag_mm", t, 8192, (64 + 2 * 8) * 128 // 8, 1),
        "attn.out": ("mm_rs", t, 64 * 128 // 8, 8192, 1),
        "mlp.up": ("ag_mm", t, 8192, 28672 // 8, 2),
        "mlp.down": ("mm_rs", t, 28672 // 8, 8192, 1),
        "attn.qkv.grad_input": ("mm_rs", t, 1280, 8192, 1),
        "attn.out.grad_input": ("ag_mm", t, 8192, 1024, 1),
        "mlp.up.grad_input": ("mm_rs", t, 2 * 3584, 8192, 1),  # gate and up gradients summed in one matmul
        "mlp.down.grad_input": ("ag_mm", t, 8192, 3584, 1),
        "lm_head": ("ag_mm", t, 8192, 129024 // 8, 1),  # vocab 128256 padded to a multiple of 128*8
    }
    for name, (kind, m, k, n, num_b) in expected.items():
        site = by_name[name]
        assert (site.kind, site.m, site.k, site.n, site.num_b, site.world) == (kind, m, k, n, num_b, 8), name
    per_layer = [n for n in expected if not n.startswith("lm_head")]
    assert all(by_name[n].count == 80 for n in per_layer)  # pp=1: one micro-batch, 80 layers
    stage = graph.stages[0]
    wgrads = [node for node in stage.nodes if node.name.endswith("grad_weight") and node.layer == 0]
    assert sorted((w.op.m, w.op.k, w.op.n) for w in wgrads) == sorted(
        [(8192, t, 1280), (1024, t, 8192), (8192, t, 2 * 3584), (3584, t, 8192)])
    attention = next(node.op for node in stage.nodes if node.name == "L0.attn.core")
    assert attention.flops == 4 * batch * seq * seq * 128 * 8 * 0.5


def test_dependencies_point_backwards_and_sites_alternate_with_compute():
    graph = model_step_sites("llama3-8b", tp=4, pp=2, dp=2, seq=1024, batch=1)
    layers = [s.layers for s in graph.stages]
    assert graph.world == 16 and sum(layers) == 32
    assert layers[0] > layers[1]  # the last stage also runs the LM head (vocab 128256 x 4096)
    for stage in graph.stages:
        for i, node in enumerate(stage.nodes):
            assert all(0 <= d < i for d in node.depends_on)
        assert stage.step_nodes and stage.step_nodes[0].op.axis == "dp"
        assert len(stage.step_nodes[0].op.ranks) == 2
    json.dumps(graph.to_dict())
    assert graph.stages[1].ranks == (8, 9, 10, 11)  # rank = t + tp * (d + dp * s)


def test_uneven_and_auto_stages():
    graph = model_step_sites("llama3-405b", tp=8, pp=16, seq=4096, stages=[6] + [8] * 14 + [8])
    assert [s.layers for s in graph.stages][0] == 6 and sum(s.layers for s in graph.stages) == 126
    mixed = load_preset("h100-a100-16k")
    auto = model_step_sites("llama3-405b", tp=8, pp=16, dp=128, seq=4096, cluster=mixed)
    layers = [s.layers for s in auto.stages]
    assert sum(layers) == 126
    speeds = [mixed.device(s.ranks[0]).peak("bfloat16") for s in auto.stages]
    fast = [n for n, v in zip(layers, speeds) if v == max(speeds)]
    slow = [n for n, v in zip(layers, speeds) if v == min(speeds)]
    assert min(fast) > max(slow)  # faster devices hold more layers
    assert balance_layers(10, [1, 1], [0, 0], 1.0) == [5, 5]
    assert balance_layers(10, [1, 1], [0, 4.0], 1.0) == [7, 3]


def test_bad_degrees_name_the_quantity():
    with pytest.raises(ValueError, match="num_attention_heads"):
        model_step_sites("llama3-70b", tp=3, seq=128)
    with pytest.raises(ValueError, match="num_key_value_heads"):
        model_step_sites("llama3-70b", tp=16, seq=128)
    with pytest.raises(ValueError, match="pp=200"):
        model_step_sites("llama3-70b", tp=8, pp=200, seq=128)
    with pytest.raises(ValueError, match="sum to 80"):
        model_step_sites("llama3-70b", tp=8, pp=2, seq=128, stages=[40, 39])
    with pytest.raises(ValueError, match="16 devices"):
        model_step_sites("llama3-70b", tp=8, seq=128, cluster=load_preset("h100-ib-2node"))
    with pytest.raises(ValueError, match="seq"):
        model_step_sites("llama3-70b", tp=8, seq=0)


def test_unknown_model_lists_presets():
    with pytest.raises(ValueError, match="llama3-70b"):
        load_model("llama-9000")


def test_hugging_face_config(tmp_path):
    config = {"hidden_size": 2048, "intermediate_size": 5632, "num_attention_heads": 32,
              "num_key_value_heads": 4, "num_hidden_layers": 22, "vocab_size": 32000, "hidden_act": "silu",
              "model_type": "llama", "rms_norm_eps": 1e-5}
    (tmp_path / "config.json").write_text(json.dumps(config))
    model = load_model(str(tmp_path))
    assert (model.hidden_size, model.num_key_value_heads, model.mlp) == (2048, 4, "gated")
    graph = model_step_sites(model, tp=4, seq=512)
    assert {s.name for s in graph.sites()} >= {"attn.qkv", "mlp.up"}
    del config["vocab_size"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="vocab_size"):
        load_model(str(tmp_path / "config.json"))


def test_step_sites_are_plain_sites_and_compute_ops():
    graph = model_step_sites("gpt3-175b", tp=8, seq=2048)
    kinds = {type(node.op) for node in graph.stages[0].nodes}
    assert Site in kinds and ComputeOp in kinds
    up = next(s for s in graph.sites() if s.name == "mlp.up")
    assert up.num_b == 1 and up.n == 49152 // 8  # GeLU MLP: one up projection
