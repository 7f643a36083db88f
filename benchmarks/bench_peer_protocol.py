"""Copy-engine protocols head to head: sequential, chunked/copy_engine with each peer protocol
(push, pull, put: ``HOCKET_PEER_PROTOCOL``), and PyTorch's async-TP op, on the multi-GPU cases.

Every method is checked against the reference once, then all are timed in interleaved rounds
(``--rounds`` of ``--iters / --rounds`` samples each; a sample is the mean of ``--reps`` calls back
to back, the steady state of a training loop), medians over all samples, the max across ranks.
Run from the repo root:

    torchrun --nproc_per_node 2 benchmarks/bench_peer_protocol.py --cases issue6 --iters 60 --reps 8

Prints a table (ms, and each method's speedup over sequential) and writes one JSON object per
case to ``--out`` (default ``$OUT/bench_peer_protocol.jsonl``).
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import asdict
from pathlib import Path

import torch
import torch.distributed as dist

from bench_multigpu import Case, checked  # sibling script: operands, reference check
from hocket.bench.provenance import collect, command_line
from hocket.timing.stats import summarize
from hocket.timing.timer import sample_ms
from hocket.env import overridden
from hocket.bench.tp_cases import CASE_SETS, case_sites
from hocket.launch import init_torchrun
from hocket.ops import close_contexts
from hocket.ops.lowering.peer_pipe import close_peer_pipes
from hocket.core.plan import Plan
from hocket.core.peer_protocol import available


def methods_for(case: Case, chunk_counts: tuple[int, ...]) -> dict[str, tuple[dict[str, str], object]]:
    """name -> (environment during the call, callable)."""
    out = {"sequential": ({}, lambda: case.run(Plan()))}
    kind = case.site.kind
    for chunks in chunk_counts:
        plan = Plan(strategy="chunked", chunks=chunks, transport="copy_engine")
        for protocol in ("push", "pull", "put"):
            if not available(protocol, kind, chunks):
                continue  # no form of it there (hocket.core.peer_protocol)
            out[f"{plan.describe()} {protocol}"] = ({"HOCKET_PEER_PROTOCOL": protocol},
                                                    lambda plan=plan: case.run(plan))
    if kind in ("ag_mm", "mm_rs"):
        out["pytorch_async_tp"] = ({}, case.pytorch(native=False))
    return out


def measure(case: Case, args) -> dict:
    methods = methods_for(case, args.chunks)
    errors, failed = {}, {}
    for name, (env, fn) in list(methods.items()):
        with overridden(env):
            ok, err, message = checked(case, fn, name)
        if not ok:
            failed[name] = message
            methods.pop(name)
        else:
            errors[name] = err
    samples: dict[str, list[float]] = {name: [] for name in methods}
    per_round = max(1, args.iters // args.rounds)
    for _ in range(args.rounds):
        for name, (env, fn) in methods.items():
            with overridden(env):  # set for the whole sample, not per call (it would cost host time)
                samples[name] += sample_ms(fn, iters=per_round, warmup=1, group=case.group, device=case.device,
                                           reps=args.reps)
    summaries = {name: summarize(values).to_dict() for name, values in samples.items()}
    close_peer_pipes()
    close_contexts()
    return {"site": case.site.to_dict(), "methods": summaries, "max_error": errors, "failed": failed}


def short(name: str) -> str:
    return name.replace("chunked(", "c(").replace("/copy_engine", "/ce").replace("pytorch_async_tp", "pytorch")[:22]


def table(rows: list[dict]) -> str:
    names = []
    for row in rows:
        names += [n for n in row["methods"] if n not in names]
    lines = [f"{'case (m k n)':24s} " + " ".join(f"{short(n):>22s}" for n in names)]
    for row in rows:
        s = row["site"]
        seq = row["methods"].get("sequential", {}).get("median_ms")
        cells = []
        for n in names:
            m = row["methods"].get(n)
            if m is None:
                cells.append(f"{'failed' if n in row['failed'] else '-':>22s}")
            else:
                x = f" x{seq / m['median_ms']:.3f}" if seq else ""
                cells.append(f"{m['median_ms']:>13.3f}{x:>9s}")
        lines.append(f"{s['kind']} {s['m']} {s['k']} {s['n']:<8d} "[:24].ljust(24) + " " + " ".join(cells))
    return "\n".join(lines)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", default="issue6", help=f"comma-separated shape sets: {', '.join(CASE_SETS)}")
    p.add_argument("--pick", default="", help="comma-separated case indices to run (default: all)")
    p.add_argument("--chunks", default="1,2", help="chunk counts of the copy-engine plans")
    p.add_argument("--iters", type=int, default=60)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--reps", type=int, default=8)
    p.add_argument("--seed", type=int, default=int.from_bytes(os.urandom(3), "little"))
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    try:
        args.chunks = tuple(int(c) for c in args.chunks.split(","))
    except ValueError:
        p.error(f"--chunks={args.chunks!r}: write comma-separated ints, e.g. 1,2")
    if args.iters < 50:
        p.error(f"--iters={args.iters}: use at least 50 timed samples")
    if args.rounds < 1 or args.reps < 1:
        p.error("--rounds and --reps must be >= 1")
    if args.out is None:
        args.out = str(Path(os.environ.get("OUT", ".")) / "bench_peer_protocol.jsonl")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    ctx = init_torchrun(backend="nccl")
    rank0 = ctx.rank == 0
    sites = [s for name in args.cases.split(",") for s in case_sites(name.strip(), world=ctx.world_size)]
    if args.pick:
        sites = [sites[int(i)] for i in args.pick.split(",")]
    provenance = collect(command=command_line(), hardware={}, extra={"iters": args.iters, "reps": args.reps,
                                                                     "rounds": args.rounds, "seed": args.seed})
    rows = []
    for site in sites:
        case = Case(site, group=dist.group.WORLD, device=ctx.device, seed=args.seed)
        row = measure(case, args)
        row["provenance"] = asdict(provenance)
        rows.append(row)
        if rank0:
            print(table([row]).splitlines()[-1], flush=True)
            with open(args.out, "a") as fh:
                fh.write(json.dumps(row, default=str) + "\n")
        del case
        torch.cuda.empty_cache()
    if rank0:
        print(f"\nmedian ms of {args.iters} samples x {args.reps} calls ({args.rounds} interleaved rounds), "
              f"x = sequential / method\n" + table(rows), flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
