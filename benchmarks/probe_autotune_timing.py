"""Why the live autotuner and the bench time the same plan differently (run under torchrun, 2 GPUs).

On 2xH200 run69 the bench's autotuner read the pull plan of mm_rs 8192x2048x4096 at 0.376 ms (and
chunked(2) at 0.592) while the bench's own loop read the same plans at 0.264 (0.368). This probe times
one site's plans four ways, each a median of ``--iters`` samples of ``--reps`` calls back to back:

* ``bench``: the bench's inputs (``Case``: per-rank random operands), one plan after another;
* ``runners``: the autotuner's callables (``hocket.ops.live.operator_runners``), one plan after another;
* ``interleaved``: the autotuner's callables through its timer (``interleaved_samples_ms``, rounds);
* ``autotune``: ``hocket.plan.autotune.autotune`` itself (its recorded medians); ``--repeat`` runs it
  again, with the interleaved timer between, to tell a lasting change of state from the autotuner's own.

    torchrun --nproc_per_node 2 benchmarks/probe_autotune_timing.py --pick 5
"""

from __future__ import annotations

import argparse
import statistics
import sys

import torch
import torch.distributed as dist

from bench_multigpu import Case, runnable, shrunk  # same folder
from hocket.timing.timer import TimingConfig, interleaved_samples_ms, sample_ms
from hocket.bench.tp_cases import case_sites
from hocket.launch import init_torchrun
from hocket.plan.autotune import AutotuneConfig, autotune
from hocket.ops.live import operator_runners
from hocket.core.plan import Plan
from hocket.plan.labels import plan_label

PLANS = (Plan(), Plan(strategy="chunked", chunks=1, transport="copy_engine"), Plan(strategy="bulk"),
         Plan(strategy="ring", transport="p2p"), Plan(strategy="chunked", chunks=2))


def median(values: list[float]) -> float:
    return statistics.median(values)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", default="issue6")
    p.add_argument("--pick", default="5")
    p.add_argument("--iters", type=int, default=16)
    p.add_argument("--reps", type=int, default=4)
    p.add_argument("--rounds", type=int, default=2, help="interleaved rounds of the timer and of autotune")
    p.add_argument("--repeat", type=int, default=1, help="autotune this many times, the interleaved timer between")
    p.add_argument("--backend", choices=("nccl", "gloo"), default="nccl", help="gloo: a CPU dry run (with --shrink)")
    p.add_argument("--shrink", type=int, default=1, help="divide m, k and n by this (a dry run)")
    args = p.parse_args(argv)
    ctx = init_torchrun(backend=args.backend)
    group, device = dist.group.WORLD, ctx.device
    sites = case_sites(args.cases, world=ctx.world_size, tokens=8192)
    for index in (int(i) for i in args.pick.split(",")):
        site = shrunk(sites[index], args.shrink)
        plans = [plan for plan in PLANS if runnable(plan, site.kind)]
        case = Case(site, group=group, device=device, seed=7)
        make = operator_runners(site, group=group, device=device)
        runners = {plan.to_json(): make(plan) for plan in plans}
        table: dict[str, dict[str, float]] = {plan_label(plan): {} for plan in plans}
        for plan in plans:
            got = sample_ms(lambda: case.run(plan), iters=args.iters, warmup=2, group=group, device=device,
                            reps=args.reps)
            table[plan_label(plan)]["bench"] = median(got)
        for plan in plans:
            got = sample_ms(runners[plan.to_json()], iters=args.iters, warmup=2, group=group, device=device,
                            reps=args.reps)
            table[plan_label(plan)]["runners"] = median(got)
        timing = TimingConfig(warmup=2, iters=args.iters, reps=args.reps)
        mixed = interleaved_samples_ms(runners, config=timing, rounds=args.rounds, group=group, device=device)
        for plan in plans:
            table[plan_label(plan)]["interleaved"] = median(mixed[plan.to_json()])
        config = AutotuneConfig(top_k=4, warmup=2, iters=args.iters, rounds=args.rounds, reps=args.reps)
        columns = ["bench", "runners", "interleaved"]
        for again in range(args.repeat):
            result = autotune(site, plans, make, group=group, device=device, config=config)
            name = "autotune" if again == 0 else f"autotune#{again + 1}"
            columns.append(name)
            for plan in plans:
                table[plan_label(plan)][name] = result.timings_ms.get(plan.to_json(), float("nan"))
            if again + 1 < args.repeat:  # the interleaved timer again, between two autotunes
                mixed = interleaved_samples_ms(runners, config=timing, rounds=args.rounds, group=group, device=device)
                columns.append(f"interleaved#{again + 2}")
                for plan in plans:
                    table[plan_label(plan)][columns[-1]] = median(mixed[plan.to_json()])
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        if ctx.rank == 0:
            print(f"\n{site.kind} {site.m}x{site.k}x{site.n}: median ms of {args.iters} samples x {args.reps} calls; "
                  f"autotune chose {plan_label(result.chosen)}")
            print(f"{'plan':<28}" + "".join(f" {c:>14}" for c in columns))
            for name, row in table.items():
                print(f"{name:<28}" + "".join(f" {row[c]:>14.3f}" for c in columns), flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
