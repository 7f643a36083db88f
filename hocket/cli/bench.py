"""`hocket bench`: measure one operator at given shapes under every (or chosen) strategy.

Shapes are per rank in docs/operators.md's convention (m k n; m after the gather for ag_mm).
Each plan is checked against the reference first, then timed together with
compute-alone (torch.mm on the whole per-rank problem) and comm-alone (the collective
on the same bytes). Self-spawns local ranks, or runs under torchrun. Results lines
(--out) follow the schema of docs/validation.md.
"""

from __future__ import annotations

import argparse

from hocket.cli._ranks import add_rank_arguments, positive_int, run_and_report

KINDS = ("ag_mm", "mm_rs", "mm_ar")


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "bench", help="measure one operator under every strategy (table + JSON lines)",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kind", choices=KINDS,
                        help="all-gather+matmul, matmul+reduce-scatter or matmul+all-reduce")
    parser.add_argument("--m", type=positive_int, required=True, help="rows (after the gather for ag_mm)")
    parser.add_argument("--k", type=positive_int, required=True, help="inner dim (local k for mm_rs/mm_ar)")
    parser.add_argument("--n", type=positive_int, required=True, help="columns of B")
    parser.add_argument("--dtype", default="auto", help="bf16, fp16, fp32 (auto: bf16 on GPUs, fp32 on CPU)")
    parser.add_argument("--strategy", nargs="+", default=["all"], metavar="S",
                        help="strategies to measure, or 'all' (sequential always runs)")
    parser.add_argument("--chunks", nargs="+", type=positive_int, default=[2, 4], metavar="C",
                        help="chunk counts for chunked/substituted (default: 2 4)")
    parser.add_argument("--iters", type=positive_int, default=10, help="timed iterations per candidate")
    parser.add_argument("--warmup", type=int, default=2, help="untimed iterations first")
    parser.add_argument("--rounds", type=positive_int, default=None,
                        help="interleaved timing rounds (default: --iters, i.e. candidates take turns one "
                             "iteration at a time, so drifting machine load hits all of them alike)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random operands")
    parser.add_argument("--graph", action="store_true",
                        help="check and time each plan replayed from a CUDA graph (hocket.ops.CapturedCall; NCCL "
                             "ranks on GPUs); plans over copy_engine or peer_read, which a graph cannot capture, "
                             "are left out")
    add_rank_arguments(parser, world_flag="--world", timeout_s=1800.0)
    parser.set_defaults(func=run)


def build_spec(args):
    """The SuiteSpec of parsed arguments; bad values raise ValueError naming the flag."""
    from hocket.bench.plans import bench_plans
    from hocket.bench.suite import SuiteSpec
    from hocket.cli._ranks import default_world, resolved_backend
    from hocket.core.site import Site, canonical_dtype
    from hocket.timing.timer import TimingConfig

    world = default_world(args.world)
    if args.dtype == "auto":
        dtype = "bfloat16" if resolved_backend(args) == "nccl" else "float32"
    else:
        dtype = canonical_dtype(args.dtype)
    if args.kind in ("ag_mm", "mm_rs") and args.m % world:
        raise ValueError(f"--m {args.m} is not divisible by --world {world}: {args.kind} splits m rows across "
                         f"ranks; use --m {args.m - args.m % world or world}")
    if args.warmup < 0:
        raise ValueError(f"--warmup {args.warmup} must be >= 0")
    if getattr(args, "graph", False) and resolved_backend(args) != "nccl":
        raise ValueError(f"--graph replays CUDA graphs, which need GPU ranks on NCCL; this run resolves to backend "
                         f"{resolved_backend(args)!r} (drop --graph, or run on GPUs with --backend nccl)")
    site = Site(kind=args.kind, m=args.m, k=args.k, n=args.n, dtype=dtype, world=world)
    plans = bench_plans(args.kind, strategies=tuple(args.strategy), chunks=tuple(args.chunks))
    if getattr(args, "graph", False):  # what a CUDA graph can capture (hocket.plan.capture)
        from hocket.plan.capture import capturable

        plans = tuple(p for p in plans if capturable(site, p))
    return SuiteSpec(sites=((site, plans),), timing=TimingConfig(warmup=args.warmup, iters=args.iters),
                     rounds=args.rounds or args.iters, seed=args.seed, captured=bool(getattr(args, "graph", False)))


def run(args) -> int:
    return run_and_report(build_spec, args, title=f"hocket bench {args.kind}")
