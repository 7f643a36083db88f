"""`hocket plan --search`: the table, the JSON `hocket simulate --plan` reads, and the exclusions."""

from __future__ import annotations

import json

from hocket.cli.main import main


def test_search_prints_the_ranking_and_writes_a_plan_simulate_reads(tmp_path, capsys):
    out = tmp_path / "search.json"
    rc = main(["plan", "--search", "--model", "llama3-8b", "--cluster", "h100x8", "--seq", "4096",
               "--global-batch", "16", "--top", "3", "--rerank", "1", "--json", str(out)])
    text = capsys.readouterr().out
    assert rc == 0, text
    assert "torchtitan:" in text and "Megatron-LM:" in text and " 1 tp" in text
    report = json.loads(out.read_text())
    assert report["search"]["ranked"][0]["why"] == "best" and len(report["search"]["ranked"]) == 3
    assert "6*N + 12*L*q*S" in report["search"]["flops_formula"]
    winner = report["search"]["ranked"][0]["candidate"]
    assert report["parallel"]["tp"] == winner["tp"] and report["parallel"]["pp"] == winner["pp"]
    assert report["parallel"]["sharding"] == winner["sharding"]
    assert report["parallel"]["dp_sync"] == ("all_reduce" if winner["sharding"] == "replicated" else "reduce_scatter")
    if winner["cp"] == 1:
        assert main(["simulate", "--plan", str(out), "--json"]) == 0


def test_search_excludes_the_degrees(capsys):
    rc = main(["plan", "--search", "--tp", "8", "--model", "llama3-8b", "--cluster", "h100x8", "--seq", "4096"])
    assert rc == 2 and "leave out --tp" in capsys.readouterr().err


def test_without_search_tp_is_required(capsys):
    rc = main(["plan", "--model", "llama3-8b", "--cluster", "h100x8", "--seq", "4096"])
    assert rc == 2 and "--tp is required" in capsys.readouterr().err


def test_a_cluster_too_small_is_a_clear_error(capsys):
    rc = main(["plan", "--search", "--model", "llama3-405b", "--cluster", "h100x8", "--seq", "8192",
               "--global-batch", "8"])
    err = capsys.readouterr().err
    assert rc == 2 and "does not fit in device memory at any configuration" in err and "usable" in err
