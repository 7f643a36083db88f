"""hocket validate and hocket regret read a one-rank tile_fused line of bench_single_gpu.py's ``previous``
schedule as the operators' only up to run16, where it still was their default; later it is skipped."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

from hocket.core.plan import Plan
from hocket.core.site import Site
from hocket.validate import lines as vl


def _line(strategy: str, variant: str | None, *, world: int = 1):
    kind = "mm_d2h" if world == 1 else "ag_mm"
    plan = Plan(strategy=strategy, chunks=8, transport="host_staged") if strategy != "sequential" else \
        Plan(transport="host_staged")
    run = {"variant": variant} if variant is not None else {}
    return SimpleNamespace(plan=plan, site=Site(kind=kind, m=8192, k=8192, n=7168, world=world), run=run)


@pytest.mark.parametrize("run, skipped", [("run10_ramps", False), ("run16_final", False), ("run17_x", True),
                                         ("run18_order", True), ("run30_defaults", True), ("run46_lease_check", True)])
def test_the_previous_schedule_counts_only_while_it_was_the_operators(tmp_path, run, skipped):
    path = tmp_path / "results" / "h200" / run / "bench_single_gpu.jsonl"
    line = _line("tile_fused", "previous")
    assert vl.superseded_offload_variant(line, path) is skipped
    assert vl.measures_current_executor(line, path) is (not skipped)


@pytest.mark.parametrize("seed", range(3))
def test_other_lines_of_those_runs_are_kept(tmp_path, seed):
    rng = random.Random(seed)
    path = tmp_path / "results" / "h200" / f"run{rng.randint(17, 60)}_x" / "bench_single_gpu.jsonl"
    for line in (_line("tile_fused", "operator"), _line("tile_fused", None), _line("chunked", "ramp"),
                 _line("chunked", "previous"), _line("sequential", None)):
        assert not vl.superseded_offload_variant(line, path)
        assert vl.measures_current_executor(line, path)


def test_two_gpu_folders_are_not_read_as_one_gpu_runs(tmp_path):
    path = tmp_path / "results" / "h200x2" / "run46" / "bench_multigpu_nvlink.jsonl"
    assert not vl.superseded_offload_variant(_line("tile_fused", "previous", world=2), path)
