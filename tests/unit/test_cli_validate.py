"""`hocket validate` and `hocket regret` on small committed results folders (benchmarks/results/cpu, the gloo
world-2 lines and their CPU profile; benchmarks/results/h200x2/run9, one NVLink lease), run as a user runs them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from hocket.cli.main import main as hocket_main

ROOT = Path(__file__).resolve().parents[2]
CPU = ROOT / "benchmarks" / "results" / "cpu"
CPU_PROFILE = ROOT / "benchmarks" / "results" / "calibration" / "cpu-gloo-w2.json"
RUN9 = ROOT / "benchmarks" / "results" / "h200x2" / "run9"


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU lines are matched to this machine's probe (CPU ranks)")
def test_validate_on_the_cpu_folder_matches_docs_validation_row(tmp_path):
    """The CPU row of docs/validation.md: 17 held-out points, median 5.2%, max 19.2%, sign right 100%."""
    out = tmp_path / "report.json"
    done = subprocess.run([sys.executable, "-m", "hocket", "validate", str(CPU), "--profile", str(CPU_PROFILE),
                           "--json", str(out)], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    text = done.stdout
    assert "\n## probed (CPU rank)\n" in text  # CPU ranks: this machine's probe, not a preset
    assert "held-out sites (calibrated on 4 other CPU rank site runs' baselines + profile): 17 points on 2 sites" \
        in text
    assert "median |error| 5.2%, max 19.2% | saving sign right 100.0% of 1" in text
    assert "targets: median <= 10%, max <= 25%, sign right >= 90%" in text
    # the folder's compile and simulate timings are not results lines: noted, not fatal
    assert "compile_cpu_w2.jsonl skipped" in text and "simulate_step.jsonl skipped" in text
    (table,) = json.loads(out.read_text()).values()
    summary = table["held_out"]["summary"]
    assert summary["points"] == 17 and summary["median_abs_error"] == pytest.approx(0.052, abs=5e-4)
    assert summary["max_abs_error"] == pytest.approx(0.192, abs=5e-4)


def test_regret_on_one_lease_folder(tmp_path, capsys):
    out = tmp_path / "rows.json"
    assert hocket_main(["regret", str(RUN9), "--cluster", "h200x2", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "prediction alone: margin 3%" in text and "sites: all" in text
    assert "6 sites | prediction alone: median regret 1.075, max 1.237, slower than sequential beyond noise: 0 | " \
           "autotuned: median 1.000, max 1.000, slower than sequential beyond noise: 0" in text
    rows = json.loads(out.read_text())
    assert len(rows) == 6 and all(r["tuned_regret"] >= 1.0 and r["predicted_regret"] >= 1.0 for r in rows)
    assert max(r["predicted_regret"] for r in rows) == pytest.approx(1.237, abs=5e-4)


def test_allowances_and_published_run_from_the_same_command(capsys):
    assert hocket_main(["validate", "--allowances", str(RUN9)]) == 0
    text = capsys.readouterr().out
    assert text.startswith("calibration site runs: ") and "DEFAULT_REL_ERROR = {" in text
    assert hocket_main(["validate", "--published"]) == 0
    assert "12 points | median |error| 14.0%, max 31.0%" in capsys.readouterr().out  # docs/validation.md


def test_a_missing_path_and_misused_flags_are_refused(tmp_path, capsys):
    assert hocket_main(["validate", str(tmp_path / "nothing")]) == 2
    assert "no such results file or folder" in capsys.readouterr().err
    assert hocket_main(["regret", str(tmp_path / "nothing")]) == 2
    for argv in (["validate", "--published", str(RUN9)], ["validate", "--holdout", "0.2", str(RUN9)],
                 ["validate", "--allowances", "--lease-only", str(RUN9)],
                 ["validate", "--allowances", "--published"], ["regret", "--holdout", "some"]):
        with pytest.raises(SystemExit) as exc:
            hocket_main(argv)
        assert exc.value.code == 2, argv
