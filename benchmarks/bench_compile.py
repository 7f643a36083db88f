"""Forward+backward step time of a tensor-parallel Llama block: eager vs torch.compile vs hocket.compile.

    python benchmarks/bench_compile.py                                     # 2 self-spawned CPU ranks (gloo)
    torchrun --nproc-per-node 2 benchmarks/bench_compile.py --sizes 8b     # GPUs (NCCL)

Each size builds one block (same weights), shards it with PyTorch's tensor parallelism
and times a step (forward, backward with a fixed output gradient) three ways, in
interleaved rounds, each iteration the slowest rank's time. The ratio
``hocket.compile / torch.compile`` is the number that matters: hocket must never be
slower (<= 1.0), and faster where its planner rewrites a site. hocket's output and input
gradient are checked against eager before timing. One JSON line per size goes to
``--out`` (hardware fingerprint, versions, git hash and this command included).
"""

from __future__ import annotations

import argparse
import copy
import json
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.distributed as dist

SIZES = {
    # name: dim, heads, kv_heads, hidden, batch, seq  (CPU-sized first, then GPU-sized)
    "s": (256, 8, 4, 768, 1, 256),
    "m": (512, 8, 4, 1536, 1, 512),
    "l": (1024, 16, 8, 2816, 1, 1024),
    "8b": (4096, 32, 8, 14336, 1, 4096),
    "8b-long": (4096, 32, 8, 14336, 1, 16384),
}


@dataclass(frozen=True, kw_only=True)
class BenchOptions:
    sizes: tuple[str, ...]
    dtype: str
    backend: str
    warmup: int
    iters: int
    rounds: int
    cluster: str | None
    rewrite: bool = True
    autotune: bool = False


def _summary(s) -> dict:
    return s.to_dict()


def bench_rank(rank: int, world: int, options: BenchOptions) -> list[dict]:
    """Every rank: build, check and time each size; returns one record per size."""
    from torch.distributed.device_mesh import init_device_mesh

    import hocket
    from hocket.graph import PassConfig
    from hocket.bench.timer import TimingConfig, time_interleaved
    from hocket.models.llama_block import LlamaBlock, LlamaBlockConfig, parallelize_llama_block, shard_sequence
    from hocket.ops.tolerance import assert_close

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
        overlapped = hocket.compile(parallelize_llama_block(copy.deepcopy(base), mesh), backend=options.backend,
                                    cluster=options.cluster, dynamic=False, autotune=options.autotune,
                                    config=PassConfig(rewrite=options.rewrite))
        del base
        gen = torch.Generator(device="cpu").manual_seed(1)
        x = shard_sequence(torch.randn(batch, seq, dim, generator=gen), rank, world).to(device, dtype)
        dy = shard_sequence(torch.randn(batch, seq, dim, generator=gen), rank, world).to(device, dtype)

        def step(module: torch.nn.Module, inp: torch.Tensor = x) -> torch.Tensor:
            for p in module.parameters():
                p.grad = None
            y = module(inp)
            y.backward(dy)
            return y

        x_ref, x_new = x.clone().requires_grad_(), x.clone().requires_grad_()
        assert_close(step(overlapped, x_new).detach(), step(eager, x_ref).detach(), world=world,
                     what=f"hocket.compile output ({name})")
        assert_close(x_new.grad, x_ref.grad, world=world, what=f"hocket.compile input gradient ({name})")
        timings = time_interleaved({"eager": lambda: step(eager), "torch_compile": lambda: step(compiled),
                                    "hocket_compile": lambda: step(overlapped)},
                                   config=TimingConfig(warmup=options.warmup, iters=options.iters),
                                   rounds=options.rounds, device=device)
        report = hocket.explain(overlapped)
        records.append({
            "benchmark": "compile", "model": "llama_block", "size": name, "world": world, "dtype": options.dtype,
            "backend": options.backend, "device": device.type, "rewrite": options.rewrite,
            "autotune": options.autotune,
            "config": asdict(config), "batch": batch, "seq": seq,
            "eager": _summary(timings["eager"]), "torch_compile": _summary(timings["torch_compile"]),
            "hocket_compile": _summary(timings["hocket_compile"]),
            "ratio_hocket_over_torch_compile": timings["hocket_compile"].median_ms
            / timings["torch_compile"].median_ms,
            "sites": [{"graph": s.graph, "kind": s.kind, "m": s.site.m, "k": s.site.k, "n": s.site.n,
                       "plan": s.plan.describe(), "rewritten": s.rewritten,
                       "predicted_saving_ms": s.predicted_saving_ms} for s in report.sites],
            "rewritten_sites": len(report.rewritten),
            "gaps_filled": len(report.gaps),
            "matmuls_moved_into_gaps": sum(g.matmuls_in_gap for g in report.gaps),
        })
        del eager, compiled, overlapped
        torch._dynamo.reset()
    return records


def _table(records: list[dict]) -> str:
    lines = [f"{'size':<8} {'dtype':<9} {'w':>2} {'eager_ms':>10} {'compile_ms':>11} {'hocket_ms':>10} "
             f"{'hocket/compile':>14} {'rewritten':>9} {'gap_mms':>7}"]
    for r in records:
        lines.append(f"{r['size']:<8} {r['dtype']:<9} {r['world']:>2} {r['eager']['median_ms']:>10.2f} "
                     f"{r['torch_compile']['median_ms']:>11.2f} {r['hocket_compile']['median_ms']:>10.2f} "
                     f"{r['ratio_hocket_over_torch_compile']:>14.3f} {r['rewritten_sites']:>9} "
                     f"{r['matmuls_moved_into_gaps']:>7}")
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
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--iters", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cluster", default=None, help="cluster preset/YAML for the planner (default: probe)")
    parser.add_argument("--no-rewrite", action="store_true", help="hocket only reorders (sites left as traced)")
    parser.add_argument("--autotune", action="store_true", help="measure plans while compiling (collective)")
    parser.add_argument("--out", type=Path, default=None, help="JSON lines file to append to")
    args = parser.parse_args(argv)
    unknown = [s for s in args.sizes.split(",") if s not in SIZES]
    if unknown:
        parser.error(f"--sizes {unknown} unknown; choose from {sorted(SIZES)}")
    return args


def main(argv: list[str] | None = None) -> None:
    from hocket.bench.provenance import command_line
    from hocket.launch import detect_torchrun, init_torchrun, spawn

    args = parse_args(argv)
    dtype = args.dtype or ("bfloat16" if torch.cuda.is_available() else "float32")
    options = BenchOptions(sizes=tuple(args.sizes.split(",")), dtype=dtype, backend=args.backend,
                           warmup=args.warmup, iters=args.iters, rounds=args.rounds, cluster=args.cluster,
                           rewrite=not args.no_rewrite, autotune=args.autotune)
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
