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
import time
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path

import torch
import torch.distributed as dist

from bench_multigpu import Case, runnable  # same folder
from hocket.bench.tp_cases import case_sites
from hocket.launch import init_torchrun
from hocket.ops.lowering.peer_pipe import close_peer_pipes
from hocket.core.plan import Plan
from trace_multigpu import DEFAULT_PLANS, host_issue_us


STAGES = (("hocket.ops.lowering.peer_pipe", "PeerPipe", ("begin", "push", "wait_flags", "end")),
          ("hocket.ops.lowering.peer_pipe", "FlagWatch", ("watch", "poll")),
          ("hocket.ops.lowering.problems", "GatherMatmul", ("compute_rows", "finish", "__init__")),
          ("hocket.transport.symm_mem", "SymmBuffer", ("barrier",)),
          ("hocket.ops.all_gather_matmul", None, ("prepare_all_gather_matmul",)),
          ("hocket.kernels.flags", None, ("set_flag_on_stream",)),
          ("hocket.kernels.peer_flags", None, ("wait_flag_range_on_stream",)))


@contextmanager
def stage_clock(totals: dict):
    """Wrap the methods of ``STAGES`` so their host time per call adds up in ``totals`` (us)."""
    import importlib

    saved = []
    for module_name, owner_name, names in STAGES:
        module = importlib.import_module(module_name)
        owner = getattr(module, owner_name) if owner_name else module
        for name in names:
            original = getattr(owner, name)

            def timed(*a, _f=original, _k=f"{owner_name or module_name}.{name}", **kw):
                start = time.perf_counter()
                try:
                    return _f(*a, **kw)
                finally:
                    totals[_k] += (time.perf_counter() - start) * 1e6

            saved.append((owner, name, original))
            setattr(owner, name, timed)
    try:
        yield
    finally:
        for owner, name, original in saved:
            setattr(owner, name, original)


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
            totals: dict = defaultdict(float)
            with stage_clock(totals):
                staged = host_issue_us(fn, 50, ctx.device)
            if ctx.rank == 0:
                print(f"\n--- {name}: {plain:.1f} us/call plain, {staged:.1f} with the stage clocks; per call (us, "
                      f"nested stages overlap):", flush=True)
                for key, total in sorted(totals.items(), key=lambda kv: -kv[1]):
                    print(f"      {total / 50:8.1f}  {key}", flush=True)
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
