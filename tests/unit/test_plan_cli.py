"""`hocket plan` and plan_model: the JSON schema, totals that add up, never slower than sequential, bad input."""

from __future__ import annotations

import json

import pytest

from hocket.cli.main import main

pytest.importorskip("hocket.models.step")


@pytest.fixture(scope="module")
def report_8b(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("plan") / "plan.json"
    assert main(["plan", "--model", "llama3-8b", "--cluster", "h100x8", "--tp", "8", "--seq", "2048",
                 "--batch", "2", "--json", str(out)]) == 0
    return json.loads(out.read_text())


def test_json_schema(report_8b):
    r = report_8b
    assert r["model"] == "llama3-8b" and r["cluster"] == "h100x8"
    assert r["parallel"] == {"tp": 8, "pp": 1, "dp": 1, "seq": 2048, "batch": 2, "micro_batches": 1}
    assert set(r["predicted_step_ms"]) >= {"sequential", "chosen"}
    names = {s["name"] for s in r["sites"]}
    assert {"attn.qkv", "attn.out", "mlp.up", "mlp.down", "attn.qkv.grad_input", "lm_head"} <= names
    for site in r["sites"]:
        assert {"name", "kind", "m", "n", "k", "dtype", "world", "plan", "predicted_ms"} <= set(site)
        assert site["m"] == 4096 and site["world"] == 8 and site["dtype"] == "bfloat16"
        assert set(site["predicted_ms"]) == {"sequential", "chosen"}
        assert site["plan"]["strategy"] in ("sequential", "bulk", "chunked", "ring", "bidir_ring", "tile_fused",
                                            "substituted")


def test_chosen_never_predicted_slower_and_totals_add_up(report_8b):
    r = report_8b
    margin = r["margin"]
    for site in r["sites"]:
        seq_ms, chosen_ms = site["predicted_ms"]["sequential"], site["predicted_ms"]["chosen"]
        assert 0 < chosen_ms <= seq_ms
        if site["plan"]["strategy"] != "sequential" or site["plan"]["transport"] != "collective":
            assert chosen_ms < seq_ms * (1 - margin)
    (stage,) = r["per_stage"]
    for which in ("sequential", "chosen"):
        total = sum(s["count"] * s["predicted_ms"][which] for s in r["sites"])
        assert stage["sites_ms"][which] == pytest.approx(total)
        assert r["predicted_step_ms"]["sites_only"][which] == pytest.approx(total)
        # one stage, one micro-batch: the step is its sites plus its non-communicating compute
        assert stage["compute_ms"]["per_step"] > 0
        assert r["predicted_step_ms"][which] == pytest.approx(total + stage["compute_ms"]["per_step"])
        layer = sum(s["predicted_ms"][which] for s in r["sites"] if not s["name"].startswith("lm_head"))
        assert stage["per_layer_ms"][which] == pytest.approx(layer)
    assert r["predicted_step_ms"]["chosen"] <= r["predicted_step_ms"]["sequential"]


def test_pipeline_stages_and_table(capsys):
    assert main(["plan", "--model", "llama3-8b", "--cluster", "h100-ib-2node", "--tp", "8", "--pp", "2",
                 "--seq", "1024", "--stages", "20,12"]) == 0
    out = capsys.readouterr().out
    assert "per stage" in out and "mlp.down.grad_input" in out and "0-1" in out
    assert main(["plan", "--model", "llama3-8b", "--cluster", "h100-ib-2node", "--tp", "8", "--pp", "2",
                 "--seq", "1024", "--json", "-"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert [s["stage"] for s in r["per_stage"]] == [0, 1]
    assert {s["stage"] for s in r["sites"]} == {0, 1}
    assert r["searches"] < len(r["sites"])  # identical groups on both nodes are searched once
    assert r["sites"][0]["ranks"] == list(range(8)) and r["sites"][-1]["ranks"] == list(range(8, 16))


@pytest.mark.parametrize("argv,match", [
    (["--model", "llama3-70b", "--tp", "3"], "tp=3 does not divide num_attention_heads=64"),
    (["--model", "llama3-70b", "--tp", "16", "--cluster", "h100-ib-2node"], "num_key_value_heads=8"),
    (["--model", "llama3-70b", "--tp", "4"], "product is 8"),
    (["--model", "no-such-model", "--tp", "8"], "presets: .*llama3-70b"),
    (["--model", "llama3-8b", "--tp", "8", "--cluster", "no-such-cluster"], "presets: .*h100x8"),
])
def test_bad_input_is_named(argv, match, capsys):
    if "--cluster" not in argv:
        argv = argv + ["--cluster", "h100x8"]
    assert main(["plan", "--seq", "512", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("hocket plan:")
    import re

    assert re.search(match, err), err


def test_bad_flags_fail_in_argparse(capsys):
    with pytest.raises(SystemExit):
        main(["plan", "--model", "llama3-8b", "--cluster", "h100x8", "--tp", "8", "--seq", "512", "--margin", "2"])
    assert "fraction" in capsys.readouterr().err


def test_predict_cli_prices_the_planner_space(capsys):
    from hocket.core.site import Site
    from hocket.hardware import load_preset
    from hocket.plan.search import search

    assert main(["predict", "mm_rs", "--m", "4096", "--k", "1536", "--n", "4096", "--world", "8",
                 "--cluster", "h800x8", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    site = Site(kind="mm_rs", m=4096, k=1536, n=4096, world=8)
    result = search(site, load_preset("h800x8"))
    assert len(out["candidates"]) == len(result.ranked)
    assert out["candidates"][0]["plan"] == result.sequential.to_dict()
    assert out["best_ms"] == pytest.approx(result.ranked[0].predicted_ms)
    assert {c["plan"]["strategy"] for c in out["candidates"]} >= {"sequential", "chunked", "ring"}
