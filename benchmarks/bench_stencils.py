"""Halo-exchange stencils on CPU gloo ranks: time per step of each strategy against ``sequential``, and side by side
with Devito solving the same problems (``--devito``).

For 2-D heat diffusion and the 3-D acoustic wave (``examples/heat_2d.py``, ``examples/acoustic_wave_3d.py``) at
space orders 2, 4 and 8, on ``--world`` self-spawned gloo ranks (one compute thread each), every rank runs each
plan (``sequential``, ``overlap``, ``deep_halo`` with ``s`` = 2 and 4, and ``plan=None``) once to check and
plan, then ``--repeats`` timed calls of ``--steps`` steps, interleaved plan by plan; a sample is the slowest
rank's time (a barrier before each call). Prints per case the median ms per step of each plan and its ratio to
sequential, and what ``plan=None`` chose.

With ``--devito PYTHON`` (a Python with Devito and mpi4py: ``benchmarks/devito_setup.sh``) each case also runs
``benchmarks/devito_stencils.py`` under ``mpirun`` on the same ranks (``OMP_NUM_THREADS=1``, Devito's C backend,
JIT excluded) with every ``DEVITO_MPI`` mode it accepts; hocket and Devito alternate for ``--rounds`` rounds and
each side's per-round medians are pooled. The table gives hocket's best plan over Devito's best mode per case
(below 1: hocket is faster). ``--json`` writes every number.

    python benchmarks/bench_stencils.py --smoke
    python benchmarks/bench_stencils.py --world 2 --heat-grid 2048x2048 --wave-grid 128x128x128 --steps 10
    bash benchmarks/devito_setup.sh /tmp/devito-venv && \
        python benchmarks/bench_stencils.py --devito /tmp/devito-venv/bin/python --json stencils.json
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import time
from pathlib import Path

import torch
import torch.distributed as dist

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
PLANS = {"sequential": "sequential", "overlap": "overlap",
         "deep_halo(2)": {"strategy": "deep_halo", "chunks": 2, "transport": "p2p"},
         "deep_halo(4)": {"strategy": "deep_halo", "chunks": 4, "transport": "p2p"}, "plan=None": None}


def dims(text: str) -> tuple[int, ...]:
    return tuple(int(v) for v in text.split("x"))


def _example(name: str):
    """An example module loaded from its file (the examples are scripts, not a package)."""
    spec = importlib.util.spec_from_file_location(f"hocket_example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_case(rank: int, world: int, case: dict) -> dict:
    wave_step = _example("acoustic_wave_3d").wave_step
    heat_step = _example("heat_2d").heat_step

    import hocket.ops as H
    from hocket.ops.stencil import block_slices, process_grid

    grid, r, procs = case["grid"], case["order"] // 2, tuple(case["procs"])
    gen = torch.Generator().manual_seed(0)
    full = torch.randn(grid, generator=gen)
    sl = block_slices(grid, procs, process_grid(procs, "fixed").coord)
    if case["problem"] == "heat":
        step = heat_step(r, len(procs), False, 0.1 / r)
        fields = (full[sl].clone(),)
    else:
        step = wave_step(r, len(procs), False)
        fields = (full[sl].clone(), H.Carried(full[sl].clone()), H.Static(torch.full_like(full[sl], 0.02 / r)))
    steps = {"": step}
    if case.get("compile"):  # the same step_fn under torch.compile (Inductor), one graph per box shape
        limit = "recompile_limit" if hasattr(torch._dynamo.config, "recompile_limit") else "cache_size_limit"
        setattr(torch._dynamo.config, limit, 64)
        steps[" compiled"] = torch.compile(step, dynamic=False)
    usable = {}
    for suffix, fn in steps.items():
        for name, plan in PLANS.items():
            depth = plan["chunks"] if isinstance(plan, dict) else 1
            if min(b for b in fields[0].shape[:len(procs)]) < depth * r or depth > case["steps"]:
                continue  # the blocks hold no halo that deep
            H.stencil_steps(fields, fn, r, procs, steps=case["steps"], plan=plan)  # checks, plans, compiles
            usable[name + suffix] = (plan, fn)
    samples: dict[str, list[float]] = {name: [] for name in usable}
    for _ in range(case["repeats"]):
        for name, (plan, fn) in usable.items():
            dist.barrier()
            start = time.perf_counter()
            H.stencil_steps(fields, fn, r, procs, steps=case["steps"], plan=plan)
            elapsed = torch.tensor([(time.perf_counter() - start) * 1e3 / case["steps"]])
            dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
            samples[name].append(float(elapsed))
    from hocket.ops.stencil import _CHOSEN

    chosen = [p.describe() for p in _CHOSEN.values()]
    return {"ms": {name: statistics.median(v) for name, v in samples.items()}, "chosen": chosen[-1] if chosen else ""}


def main(argv: list[str] | None = None) -> None:
    from hocket.launch import spawn

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world", type=int, default=2)
    parser.add_argument("--heat-grid", type=dims, default=(1024, 1024))
    parser.add_argument("--wave-grid", type=dims, default=(96, 96, 96))
    parser.add_argument("--orders", type=dims, default=(2, 4, 8), help="space orders, e.g. 2x4x8")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--smoke", action="store_true", help="tiny grids, two repeats")
    parser.add_argument("--devito", default=None, metavar="PYTHON",
                        help="a Python with devito and mpi4py: also run Devito on every case")
    parser.add_argument("--rounds", type=int, default=2, help="hocket/Devito alternations per case (--devito)")
    parser.add_argument("--json", default=None, help="write every number to this file")
    parser.add_argument("--compile-step", action="store_true",
                        help="also run every plan with step_fn under torch.compile (Inductor)")
    args = parser.parse_args(argv)
    if args.smoke:
        args.heat_grid, args.wave_grid, args.repeats, args.steps = (128, 128), (32, 32, 16), 2, 4
    cases = []
    for order in args.orders:
        cases.append(dict(problem="heat", grid=args.heat_grid, order=order, procs=(args.world,)))
        cases.append(dict(problem="wave", grid=args.wave_grid, order=order,
                          procs=(args.world // 2, 2) if args.world % 2 == 0 and args.world > 2 else (args.world, 1)))
    print(f"{'case':<34} {'plan':<14} {'ms/step':>9} {'vs seq':>7}")
    records = []
    for case in cases:
        case.update(steps=args.steps, repeats=args.repeats, compile=args.compile_step)
        hocket_rounds, devito_rounds = [], []
        for _ in range(args.rounds if args.devito else 1):
            hocket_rounds.append(spawn(run_case, world_size=args.world, backend="gloo", args=(case,),
                                       threads_per_rank=1, timeout_s=900)[0])
            if args.devito:
                devito_rounds.append(run_devito(args.devito, case, args.world))
        out = {"ms": {name: statistics.median(r["ms"][name] for r in hocket_rounds) for name in hocket_rounds[0]["ms"]},
               "chosen": hocket_rounds[-1]["chosen"]}
        label = f"{case['problem']} {'x'.join(map(str, case['grid']))} o{case['order']} p{case['procs']}"
        seq = out["ms"]["sequential"]
        for name, ms in out["ms"].items():
            extra = f"  (chose {out['chosen']})" if name == "plan=None" else ""
            if name.endswith(" compiled"):
                seq = out["ms"]["sequential compiled"]
            print(f"{label:<34} {name:<14} {ms:>9.3f} {seq / ms:>6.2f}x{extra}")
        record = {"case": {k: list(v) if isinstance(v, tuple) else v for k, v in case.items()}, "hocket": out}
        if devito_rounds:
            record["devito"] = pooled_devito(devito_rounds)
            for mode, entry in record["devito"].items():
                shown = f"{entry['ms_per_step']:>9.3f}" if "ms_per_step" in entry else f"{'refused':>9}"
                print(f"{label:<34} {'devito ' + mode:<14} {shown}  err {entry.get('max_rel_error', float('nan')):.1e}")
            timed = {m: e["ms_per_step"] for m, e in record["devito"].items() if "ms_per_step" in e}
            best_h = min(out["ms"].items(), key=lambda kv: kv[1])
            best_d = min(timed.items(), key=lambda kv: kv[1])
            record["hocket_best_over_devito_best"] = best_h[1] / best_d[1]
            print(f"{label:<34} hocket best {best_h[0]} {best_h[1]:.3f} ms / Devito best {best_d[0]} "
                  f"{best_d[1]:.3f} ms = {best_h[1] / best_d[1]:.2f}")
        records.append(record)
    if args.json:
        Path(args.json).write_text(json.dumps(records, indent=1))


def run_devito(python: str, case: dict, world: int) -> dict:
    """One run of ``devito_stencils.py`` under mpirun on ``world`` ranks: its JSON line."""
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        raise SystemExit("--devito needs mpirun (OpenMPI): run benchmarks/devito_setup.sh first")
    grid = "x".join(map(str, case["grid"]))
    cmd = [mpirun, "--allow-run-as-root", "--oversubscribe", "-n", str(world), python,
           str(Path(__file__).with_name("devito_stencils.py")), "--problem", case["problem"], "--grid", grid,
           "--order", str(case["order"]), "--steps", str(case["steps"]), "--repeats", str(case["repeats"])]
    env = dict(os.environ, OMP_NUM_THREADS="1", DEVITO_LANGUAGE="C", DEVITO_LOGGING="ERROR")
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, env=env, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or not lines:
        raise SystemExit(f"Devito run failed ({done.returncode}): {' '.join(cmd)}\n{done.stderr[-2000:]}")
    return json.loads(lines[-1])


def pooled_devito(rounds: list[dict]) -> dict:
    """Per mode: the median over rounds of each round's median ms per step, and the worst check error."""
    out: dict[str, dict] = {}
    for mode in [row["mode"] for row in rounds[0]["modes"]]:
        rows = [next(r for r in rnd["modes"] if r["mode"] == mode) for rnd in rounds]
        if any("error" in r for r in rows):
            out[mode] = {"error": next(r["error"] for r in rows if "error" in r)}
            continue
        out[mode] = {"ms_per_step": statistics.median(r["ms_per_step"] for r in rows),
                     "max_rel_error": max(r["max_rel_error"] for r in rows)}
    return out


if __name__ == "__main__":
    main()
