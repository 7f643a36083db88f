"""Forward+backward step time of a tensor-parallel Llama block: eager vs torch.compile vs hocket.compile.

    python benchmarks/bench_compile.py                                     # 2 self-spawned CPU ranks (gloo)
    python benchmarks/bench_compile.py --sizes m,cpu-tokens --modes predicted,autotune
    torchrun --nproc-per-node 2 benchmarks/bench_compile.py --sizes 8b --modes predicted,autotune

Each size builds one block (same weights), shards it with PyTorch's tensor parallelism
and times a step (forward, backward with a fixed output gradient): eager, torch.compile,
and hocket.compile once per ``--modes`` entry (``predicted``: the cost model's plans;
``autotune``: plans measured on the live group while compiling; ``reorder``: sites left
as traced, only gaps filled). Every iteration runs each variant once, in a rotating
order, each timing the slowest rank's; the ratio ``hocket.compile / torch.compile`` is
reported as the ratio of medians and as the median, p10 and p90 of the per-iteration
ratios. hocket must never be slower (<= 1.0), and faster where its planner rewrites a
site. hocket's output and input gradient are checked against eager before timing.

Every hocket variant gets a fresh planner and all ranks share one fresh plan-cache
folder (``--cache-dir``), so nothing decided by an earlier run or another mode leaks in.
One JSON line per (size, mode) goes to ``--out`` (hardware fingerprint, versions, git
hash and this command included).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.distributed as dist

SIZES = {
    # name: dim, heads, kv_heads, hidden, batch, seq  (CPU-sized first, then GPU-sized)
    "s": (256, 8, 4, 768, 1, 256),
    "m": (512, 8, 4, 1536, 1, 512),
    "l": (1024, 16, 8, 2816, 1, 1024),
    # many tokens through a narrow block: the collectives' share of a CPU step is largest
    "cpu-tokens": (512, 8, 4, 1536, 8, 512),
    "8b": (4096, 32, 8, 14336, 1, 4096),
    "8b-long": (4096, 32, 8, 14336, 1, 16384),
}


MODES = ("predicted", "autotune", "reorder")


@dataclass(frozen=True, kw_only=True)
class BenchOptions:
    sizes: tuple[str, ...]
    dtype: str
    backend: str
    warmup: int
    iters: int
    cluster: str | None
    modes: tuple[str, ...] = ("predicted",)


def _summary(s) -> dict:
    return s.to_dict()


def _hocket_compile(module: torch.nn.Module, mode: str, options: BenchOptions) -> torch.nn.Module:
    """hocket.compile in one mode, with a planner of its own (no decisions shared between modes)."""
    import hocket
    from hocket.graph import PassConfig
    from hocket.ops.live import set_process_planner

    set_process_planner(None)  # the next compile builds a fresh process planner
    return hocket.compile(module, backend=options.backend, cluster=options.cluster, dynamic=False,
                          autotune=mode == "autotune", config=PassConfig(rewrite=mode != "reorder"))


def time_paired(fns: dict, *, warmup: int, iters: int, device: torch.device) -> dict[str, list[float]]:
    """Per-iteration ms of each callable: every iteration runs each once, in a rotating order, each
    behind a barrier and timed as the slowest rank's; samples of one iteration are paired."""
    from hocket.timing.timer import sample_ms

    names = list(fns)
    for name in names:
        for _ in range(warmup):
            fns[name]()
    samples: dict[str, list[float]] = {name: [] for name in names}
    for it in range(iters):
        for name in names[it % len(names):] + names[:it % len(names)]:
            samples[name] += sample_ms(fns[name], iters=1, device=device)
    return samples


def _ratio(hocket_ms: list[float], compile_ms: list[float]) -> dict:
    import numpy as np

    ratios = np.asarray(hocket_ms) / np.asarray(compile_ms)
    p10, median, p90 = np.percentile(ratios, [10.0, 50.0, 90.0])
    return {"median": float(median), "p10": float(p10), "p90": float(p90), "n": int(ratios.size)}


def bench_rank(rank: int, world: int, options: BenchOptions) -> list[dict]:
    """Every rank: build, check and time each size; returns one record per (size, mode)."""
    from torch.distributed.device_mesh import init_device_mesh

    import hocket
    from hocket.models.llama_block import LlamaBlock, LlamaBlockConfig, parallelize_llama_block, shard_sequence
    from hocket.ops.tolerance import assert_close
    from hocket.timing.stats import summarize

    device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    dtype = getattr(torch, options.dtype)
    mesh = init_device_mesh(device.type, (world,))
    records = []
    for name in options.sizes:
        dim, heads, kv_heads, hidden, batch, seq = SIZES[name]
        config = LlamaBlockConfig(dim=dim, n_heads=heads, n_kv_heads=kv_heads, hidden_dim=hidden, max_seq_len=seq)
        torch.manual_seed(0)
        base = LlamaBlock(config).to(device=device, dtype=dtype)
        eager = parallelize_llama_block(copy.deepcopy(base), mesh)
        compiled = torch.compile(parallelize_llama_block(copy.deepcopy(base), mesh), backend=options.backend,
                                 dynamic=False)
        gen = torch.Generator(device="cpu").manual_seed(1)
        x = shard_sequence(torch.randn(batch, seq, dim, generator=gen), rank, world).to(device, dtype)
        dy = shard_sequence(torch.randn(batch, seq, dim, generator=gen), rank, world).to(device, dtype)

        def step(module: torch.nn.Module, inp: torch.Tensor = x, dy: torch.Tensor = dy) -> torch.Tensor:
            for p in module.parameters():
                p.grad = None
            y = module(inp)
            y.backward(dy)
            return y

        x_ref = x.clone().requires_grad_()
        y_ref = step(eager, x_ref).detach()
        variants = {"eager": eager, "torch_compile": compiled}
        for mode in options.modes:  # compiled (and, for autotune, measured) now, one mode after another
            overlapped = _hocket_compile(parallelize_llama_block(copy.deepcopy(base), mesh), mode, options)
            x_new = x.clone().requires_grad_()
            assert_close(step(overlapped, x_new).detach(), y_ref, world=world, what=f"hocket.compile output "
                         f"({name}, {mode})")
            assert_close(x_new.grad, x_ref.grad, world=world, what=f"hocket.compile input gradient ({name}, {mode})")
            variants[f"hocket_{mode}"] = overlapped
        del base
        samples = time_paired({key: (lambda m=module: step(m)) for key, module in variants.items()},
                              warmup=options.warmup, iters=options.iters, device=device)
        for mode in options.modes:
            key = f"hocket_{mode}"
            report = hocket.explain(variants[key])
            summaries = {k: summarize(samples[k]) for k in ("eager", "torch_compile", key)}
            records.append({
                "benchmark": "compile", "model": "llama_block", "size": name, "world": world,
                "dtype": options.dtype, "backend": options.backend, "device": device.type, "mode": mode,
                "rewrite": mode != "reorder", "autotune": mode == "autotune",
                "config": asdict(config), "batch": batch, "seq": seq,
                "eager": _summary(summaries["eager"]), "torch_compile": _summary(summaries["torch_compile"]),
                "hocket_compile": _summary(summaries[key]),
                "ratio_hocket_over_torch_compile": summaries[key].median_ms / summaries["torch_compile"].median_ms,
                "paired_ratio": _ratio(samples[key], samples["torch_compile"]),
                "sites": [{"graph": s.graph, "kind": s.kind, "m": s.site.m, "k": s.site.k, "n": s.site.n,
                           "plan": s.plan.describe(), "source": s.source, "rewritten": s.rewritten,
                           "predicted_saving_ms": s.predicted_saving_ms} for s in report.sites],
                "rewritten_sites": len(report.rewritten),
                "gaps_filled": len(report.gaps),
                "matmuls_moved_into_gaps": sum(g.matmuls_in_gap for g in report.gaps),
            })
        del eager, compiled, variants
        torch._dynamo.reset()
    return records


def _table(records: list[dict]) -> str:
    lines = [f"{'size':<10} {'mode':<9} {'dtype':<9} {'w':>2} {'eager_ms':>10} {'compile_ms':>11} "
             f"{'hocket_ms':>10} {'hocket/compile':>14} {'paired p10-p90':>15} {'rewritten':>9} {'gap_mms':>7}"]
    for r in records:
        paired = r["paired_ratio"]
        lines.append(f"{r['size']:<10} {r['mode']:<9} {r['dtype']:<9} {r['world']:>2} "
                     f"{r['eager']['median_ms']:>10.2f} {r['torch_compile']['median_ms']:>11.2f} "
                     f"{r['hocket_compile']['median_ms']:>10.2f} {r['ratio_hocket_over_torch_compile']:>14.3f} "
                     f"{paired['p10']:>7.3f}-{paired['p90']:<7.3f} {r['rewritten_sites']:>9} "
                     f"{r['matmuls_moved_into_gaps']:>7}")
        for site in r["sites"]:
            if site["rewritten"]:
                lines.append(f"{'':<12}{site['graph']:<12} {site['kind']} {site['m']}x{site['k']}x{site['n']}: "
                             f"{site['plan']} ({site['source']})")
    return "\n".join(lines)


def write(records: list[dict], out: Path | None, command: str) -> None:
    from hocket.bench.provenance import collect
    from hocket.bench.report import hardware_fingerprint

    provenance = collect(command=command, hardware=hardware_fingerprint())
    print(_table(records))
    if out is None:
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("a") as fh:
        for record in records:
            fh.write(json.dumps({**record, "hardware": provenance.hardware, "environment": provenance.environment,
                                 "versions": provenance.versions, "git_hash": provenance.git_hash,
                                 "command": provenance.command}, sort_keys=True) + "\n")
    print(f"wrote {len(records)} line(s) to {out}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="eager vs torch.compile vs hocket.compile on a TP Llama block")
    parser.add_argument("--world", type=int, default=2, help="ranks to spawn when not under torchrun")
    parser.add_argument("--sizes", default="s,m", help=f"comma-separated, from {sorted(SIZES)}")
    parser.add_argument("--dtype", default=None, help="default: float32 on CPU, bfloat16 on GPU")
    parser.add_argument("--backend", default="inductor", choices=("inductor", "aot_eager"))
    parser.add_argument("--modes", default="predicted",
                        help=f"comma-separated hocket.compile modes, from {MODES} (one hocket variant each)")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--iters", type=int, default=12, help="paired iterations (each runs every variant once)")
    parser.add_argument("--cluster", default=None, help="cluster preset/YAML for the planner (default: probe)")
    parser.add_argument("--cache-dir", default=None,
                        help="plan-cache folder shared by the ranks (default: a fresh one per run)")
    parser.add_argument("--out", type=Path, default=None, help="JSON lines file to append to")
    args = parser.parse_args(argv)
    unknown = [s for s in args.sizes.split(",") if s not in SIZES]
    if unknown:
        parser.error(f"--sizes {unknown} unknown; choose from {sorted(SIZES)}")
    bad = [m for m in args.modes.split(",") if m not in MODES]
    if bad:
        parser.error(f"--modes {bad} unknown; choose from {MODES}")
    if args.iters < 1 or args.warmup < 0:
        parser.error(f"--iters {args.iters} must be >= 1 and --warmup {args.warmup} >= 0")
    return args


def _cache_dir(given: str | None) -> str:
    """One plan-cache folder for every rank of this run: given, else fresh (named by the torchrun job)."""
    if given:
        return given
    run_id = os.environ.get("TORCHELASTIC_RUN_ID")
    if run_id is not None:  # every rank of this torchrun launch (one agent, their parent) builds the same name
        path = Path(tempfile.gettempdir()) / f"hocket-bench-compile-{run_id}-{os.getppid()}"
        path.mkdir(parents=True, exist_ok=True)
        return str(path)
    return tempfile.mkdtemp(prefix="hocket-bench-compile-")  # inherited by the spawned ranks


def main(argv: list[str] | None = None) -> None:
    from hocket.bench.provenance import command_line
    from hocket.launch import detect_torchrun, init_torchrun, spawn

    args = parse_args(argv)
    dtype = args.dtype or ("bfloat16" if torch.cuda.is_available() else "float32")
    options = BenchOptions(sizes=tuple(args.sizes.split(",")), dtype=dtype, backend=args.backend,
                           warmup=args.warmup, iters=args.iters, cluster=args.cluster,
                           modes=tuple(args.modes.split(",")))
    os.environ["HOCKET_CACHE_DIR"] = _cache_dir(args.cache_dir)
    command = command_line()
    if detect_torchrun() is not None:
        ctx = init_torchrun()
        records = bench_rank(ctx.rank, ctx.world_size, options)
        if ctx.rank == 0:
            write(records, args.out, command)
        dist.barrier()
        dist.destroy_process_group()
        return
    results = spawn(bench_rank, world_size=args.world, backend="gloo", args=(options,), timeout_s=3000)
    write(results[0], args.out, command)


if __name__ == "__main__":
    main()
