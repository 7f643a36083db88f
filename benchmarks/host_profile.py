"""cProfile of the host side of hocket operator calls (run under torchrun, one process per GPU):
which Python frames the issue time of one call goes to, while the device is kept busy.

    torchrun --nproc_per_node 2 benchmarks/host_profile.py --pick 2 --calls 300

Rank 0 prints, per method, the host time per call without the profiler and the top frames
by own time under it; ``$OUT/host_profile_<index>_<method>.prof`` keeps the raw stats.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from bench_multigpu import Case, runnable  # same folder
from hocket.bench.tp_cases import case_sites
from hocket.launch import init_torchrun
from hocket.ops.lowering.peer_pipe import close_peer_pipes
from hocket.plan.plan import Plan
from trace_multigpu import DEFAULT_PLANS, host_issue_us


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", default="issue6")
    p.add_argument("--pick", default="2")
    p.add_argument("--plans", nargs="*", default=list(DEFAULT_PLANS[:2]))
    p.add_argument("--calls", type=int, default=300)
    p.add_argument("--top", type=int, default=30)
    p.add_argument("--out", default=os.environ.get("OUT", "."))
    args = p.parse_args(argv)
    ctx = init_torchrun(backend="nccl")
    out = Path(args.out)
    sites = case_sites(args.cases, world=ctx.world_size, tokens=8192)
    for index in (int(i) for i in args.pick.split(",")):
        case = Case(sites[index], group=dist.group.WORLD, device=ctx.device, seed=7)
        methods = {"sequential": lambda: case.run(Plan())}
        methods.update({q.describe(): (lambda q=q: case.run(q)) for q in map(Plan.from_json, args.plans)
                        if runnable(q, case.site.kind)})
        for name, fn in methods.items():
            for _ in range(5):
                fn()
            plain = host_issue_us(fn, 50, ctx.device)
            torch.cuda.synchronize()
            dist.barrier()
            torch.cuda._sleep(200_000_000)
            prof = cProfile.Profile()
            prof.enable()
            for _ in range(args.calls):
                fn()
            prof.disable()
            torch.cuda.synchronize()
            if ctx.rank == 0:
                safe = "".join(c if c.isalnum() else "_" for c in name)
                prof.dump_stats(str(out / f"host_profile_{index}_{safe}.prof"))
                print(f"\n=== {case.site.kind} {case.site.m}x{case.site.k}x{case.site.n} {name}: "
                      f"{plain:.1f} us/call without the profiler", flush=True)
                pstats.Stats(prof, stream=sys.stdout).sort_stats("tottime").print_stats(args.top)
        close_peer_pipes()
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
