"""hocket.validate tells each line's executor apart and, with ``--lease-profiles``/``--lease-only``, prices it
with the profile calibrated on its own lease: own-block-last mm_rs lines written before ``run.own_block_zero``
ran a fill per piece (``each``); a results file beside a ``profile.json`` is priced with that profile,
one without it with the shared one (or skipped). Synthetic records on the h200x2 preset."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest
from _results_lines import baselines, record, write

from hocket.cli.main import main as hocket_main
from hocket.core.plan import Plan
from hocket.core.site import Site
from hocket.cost.calibration import CalibrationView
from hocket.hardware import load_preset
from hocket.hardware.profile import load_profile
from hocket.strategies import predict
from hocket.validate import cost_model as vc
from hocket.validate import lines as vl
from hocket.validate import sites as vs

LEASE_PROFILE = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "h200x2" / "run60" / "profile.json"
OWN_LAST = Plan(strategy="chunked", chunks=2, order="local_first")
MM_RS = Site(kind="mm_rs", m=8192, k=14336, n=8192, dtype="bfloat16", world=2)


def _line(site, plan, run=None, rng=None):
    rng = rng or random.Random(7)
    base = baselines(rng)
    return record(site=site, plan=plan, median_ms=base.sequential_ms * rng.uniform(0.8, 1.1), base=base, run=run)


def test_line_own_zero_of_old_new_and_other_lines():
    assert vl.line_own_zero(_line(MM_RS, OWN_LAST)) == "each"  # written before the field: a fill per piece
    assert vl.line_own_zero(_line(MM_RS, OWN_LAST, {"own_block_zero": "once"})) == "once"
    assert vl.line_own_zero(_line(MM_RS, Plan(strategy="chunked", chunks=2))) is None
    assert vl.line_own_zero(_line(MM_RS, OWN_LAST.with_(transport="copy_engine"))) is None
    ag = Site(kind="ag_mm", m=8192, k=4096, n=1536, dtype="bfloat16", world=2)
    assert vl.line_own_zero(_line(ag, OWN_LAST)) is None
    assert vc.implementation(_line(MM_RS, OWN_LAST)) != vc.implementation(
        _line(MM_RS, OWN_LAST, {"own_block_zero": "once"}))


def _two_leases(tmp_path: Path) -> tuple[Path, Path]:
    rng = random.Random(11)
    site = Site(kind="ag_mm", m=8192, k=8192, n=7168, dtype="bfloat16", world=2)
    paths = []
    for lease in ("lease_a", "lease_b"):
        base = baselines(rng)
        lines = [record(site=site, plan=plan, median_ms=base.sequential_ms * rng.uniform(0.8, 1.05), base=base)
                 for plan in (Plan(), Plan(strategy="chunked", chunks=2))]
        paths.append(write(tmp_path / lease / "bench_multigpu_nvlink.jsonl", lines))
    shutil.copy(LEASE_PROFILE, tmp_path / "lease_a" / "profile.json")  # lease_b left no profile
    return paths[0], paths[1]


def test_lease_profile_views_map_each_group_to_its_own_lease(tmp_path):
    a, b = _two_leases(tmp_path)
    sources: dict = {}
    records, _ = vl.read_current([a, b], sources=sources)
    assert len(sources) == len(records) == 4 and set(sources.values()) == {a, b}
    groups, _ = vs.group_sites(records, None)
    assert len(groups) == 2
    views = vc.lease_profile_views(sources, groups)
    assert len(views) == 1
    (key, view), = views.items()
    assert isinstance(view, CalibrationView)
    leased = next(g for g in groups if g.key == key)
    assert leased.sequential_ms in {r.baselines.sequential_ms for r in vl.read_current([a])[0]}


def test_lease_only_prices_every_line_with_its_leases_profile_and_skips_the_rest(tmp_path, capsys):
    a, b = _two_leases(tmp_path)
    out = tmp_path / "report.json"
    assert hocket_main(["validate", str(a), str(b), "--lease-only", "--holdout", "0.5", "--json", str(out)]) == 0
    report = json.loads(out.read_text())["h200x2"]
    points = report["held_out"]["points"] + report["calibration"]["points"]
    lines_a = vl.read_current([a])[0]
    assert len(points) == len(lines_a) == 2
    view = CalibrationView(load_profile(LEASE_PROFILE, expected=None))
    by_plan = {r.plan.describe(): r for r in lines_a}
    for p in points:
        line = by_plan[p["plan"]]
        assert p["measured_ms"] == pytest.approx(line.median_ms)
        assert p["predicted_ms"] == pytest.approx(predict(line.site, line.plan, load_preset("h200x2"), view).total_ms)
    assert "1 site runs of leases that left no profile skipped" in capsys.readouterr().out


def test_line_own_sum_of_old_new_and_other_lines():
    """One-piece pull mm_rs lines written before ``run.own_block_sum`` summed in a pass after the GEMM."""
    pull = Plan(strategy="chunked", chunks=1, transport="copy_engine")
    assert vl.line_own_sum(_line(MM_RS, pull, {"peer_protocol": "pull"})) == "pass"
    assert vl.line_own_sum(_line(MM_RS, pull, {"peer_protocol": "pull", "own_block_sum": "epilogue"})) == "epilogue"
    assert vl.line_own_sum(_line(MM_RS, pull.with_(chunks=2), {"peer_protocol": "push"})) is None
    assert vl.line_own_sum(_line(MM_RS, OWN_LAST)) is None
    ag = Site(kind="ag_mm", m=8192, k=4096, n=1536, dtype="bfloat16", world=2)
    assert vl.line_own_sum(_line(ag, pull, {"peer_protocol": "pull"})) is None
    for total, run in (("pass", {"peer_protocol": "pull"}),
                       ("epilogue", {"peer_protocol": "pull", "own_block_sum": "epilogue"})):
        assert vc.implementation(_line(MM_RS, pull, run))[-1] == total
