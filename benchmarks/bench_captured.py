"""Eager against CUDA-graph-captured calls (``hocket.ops.CapturedCall``) on the cases of
``bench_multigpu.py``, where the host's issue time matters: the slow link (``--link host_staged``,
hocket's relay through pinned host memory; the NCCL baselines with ``NCCL_P2P_DISABLE=1``):

    NCCL_P2P_DISABLE=1 torchrun --nproc_per_node 2 benchmarks/bench_captured.py --pick 2,5

Per case: compute alone, NCCL sequential, the relay alone, and ``chunked(c)/host_staged[local_first]``
for each ``--chunks``, each eager and captured (captured: the inputs are the graph's, so a call is one
replay). Every method's output is checked against the sequential reference first. Times are CUDA
events behind a barrier, max over ranks, ``--reps`` calls back to back per sample (the steady
state), medians of ``--iters``. Overlap efficiency (DESIGN.md section 4) of the best eager and the
best captured plan, both against the fastest communication alone measured (eager or captured, NCCL
or relay). Rank 0 prints a table last and writes every median to ``--out`` (JSON).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from bench_multigpu import Case, checked, runnable  # same folder
from hocket.bench.efficiency import overlap_score
from hocket.bench.provenance import command_line, git_hash, transport_environment, versions
from hocket.bench.stats import summarize
from hocket.bench.timer import sample_ms
from hocket.bench.tp_cases import case_sites
from hocket.launch import init_torchrun
import hocket.ops as H
from hocket.ops import CapturedCall
from hocket.plan.plan import Plan
from hocket.transport.host_relay import close_relays
from hocket.transport.registry import get_transport


def methods(case: Case, chunks: tuple[int, ...]) -> dict:
    """name -> (eager callable of the case's inputs A, B, whether its output is checked)."""
    relay = get_transport("host_staged", case.handle)
    if case.site.kind == "ag_mm":
        def comm(a, b):
            relay.all_gather(case.comm_out, case.comm_in).wait()
    else:
        def comm(a, b):
            relay.reduce_scatter(case.comm_out, case.comm_in).wait()

    def plan_call(plan):
        def call(a, b):
            if case.site.kind == "ag_mm":
                return H.all_gather_matmul(a, [b], 0, case.group, return_A=False, plan=plan)[1][0]
            return H.matmul_reduce_scatter(a, b, "sum", 0, case.group, plan=plan)
        return call

    out = {"compute_alone": (lambda a, b: case.compute_alone(), False),
           "sequential": (plan_call(Plan()), True),
           "comm_host_staged": (comm, False)}
    for c in chunks:
        plan = Plan(strategy="chunked", chunks=c, transport="host_staged", order="local_first")
        if runnable(plan, case.site.kind):
            out[plan.describe()] = (plan_call(plan), True)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cases", default="issue6")
    p.add_argument("--pick", default="", help="comma-separated case indices of the set (default: all)")
    p.add_argument("--chunks", default="1,2,4,8", help="local_first chunk counts of the relay plans")
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--reps", type=int, default=4)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "bench_captured.json"))
    args = p.parse_args(argv)
    if args.iters < 1 or args.reps < 1:
        p.error(f"--iters {args.iters} and --reps {args.reps} must be >= 1")
    try:
        chunks = tuple(int(c) for c in args.chunks.split(","))
    except ValueError:
        p.error(f"--chunks={args.chunks!r}: write comma-separated chunk counts, e.g. 1,2,4")
    ctx = init_torchrun(backend="nccl")
    group, device = dist.group.WORLD, ctx.device
    rank0 = dist.get_rank() == 0
    log = (lambda msg: print(msg, flush=True)) if rank0 else (lambda msg: None)
    sites = case_sites(args.cases, world=dist.get_world_size())
    picks = [int(i) for i in args.pick.split(",")] if args.pick else list(range(len(sites)))
    rows = []
    for index in picks:
        site = sites[index]
        case = Case(site, group=group, device=device, seed=args.seed)
        log(f"{site.kind} m={site.m} k={site.k} n={site.n} world {site.world}")
        row = {"site": site.to_dict(), "eager": {}, "captured": {}, "max_error": {}}
        for name, (fn, check) in methods(case, chunks).items():
            for mode in ("eager", "captured"):
                call = (lambda fn=fn: fn(case.A, case.B)) if mode == "eager" else None
                if mode == "captured":
                    step = CapturedCall(fn, case.A, case.B, what=f"{name} (bench)")
                    call = (lambda step=step: step(*step.inputs))
                if check:
                    ok, err, message = checked(case, call, f"{name} {mode}")
                    if not ok:
                        log(f"    {name:40s} {mode:8s} FAILED: {message}")
                        continue
                    row["max_error"][f"{name} {mode}"] = err
                s = summarize(sample_ms(call, iters=args.iters, warmup=args.warmup, group=group, device=device,
                                        reps=args.reps))
                row[mode][name] = s.to_dict()
                log(f"    {name:40s} {mode:8s} {s.median_ms:7.3f} ms (p10 {s.p10_ms:.3f}, p90 {s.p90_ms:.3f})")
            torch.cuda.synchronize(device)
        rows.append(row)
        close_relays()
        torch.cuda.empty_cache()
    if rank0:
        table(rows)
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        provenance = {"git_hash": git_hash(), "versions": versions(), "environment": transport_environment(),
                      "command": command_line()}
        Path(args.out).write_text(json.dumps({"rows": rows, "args": vars(args), "provenance": provenance},
                                             indent=1, default=str) + "\n")
        print(f"results -> {args.out}")
    dist.barrier()
    dist.destroy_process_group()
    return 0


def table(rows: list) -> None:
    print("\ncase (m k n)                seq    mm  comm(e) comm(c)  best eager (ms, eff)              "
          "best captured (ms, eff)")
    for row in rows:
        s = row["site"]
        e, c = row["eager"], row["captured"]
        med = lambda d, k: d.get(k, {}).get("median_ms")  # noqa: E731
        seq, mm = med(e, "sequential"), med(e, "compute_alone")
        comms = [v for v in (med(e, "comm_host_staged"), med(c, "comm_host_staged")) if v]
        if not (seq and mm and comms):
            print(f"{s['kind']} {s['m']} {s['k']} {s['n']}: baselines missing")
            continue

        def best(d):
            plans = {k: v["median_ms"] for k, v in d.items() if "/host_staged" in k}
            if not plans:
                return "-"
            name = min(plans, key=plans.get)
            score = overlap_score(measured_ms=plans[name], sequential_ms=seq, compute_alone_ms=mm,
                                  comm_alone_ms=min(comms))
            return f"{plans[name]:.3f} {score.overlap_efficiency:.2f} {name.split('/')[0]}"

        print(f"{s['kind']} {s['m']} {s['k']} {s['n']:<8} {seq:6.3f} {mm:5.3f} {med(e, 'comm_host_staged') or 0:7.3f} "
              f"{med(c, 'comm_host_staged') or 0:7.3f}  {best(e):34s} {best(c)}")


if __name__ == "__main__":
    sys.exit(main())
