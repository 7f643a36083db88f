"""`hocket simulate`: outputs, planner JSON input, bad input."""

from __future__ import annotations

import json
import random
import re

import pytest

from hocket.cli.main import main


def _config(tmp_path, rng: random.Random) -> str:
    heads = rng.choice([16, 32])
    head_dim = 64
    cfg = {"hidden_size": heads * head_dim, "intermediate_size": heads * head_dim * 3, "num_attention_heads": heads,
           "num_key_value_heads": 8, "num_hidden_layers": rng.randint(3, 6), "vocab_size": rng.randint(2000, 9000),
           "hidden_act": "silu", "rms_norm_eps": 1e-5, "model_type": "tiny-llama"}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return str(path)


def test_simulate_writes_trace_plot_and_json(tmp_path, capsys):
    rng = random.Random()
    model = _config(tmp_path, rng)
    trace, plot = tmp_path / "step.json", tmp_path / "step.png"
    rc = main(["simulate", "--model", model, "--tp", "2", "--pp", "2", "--dp", "2", "--seq", "512",
               "--microbatches", str(rng.randint(2, 5)), "--cluster", "h100x8", "--strategy", "chunked",
               "--chunks", "2", "--trace", str(trace), "--plot", str(plot), "--json"])
    out = capsys.readouterr().out
    assert rc == 0, out
    summary = json.loads(out)
    assert summary["step_ms"] > 0 and summary["world"] == 8
    assert summary["parallel"]["stages"] and sum(summary["parallel"]["stages"]) == json.load(open(model))[
        "num_hidden_layers"]
    assert 0 < summary["utilisation"]["compute"] <= 1
    assert summary["exposed_comm_ms_mean"] >= 0
    assert set(summary["site_plans"].values()) <= {"chunked(2)", "sequential"}
    data = json.loads(trace.read_text())
    assert any(e["ph"] == "X" for e in data["traceEvents"])
    assert data["otherData"]["step_ms"] == pytest.approx(summary["step_ms"], rel=1e-6)
    assert plot.read_bytes()[:4] == b"\x89PNG"
    # the table form prints the same step time
    rc = main(["simulate", "--model", model, "--tp", "2", "--pp", "2", "--dp", "2", "--seq", "512",
               "--microbatches", str(summary["parallel"]["micro_batches"]), "--cluster", "h100x8",
               "--strategy", "chunked", "--chunks", "2"])
    table = capsys.readouterr().out
    assert rc == 0 and f"predicted step time: {summary['step_ms']:.3f} ms" in table


def test_simulate_reads_a_planner_json(tmp_path, capsys):
    rng = random.Random()
    model = _config(tmp_path, rng)
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps({
        "model": model, "cluster": "h100x8", "parallel": {"tp": 8, "pp": 1, "dp": 1, "seq": 256, "batch": 1,
                                                          "micro_batches": 2},
        "sites": [], "predicted_step_ms": {"chosen": 1.0, "sequential": 1.0}}))
    rc = main(["simulate", "--plan", str(plan_file), "--json"])
    out = capsys.readouterr().out
    assert rc == 0, out
    summary = json.loads(out)
    assert summary["parallel"]["tp"] == 8 and summary["parallel"]["micro_batches"] == 2
    assert summary["planner_predicted_step_ms"] == 1.0
    assert any("not in the plan file" in note for note in summary["notes"])


@pytest.mark.parametrize("argv, match", [
    (["--tp", "8", "--cluster", "h100x8"], "--seq"),
    (["--tp", "8", "--seq", "128"], "--cluster"),
    (["--tp", "8", "--seq", "128", "--cluster", "no-such-cluster"], "no-such-cluster"),
    (["--tp", "8", "--seq", "128", "--cluster", "h100x8", "--stages", "a,b"], "--stages"),
    (["--tp", "4", "--pp", "2", "--dp", "2", "--seq", "128", "--cluster", "h100x8"], "tp\\*pp\\*dp"),
    (["--tp", "8", "--seq", "128", "--cluster", "h100x8", "--plan", '{"strategy":"chunked"}',
      "--strategy", "ring"], "do not combine"),
])
def test_bad_input_is_a_clear_error(tmp_path, capsys, argv, match):
    model = _config(tmp_path, random.Random())
    rc = main(["simulate", "--model", model, *argv])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.startswith("hocket simulate: ")
    assert re.search(match, err), err


def test_missing_model_is_a_clear_error(capsys):
    rc = main(["simulate", "--cluster", "h100x8", "--seq", "128"])
    assert rc == 2 and "--model" in capsys.readouterr().err
