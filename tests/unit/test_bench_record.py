import json
import random

import pytest

from hocket.bench.outcome import PlanOutcome, SiteOutcome
from hocket.bench.provenance import Provenance, command_line, git_hash, versions
from hocket.bench.record import REQUIRED_KEYS, SITE_KEYS, BenchRecord, read_records, records_from_outcome, write_records
from hocket.bench.table import outcome_rows, results_table
from hocket.core.plan import Plan
from hocket.core.site import Site
from hocket.timing.stats import summarize


def _timing():
    return summarize([random.uniform(10.0, 200.0) for _ in range(6)])


def _outcome(*, failed_plan: bool = False) -> SiteOutcome:
    world = random.choice([2, 4])
    site = Site(kind=random.choice(["ag_mm", "mm_rs", "mm_ar"]), m=world * random.randint(8, 64),
                k=random.randint(8, 128), n=random.randint(8, 128), dtype=random.choice(["float32", "bfloat16"]),
                world=world)
    plans = [PlanOutcome(plan=Plan(), max_error=random.uniform(0, 1e-6), tolerance=1e-4, passed=True,
                         timing=_timing()),
             PlanOutcome(plan=Plan(strategy="chunked", chunks=random.randint(2, 8)),
                         max_error=random.uniform(0, 1e-6), tolerance=1e-4, passed=True, timing=_timing())]
    if failed_plan:
        plans.append(PlanOutcome(plan=Plan(strategy="ring"), max_error=0.5, tolerance=1e-4, passed=False))
    return SiteOutcome(site=site, compute_alone=_timing(), comm_alone=_timing(), plans=tuple(plans),
                       comm_transport=random.choice(["collective", "copy_engine"]))


def _provenance() -> Provenance:
    return Provenance(hardware={"device": "cpu", "count": random.randint(1, 4)}, environment={"OMP_NUM_THREADS": "1"},
                      versions=versions(), git_hash=git_hash(), command=command_line(["hocket", "bench", "ag_mm"]),
                      extra={"backend": "gloo", "threads_per_rank": 1})


def test_records_round_trip_through_json_lines(tmp_path):
    outcome = _outcome(failed_plan=True)
    records = records_from_outcome(outcome, _provenance())
    assert len(records) == 2  # the failed plan is never timed, so it has no line
    path = write_records(tmp_path / "r.jsonl", records)
    write_records(path, records)  # appends
    back = read_records(path)
    assert len(back) == 4
    for original, loaded in zip(records * 2, back):
        assert loaded.site.key == original.site.key
        assert loaded.plan == original.plan
        assert loaded.timing == original.timing
        assert loaded.baselines == original.baselines
        assert loaded.run == {"backend": "gloo", "threads_per_rank": 1}
    line = json.loads(path.read_text().splitlines()[0])
    assert set(REQUIRED_KEYS) <= set(line)
    assert set(line["site"]) == set(SITE_KEYS)
    assert line["baselines"]["sequential_ms"] == outcome.sequential.timing.median_ms
    assert line["baselines"]["comm_alone_transport"] == outcome.comm_transport
    assert back[0].baselines.comm_alone_transport == outcome.comm_transport
    assert set(line["versions"]) == {"torch", "triton", "nccl", "driver", "hocket"}
    assert line["command"] == "hocket bench ag_mm"


def test_every_line_carries_the_score_from_its_baselines():
    outcome = _outcome()
    for record in records_from_outcome(outcome, _provenance()):
        data = record.to_dict()
        base = data["baselines"]
        ideal = max(base["compute_alone_ms"], base["comm_alone_ms"])
        if base["sequential_ms"] > ideal:
            expected = (base["sequential_ms"] - data["median_ms"]) / (base["sequential_ms"] - ideal)
            assert data["overlap_efficiency"] == pytest.approx(expected)
        assert data["speedup"] == pytest.approx(base["sequential_ms"] / data["median_ms"])


def test_reader_names_file_line_and_field(tmp_path):
    good = records_from_outcome(_outcome(), _provenance())[0].to_dict()
    path = tmp_path / "bad.jsonl"
    broken = dict(good)
    del broken["baselines"]
    path.write_text(json.dumps(good) + "\n" + json.dumps(broken) + "\n")
    with pytest.raises(ValueError, match=r"bad.jsonl:2.*baselines"):
        read_records(path)
    path.write_text("{not json\n")
    with pytest.raises(ValueError, match=r"bad.jsonl:1.*not valid JSON"):
        read_records(path)
    wrong_site = dict(good, site={"kind": "ag_mm"})
    with pytest.raises(ValueError, match="site"):
        BenchRecord.from_dict(wrong_site)


def test_outcome_without_sequential_cannot_become_records():
    outcome = _outcome()
    no_seq = SiteOutcome(site=outcome.site, compute_alone=outcome.compute_alone, comm_alone=outcome.comm_alone,
                         plans=outcome.plans[1:], comm_transport=outcome.comm_transport)
    with pytest.raises(ValueError, match="sequential"):
        records_from_outcome(no_seq, _provenance())


def test_table_rows_show_each_plan_and_flag_failures():
    outcome = _outcome(failed_plan=True)
    rows = outcome_rows(outcome)
    assert len(rows) == 3
    assert rows[0][3] == "sequential"
    assert rows[2][-1].startswith("FAIL")
    assert rows[2][4] == "—"  # never timed
    assert float(rows[1][4]) == pytest.approx(outcome.plans[1].timing.median_ms, abs=0.01)
    assert results_table([outcome], title="t").row_count == 3


def test_command_line_is_shell_quoted():
    assert command_line(["/usr/bin/hocket", "bench", "--strategy", "a b"]) == "hocket bench --strategy 'a b'"


def test_report_prints_summary_and_fails_on_a_failed_check(tmp_path):
    from io import StringIO

    from rich.console import Console

    from hocket.bench.report import report, summary_lines
    from hocket.bench.session import RunResult

    good, bad = _outcome(), _outcome(failed_plan=True)
    result = RunResult(outcomes=[good], is_reporter=True, backend="gloo", world_size=2, threads_per_rank=1,
                       launcher="spawn")
    buffer = StringIO()
    assert report(result, title="t", command="hocket bench", console=Console(file=buffer, width=200)) == 0
    best = good.best()
    (line,) = summary_lines(result)
    assert (f"best {best.plan.describe()}" in line) != (best.plan.strategy == "sequential")
    assert line in buffer.getvalue()
    failing = RunResult(outcomes=[good, bad], is_reporter=False, backend="gloo", world_size=2, threads_per_rank=1,
                        launcher="torchrun")
    assert report(failing, title="t", command="x", console=Console(file=StringIO())) == 1


def test_summary_text_says_hides_nothing_when_the_plan_is_slower_than_the_parts_back_to_back():
    import random
    import re

    from hocket.bench.report import hidden_text

    share = random.uniform(0.05, 0.95)
    assert hidden_text(share, "p2p") == f"hides {share:.2f} of the shorter of compute-alone and comm-alone (p2p)"
    slower = hidden_text(-random.uniform(0.05, 2.0), "p2p")
    assert slower.startswith("hides nothing") and not re.search(r"-\d", slower)  # no negative share printed
    beyond = hidden_text(random.uniform(1.01, 3.0), "p2p")
    assert beyond.startswith("hides all") and not re.search(r"\d\.\d", beyond)  # no share above 1 printed


def test_results_lines_say_whether_the_calls_were_replayed(tmp_path):
    """``hocket validate`` prices a line by ``run.captured`` / ``run.eager_graphs``: a ``hocket bench --graph``
    run must say it timed replays, or its lines are scored as host-issued calls."""
    from io import StringIO

    from rich.console import Console

    from hocket.bench.report import report
    from hocket.bench.session import RunResult

    captured = random.choice([True, False])
    mode = random.choice(["off", "auto", "on"])
    result = RunResult(outcomes=[_outcome()], is_reporter=True, backend="nccl", world_size=2, threads_per_rank=1,
                       launcher="spawn", captured=captured, eager_graphs=mode)
    out = tmp_path / "r.jsonl"
    assert report(result, title="t", command="hocket bench ag_mm --graph", out=out,
                  console=Console(file=StringIO())) == 0
    lines = read_records(out)
    assert lines and all(r.run["captured"] is captured and r.run["eager_graphs"] == mode for r in lines)


def test_a_cpu_run_never_records_eager_graphs(monkeypatch):
    from hocket.bench.session import _eager_graphs

    monkeypatch.setenv("HOCKET_EAGER_GRAPHS", "on")
    assert _eager_graphs("gloo") == "off"  # CPU calls are never replayed
    assert _eager_graphs("nccl") == "on"
    monkeypatch.setenv("HOCKET_EAGER_GRAPHS", "sometimes")
    with pytest.raises(ValueError, match="HOCKET_EAGER_GRAPHS"):
        _eager_graphs("nccl")
