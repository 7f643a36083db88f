"""`hocket demo` and `hocket bench` as a user runs them: real processes, real exit codes."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from hocket.bench.plans import BENCH_STRATEGIES
from hocket.bench.record import read_records

RUN_TIMEOUT_S = 200


def _hocket(*argv: str, tmp_path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                                           "MASTER_PORT", "LOCAL_WORLD_SIZE")}
    env["COLUMNS"] = "250"
    return subprocess.run([sys.executable, "-m", "hocket.cli.main", *argv], capture_output=True, text=True,
                          timeout=RUN_TIMEOUT_S, env=env, cwd=tmp_path, check=False)


@pytest.mark.timeout(RUN_TIMEOUT_S + 30)
def test_demo_runs_every_operator_and_strategy_and_writes_results(tmp_path):
    out = tmp_path / "demo.jsonl"
    proc = _hocket("demo", "--tokens", "64", "--scale", "64", "--iters", "2", "--warmup", "0",
                   "--backend", "gloo", "--out", str(out), tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for strategy in {s for kinds in BENCH_STRATEGIES.values() for s in kinds}:
        assert strategy in proc.stdout
    assert "overlap eff." in proc.stdout
    records = read_records(out)
    kinds = {r.site.kind for r in records}
    assert kinds == {"ag_mm", "mm_rs", "mm_ar"}
    for kind in kinds:
        assert {r.plan.strategy for r in records if r.site.kind == kind} == set(BENCH_STRATEGIES[kind])
    for record in records:
        assert record.run["backend"] == "gloo" and record.run["world_size"] == 2
        assert record.command.startswith("hocket demo --tokens 64 --scale 64")
        assert record.max_error is not None and record.max_error < 1e-3
        assert record.baselines.sequential_ms > 0


@pytest.mark.timeout(RUN_TIMEOUT_S + 30)
def test_bench_writes_one_line_per_plan(tmp_path):
    out = tmp_path / "bench.jsonl"
    proc = _hocket("bench", "mm_rs", "--m", "64", "--k", "48", "--n", "32", "--world", "2", "--backend", "gloo",
                   "--strategy", "chunked", "ring", "--chunks", "2", "3", "--iters", "2", "--warmup", "0",
                   "--threads-per-rank", "1", "--out", str(out), tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    records = read_records(out)
    assert [r.plan.describe() for r in records] == ["sequential", "chunked(2)", "chunked(3)", "ring(1)"]
    assert all(r.run["threads_per_rank"] == 1 for r in records)
    assert {(r.site.m, r.site.k, r.site.n) for r in records} == {(64, 48, 32)}
