"""Halo-exchange stencils on CPU gloo ranks: time per step of each strategy against ``sequential`` (hocket side of
issue 35's benchmark; the Devito side is not here).

For 2-D heat diffusion and the 3-D acoustic wave (``examples/heat_2d.py``, ``examples/acoustic_wave_3d.py``) at
space orders 2, 4 and 8, on ``--world`` self-spawned gloo ranks (one compute thread each), every rank runs each
plan (``sequential``, ``overlap``, ``deep_halo`` with ``s`` = 2 and 4, and ``plan=None``) once to check and
plan, then ``--repeats`` timed calls of ``--steps`` steps, interleaved plan by plan; a sample is the slowest
rank's time (a barrier before each call). Prints per case the median ms per step of each plan and its ratio to
sequential, and what ``plan=None`` chose.

    python benchmarks/bench_stencils.py --smoke
    python benchmarks/bench_stencils.py --world 2 --heat-grid 2048x2048 --wave-grid 128x128x128 --steps 10
"""

from __future__ import annotations

import argparse
import statistics
import sys
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


def run_case(rank: int, world: int, case: dict) -> dict:
    sys.path.insert(0, str(EXAMPLES))
    from acoustic_wave_3d import wave_step
    from heat_2d import heat_step

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
    usable = {}
    for name, plan in PLANS.items():
        depth = plan["chunks"] if isinstance(plan, dict) else 1
        if min(b for b in fields[0].shape[:len(procs)]) < depth * r or depth > case["steps"]:
            continue  # the blocks hold no halo that deep
        H.stencil_steps(fields, step, r, procs, steps=case["steps"], plan=plan)
        usable[name] = plan
    samples: dict[str, list[float]] = {name: [] for name in usable}
    for _ in range(case["repeats"]):
        for name, plan in usable.items():
            dist.barrier()
            start = time.perf_counter()
            H.stencil_steps(fields, step, r, procs, steps=case["steps"], plan=plan)
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
    args = parser.parse_args(argv)
    if args.smoke:
        args.heat_grid, args.wave_grid, args.repeats, args.steps = (128, 128), (32, 32, 16), 2, 4
    cases = []
    for order in args.orders:
        cases.append(dict(problem="heat", grid=args.heat_grid, order=order, procs=(args.world,)))
        cases.append(dict(problem="wave", grid=args.wave_grid, order=order,
                          procs=(args.world // 2, 2) if args.world % 2 == 0 and args.world > 2 else (args.world, 1)))
    print(f"{'case':<34} {'plan':<14} {'ms/step':>9} {'vs seq':>7}")
    for case in cases:
        case.update(steps=args.steps, repeats=args.repeats)
        out = spawn(run_case, world_size=args.world, backend="gloo", args=(case,), threads_per_rank=1,
                    timeout_s=900)[0]
        label = f"{case['problem']} {'x'.join(map(str, case['grid']))} o{case['order']} p{case['procs']}"
        seq = out["ms"]["sequential"]
        for name, ms in out["ms"].items():
            extra = f"  (chose {out['chosen']})" if name == "plan=None" else ""
            print(f"{label:<34} {name:<14} {ms:>9.3f} {seq / ms:>6.2f}x{extra}")


if __name__ == "__main__":
    main()
