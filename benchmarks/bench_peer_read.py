"""Peer-read vs copy-engine tile_fused all-gather + matmul on 2+ GPUs (issue 6 item 2).

    torchrun --nproc_per_node 2 benchmarks/bench_peer_read.py --iters 50

Per ag_mm case of ``--cases`` (default: the three ag_mm cases of issue 6), after checking every
method's output against the sequential reference: compute alone (torch.mm on the whole per-rank
problem), communication alone (NCCL all-gather and the copy-engine transport), sequential (NCCL +
torch.mm), PyTorch's ``fused_all_gather_matmul``, ``tile_fused`` over ``copy_engine`` (chunks 1; 4
measured slower in run6's smoke), ``tile_fused`` over ``peer_read``, and the peer-read kernel with every base pointing at local
memory and every flag pre-set (the same kernel without remote reads or waits: what the GEMM itself
costs). Times: CUDA events, each iteration behind a barrier, max over ranks, medians of ``--iters``
with p10/p90 (``hocket.bench``), JSON lines in the ``hocket.bench.record`` schema plus a table.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import replace
from pathlib import Path

import torch
import torch.distributed as dist

import hocket.ops as H
from bench_multigpu import Case, checked, timed  # the script's own folder is on sys.path
from hocket.bench.provenance import collect, command_line
from hocket.bench.record import Baselines, make_record, write_records
from hocket.timing.stats import Summary
from hocket.bench.tp_cases import case_sites
from hocket.hardware import load_cluster
from hocket.hardware.fingerprint import fingerprint
from hocket.launch import init_torchrun
from hocket.ops.lowering.peer_pipe import close_peer_pipes
from hocket.core.plan import Plan
from hocket.transport.copy_engine import close_mailboxes

PLANS = {
    "tile_fused(1)/copy_engine": Plan(strategy="tile_fused", chunks=1, transport="copy_engine"),
    "tile_fused/peer_read": Plan(strategy="tile_fused", chunks=1, transport="peer_read"),
}


def local_kernel(case: Case):
    """The peer-read kernel on this rank's shard for every rank (no remote reads, flags pre-set)."""
    from hocket.kernels.peer_read_gemm import peer_read_gemm, warmup_peer_read
    from hocket.kernels.peer_read_schedule import PeerReadWorkspace

    site, w = case.site, case.site.world
    R = site.m // w
    ws = PeerReadWorkspace(rows_per_shard=R, n=site.n, k=site.k, world=w, rank=case.handle.rank,
                           dtype=case.A.dtype, device=case.device)
    stage = torch.empty(w * R, site.k, dtype=case.A.dtype, device=case.device)
    out = torch.empty(w * R, site.n, dtype=case.A.dtype, device=case.device)
    warmup_peer_read(ws, case.A, stage, case.B, out)
    ready = torch.ones(w, dtype=torch.int32, device=case.device)

    def run():
        ws.reset()
        peer_read_gemm(case.A, [case.A] * w, stage, case.B, workspace=ws, out=out, peer_flags=ready)

    return run


def measure_case(site, args, *, group, device, provenance, log) -> dict:
    case = Case(site, group=group, device=device, seed=args.seed)
    methods: dict[str, dict] = {}

    def measure(name: str, fn, *, plan: Plan | None = None, check: bool = True) -> None:
        err = None
        if check:
            ok, err, message = checked(case, fn, name)
            if not ok:
                log(f"    {name:28s} FAILED: {message}")
                return
        else:
            fn()
        s = timed(fn, args, case)
        methods[name] = {"median_ms": s.median_ms, "p10_ms": s.p10_ms, "p90_ms": s.p90_ms, "n": s.n,
                         "max_error": err, "plan": plan}
        log(f"    {name:28s} {s.median_ms:7.3f} ms (p10 {s.p10_ms:.3f}, p90 {s.p90_ms:.3f})"
            + (f", max error {err:.2g}" if err is not None else ""))

    log(f"  ag_mm m={site.m} k={site.k} n={site.n} world {site.world}")
    measure("compute_alone", case.compute_alone, check=False)
    measure("comm_nccl", case.comm("collective"), check=False)
    measure("comm_copy_engine", case.comm("copy_engine"), check=False)
    measure("sequential", lambda: case.run(Plan()), plan=Plan())
    measure("pytorch_async_tp", case.pytorch(native=False))
    measure("peer_read_kernel_local", local_kernel(case), check=False)
    for name, plan in PLANS.items():
        measure(name, lambda plan=plan: case.run(plan), plan=plan)
    close_peer_pipes()
    H.close_contexts()
    if dist.get_rank() == 0 and "sequential" in methods:
        comm = min(v["median_ms"] for k, v in methods.items() if k.startswith("comm_"))
        baselines = Baselines(sequential_ms=methods["sequential"]["median_ms"],
                              compute_alone_ms=methods["compute_alone"]["median_ms"], comm_alone_ms=comm)
        extra = {"case_name": site.name, "link": "nvlink",
                 "times_ms": {k: v["median_ms"] for k, v in methods.items()}}
        records = []
        for name, entry in methods.items():
            if entry["plan"] is None:
                continue
            timing = Summary(median_ms=entry["median_ms"], p10_ms=entry["p10_ms"], p90_ms=entry["p90_ms"],
                             n=entry["n"])
            prov = replace(provenance, extra={**provenance.extra, **extra, "method": name})
            records.append(make_record(site=site, plan=entry["plan"], timing=timing, baselines=baselines,
                                       provenance=prov, max_error=entry["max_error"]))
        write_records(args.out, records)
    return {"site": site, "methods": methods}


def table(rows: list[dict]) -> str:
    cols = ["compute_alone", "comm_nccl", "comm_copy_engine", "sequential", "pytorch_async_tp",
            "peer_read_kernel_local", *PLANS]
    short = ["mm", "nccl", "ce", "seq", "torch", "pr_local", "tf1/ce", "tf/peer_read"]
    lines = ["times in ms (medians); x seq = sequential / peer_read",
             f"{'case (m k n)':24s} " + " ".join(f"{s:>12s}" for s in short) + f" {'x seq':>6s} {'x best ce':>9s}"]
    for row in rows:
        s, m = row["site"], row["methods"]
        cells = [f"{m[c]['median_ms']:12.3f}" if c in m else f"{'—':>12s}" for c in cols]
        pr = m.get("tile_fused/peer_read", {}).get("median_ms")
        seq = m.get("sequential", {}).get("median_ms")
        ce = min((m[c]["median_ms"] for c in PLANS if c.endswith("copy_engine") and c in m), default=None)
        lines.append(f"{f'{s.m} {s.k} {s.n}':24s} " + " ".join(cells)
                     + (f" {seq / pr:6.3f}" if pr and seq else "      —")
                     + (f" {ce / pr:9.3f}" if pr and ce else "        —"))
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", default="issue6", help="shape set of hocket.bench.tp_cases (its ag_mm sites are run)")
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--seed", type=int, default=int.from_bytes(os.urandom(3), "little"))
    p.add_argument("--max-cases", type=int, default=0, help="run only the first N ag_mm cases (0: all)")
    p.add_argument("--out", default=None, help="JSON lines path (default $OUT/bench_peer_read.jsonl)")
    args = p.parse_args(argv)
    if args.iters < 5:
        p.error(f"--iters={args.iters}: use at least 5 timed runs (50 for results)")
    args.out = args.out or str(Path(os.environ.get("OUT", ".")) / "bench_peer_read.jsonl")
    ctx = init_torchrun(backend="nccl")
    device, world = ctx.device, ctx.world_size
    log = (lambda msg: print(msg, flush=True)) if ctx.rank == 0 else (lambda msg: None)
    sites = [s for s in case_sites(args.cases, world=world) if s.kind == "ag_mm"]
    if args.max_cases:
        sites = sites[:args.max_cases]
    cluster = load_cluster("h200x2" if world == 2 else "h200x8")
    provenance = collect(command=command_line(), hardware=fingerprint(cluster) if ctx.rank == 0 else {},
                         extra={"world": world, "backend": "nccl", "iters": args.iters, "seed": args.seed})
    log(f"bench_peer_read: {len(sites)} ag_mm cases, world {world}, iters {args.iters}, torch {torch.__version__}")
    rows = [measure_case(s, args, group=dist.group.WORLD, device=device, provenance=provenance, log=log)
            for s in sites]
    log(f"results -> {args.out}\n" + table(rows))
    close_mailboxes()
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
