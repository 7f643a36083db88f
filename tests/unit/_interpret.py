"""Shared by the Triton-interpreter tests: run a test file's cases in a child process with
``TRITON_INTERPRET=1`` (it must be set before triton is imported), and check a kernel's
output against an fp64 reference with every element written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch

from hocket.ops.tolerance import tolerance


def run_interpreted(script: str, cases: list, tmp: Path) -> list[dict]:
    """Run ``python script CASES OUT`` under the interpreter; return the records it saved."""
    cases_path, out_path = tmp / "cases.json", tmp / "results.pt"
    cases_path.write_text(json.dumps(cases))
    env = dict(os.environ, TRITON_INTERPRET="1", TRITON_DEFAULT_FP_FUSION="1")
    proc = subprocess.run([sys.executable, script, str(cases_path), str(out_path)], env=env,
                          capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, f"interpreter child failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    return torch.load(out_path, weights_only=False)


def assert_matches_reference(record: dict) -> None:
    """``record["out"]`` equals ``a @ b`` (fp64) within the dtype's tolerance; no NaN left."""
    out, a, b = record["out"], record["a"], record["b"]
    assert not out.isnan().any(), f"{int(out.isnan().sum())} output elements never written in {record['case']}"
    ref = torch.mm(a.double(), b.double())
    tol = tolerance(out.dtype)
    scale = max(1.0, float(ref.abs().max()))
    err = (out.double() - ref).abs()
    bound = tol.atol * scale + tol.rtol * ref.abs()
    assert bool((err <= bound).all()), f"max error {float(err.max()):.3g} beyond {out.dtype} tolerance in {record['case']}"
