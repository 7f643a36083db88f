"""How long `hocket simulate` takes for a Llama-3-405B training step on 16,384 GPUs.

Issue 3's benchmark: TP 8, PP 16 (uneven stages over 126 layers), DP 128 on the
``h100-16k`` preset and on the heterogeneous ``h100-a100-16k`` preset (half H100, half
A100, stages sized by device speed), each with trace and plot, must finish in under
60 s on a 2-core machine. Each case runs the real console script in a subprocess (imports
included) and is timed wall-clock; child CPU time is recorded too, because on a shared
machine wall time also counts other people's work.

  python benchmarks/simulate_step.py [--repeat 3] [--out benchmarks/results/simulate/simulate_step.jsonl]

Prints a table and appends one JSON line per case (command, wall_s per run and median,
cpu_s, the simulated step_ms, tasks, rank classes, git hash, versions).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BUDGET_S = 60.0
COMMON = ["--model", "llama3-405b", "--tp", "8", "--pp", "16", "--dp", "128", "--seq", "8192", "--batch", "1",
          "--microbatches", "16", "--stages", "auto"]
CASES = {
    "h100-16k": COMMON + ["--cluster", "h100-16k"],
    "h100-a100-16k": COMMON + ["--cluster", "h100-a100-16k"],
}


def _hocket() -> list[str]:
    return [sys.executable, "-m", "hocket.cli.main"]


def run_case(name: str, args: list[str], folder: Path) -> dict:
    trace, plot = folder / f"{name}.json", folder / f"{name}.png"
    cmd = _hocket() + ["simulate", *args, "--trace", str(trace), "--plot", str(plot), "--json"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=10 * BUDGET_S, check=False)
    wall_s = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{name}: hocket simulate failed ({proc.returncode}): {proc.stderr.strip()}")
    summary = json.loads(proc.stdout)
    return {"wall_s": wall_s, "cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
            "summary": summary, "trace_bytes": trace.stat().st_size, "plot_bytes": plot.stat().st_size}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=1, help="runs per case (median reported)")
    parser.add_argument("--out", default="benchmarks/results/simulate/simulate_step.jsonl",
                        help="append JSON lines here ('' to skip)")
    opts = parser.parse_args(argv)
    from hocket.bench.provenance import git_hash, versions

    lines = []
    print(f"{'case':<16} {'wall_s (median)':>16} {'cpu_s':>8} {'step_ms':>12} {'tasks':>8} {'classes':>8} "
          f"{'under 60 s':>10}")
    with tempfile.TemporaryDirectory() as tmp:
        for name, args in CASES.items():
            runs = [run_case(name, args, Path(tmp)) for _ in range(max(1, opts.repeat))]
            wall = statistics.median(r["wall_s"] for r in runs)
            cpu = statistics.median(r["cpu_s"] for r in runs)
            summary = runs[-1]["summary"]
            ok = wall < BUDGET_S
            print(f"{name:<16} {wall:>16.2f} {cpu:>8.2f} {summary['step_ms']:>12.1f} {summary['tasks']:>8} "
                  f"{summary['rank_classes']:>8} {'yes' if ok else 'NO':>10}")
            lines.append({
                "benchmark": "simulate_step", "case": name,
                "command": "hocket simulate " + " ".join(shlex.quote(a) for a in args) + " --trace T --plot P --json",
                "wall_s": [r["wall_s"] for r in runs], "median_wall_s": wall, "median_cpu_s": cpu,
                "n": len(runs), "budget_s": BUDGET_S, "under_budget": ok,
                "step_ms": summary["step_ms"], "tasks": summary["tasks"], "rank_classes": summary["rank_classes"],
                "stages": summary["parallel"]["stages"], "trace_bytes": runs[-1]["trace_bytes"],
                "machine": {"cpus": os.cpu_count()}, "git_hash": git_hash(), "versions": versions(),
            })
    if opts.out:
        out = Path(opts.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        with out.open("a", encoding="utf-8") as fh:
            for line in lines:
                fh.write(json.dumps(line, sort_keys=True) + "\n")
        print(f"appended {len(lines)} lines to {out}")
    return 0 if all(line["under_budget"] for line in lines) else 1


if __name__ == "__main__":
    sys.exit(main())
