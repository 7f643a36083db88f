"""``python -m hocket`` is the ``hocket`` command (for checkouts without the console script)."""

import subprocess
import sys

import pytest


@pytest.mark.timeout(120)
def test_python_m_hocket_runs_the_cli():
    done = subprocess.run([sys.executable, "-m", "hocket", "--help"], capture_output=True, text=True, timeout=100)
    assert done.returncode == 0, done.stderr
    for command in ("demo", "bench", "calibrate", "predict", "plan", "simulate"):
        assert command in done.stdout
    bad = subprocess.run([sys.executable, "-m", "hocket", "no-such-command"], capture_output=True, text=True,
                         timeout=100)
    assert bad.returncode != 0 and "no-such-command" in bad.stderr
