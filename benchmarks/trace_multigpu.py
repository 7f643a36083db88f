"""Where one call's time goes: host issue time, steady-state device time and a profiler trace
per method, for chosen cases of ``bench_multigpu.py`` (run under torchrun, one process per GPU).

    torchrun --nproc_per_node 2 benchmarks/trace_multigpu.py --cases issue6 --pick 2,5

Per case and method (sequential, the plans of ``--plans``, PyTorch's fused op where it runs):

* ``host_us``: the host's time to issue one call while the GPU is busy (a ``torch.cuda._sleep``
  kernel is queued first, so no call waits for the device): when it exceeds the device time, a
  training loop of these calls is host-bound;
* ``device_ms``: mean of ``--reps`` calls back to back behind one barrier (CUDA events, max over
  ranks, median of ``--iters`` samples): the steady state;
* a torch.profiler trace of ``--trace-calls`` calls on every rank (``$OUT/trace_<case>_<method>_r<rank>.json``,
  open in Perfetto) and, on rank 0, the top device kernels by total time. Every trace is taken after
  every timing: once the profiler has run, CUPTI stays attached and slows every later launch.

The table printed last holds one row per (case, method).

``--graph``: every method is captured in a CUDA graph once and each call is a replay
(``hocket.ops.captured.replayed``), as ``bench_multigpu.py --graph`` times them; ``--timeline``
prints, on rank 0, the kernels of the last traced call (start relative to its first kernel, duration,
stream), which shows which kernel waited for which. ``--no-pytorch`` leaves PyTorch's fused op out.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

from bench_multigpu import Case, runnable  # the benchmark's operands and callables (same folder)
from hocket.timing.stats import summarize
from hocket.timing.timer import sample_ms
from hocket.bench.tp_cases import case_sites
from hocket.launch import init_torchrun
from hocket.ops.captured import replayed
from hocket.ops.lowering.peer_pipe import close_peer_pipes
from hocket.core.plan import Plan

DEFAULT_PLANS = ('{"strategy": "chunked", "chunks": 1, "order": "local_first"}',
                 '{"strategy": "chunked", "chunks": 1, "transport": "copy_engine"}',
                 '{"strategy": "tile_fused", "chunks": 1, "transport": "copy_engine"}')
SLEEP_CYCLES = 50_000_000
"""cycles of the kernel queued ahead of the host-time loop (~25 ms at H200 clocks): the loop must
finish issuing before the device drains its queue."""


def host_issue_us(fn, calls: int, device: torch.device) -> float:
    torch.cuda.synchronize(device)
    dist.barrier()
    torch.cuda._sleep(SLEEP_CYCLES)
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    elapsed = time.perf_counter() - start
    torch.cuda.synchronize(device)
    return elapsed / calls * 1e6


def trace(fn, calls: int, path: Path, device: torch.device, *, timeline: bool = False
          ) -> list[tuple[str, float, int]]:
    """Profile ``calls`` calls; write the chrome trace; (kernel, total device ms, count), largest first."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize(device)
    dist.barrier()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize(device)
    prof.export_chrome_trace(str(path))
    if timeline:
        print_timeline(path, calls)
    rows = []
    for evt in prof.key_averages():
        device_us = getattr(evt, "device_time_total", None)
        if device_us is None:
            device_us = getattr(evt, "cuda_time_total", 0.0)
        host_us = getattr(evt, "cpu_time_total", 0.0)
        if device_us and not host_us:  # device activities (kernels, copies) only: host ops include their children
            rows.append((evt.key, device_us / 1e3, evt.count))
    return sorted(rows, key=lambda r: -r[1])


def print_timeline(path: Path, calls: int) -> None:
    """The device kernels of the trace's last call (start us from its first kernel, us, stream, name):
    every call runs the same kernels, so the last ``1 / calls`` of them by start time. The first
    call's first collective also waits for the other rank to enter the profiler; later calls do not."""
    events = sorted((e for e in json.loads(path.read_text()).get("traceEvents", [])
                     if e.get("cat") == "kernel" and "ts" in e and "dur" in e), key=lambda e: e["ts"])
    last = events[len(events) - len(events) // max(1, calls):] if calls > 1 else events
    t0 = last[0]["ts"] if last else 0.0
    for e in last:
        print(f"      {e['ts'] - t0:9.1f} {e['dur']:8.1f} us  stream {e.get('tid')!s:>4s}  {e['name'][:70]}", flush=True)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", default="issue6")
    p.add_argument("--pick", default="", help="comma-separated case indices of the set (default: all)")
    p.add_argument("--plans", nargs="*", default=list(DEFAULT_PLANS), help="plans as JSON objects")
    p.add_argument("--iters", type=int, default=30)
    p.add_argument("--reps", type=int, default=8)
    p.add_argument("--host-calls", type=int, default=20)
    p.add_argument("--trace-calls", type=int, default=4)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--out", default=os.environ.get("OUT", "."))
    p.add_argument("--graph", action="store_true", help="time and trace every method as CUDA graph replays")
    p.add_argument("--timeline", action="store_true", help="print the last traced call's kernels (rank 0)")
    p.add_argument("--no-pytorch", dest="pytorch", action="store_false", help="leave PyTorch's fused op out")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    ctx = init_torchrun(backend="nccl")
    device, rank = ctx.device, ctx.rank
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    sites = case_sites(args.cases, world=ctx.world_size, tokens=8192)
    picks = [int(i) for i in args.pick.split(",")] if args.pick else list(range(len(sites)))
    plans = [Plan.from_json(text) for text in args.plans]
    table, cases = [], []
    for index in picks:
        site = sites[index]
        case = Case(site, group=dist.group.WORLD, device=device, seed=args.seed)
        methods = {"sequential": lambda: case.run(Plan())}
        methods.update({p.describe(): (lambda p=p: case.run(p)) for p in plans if runnable(p, site.kind)})
        if site.kind in ("ag_mm", "mm_rs") and args.pytorch:
            methods["pytorch_async_tp"] = case.pytorch(native=False)
        if args.graph:
            methods = {name: replayed(fn, device, what=name) for name, fn in methods.items()}
        for name, fn in methods.items():
            for _ in range(3):
                fn()
            host = host_issue_us(fn, args.host_calls, device)
            dev = summarize(sample_ms(fn, iters=args.iters, warmup=2, group=dist.group.WORLD, device=device,
                                      reps=args.reps))
            table.append({"case": f"{site.kind} {site.m}x{site.k}x{site.n}", "index": index, "method": name,
                          "host_us": host, "device_ms": dev.median_ms, "device_p10_ms": dev.p10_ms,
                          "device_p90_ms": dev.p90_ms})
            if rank == 0:
                print(f"{table[-1]['case']:24s} {name:34s} host {host:7.1f} us/call, device {dev.median_ms:.3f} ms "
                      f"(p10 {dev.p10_ms:.3f}, p90 {dev.p90_ms:.3f})", flush=True)
        cases.append((index, case, methods))
    for index, case, methods in cases:  # traces last: the profiler slows every launch after it
        for name, fn in methods.items():
            safe = name.replace("/", "_").replace("(", "").replace(")", "").replace("[", "_").replace("]", "")
            if rank == 0 and args.timeline:
                print(f"timeline {case.site.kind} {case.site.m}x{case.site.k}x{case.site.n} {name}", flush=True)
            kernels = trace(fn, args.trace_calls, out / f"trace_{index}_{safe}_r{rank}.json", device,
                            timeline=args.timeline and rank == 0)
            row = next(r for r in table if r["index"] == index and r["method"] == name)
            row["kernels"] = [(k, round(ms / args.trace_calls, 4), n // args.trace_calls) for k, ms, n in kernels[:8]]
            if rank == 0:
                print(f"{row['case']:24s} {name}", flush=True)
                for k, ms, n in row["kernels"]:
                    print(f"      {ms:8.4f} ms/call  x{n:<3d} {k[:90]}", flush=True)
    close_peer_pipes()
    if rank == 0:
        (out / "trace_multigpu.json").write_text(json.dumps(table, indent=1))
        print(f"\n{'case':24s} {'method':34s} {'host us':>8s} {'device ms':>9s}")
        for row in table:
            print(f"{row['case']:24s} {row['method']:34s} {row['host_us']:8.1f} {row['device_ms']:9.3f}")
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
