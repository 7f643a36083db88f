"""Plain eager calls with and without hocket's own CUDA graphs (``HOCKET_EAGER_GRAPHS``), on the cases
of ``bench_multigpu.py``:

    NCCL_P2P_DISABLE=1 torchrun --nproc_per_node 2 -m benchmarks.bench_eager_graphs --link host_staged \
        --profile $OUT/profile_host.json
    torchrun --nproc_per_node 2 -m benchmarks.bench_eager_graphs --link nvlink --profile $OUT/profile.json

The code under test is a user's eager loop: ``plan=None`` calls, no ``CapturedCall``. Per case:
compute alone, communication alone (NCCL and hocket's own transport of the link mode, the faster counts),
sequential NCCL, the eager planner's choice (``HOCKET_EAGER_GRAPHS=off``) and the eager-graph planner's
choice (``--mode``, default ``auto``: :mod:`hocket.plan.eager_graphs`). Each planner is autotuned on the
live group: its top predicted plans and sequential are timed as they run in that mode (under ``auto`` a
plan whose replay is priced cheaper is timed replayed, with its copies). Each choice's output is checked
against the sequential reference after its capture (a replay), then timed, then paired with sequential in
interleaved rounds (``bench_multigpu.paired``). Times are CUDA events, each sample behind a barrier, the
max over ranks, ``--reps`` calls back to back per sample (the steady state), medians of ``--iters``.

Results: JSON lines in ``--out`` (``run.eager_graphs`` and ``run.replayed`` on the graph planner's line, which
hocket validate leaves out; every line records the executor fields of ``bench_multigpu.executor_fields``), a summary
JSON beside it, a table printed last by rank 0.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch
import torch.distributed as dist

import hocket.ops as H
from benchmarks.bench_multigpu import (
    EXECUTOR_FIELDS,
    NVLINK_PROFILE,
    Case,
    checked,
    executor_fields,
    paired,
    shrunk,
    timed,
)
from hocket.bench.efficiency import overlap_score
from hocket.bench.provenance import collect, command_line
from hocket.bench.record import Baselines, make_record, write_records
from hocket.bench.tp_cases import CASE_SETS, case_sites
from hocket.core.plan import Plan
from hocket.core.site import Site
from hocket.env import overridden
from hocket.hardware import load_cluster
from hocket.hardware.fingerprint import fingerprint
from hocket.hardware.profile import load_profile
from hocket.launch import init_torchrun
from hocket.ops import dispatch
from hocket.ops.live import LiveConfig, LivePlanner, eager_graphs_planner, operator_runners, set_process_planner
from hocket.plan.autotune import AutotuneConfig
from hocket.plan.bucket import fit_plan
from hocket.plan.eager_graphs import eager_graph_cost_fn
from hocket.plan.search import predict_cost_fn
from hocket.timing.stats import Summary
from hocket.transport.copy_engine import close_mailboxes
from hocket.transport.host_relay import close_relays


def in_mode(mode: str, fn):
    """``fn`` called with ``HOCKET_EAGER_GRAPHS=mode`` (read by each call's dispatch)."""
    def call():
        with overridden({"HOCKET_EAGER_GRAPHS": mode}):
            return fn()
    return call


def measure_case(site: Site, args, *, group, device, planners: dict, cluster, profile, log) -> dict:
    site = shrunk(site, args.shrink)
    case = Case(site, group=group, device=device, seed=args.seed)
    row = {"site": site.to_dict(), "methods": {}, "failures": {}}
    calls = {}

    def measure(name: str, fn, *, plan: Plan | None = None, check: bool = True, mode: str = "off") -> None:
        if check:
            fn()
            fn()  # the second call of a replayed signature captures it: the check below reads a replay
            ok, err, message = checked(case, fn, name)
            if not ok:
                row["failures"][name] = message
                log(f"    {name:36s} FAILED: {message}")
                return
        else:
            err = None
            fn()
        calls[name] = fn
        summary = timed(fn, args, case)
        entry = {"median_ms": summary.median_ms, "p10_ms": summary.p10_ms, "p90_ms": summary.p90_ms,
                 "n": summary.n, "max_error": err, "mode": mode}
        if plan is not None:
            entry["plan"] = plan.to_dict()
            entry.update(executor_fields(case, plan))
            replays = planners[mode].replays(site, plan) if mode != "off" else False
            entry["replayed"] = replays
            cost = eager_graph_cost_fn(cluster, profile, steady_state=args.reps > 1, mode=mode) if mode != "off" \
                else predict_cost_fn(cluster, profile, steady_state=args.reps > 1)
            try:
                entry["predicted_ms"] = float(cost(site, plan))
            except ValueError:
                entry["predicted_ms"] = None
        row["methods"][name] = entry
        pred = entry.get("predicted_ms")
        log(f"    {name:36s} {summary.median_ms:7.3f} ms (p10 {summary.p10_ms:.3f}, p90 {summary.p90_ms:.3f})"
            + (f", predicted {pred:.3f}" if pred else "") + (" [replayed]" if entry.get("replayed") else ""))

    log(f"  {site.kind} m={site.m} k={site.k} n={site.n} ({site.name}) world {site.world}, link {args.link}")
    measure("compute_alone", case.compute_alone, check=False)
    measure("comm_nccl", case.comm("collective"), check=False)
    own = "copy_engine" if args.link == "nvlink" else "host_staged"
    measure(f"comm_{own}", case.comm(own), check=False)
    measure("sequential", lambda: case.run(Plan()), plan=Plan())
    def moded(mode, runners):
        return lambda plan: in_mode(mode, runners(plan))

    for mode in ((args.mode, "off") if args.graphs_first else ("off", args.mode)):
        planner = planners[mode]
        decision = planner.decide(site, group=group, device=device, autotune_switch=True,
                                  runners=lambda s, mode=mode: moded(mode, operator_runners(s, group=group,
                                                                                             device=device)))
        chosen = fit_plan(decision.plan, site)
        name = "planner" if mode == "off" else f"planner_graphs_{mode}"
        row[name] = {"plan": chosen.to_dict(), "source": decision.source,
                     "timings_ms": {Plan.from_json(k).describe(): v for k, v in decision.timings_ms.items()}}
        if decision.timings_ms:
            log(f"    {name} shortlist ({decision.source}): " + ", ".join(
                f"{k} {v:.3f}" for k, v in sorted(row[name]["timings_ms"].items(), key=lambda kv: kv[1])))
        measure(name, in_mode(mode, lambda chosen=chosen: case.run(chosen)), plan=chosen, mode=mode)
        if "sequential" in calls and name in calls:
            row[f"paired_{name}"] = paired(case, calls["sequential"], calls[name], args)
            p = row[f"paired_{name}"]
            log(f"    paired with sequential: {name} x{p['speedup']:.3f} (p10 {p['speedup_p10']:.3f}, "
                f"p90 {p['speedup_p90']:.3f})")
    calls.clear()
    torch.cuda.synchronize(device)
    dispatch.clear_prepared_cache()  # the case's graphs and their memory pools go before the next case
    H.close_contexts()
    return row


def write_rows(row: dict, args, provenance) -> None:
    methods = row["methods"]
    if "sequential" not in methods:
        return
    site = Site.from_dict(row["site"])
    comm = min(v["median_ms"] for k, v in methods.items() if k.startswith("comm_"))
    baselines = Baselines(sequential_ms=methods["sequential"]["median_ms"],
                          compute_alone_ms=methods["compute_alone"]["median_ms"], comm_alone_ms=comm)
    records = []
    for name, entry in methods.items():
        if "plan" not in entry:
            continue
        timing = Summary(median_ms=entry["median_ms"], p10_ms=entry["p10_ms"], p90_ms=entry["p90_ms"], n=entry["n"])
        extra = {**provenance.extra, "link": args.link, "method": name, "predicted_ms": entry.get("predicted_ms"),
                 "paired": row.get(f"paired_{name}"), "executor_fields": True,
                 **{key: entry[key] for key in EXECUTOR_FIELDS if key in entry}}
        if entry["mode"] != "off":
            extra.update(eager_graphs=entry["mode"], replayed=entry["replayed"])
        records.append(make_record(site=site, plan=Plan.from_dict(entry["plan"]), timing=timing, baselines=baselines,
                                   provenance=replace(provenance, extra=extra), max_error=entry.get("max_error")))
    write_records(args.out, records)


def table(rows: list[dict], args) -> str:
    graphs = f"planner_graphs_{args.mode}"
    head = (f"{'case (m k n)':26s} {'seq':>6s} {'mm':>6s} {'comm':>6s} | {'eager planner':>30s} {'x seq':>6s} "
            f"{'eff':>6s} | {'with eager graphs (' + args.mode + ')':>34s} {'x seq':>6s} {'eff':>6s} {'pred':>6s}")
    lines = [f"link mode: {args.link}; ms (medians); x seq from paired rounds; eff = overlap efficiency (DESIGN.md "
             f"section 4), or the speedup (x) where the possible saving is under 15%; R = replayed", head,
             "-" * len(head)]
    for row in rows:
        s, m = row["site"], row["methods"]
        if "sequential" not in m:
            lines.append(f"{s['kind']} {s['m']} {s['k']} {s['n']}: incomplete ({row['failures']})")
            continue
        seq, mm = m["sequential"]["median_ms"], m["compute_alone"]["median_ms"]
        comm = min(v["median_ms"] for k, v in m.items() if k.startswith("comm_"))
        cells = []
        for name in ("planner", graphs):
            if name not in m:
                cells.append(f"{'failed':>30s} {'':6s} {'':6s}")
                continue
            ms = m[name]["median_ms"]
            score = overlap_score(measured_ms=ms, sequential_ms=seq, compute_alone_ms=mm, comm_alone_ms=comm)
            plan = Plan.from_dict(m[name]["plan"]).describe() + (" R" if m[name].get("replayed") else "")
            width = 30 if name == "planner" else 34
            cells.append(f"{plan + f' {ms:.3f}':>{width}s} {row.get(f'paired_{name}', {}).get('speedup', seq / ms):6.3f} "
                         f"{score.label():>6s}")
        pred = m.get(graphs, {}).get("predicted_ms")
        lines.append(f"{s['kind']} {s['m']} {s['k']} {s['n']:<10d} {seq:6.3f} {mm:6.3f} {comm:6.3f} | {cells[0]} | "
                     f"{cells[1]} {(f'{pred:6.3f}' if pred else '     —')}")
    return "\n".join(lines)


def plot(rows: list[dict], args, path: Path) -> None:
    """Bars per case: sequential, the ideal max(mm, comm), and the two planners' choices (medians)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    graphs = f"planner_graphs_{args.mode}"
    rows = [r for r in rows if {"sequential", "compute_alone"} <= set(r["methods"])]
    if not rows:
        return

    def ms(row, name):
        return row["methods"].get(name, {}).get("median_ms", 0.0)

    bars = (("sequential", lambda r: ms(r, "sequential")),
            ("ideal max(mm, comm)", lambda r: max(ms(r, "compute_alone"),
                                                   min(v["median_ms"] for k, v in r["methods"].items()
                                                       if k.startswith("comm_")))),
            ("planner, issued", lambda r: ms(r, "planner")),
            (f"planner, HOCKET_EAGER_GRAPHS={args.mode}", lambda r: ms(r, graphs)))
    fig, ax = plt.subplots(figsize=(1.6 * len(rows) + 2, 4))
    width = 0.8 / len(bars)
    for i, (label, value) in enumerate(bars):
        ax.bar([x + i * width for x in range(len(rows))], [value(r) for r in rows], width, label=label)
    ax.set_xticks([x + 0.4 - width / 2 for x in range(len(rows))],
                  [f"{r['site']['kind']}\n{r['site']['m']}x{r['site']['k']}x{r['site']['n']}" for r in rows], fontsize=8)
    ax.set_ylabel("ms per call (median)")
    ax.set_title(f"{args.link}: eager calls issued vs replayed from hocket's graphs", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--link", choices=("nvlink", "host_staged"), default="host_staged")
    p.add_argument("--mode", choices=("auto", "on"), default="auto", help="HOCKET_EAGER_GRAPHS of the second planner")
    p.add_argument("--graphs-first", action="store_true", help="autotune and time the eager-graph planner before the "
                   "eager one (the first autotune of a case runs on a process that has not run its plans yet)")
    p.add_argument("--cases", default="issue6", help=f"comma-separated shape sets: {', '.join(CASE_SETS)}")
    p.add_argument("--pick", default="", help="comma-separated case indices (0-based) of the sets, e.g. 2,5")
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--reps", type=int, default=4, help="calls back to back per timed sample (the steady state)")
    p.add_argument("--seed", type=int, default=int.from_bytes(os.urandom(3), "little"))
    p.add_argument("--cluster", default=None, help="cluster preset (default h200x2, or h200-host-staged)")
    p.add_argument("--profile", default=None, help="calibration profile JSON of this lease (hocket calibrate)")
    p.add_argument("--shrink", type=int, default=1, help="divide every case's m, k, n by this (dry runs)")
    p.add_argument("--time-budget-s", type=float, default=0.0, help="start no new case after this many seconds")
    p.add_argument("--out", default=None, help="JSON lines path (default $OUT/bench_eager_graphs_<link>.jsonl)")
    args = p.parse_args(argv)
    if args.iters < 50:
        p.error(f"--iters={args.iters}: use at least 50 timed runs")
    if args.reps < 1:
        p.error(f"--reps={args.reps}: give an int >= 1")
    if args.out is None:
        args.out = str(Path(os.environ.get("OUT", ".")) / f"bench_eager_graphs_{args.link}.jsonl")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    ctx = init_torchrun(backend="nccl")
    if ctx.device.type != "cuda":
        raise SystemExit("bench_eager_graphs.py needs GPUs: CUDA graphs capture GPU work only")
    device, world, rank0 = ctx.device, ctx.world_size, ctx.rank == 0
    log = (lambda msg: print(msg, flush=True)) if rank0 else (lambda msg: None)
    sites = [s for name in args.cases.split(",") for s in case_sites(name.strip(), world=world, tokens=8192)]
    if args.pick:
        sites = [sites[int(i)] for i in args.pick.split(",")]
    cluster_name = args.cluster or ("h200-host-staged" if args.link == "host_staged" else "h200x2")
    cluster = load_cluster(cluster_name)
    profile_path = args.profile or (NVLINK_PROFILE if args.link == "nvlink" else None)
    profile = load_profile(profile_path, expected=None) if profile_path else None
    base = LivePlanner(cluster=cluster, profile=profile,
                       config=LiveConfig(autotune=True, use_disk_cache=False, steady_state=args.reps > 1,
                                         tuning=AutotuneConfig(top_k=4, warmup=3, iters=16, rounds=8,
                                                               reps=args.reps)))
    set_process_planner(base)
    planners = {"off": base, args.mode: eager_graphs_planner(args.mode)}
    provenance = collect(command=command_line(), hardware=fingerprint(cluster) if rank0 else {},
                         extra={"world": world, "backend": "nccl", "cluster": cluster_name, "iters": args.iters,
                                "reps": args.reps, "seed": args.seed, "profile": str(profile_path or "")})
    log(f"bench_eager_graphs: {len(sites)} cases, world {world}, link {args.link}, cluster {cluster_name}, "
        f"mode {args.mode}, iters {args.iters} x {args.reps} reps, torch {torch.__version__}")
    summary = {"link": args.link, "mode": args.mode, "world": world, "cluster": cluster_name,
               "command": provenance.command, "environment": provenance.environment, "rows": []}
    started = time.monotonic()
    for i, site in enumerate(sites):
        if args.time_budget_s and time.monotonic() - started > args.time_budget_s and i:
            log(f"time budget of {args.time_budget_s:g} s spent: cases {i}..{len(sites) - 1} not measured")
            break
        row = measure_case(site, args, group=dist.group.WORLD, device=device, planners=planners, cluster=cluster,
                           profile=profile, log=log)
        summary["rows"].append(row)
        if rank0:
            write_rows(row, args, provenance)
    if rank0:
        out = Path(args.out)
        out.with_suffix(".summary.json").write_text(json.dumps(summary, indent=1, default=str))
        plot(summary["rows"], args, out.with_suffix(".png"))
        log(f"results -> {out} (+ {out.with_suffix('.summary.json').name}, {out.with_suffix('.png').name})\n")
        log(table(summary["rows"], args))
    close_mailboxes()
    close_relays()
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
