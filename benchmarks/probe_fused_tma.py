"""Probe: the offload operators' tile_fused GEMM with tensor-descriptor (TMA) loads.

Issue 5 asks the tile-fused GEMM alone for >= 90% of cuBLAS; with pointer loads and the
operators' schedules it reached 79-92% (h200 run16), while a plain persistent Triton GEMM with
descriptor loads reached 97-99% on 128x256 tiles (run21). ``TileConfig(tma=True)`` now loads
the fused kernels' operand tiles through descriptors. Per shape and direction, for each
candidate tile config, this probe measures with the operator's own context and ramped pieces:

* the fused GEMM alone (flags pre-set / nothing waiting), timed in alternation with ``torch.mm``;
* the tile_fused pipeline (medians of ``--iters``) at 6, 8 and 12 pieces, output checked first on
  poisoned buffers, with the overlap efficiency of DESIGN.md section 4 against sequential,
  ``torch.mm`` alone and the copy alone measured in the same process;
* the ramped stream pipeline (``chunked``, 8 pieces) as the reference the operators beat or not.

    python3 benchmarks/probe_fused_tma.py --out $OUT/probe_fused_tma.jsonl [--smoke]
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

import torch

SHAPES = ((8192, 8192, 7168), (8192, 3584, 8192), (8192, 8192, 1280), (4096, 12288, 6144))
DIRECTIONS = ("to_host", "from_host")
PIECES = (6, 8, 12)


TAIL = "/tail"
"""A candidate label ending in this runs with ``OffloadContext(balance_tail=True)``: more narrow row
blocks where they fill the persistent launch's last wave (``hocket.ops.offload.fused_narrow_rows``)."""


def candidates(m: int, n: int, k: int, *, only: tuple[str, ...] = ()) -> dict:
    """label -> TileConfig: the operators' rule, the rule with descriptor loads, and 128x256
    descriptor tiles with 64- and 128-wide narrow edge tiles, the latter also with the last
    wave balanced (``TAIL``); ``only``: just these labels."""
    from hocket.kernels.config import NARROW_BF16, TileConfig
    from hocket.ops.offload import offload_tile_config

    rule = offload_tile_config(m, n, k, torch.bfloat16)
    wide = TileConfig(block_m=128, block_n=256, block_k=64, num_warps=8, num_stages=4, tma=True)
    out = {"rule": rule, "rule+tma": replace(rule, tma=True), "256/tma/n64": replace(wide, narrow_block_n=64),
           "256/tma/n128": replace(wide, narrow_block_n=128),
           "256/tma/n128" + TAIL: replace(wide, narrow_block_n=128)}
    if rule != NARROW_BF16:
        out["128/tma"] = replace(NARROW_BF16, tma=True)
    unique = {}
    for label, cfg in out.items():  # on n < 2048 the rule is already 128x256 with 64-wide narrow tiles
        if (cfg, label.endswith(TAIL)) not in {(c, name.endswith(TAIL)) for name, c in unique.items()}:
            unique[label] = cfg
    return {label: cfg for label, cfg in unique.items() if not only or label in only}


def measure(direction: str, m: int, k: int, n: int, *, iters: int, pieces, log, only=()) -> list[dict]:
    sys.path.insert(0, str(Path(__file__).parent))
    from bench_single_gpu import VARIANTS, _run_fn, fused_alone_ms, fused_plan, median_ms, samples_ms
    from hocket.bench.efficiency import overlap_score
    from hocket.timing.stats import summarize
    from hocket.ops.offload import OffloadContext
    from hocket.plan.offload import ramp_sizes
    from hocket.core.plan import Plan
    from hocket.core.site import Site

    dev = torch.device("cuda", torch.cuda.current_device())
    a_dev = torch.randn(m, k, device=dev).to(torch.bfloat16)
    b = (torch.randn(k, n, device=dev) / k**0.5).to(torch.bfloat16)
    c_dev = torch.empty(m, n, dtype=torch.bfloat16, device=dev)
    expected = torch.mm(a_dev.float(), b.float())
    buffers = dict(a_dev=a_dev, a_host=a_dev.cpu().pin_memory(), b=b, c_dev=c_dev,
                   host_out=torch.empty(m, n, dtype=torch.bfloat16, pin_memory=True))
    shape = (m, k, n)
    mm_ms = median_ms(lambda: torch.mm(a_dev, b, out=c_dev), iters=iters)
    src, dst = (c_dev, buffers["host_out"]) if direction == "to_host" else (buffers["a_host"], a_dev)
    copy_ms = median_ms(lambda: dst.copy_(src, non_blocking=True), iters=iters)
    base = dict(direction=direction, m=m, k=k, n=n, mm_ms=mm_ms, copy_ms=copy_ms)
    rows = []

    def pipeline(label, ctx, plan, extra):
        fn, err = _run_fn(direction, ctx, plan, expected=expected, shape=shape, **buffers)
        s = summarize(samples_ms(fn, iters=iters, warmup=3))
        ctx.check()
        row = dict(base, variant=label, plan=plan.describe(), pieces=list(plan.split_sizes or ()), max_error=err,
                   median_ms=s.median_ms, p10_ms=s.p10_ms, p90_ms=s.p90_ms, **extra)
        rows.append(row)
        log(f"  {direction} {m}x{k}x{n} {label:14s} {plan.describe():26s} {s.median_ms:.3f} ms "
            f"(p10 {s.p10_ms:.3f}, p90 {s.p90_ms:.3f}) err {err:.2g}")
        return row

    with OffloadContext(dev) as ctx:
        seq = pipeline("sequential", ctx, Plan(strategy="sequential", transport="host_staged"), {})
        kind = "mm_d2h" if direction == "to_host" else "h2d_mm"
        sizes = ramp_sizes(Site(kind=kind, m=m, k=k, n=n, dtype="bfloat16", world=1), 8)
        pipeline("ramp", ctx, Plan(strategy="chunked", chunks=len(sizes), split_sizes=sizes,
                                   transport="host_staged"), {})
    for label, cfg in candidates(m, n, k, only=only).items():
        with OffloadContext(dev, config=cfg, balance_tail=label.endswith(TAIL)) as ctx:
            plan8 = fused_plan(VARIANTS[0], 8, m, block_m=cfg.block_m, direction=direction)
            alone, cublas = fused_alone_ms(ctx, direction, plan8, a_dev, b, c_dev, iters=max(30, iters // 2))
            log(f"  {direction} {m}x{k}x{n} {label:14s} {cfg.label()}: GEMM alone {alone:.3f} ms, cuBLAS "
                f"{cublas:.3f} ({cublas / alone:.1%})")
            narrow = ctx.producer(m, n, k, a_dev.dtype, plan8) if direction == "to_host" else \
                ctx.consumer(m, n, k, a_dev.dtype, plan8)
            rows.append(dict(base, variant=label, tile_config=cfg.label(), alone_ms=alone, alone_cublas_ms=cublas,
                             of_cublas=cublas / alone, narrow_tiles=sum(t[2] for t in narrow.schedule.tiles)))
            for c in pieces:
                plan = fused_plan(VARIANTS[0], c, m, block_m=cfg.block_m, direction=direction)
                pipeline(label, ctx, plan, dict(tile_config=cfg.label()))
    for row in rows:
        if "median_ms" in row:
            row["eff"] = overlap_score(measured_ms=row["median_ms"], sequential_ms=seq["median_ms"],
                                       compute_alone_ms=mm_ms, comm_alone_ms=copy_ms).label()
    return rows


def table(rows: list[dict]) -> str:
    lines = [f"{'direction':9s} {'m x k x n':16s} {'mm':>6s} {'copy':>6s} {'seq':>6s} {'ramp(8)':>14s}  "
             "config: GEMM alone % of cuBLAS, best tile_fused ms (pieces) eff"]
    keys = sorted({(r["direction"], r["m"], r["k"], r["n"]) for r in rows}, key=lambda t: (t[1:], t[0]))
    for key in keys:
        sel = [r for r in rows if (r["direction"], r["m"], r["k"], r["n"]) == key]
        first = sel[0]
        seq = next(r for r in sel if r["variant"] == "sequential")
        ramp = next(r for r in sel if r["variant"] == "ramp")
        cells = []
        for label in dict.fromkeys(r["variant"] for r in sel if "of_cublas" in r):
            alone = next(r for r in sel if r["variant"] == label and "of_cublas" in r)
            runs = [r for r in sel if r["variant"] == label and "median_ms" in r]
            best = min(runs, key=lambda r: r["median_ms"])
            cells.append(f"{label} {alone['of_cublas']:.0%} {best['median_ms']:.3f} ({len(best['pieces'])}) "
                         f"{best['eff']}")
        lines.append(f"{key[0]:9s} {key[1]}x{key[2]}x{key[3]:<6d} {first['mm_ms']:6.3f} {first['copy_ms']:6.3f} "
                     f"{seq['median_ms']:6.3f} {ramp['median_ms']:7.3f} {ramp['eff']:>6s}  " + " | ".join(cells))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=None, help="JSON lines of every measurement")
    parser.add_argument("--smoke", action="store_true", help="first shape, to_host and from_host, 8 pieces, 10 runs")
    parser.add_argument("--iters", type=int, default=None, help="timed runs per measurement (default 50; smoke 10)")
    parser.add_argument("--shapes", default=None, help="comma-separated MxKxN (default: issue 5's four)")
    parser.add_argument("--configs", default="", help="comma-separated candidate labels (default: every one)")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("probe_fused_tma: no CUDA device; nothing to measure", file=sys.stderr)
        return 2
    shapes = SHAPES[:1] if args.smoke else SHAPES
    if args.shapes:
        shapes = tuple(tuple(int(d) for d in s.split("x")) for s in args.shapes.split(","))
    iters = args.iters or (10 if args.smoke else 50)
    pieces = (8,) if args.smoke else PIECES
    rows: list[dict] = []
    for m, k, n in shapes:
        for direction in DIRECTIONS:
            rows += measure(direction, m, k, n, iters=iters, pieces=pieces, log=lambda t: print(t, flush=True),
                            only=tuple(c for c in args.configs.split(",") if c))
            if args.out:
                args.out.parent.mkdir(parents=True, exist_ok=True)
                args.out.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
    print("\n" + table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
