"""bench_multigpu's --graph switch: its default results file, and its refusal on gloo."""

from __future__ import annotations

import pytest

from _bench_scripts import load_script

bm = load_script("bench_multigpu")


def test_graph_results_get_their_own_file(monkeypatch, tmp_path):
    monkeypatch.setenv("OUT", str(tmp_path))
    assert bm.parse_args(["--link", "host_staged", "--graph"]).out == str(tmp_path / "bench_multigpu_host_staged_graph.jsonl")
    assert bm.parse_args(["--link", "host_staged"]).out == str(tmp_path / "bench_multigpu_host_staged.jsonl")


def test_graph_on_gloo_is_refused_naming_both_flags(capsys):
    with pytest.raises(SystemExit):
        bm.parse_args(["--graph", "--backend", "gloo"])
    assert "--graph needs --backend nccl" in capsys.readouterr().err
