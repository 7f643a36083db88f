"""`hocket demo`: every operator under every strategy on Llama-style shapes, checked and timed.

With no arguments: 2 local ranks on gloo (NCCL on all local GPUs when there are two or
more), or the ranks of torchrun when launched by it. Each plan is checked against the
unfused reference, then timed with sequential, compute-alone and comm-alone baselines;
the table shows overlap efficiency (docs/validation.md). Then one expert-parallel MoE layer
(Mixtral-8x7B-shaped: 8 experts, top-2, dims divided by the scale) runs ``hocket.ops.moe_experts`` under every
MoE strategy and both split modes, each checked against the single-process reference of the whole layer (forward
and gradients) and timed against sequential. Exits 1 if any check fails.
"""

from __future__ import annotations

import argparse

from hocket.cli._ranks import add_rank_arguments, positive_int, run_and_report

# Mixtral-8x7B's hidden and FFN widths are Llama-3-8B's (4096, 14336).
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


MOE_EXPERTS, MOE_TOPK = 8, 2


def moe_plans() -> tuple[dict, ...]:
    """One plan per strategy that serves the MoE kinds (the registry's order), at its fewest chunks."""
    from hocket.strategies import specs

    return tuple({"strategy": s.name, "chunks": s.min_chunks} for s in specs() if "a2a_mm" in s.kinds)


def moe_rank(rank: int, world: int, options: dict) -> str:
    """On every rank: the MoE site of the demo, each plan checked (forward and gradients) and timed."""
    import time

    import torch
    import torch.distributed as dist

    from hocket.ops import moe_experts
    from hocket.ops.reference import moe_experts_reference

    hidden, ffn, tokens = options["hidden"], options["ffn"], options["tokens"]
    e_local = MOE_EXPERTS // world
    gen = torch.Generator().manual_seed(0)  # every rank's tokens and every expert, the same on every rank
    xs = [torch.randn(tokens, hidden, generator=gen) for _ in range(world)]
    scores = [torch.randn(tokens, e_local * world, generator=gen) for _ in range(world)]
    w1 = torch.randn(e_local * world, hidden, 2 * ffn, generator=gen) / hidden ** 0.5
    w2 = torch.randn(e_local * world, ffn, hidden, generator=gen) / ffn ** 0.5
    tops = [torch.topk(s.softmax(-1), MOE_TOPK, dim=1) for s in scores]
    ids, weights = tops[rank].indices, tops[rank].values
    mine = slice(rank * e_local, (rank + 1) * e_local)
    ref_x = [x.clone().requires_grad_() for x in xs]
    ref_w1 = w1.clone().requires_grad_()
    outs = moe_experts_reference(ref_x, [t.indices for t in tops], [t.values for t in tops],
                                 [ref_w1[r * e_local:(r + 1) * e_local] for r in range(world)],
                                 [w2[r * e_local:(r + 1) * e_local] for r in range(world)])
    sum(o.sum() for o in outs).backward()
    ref = outs[rank].detach()
    lines, failed = [], False
    base_ms = None
    for split in ("exchanged", "padded"):
        for plan in moe_plans():
            plan = {**plan, "splits": split}
            args = [t.clone().requires_grad_() for t in (xs[rank], weights, w1[mine])]
            y = moe_experts(args[0], ids, args[1], args[2], w2[mine], dist.group.WORLD, plan=plan)
            y.sum().backward()
            err = max(float((y.detach() - ref).abs().max()), float((args[0].grad - ref_x[rank].grad).abs().max()),
                      float((args[2].grad - ref_w1.grad[mine]).abs().max()))
            t = torch.tensor([err], dtype=torch.float64)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            err = float(t)
            ok = err <= 1e-3 * max(1.0, float(ref.abs().max()))
            failed |= not ok
            times = []
            for _ in range(options["iters"]):
                dist.barrier()
                start = time.perf_counter()
                with torch.no_grad():
                    moe_experts(xs[rank], ids, weights, w1[mine], w2[mine], dist.group.WORLD, plan=plan)
                times.append((time.perf_counter() - start) * 1e3)
            ms = torch.tensor([sorted(times)[len(times) // 2]], dtype=torch.float64)
            dist.all_reduce(ms, op=dist.ReduceOp.MAX)
            ms = float(ms)
            base_ms = ms if plan["strategy"] == "sequential" and split == "exchanged" else base_ms
            label = f"{plan['strategy']}({plan.get('chunks', 1)}):{split}"
            lines.append(f"  {label:<28} {'ok' if ok else 'FAILED':<7} err {err:.1e}  {ms:8.3f} ms  "
                         f"x{base_ms / ms:.2f} vs sequential")
    head = (f"hocket demo: MoE site a2a_mm + mm_a2a (Mixtral-8x7B-shaped, E={MOE_EXPERTS} top-{MOE_TOPK}, "
            f"hidden {hidden}, ffn {ffn}, {tokens} tokens per rank, world {world})")
    return "\n".join([head, *lines, "  FAILED" if failed else "  all MoE plans match the reference"])


def moe_dim(full: int, scale: int) -> int:
    """A Mixtral dim for the demo's MoE layer: ``full // (4 * scale)``, a multiple of 8 (at least 8), so the
    layer stays a few milliseconds on a CPU rank."""
    return max(8, full // (4 * scale) // 8 * 8)


def run_moe(args) -> int:
    from hocket.cli._ranks import default_world, resolved_backend
    from hocket.launch import run_everywhere

    world = default_world(args.world)
    if MOE_EXPERTS % world or resolved_backend(args) != "gloo":
        print(f"hocket demo: MoE site skipped ({MOE_EXPERTS} experts over {world} ranks on "
              f"{resolved_backend(args)}: the demo's MoE layer runs on gloo with a world that divides 8)")
        return 0
    scale = args.scale or 8
    options = {"hidden": moe_dim(LLAMA_HIDDEN, scale), "ffn": moe_dim(LLAMA_FFN, scale),
               "tokens": max(1, min(args.tokens or 64, 64)), "iters": max(1, args.iters)}
    text = run_everywhere(moe_rank, options, world_size=world, backend="gloo", timeout_s=args.timeout_s)
    return 1 if text is not None and "FAILED" in text else 0


def run(args) -> int:
    code = run_and_report(build_spec, args, title="hocket demo")
    if code == 2:
        return code
    return max(code, run_moe(args))
