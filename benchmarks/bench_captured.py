"""Eager against CUDA-graph-captured calls (``hocket.ops.CapturedCall``) on the cases of
``bench_multigpu.py``, where the host's issue time matters: the slow link (``--link host_staged``,
hocket's relay through pinned host memory; the NCCL baselines with ``NCCL_P2P_DISABLE=1``):

    NCCL_P2P_DISABLE=1 torchrun --nproc_per_node 2 -m benchmarks.bench_captured --pick 2,5

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
from dataclasses import replace
from pathlib import Path

import torch
import torch.distributed as dist

import hocket.ops as H
from benchmarks.bench_multigpu import Case, checked, runnable
from hocket.bench.efficiency import overlap_score
from hocket.bench.provenance import Provenance, command_line, git_hash, transport_environment, versions
from hocket.bench.record import Baselines, make_record, write_records
from hocket.bench.tp_cases import case_sites
from hocket.core.plan import Plan
from hocket.core.site import Site
from hocket.core.sizes import MIB, TransportSizes
from hocket.hardware import load_cluster
from hocket.hardware.fingerprint import fingerprint
from hocket.hardware.profile import load_profile
from hocket.launch import init_torchrun
from hocket.ops import CapturedCall
from hocket.plan.search import SearchConfig, search
from hocket.timing.stats import Summary, summarize
from hocket.timing.timer import sample_ms
from hocket.transport.host_relay import close_relays
from hocket.transport.registry import get_transport


def methods(case: Case, chunks: tuple[int, ...], piece_mbs: tuple[float, ...], planned: dict) -> dict:
    """name -> (callable of the case's inputs A, B, whether its output is checked, modes it is timed in)."""
    def comm(mb: float):
        relay = get_transport("host_staged", case.handle, sizes=TransportSizes(piece_bytes=max(1, int(mb * MIB))))
        if case.site.kind == "ag_mm":
            return lambda a, b: relay.all_gather(case.comm_out, case.comm_in).wait()
        return lambda a, b: relay.reduce_scatter(case.comm_out, case.comm_in).wait()

    both = ("eager", "captured")

    def plan_call(plan):
        def call(a, b):
            if case.site.kind == "ag_mm":
                return H.all_gather_matmul(a, [b], 0, case.group, return_A=False, plan=plan)[1][0]
            return H.matmul_reduce_scatter(a, b, "sum", 0, case.group, plan=plan)
        return call

    out = {"compute_alone": (lambda a, b: case.compute_alone(), False, both),
           "sequential": (plan_call(Plan()), True, both)}
    for mb in piece_mbs:  # the relay alone in messages of each size: the fastest is the comm baseline
        out[f"comm_host_staged@{mb:g}MB"] = (comm(mb), False, both)
    for c in chunks:
        plan = Plan(strategy="chunked", chunks=c, transport="host_staged", order="local_first")
        if runnable(plan, case.site.kind):
            out[plan.describe()] = (plan_call(plan), True, both)
    for mode, plan in planned.items():  # the planner's choice, priced for that mode, measured in it
        out[f"planner[{mode}] {plan.describe()}"] = (plan_call(plan), True, (mode,))
    return out


def planner_choices(site, profile) -> dict:
    """The plan hocket's planner picks by prediction for an eager loop (steady state) and for a loop of
    CUDA graph replays (``SearchConfig(captured=True)``), on the slow-link cluster."""
    cluster = load_cluster("h200-host-staged")
    return {"eager": search(site, cluster, profile=profile, config=SearchConfig(steady_state=True)).chosen,
            "captured": search(site, cluster, profile=profile, config=SearchConfig(captured=True)).chosen}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cases", default="issue6")
    p.add_argument("--pick", default="", help="comma-separated case indices of the set (default: all)")
    p.add_argument("--chunks", default="1,2,4,8,16", help="local_first chunk counts of the relay plans")
    p.add_argument("--piece-mb", default="2,4,8", help="relay message sizes the relay alone is timed with (MB)")
    p.add_argument("--profile", default=None, help="calibration profile JSON the planner rows price with")
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
        piece_mbs = tuple(float(c) for c in args.piece_mb.split(","))
    except ValueError:
        p.error(f"--chunks={args.chunks!r} / --piece-mb={args.piece_mb!r}: write comma-separated numbers, e.g. 1,2,4")
    profile = load_profile(args.profile, expected=None) if args.profile else None
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
        planned = planner_choices(site, profile)
        row = {"site": site.to_dict(), "eager": {}, "captured": {}, "max_error": {},
               "planner": {mode: plan.to_dict() for mode, plan in planned.items()}}
        for name, (fn, check, modes) in methods(case, chunks, piece_mbs, planned).items():
            for mode in modes:
                measure_one(row, case, name, fn, check, mode, args, log)
            torch.cuda.synchronize(device)
        rows.append(row)
        close_relays()
        torch.cuda.empty_cache()
    if rank0:
        table(rows)
        plot(rows, Path(args.out).with_suffix(".png"))
        cluster = load_cluster("h200-host-staged")
        provenance = Provenance(hardware=fingerprint(cluster), environment=transport_environment(), versions=versions(),
                                git_hash=git_hash(), command=command_line(),
                                extra={"world": dist.get_world_size(), "backend": "nccl", "cluster": cluster.name,
                                       "iters": args.iters, "reps": args.reps, "seed": args.seed,
                                       "profile": str(args.profile or ""), "link": "host_staged"})
        write_records(Path(args.out).with_suffix(".jsonl"), records(rows, provenance), append=False)
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        provenance = {"git_hash": git_hash(), "versions": versions(), "environment": transport_environment(),
                      "command": command_line()}
        Path(args.out).write_text(json.dumps({"rows": rows, "args": vars(args), "provenance": provenance},
                                             indent=1, default=str) + "\n")
        print(f"results -> {args.out}")
    dist.barrier()
    dist.destroy_process_group()
    return 0


def measure_one(row: dict, case: Case, name: str, fn, check: bool, mode: str, args, log) -> None:
    """Check (where the method has an output) and time one method in one mode into ``row``."""
    call = lambda: fn(case.A, case.B)  # noqa: E731
    if mode == "captured":
        step = CapturedCall(fn, case.A, case.B, what=f"{name} (bench)")
        call = lambda: step(*step.inputs)  # noqa: E731
    if check:
        ok, err, message = checked(case, call, f"{name} {mode}")
        if not ok:
            log(f"    {name:44s} {mode:8s} FAILED: {message}")
            return
        row["max_error"][f"{name} {mode}"] = err
    s = summarize(sample_ms(call, iters=args.iters, warmup=args.warmup, group=case.group, device=case.device,
                            reps=args.reps))
    row[mode][name] = s.to_dict()
    log(f"    {name:44s} {mode:8s} {s.median_ms:7.3f} ms (p10 {s.p10_ms:.3f}, p90 {s.p90_ms:.3f})")


def records(rows: list, provenance: Provenance) -> list:
    """The rows as results lines (``hocket.bench.record`` schema) for hocket validate and hocket regret:
    one line per measured plan and mode, judged against that mode's own sequential and compute-alone times
    and the fastest relay-alone time of the mode; ``run.captured`` marks the CUDA graph replays."""
    lines = []
    for row in rows:
        site = Site.from_dict(row["site"])
        plans = {"sequential": Plan()}
        plans.update({f"planner[{mode}] {Plan.from_dict(d).describe()}": Plan.from_dict(d)
                      for mode, d in row.get("planner", {}).items()})
        for mode in ("eager", "captured"):
            got = row[mode]
            comms = [v["median_ms"] for k, v in got.items() if k.startswith("comm_")]
            if "sequential" not in got or "compute_alone" not in got or not comms:
                continue
            base = Baselines(sequential_ms=got["sequential"]["median_ms"], compute_alone_ms=got["compute_alone"]["median_ms"],
                             comm_alone_ms=min(comms), comm_alone_transport="host_staged")
            seen = set()
            for name, timing in got.items():
                plan = plans.get(name) or (Plan.from_dict(_plan_of(name)) if "/host_staged" in name else None)
                if plan is None or plan in seen:  # the planner's pick is a plan measured under its own name too
                    continue
                seen.add(plan)
                extra = {**provenance.extra, "captured": mode == "captured", "method": name,
                         "host_stage_signal": "device", "host_stage_calls": "one"}
                lines.append(make_record(site=site, plan=plan, timing=Summary(**timing), baselines=base,
                                         provenance=replace(provenance, extra=extra),
                                         max_error=row["max_error"].get(f"{name} {mode}")))
    return lines


def _plan_of(name: str) -> dict:
    """The plan of a method named ``chunked(c)/host_staged[local_first]``."""
    chunks = int(name.split("(")[1].split(")")[0])
    return {"strategy": "chunked", "chunks": chunks, "transport": "host_staged", "order": "local_first"}


def scores(row: dict) -> dict | None:
    """The row's baselines and, per mode, the planner's and the best relay plan's (ms, efficiency, name)."""
    e, c = row["eager"], row["captured"]
    comms = {f"{k} {mode}": v["median_ms"] for mode, d in (("eager", e), ("captured", c)) for k, v in d.items()
             if k.startswith("comm_")}
    seq = e.get("sequential", {}).get("median_ms")
    alone = [d["compute_alone"]["median_ms"] for d in (e, c) if "compute_alone" in d]
    mm = min(alone) if alone else None
    if not (seq and mm and comms):
        return None
    comm_name = min(comms, key=comms.get)
    out = {"sequential_ms": seq, "compute_ms": mm, "comm_ms": comms[comm_name], "comm": comm_name}
    for mode, d in (("eager", e), ("captured", c)):
        # each mode against its own sequential (a captured one is a little faster), and the ideal
        # max(fastest compute alone, fastest comm alone) of either mode
        seq = d.get("sequential", {}).get("median_ms") or out["sequential_ms"]
        out[f"sequential_{mode}_ms"] = seq
        for what, keep in (("planner", lambda k: k.startswith("planner[")),
                           ("best", lambda k: "/host_staged" in k and not k.startswith("planner["))):
            plans = {k: v["median_ms"] for k, v in d.items() if keep(k)}
            if plans:
                name = min(plans, key=plans.get)
                score = overlap_score(measured_ms=plans[name], sequential_ms=seq, compute_alone_ms=mm,
                                      comm_alone_ms=out["comm_ms"])
                out[f"{what}_{mode}"] = (plans[name], score.overlap_efficiency, name.split("] ")[-1].split("/")[0])
    return out


def table(rows: list) -> None:
    """The summary: efficiency against max(compute alone, the fastest relay-alone or NCCL time measured)."""
    print("\nslow link; eff = (seq - T) / (seq - max(mm, comm)): seq of the same mode (eager or CUDA graph), "
          "mm and comm the fastest of either mode (comm: relay alone at any message size)")
    print(f"{'case (m k n)':26s} {'seq':>6s} {'mm':>6s} {'comm':>6s}  {'planner eager':>22s}  "
          f"{'planner captured':>22s}  {'best eager':>22s}  {'best captured':>22s}")
    for row in rows:
        s, got = row["site"], scores(row)
        label = f"{s['kind']} {s['m']} {s['k']} {s['n']}"
        if got is None:
            print(f"{label:26s} baselines missing")
            continue
        cells = []
        for key in ("planner_eager", "planner_captured", "best_eager", "best_captured"):
            if key in got:
                ms, eff, name = got[key]
                cells.append(f"{ms:6.3f} {eff:4.2f} {name:>10s}")
            else:
                cells.append(f"{'-':>22s}")
        print(f"{label:26s} {got['sequential_ms']:6.3f} {got['compute_ms']:6.3f} {got['comm_ms']:6.3f}  "
              + "  ".join(cells))


def plot(rows: list, path: Path) -> None:
    """Bars per case: sequential, the ideal max(mm, comm), and the planner's choice eager and captured."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    got = [(r["site"], scores(r)) for r in rows]
    got = [(s, g) for s, g in got if g is not None]
    if not got:
        return
    bars = (("sequential (NCCL via host)", lambda g: g["sequential_ms"]),
            ("ideal max(mm, comm)", lambda g: max(g["compute_ms"], g["comm_ms"])),
            ("planner, eager", lambda g: g.get("planner_eager", (0,))[0]),
            ("planner, CUDA graph", lambda g: g.get("planner_captured", (0,))[0]))
    fig, ax = plt.subplots(figsize=(1.6 * len(got) + 2, 4))
    width = 0.8 / len(bars)
    for i, (label, value) in enumerate(bars):
        ax.bar([x + i * width for x in range(len(got))], [value(g) for _, g in got], width, label=label)
    ax.set_xticks([x + 0.4 - width / 2 for x in range(len(got))],
                  [f"{s['kind']}\n{s['m']}x{s['k']}x{s['n']}" for s, _ in got], fontsize=8)
    ax.set_ylabel("ms per call (median)")
    ax.set_title("slow link (through pinned host memory): eager vs CUDA graph", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
