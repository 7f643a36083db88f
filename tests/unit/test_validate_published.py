"""hocket.validate.published (``hocket validate --published``): every published point is priced from its
preset alone (no profile)."""

from __future__ import annotations

import json
import math

from hocket.cli.main import main as hocket_main
from hocket.validate import published


def test_every_point_is_priced_finite_and_scored(tmp_path, capsys):
    out = tmp_path / "published.json"
    assert hocket_main(["validate", "--published", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())
    assert [r["name"] for r in rows] == [p.name for p in published.POINTS]
    for row, point in zip(rows, published.POINTS):
        assert math.isfinite(row["predicted"]) and row["predicted"] > 0
        inside = point.low <= row["predicted"] <= point.high
        assert (row["error"] == 0.0) == inside
        assert row["source"]
    assert "median |error|" in capsys.readouterr().out


def test_error_is_signed_and_zero_inside_a_range():
    point = published.Point("x", "h100x8", "all_reduce", 200.0, 250.0, "GB/s", "src")
    assert published.error(point, 225.0) == 0.0
    assert published.error(point, 180.0) < 0 < published.error(point, 300.0)
    assert abs(published.error(point, 300.0) - 0.2) < 1e-12
