"""bench_multigpu's --graph switch: its default results file, and its refusal on gloo."""

from __future__ import annotations

import pytest

import benchmarks.bench_multigpu as bm


def test_graph_results_get_their_own_file(monkeypatch, tmp_path):
    monkeypatch.setenv("OUT", str(tmp_path))
    assert bm.parse_args(["--link", "host_staged", "--graph"]).out == str(tmp_path / "bench_multigpu_host_staged_graph.jsonl")
    assert bm.parse_args(["--link", "host_staged"]).out == str(tmp_path / "bench_multigpu_host_staged.jsonl")


def test_graph_on_gloo_is_refused_naming_both_flags(capsys):
    with pytest.raises(SystemExit):
        bm.parse_args(["--graph", "--backend", "gloo"])
    assert "--graph needs --backend nccl" in capsys.readouterr().err


def _row(paired_torch=None):
    methods = {"sequential": {"median_ms": 3.0}, "compute_alone": {"median_ms": 2.7}, "comm_nccl": {"median_ms": 0.3},
               "pytorch_async_tp": {"median_ms": 3.1}, "pytorch_async_tp_native": {"median_ms": 2.96},
               "planner": {"median_ms": 2.9, "plan": {"strategy": "chunked", "transport": "copy_engine"}}}
    row = {"site": {"kind": "mm_rs", "m": 8192, "k": 14336, "n": 8192}, "methods": methods,
           "paired": {"speedup": 1.04}}
    if paired_torch is not None:
        row["paired_torch"] = {"speedup": paired_torch}
    return row


def test_x_torch_reads_the_paired_measurement_when_there_is_one():
    """x torch: PyTorch's faster op over the planner from their interleaved rounds; without them, from the
    two separate medians."""
    unpaired = bm.table([_row()], "nvlink").splitlines()[-1].split()
    paired = bm.table([_row(1.0512)], "nvlink").splitlines()[-1].split()
    assert f"{2.96 / 2.9:.3f}" in unpaired and "1.051" in paired and f"{2.96 / 2.9:.3f}" not in paired
    assert "1.040" in paired  # x seq from its own paired rounds
