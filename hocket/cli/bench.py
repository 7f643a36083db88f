"""`hocket bench`: measure one operator at given shapes under every (or chosen) strategy.

Shapes are per rank in docs/operators.md's convention (m k n; m after the gather for ag_mm).
Each plan is checked against the reference first, then timed together with
compute-alone (torch.mm on the whole per-rank problem) and comm-alone (the collective
on the same bytes). Self-spawns local ranks, or runs under torchrun. Results lines
(--out) follow the schema of docs/validation.md.

`hocket bench moe` measures the routed experts of one MoE layer (hocket.ops.moe_experts) under
every MoE strategy against a plain sequential expert-parallel path and torchtitan's, on
self-spawned gloo ranks with one thread each (hocket.bench.moe): a model preset (--model,
scaled by --scale) or --hidden/--ffn/--experts/--topk, --tokens per rank, --skew uniform or
zipf:S, --backward for forward and backward together (--dtype auto is bf16 here;
--threads-per-rank defaults to 1; --backend nccl is refused). Its results lines (--out) are
hocket.bench.moe/1 lines, not the operator schema.

  hocket bench moe --model qwen3-30b-a3b --scale 8 --tokens 512 --skew zipf:1.0
  hocket bench moe --hidden 256 --ffn 896 --experts 8 --topk 2 --tokens 1024
"""

from __future__ import annotations

import argparse

from hocket.cli._ranks import add_rank_arguments, positive_int, run_and_report

KINDS = ("ag_mm", "mm_rs", "mm_ar", "moe")


class _KindAction(argparse.Action):
    """Stores the kind; ``--m``/``--k``/``--n`` (``shapes``) are required for the matrix kinds, not for ``moe``."""

    shapes: list = []

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        setattr(namespace, self.dest, values)
        for action in self.shapes:
            action.required = values != "moe"


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "bench", help="measure one operator under every strategy (table + JSON lines)",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    kind = parser.add_argument("kind", choices=KINDS, action=_KindAction,
                               help="all-gather+matmul, matmul+reduce-scatter, matmul+all-reduce, or moe (the MoE "
                                    "flags below)")
    kind.shapes = [parser.add_argument("--m", type=positive_int, required=True,
                                       help="rows (after the gather for ag_mm)"),
                   parser.add_argument("--k", type=positive_int, required=True,
                                       help="inner dim (local k for mm_rs/mm_ar)"),
                   parser.add_argument("--n", type=positive_int, required=True, help="columns of B")]
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
    moe = parser.add_argument_group("moe (hocket bench moe)")
    moe.add_argument("--model", default=None, help="MoE model preset: mixtral-8x7b, qwen3-30b-a3b, deepseek-v3")
    moe.add_argument("--scale", type=positive_int, default=1,
                     help="divide hidden, ffn and the shared expert's width by this (multiples of 16)")
    moe.add_argument("--hidden", type=positive_int, default=None, help="model width (without --model)")
    moe.add_argument("--ffn", type=positive_int, default=None, help="routed expert's intermediate width")
    moe.add_argument("--experts", type=positive_int, default=None, help="routed experts (divisible by --world)")
    moe.add_argument("--topk", type=positive_int, default=None, help="experts per token")
    moe.add_argument("--shared-ffn", type=int, default=None,
                     help="shared expert's width (default: the preset's, else 0)")
    moe.add_argument("--tokens", type=int, default=None, help="tokens per rank (moe; default 512)")
    moe.add_argument("--skew", default="uniform", help="router: uniform or zipf:S (e.g. zipf:1.0)")
    moe.add_argument("--splits", nargs="+", default=["exchanged"], choices=("exchanged", "padded"),
                     help="split-size modes of the hocket plans (default: exchanged)")
    moe.add_argument("--no-torchtitan", action="store_true", help="leave torchtitan's EP path out")
    moe.add_argument("--backward", action="store_true",
                     help="time (and check) each candidate's forward and backward together")
    add_rank_arguments(parser, world_flag="--world", timeout_s=1800.0)
    parser.set_defaults(func=run)


def build_moe_spec(args):
    """The MoeBenchSpec of parsed ``hocket bench moe`` arguments; bad values raise ValueError naming the flag."""
    import dataclasses

    from hocket.bench.moe import MoeBenchSpec, MoeLayer, bench_plans, layer_from_preset
    from hocket.core.moe import parse_skew
    from hocket.core.site import canonical_dtype

    if args.backend == "nccl":
        raise ValueError("--backend nccl: hocket bench moe runs on self-spawned CPU gloo ranks; drop --backend")

    sizes = {"--hidden": args.hidden, "--ffn": args.ffn, "--experts": args.experts, "--topk": args.topk}
    if args.model is not None:
        given = [flag for flag, v in sizes.items() if v is not None]
        layer = layer_from_preset(args.model)
        if given:
            raise ValueError(f"--model {args.model} fixes the layer; drop {given} (or drop --model)")
    else:
        missing = [flag for flag, v in sizes.items() if v is None]
        if missing:
            raise ValueError(f"hocket bench moe needs --model or all of --hidden --ffn --experts --topk; "
                             f"missing {missing}")
        layer = MoeLayer(name="custom", hidden=args.hidden, ffn=args.ffn, experts=args.experts, topk=args.topk)
    if args.shared_ffn is not None:
        if args.shared_ffn < 0:
            raise ValueError(f"--shared-ffn {args.shared_ffn} must be >= 0 (0: no shared expert)")
        layer = dataclasses.replace(layer, shared_ffn=args.shared_ffn)
    layer = layer.scaled(args.scale)
    world = 2 if args.world is None else args.world
    layer.check_world(world)
    tokens = 512 if args.tokens is None else args.tokens
    if tokens < 0:
        raise ValueError(f"--tokens {tokens} must be >= 0")
    try:
        parse_skew(args.skew)
    except ValueError as exc:
        raise ValueError(f"--skew {args.skew!r}: {exc}") from None
    if args.warmup < 0:
        raise ValueError(f"--warmup {args.warmup} must be >= 0")
    dtype = "bfloat16" if args.dtype == "auto" else args.dtype
    plans = bench_plans(tuple(args.strategy), tuple(args.chunks), tuple(args.splits))
    return MoeBenchSpec(layer=layer, tokens=tokens, skew=args.skew, dtype=canonical_dtype(dtype), plans=plans,
                        torchtitan=not args.no_torchtitan, backward=args.backward, iters=args.iters,
                        warmup=args.warmup, rounds=args.rounds, seed=args.seed), world


def run_moe(args) -> int:
    import json
    import sys
    from pathlib import Path

    from hocket.bench.moe import run_specs, score, table_lines
    from hocket.bench.provenance import command_line, git_hash, versions

    try:
        spec, world = build_moe_spec(args)
    except ValueError as exc:
        print(f"hocket: error: {exc}", file=sys.stderr)
        return 2
    (result,) = run_specs((spec,), world=world, threads_per_rank=args.threads_per_rank or 1,
                          timeout_s=args.timeout_s)
    print("\n".join(table_lines(result)))
    if args.out:
        line = {**result, "scores": score(result), "command": command_line(), "git_hash": git_hash(),
                "versions": versions()}
        with Path(args.out).open("a") as f:
            f.write(json.dumps(line) + "\n")
    return 0


def build_spec(args):
    """The SuiteSpec of parsed arguments; bad values raise ValueError naming the flag."""
    from hocket.bench.plans import bench_plans
    from hocket.bench.suite import SuiteSpec
    from hocket.cli._ranks import default_world, resolved_backend
    from hocket.core.site import Site, canonical_dtype
    from hocket.timing.timer import TimingConfig

    missing = [f"--{d}" for d in "mkn" if getattr(args, d) is None]
    if missing:
        raise ValueError(f"hocket bench {args.kind} needs --m --k --n; missing {missing}")
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
    if args.kind == "moe":
        return run_moe(args)
    return run_and_report(build_spec, args, title=f"hocket bench {args.kind}")
