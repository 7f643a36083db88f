"""bench_eager_graphs.py's arguments and lines, the executor fields every multi-GPU bench line records
(bench_multigpu.executor_fields), and which of its lines `hocket validate` (hocket.validate.lines) scores."""

from __future__ import annotations

import random

import pytest
from _results_lines import baselines, record, write

import benchmarks.bench_eager_graphs as beg
import benchmarks.bench_multigpu as bm
import hocket.validate.lines as vc
from hocket.core.peer_protocol import peer_protocol_for
from hocket.core.site import Site
from hocket.core.sizes import DEFAULT_SIZES, MIB, TransportSizes, using_sizes
from hocket.plan import Plan


class FakeCase:
    def __init__(self, site: Site) -> None:
        self.site = site

    def own_block_sum(self) -> str:
        return "epilogue@512"


def test_arguments(monkeypatch, tmp_path):
    monkeypatch.setenv("OUT", str(tmp_path))
    args = beg.parse_args(["--link", "nvlink", "--mode", "on"])
    assert args.out == str(tmp_path / "bench_eager_graphs_nvlink.jsonl") and args.mode == "on" and args.reps == 4
    with pytest.raises(SystemExit):
        beg.parse_args(["--iters", "10"])
    with pytest.raises(SystemExit):
        beg.parse_args(["--mode", "sometimes"])


def test_executor_fields_follow_the_plan_and_the_sizes_of_the_measurement():
    rs = FakeCase(Site(kind="mm_rs", m=512, k=64, n=96, world=2))
    ag = FakeCase(Site(kind="ag_mm", m=512, k=64, n=96, world=2))
    assert bm.executor_fields(ag, Plan()) == {}
    chunks = random.choice([1, 2, 3])
    fields = bm.executor_fields(ag, Plan(strategy="chunked", chunks=chunks, transport="copy_engine"))
    assert fields == {"peer_protocol": peer_protocol_for("ag_mm", chunks)}
    one = Plan(strategy="chunked", chunks=1, transport="copy_engine")
    assert bm.executor_fields(ag, one.with_(protocol="push")) == {"peer_protocol": "push"}
    pull = bm.executor_fields(rs, one)  # a one-piece mm_rs pulls unless its plan says otherwise
    assert pull == {"peer_protocol": "pull", "own_block_sum": "epilogue@512"}
    assert bm.executor_fields(rs, one.with_(protocol="push")) == {"peer_protocol": "push"}
    assert bm.executor_fields(rs, Plan(strategy="chunked", chunks=2, order="local_first")) == \
        {"own_block_zero": "once"}
    relay_plan = Plan(strategy="chunked", chunks=4, transport="host_staged", order="local_first")
    with using_sizes(TransportSizes(piece_bytes=2 * MIB, slots=8)):
        relay = bm.executor_fields(ag, relay_plan)
    assert relay == {"host_stage_signal": "device", "host_stage_pipeline": "message", "host_stage_slots": 8,
                     "host_stage_calls": "one", "host_stage_piece_bytes": 2 * MIB}
    assert bm.executor_fields(ag, relay_plan)["host_stage_slots"] == DEFAULT_SIZES.slots
    assert set(relay) | set(pull) <= set(bm.EXECUTOR_FIELDS)


def test_validation_scores_only_lines_that_recorded_their_executor(tmp_path):
    rng = random.Random()
    site = Site(kind="ag_mm", m=8192, k=4096, n=1536, world=2)
    base = baselines(rng)
    relay = Plan(strategy="chunked", chunks=4, transport="host_staged", order="local_first")
    fields = {"host_stage_signal": "device", "host_stage_pipeline": "message", "host_stage_slots": 4,
              "host_stage_calls": "one"}
    lines = [record(site=site, plan=Plan(), median_ms=base.sequential_ms, base=base, run={"method": "sequential"}),
             record(site=site, plan=relay, median_ms=1.0, base=base, run={"method": "planner", "executor_fields": True,
                                                                          **fields}),
             record(site=site, plan=relay, median_ms=1.0, base=base,
                    run={"method": "planner_graphs_auto", "executor_fields": True, "eager_graphs": "auto",
                         "replayed": True, **fields})]
    path = write(tmp_path / "h200x2" / "run99" / "bench_eager_graphs_host_staged.jsonl", lines)
    kept, notes = vc.read_current([path], all_relays=True)
    assert [r.run["method"] for r in kept] == ["planner"]
    assert any("without the executor fields" in n for n in notes) and any("HOCKET_EAGER_GRAPHS" in n for n in notes)
    # the same lines in another bench's file: only the eager-graph line is left out
    other = write(tmp_path / "h200x2" / "run99" / "bench_multigpu_host_staged.jsonl", lines)
    kept, _ = vc.read_current([other], all_relays=True)
    assert [r.run["method"] for r in kept] == ["sequential", "planner"]


def test_the_plot_draws_every_complete_case(tmp_path):
    def methods(seq):
        return {"sequential": {"median_ms": seq}, "compute_alone": {"median_ms": seq * 0.6},
                "comm_nccl": {"median_ms": seq * 0.5}, "planner": {"median_ms": seq * 0.8},
                "planner_graphs_auto": {"median_ms": seq * 0.75}}

    site = {"kind": "ag_mm", "m": 8192, "k": 4096, "n": 1536}
    rows = [{"site": site, "methods": methods(random.uniform(0.3, 2.0))}, {"site": site, "methods": {}}]
    args = beg.parse_args(["--out", str(tmp_path / "x.jsonl")])
    beg.plot(rows, args, tmp_path / "x.png")
    assert (tmp_path / "x.png").stat().st_size > 1000
    beg.plot([rows[1]], args, tmp_path / "none.png")  # nothing complete: no file
    assert not (tmp_path / "none.png").exists()
