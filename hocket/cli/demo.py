"""`hocket demo`: every operator under every strategy on Llama-style shapes, checked and timed.

With no arguments: 2 local ranks on gloo (NCCL on all local GPUs when there are two or
more), or the ranks of torchrun when launched by it. Each plan is checked against the
unfused reference, then timed with sequential, compute-alone and comm-alone baselines;
the table shows overlap efficiency (docs/validation.md). Exits 1 if any check fails.
"""

from __future__ import annotations

import argparse

from hocket.cli._ranks import add_rank_arguments, positive_int, run_and_report

# Llama-3-8B-like transformer layer under tensor parallelism (sequence parallel):
# hidden 4096, FFN 14336, 32 query heads + 8 KV heads of 128 -> QKV width 6144.
LLAMA_HIDDEN, LLAMA_FFN, LLAMA_QKV = 4096, 14336, 6144


def llama_sites(*, world: int, tokens: int, scale: int, dtype: str) -> list:
    """The layer's communicating matmuls, every dim divided by ``scale`` (per rank, m k n).

    * ag_mm QKV projection: ``[tokens, hidden] @ [hidden, qkv/w]``;
    * ag_mm MLP up+gate: ``[tokens, hidden] @ [hidden, 2*ffn/w]``;
    * mm_rs MLP down: ``[tokens, ffn/w] @ [ffn/w, hidden]``;
    * mm_ar attention output (plain TP): ``[tokens, hidden/w] @ [hidden/w, hidden]``.
    """
    from hocket.core.site import Site

    hidden, ffn, qkv = LLAMA_HIDDEN // scale, LLAMA_FFN // scale, LLAMA_QKV // scale
    m = tokens - tokens % world
    common = dict(dtype=dtype, world=world)
    return [
        Site(kind="ag_mm", m=m, k=hidden, n=qkv // world, name="attn.qkv", **common),
        Site(kind="ag_mm", m=m, k=hidden, n=2 * ffn // world, name="mlp.up_gate", **common),
        Site(kind="mm_rs", m=m, k=ffn // world, n=hidden, name="mlp.down", **common),
        Site(kind="mm_ar", m=m, k=hidden // world, n=hidden, name="attn.out", **common),
    ]


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "demo", help="run every operator under every strategy on this machine, checked and timed",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iters", type=positive_int, default=5, help="timed iterations per candidate")
    parser.add_argument("--warmup", type=int, default=1, help="untimed iterations first")
    parser.add_argument("--tokens", type=positive_int, default=None,
                        help="rows m of every site (default: 512 on CPU, 8192 on GPUs)")
    parser.add_argument("--scale", type=positive_int, default=None,
                        help="divide Llama-3-8B's dims by this (default: 8 on CPU, 1 on GPUs)")
    add_rank_arguments(parser, world_flag="--world-size", timeout_s=600.0)
    parser.set_defaults(func=run)


def build_spec(args):
    from hocket.bench.plans import bench_plans
    from hocket.bench.suite import SuiteSpec
    from hocket.cli._ranks import default_world, resolved_backend
    from hocket.timing.timer import TimingConfig

    world = default_world(args.world)
    on_gpu = resolved_backend(args) == "nccl"
    tokens = args.tokens or (8192 if on_gpu else 512)
    scale = args.scale or (1 if on_gpu else 8)
    if tokens < world or LLAMA_HIDDEN // scale < world:
        raise ValueError(f"--tokens {tokens} and --scale {scale} leave nothing to split over {world} ranks; "
                         f"use --tokens >= {world} and --scale <= {LLAMA_HIDDEN // world}")
    if args.warmup < 0:
        raise ValueError(f"--warmup {args.warmup} must be >= 0")
    sites = llama_sites(world=world, tokens=tokens, scale=scale, dtype="bfloat16" if on_gpu else "float32")
    return SuiteSpec(sites=tuple((site, bench_plans(site.kind)) for site in sites),
                     timing=TimingConfig(warmup=args.warmup, iters=args.iters), rounds=args.iters)


def run(args) -> int:
    return run_and_report(build_spec, args, title="hocket demo")
