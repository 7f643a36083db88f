"""benchmarks/published_check.py: every published point is priced from its preset alone (no profile)."""

from __future__ import annotations

import json
import math

from _bench_scripts import load_script


def test_every_point_is_priced_finite_and_scored(tmp_path, capsys):
    script = load_script("published_check")
    out = tmp_path / "published.json"
    assert script.main(["--json", str(out)]) == 0
    rows = json.loads(out.read_text())
    assert [r["name"] for r in rows] == [p.name for p in script.POINTS]
    for row, point in zip(rows, script.POINTS):
        assert math.isfinite(row["predicted"]) and row["predicted"] > 0
        inside = point.low <= row["predicted"] <= point.high
        assert (row["error"] == 0.0) == inside
        assert row["source"]
    assert "median |error|" in capsys.readouterr().out


def test_error_is_signed_and_zero_inside_a_range():
    script = load_script("published_check")
    point = script.Point("x", "h100x8", "all_reduce", 200.0, 250.0, "GB/s", "src")
    assert script.error(point, 225.0) == 0.0
    assert script.error(point, 180.0) < 0 < script.error(point, 300.0)
    assert abs(script.error(point, 300.0) - 0.2) < 1e-12
