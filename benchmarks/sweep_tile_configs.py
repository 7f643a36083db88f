"""Tile-config sweep of the tile-fused GEMMs alone (flags pre-set) against cuBLAS, on one GPU.

For each bf16 shape (m, k, n) and direction (``to_host``: the producer GEMM, signalling, as
``matmul_to_host`` runs it, counters reset before each call; ``from_host``: the consumer
GEMM with every chunk flag pre-set) and each tile config of a space wider than
``hocket.kernels.config.BF16_CONFIGS`` (block sizes, block_k, stages, warps), pruned to
what fits shared memory and a sane accumulator size per thread:

1. checks the kernel against an fp32 ``torch.mm`` on fresh random inputs (output poisoned
   with NaN first: every element must be written; elementwise bf16 tolerance and the
   relative Frobenius error);
2. times it with CUDA events (warm-up, median of ``--iters`` back-to-back runs; inputs
   rotate between several copies when one set would fit in L2) next to ``torch.mm``;
3. for the fastest configs of each shape and direction, also times the other ``group_m``
   values and other persistent grid sizes (the fewest programs that keep the default's
   number of waves, two programs per SM where two blocks fit, every SM).

The schedule is the operator's: an 8-piece ramp of flag groups / chunks with narrow
tiles on the edge piece (``hocket.ops.offload_pieces``), fixed-stride tiles.
Compilation dominates the device time, so every config is compiled first in parallel
worker processes (they fill Triton's on-disk cache; the timing process then only loads).

Prints progress, then one table per shape and direction sorted by % of cuBLAS; writes
everything as JSON to ``$OUT/sweep_tile_configs.json`` (or ``--out``).

    python3 benchmarks/sweep_tile_configs.py --smoke
    python3 benchmarks/sweep_tile_configs.py
    python3 benchmarks/sweep_tile_configs.py --list          # the config space, no GPU needed
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from hocket.bench.paired import alternating_ms
from hocket.kernels.config import (BF16_CONFIGS, SHARED_MEMORY_BYTES, TileConfig, persistent_programs,
                                   shared_memory_bytes)

WEAK_SHAPES = ((8192, 8192, 1280), (4096, 12288, 6144))
CONTROL_SHAPES = ((8192, 8192, 7168),)
SMOKE_SHAPE = (8192, 8192, 1280)
DIRECTIONS = ("to_host", "from_host")
DTYPE = torch.bfloat16
ITEMSIZE = 2
PIECES = 8
"""flag groups / chunks of the schedule (the benchmark's and the operators' 8-piece ramp)."""
MAX_ACC_PER_THREAD = 128
"""fp32 accumulator values per thread above which registers spill (block_m*block_n / threads)."""
MIN_ACC_PER_THREAD = 64
"""below this a block has more warps than work (8 warps on a 128x64 tile)."""
BLOCKS = ((128, 256), (256, 128), (128, 128), (64, 256), (256, 64), (128, 64), (64, 128))
BLOCK_KS = (64, 128)
WARPS = (4, 8)
STAGES = (2, 3, 4, 5)
STAGES_PER_SHAPE = 2
"""stage counts kept per (block, block_k, warps): the deepest that fit and the next ones down."""
GROUP_MS = (4, 8, 16)
TOP_CONFIGS = 4
"""fastest configs per shape and direction that get the group_m and grid variants."""
REL_ERROR_MAX = 1e-2
"""relative Frobenius error allowed for bf16 operands with fp32 accumulation (METHOD.md)."""


# -- the config space (plain Python) ---------------------------------------------------
def acc_per_thread(cfg: TileConfig) -> int:
    return cfg.block_m * cfg.block_n // (32 * cfg.num_warps)


def config_space(*, max_configs: int | None = None) -> list[TileConfig]:
    """Compiled configs to try (group_m 8: group_m and the grid change no compiled code).

    Per block shape, block_k and warp count: the ``STAGES_PER_SHAPE`` deepest pipelines that
    fit ``SHARED_MEMORY_BYTES``; accumulators between ``MIN_ACC_PER_THREAD`` and
    ``MAX_ACC_PER_THREAD`` values per thread. BF16_CONFIGS come first (the known ones), then
    the rest in ``BLOCKS`` order; ``max_configs`` caps the count.
    """
    chosen = [replace_group(cfg, 8) for cfg in BF16_CONFIGS]
    for bm, bn in BLOCKS:
        for bk in BLOCK_KS:
            for warps in WARPS:
                fits = []
                for stages in STAGES:
                    cfg = TileConfig(block_m=bm, block_n=bn, block_k=bk, num_warps=warps, num_stages=stages)
                    if (shared_memory_bytes(cfg, ITEMSIZE) <= SHARED_MEMORY_BYTES
                            and MIN_ACC_PER_THREAD <= acc_per_thread(cfg) <= MAX_ACC_PER_THREAD):
                        fits.append(cfg)
                for cfg in fits[::-1][:STAGES_PER_SHAPE]:
                    if cfg not in chosen:
                        chosen.append(cfg)
    return chosen if max_configs is None else chosen[:max_configs]


def replace_group(cfg: TileConfig, group_m: int) -> TileConfig:
    return TileConfig(block_m=cfg.block_m, block_n=cfg.block_n, block_k=cfg.block_k, group_m=group_m,
                      num_warps=cfg.num_warps, num_stages=cfg.num_stages, narrow_block_n=cfg.narrow_block_n)


def grid_options(num_tiles: int, default_programs: int, cfg: TileConfig, num_sms: int) -> dict[str, int]:
    """Persistent grid sizes worth timing: the default; the fewest programs that keep the
    default's number of waves (the last wave full); two programs per SM where two blocks'
    shared memory fits (same reserve of SMs)."""
    waves = math.ceil(num_tiles / default_programs)
    options = {"default": default_programs, "balanced": math.ceil(num_tiles / waves)}
    if 2 * shared_memory_bytes(cfg, ITEMSIZE) <= SHARED_MEMORY_BYTES and acc_per_thread(cfg) <= 64:
        options["two_per_sm"] = min(num_tiles, 2 * default_programs)
    if num_sms > default_programs:
        options["all_sms"] = min(num_tiles, num_sms)
    return options


# -- one kernel on one shape -----------------------------------------------------------
def workspace(direction: str, shape, cfg: TileConfig, device, *, num_programs: int | None = None,
              balance_tail: bool = False, edge_pieces: int | None = None, dynamic: bool = False):
    """The operator's workspace for this shape: an 8-piece ramp, narrow tiles on the edge
    piece (``edge_pieces``) and, with ``balance_tail``, on the rows that fill the last wave
    (``hocket.ops.offload.fused_narrow_rows``)."""
    from hocket.kernels.workspace import ConsumerWorkspace, ProducerWorkspace
    from hocket.ops.offload import fused_narrow_rows
    from hocket.ops.offload_pieces import EDGE_PIECES, piece_offsets
    from hocket.core.plan import Plan

    m, k, n = shape
    plan = Plan(strategy="tile_fused", chunks=PIECES, transport="host_staged")
    offsets = piece_offsets(plan, m, align=cfg.block_m, direction=direction)
    programs = num_programs or persistent_programs(torch.cuda.get_device_properties(device).multi_processor_count)
    narrow = fused_narrow_rows(offsets, direction=direction, n=n, config=cfg, programs=programs,
                               edge_pieces=EDGE_PIECES if edge_pieces is None else edge_pieces,
                               balance_tail=balance_tail)
    common = dict(m=m, n=n, k=k, dtype=DTYPE, device=device, config=cfg, narrow_rows=narrow,
                  num_programs=programs, dynamic=dynamic)
    if direction == "to_host":
        return ProducerWorkspace(group_offsets=offsets, **common)
    return ConsumerWorkspace(chunk_offsets=offsets, **common)


def runner(direction: str, ws, a, b, out):
    """A callable running the kernel once as the operator does (flags pre-set)."""
    from hocket.kernels.launch import consumer_gemm, producer_gemm, reset_producer, warmup_consumer, warmup_producer

    if direction == "to_host":
        warmup_producer(ws, a, b, out)

        def run(a=a, b=b, out=out):
            reset_producer(ws)
            producer_gemm(a, b, workspace=ws, out=out)

        return run
    warmup_consumer(ws, a, b, out)
    ws.flags.fill_(1)

    def run(a=a, b=b, out=out):
        consumer_gemm(a, b, workspace=ws, out=out)

    return run


def _compile_errors():
    from triton.compiler.errors import CompilationError
    from triton.runtime.errors import OutOfResources

    return (OutOfResources, CompilationError)


def precompile(cfg_fields: dict, shapes: list, device_index: int, variants: list[dict]) -> tuple[dict, dict[str, str]]:
    """Worker: compile and load ``cfg``'s kernels for every shape, direction and variant
    (``FOCUS_VARIANTS`` options; Triton specialises on the tile count too), filling Triton's
    cache. Returns (cfg_fields, {"shape/direction": error}) for those that failed."""
    torch.cuda.set_device(device_index)
    cfg = TileConfig(**cfg_fields)
    dev = torch.device("cuda", device_index)
    failed = {}
    for shape in shapes:
        m, k, n = shape
        a = torch.randn(m, k, device=dev).to(DTYPE)
        b = torch.randn(k, n, device=dev).to(DTYPE)
        out = torch.empty(m, n, dtype=DTYPE, device=dev)
        for direction in DIRECTIONS:
            try:
                for options in variants:
                    runner(direction, variant_workspace(direction, shape, cfg, dev, options)[1], a, b, out)
            except _compile_errors() as err:
                failed[f"{shape}/{direction}"] = f"{type(err).__name__}: {str(err).splitlines()[0][:200]}"
        del a, b, out
    torch.cuda.synchronize(dev)
    return cfg_fields, failed


def precompile_all(configs, shapes, *, variants: list[dict], workers: int, log) -> dict[TileConfig, str]:
    """Compile every config in ``workers`` spawned processes; {config: first error} of failures."""
    start = time.perf_counter()
    failed = {}
    ctx = multiprocessing.get_context("spawn")
    device_index = torch.cuda.current_device()
    with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
        futures = [pool.submit(precompile, asdict(cfg), list(shapes), device_index, variants) for cfg in configs]
        for i, future in enumerate(as_completed(futures), 1):
            fields, errors = future.result()
            cfg = TileConfig(**fields)
            if errors:
                failed[cfg] = next(iter(errors.values()))
            log(f"  compiled {i}/{len(configs)} {cfg.label()} ({time.perf_counter() - start:.0f} s)"
                + (f": FAILED {failed[cfg]}" if errors else ""))
    return failed


# -- checks and timing ------------------------------------------------------------------
def check(out: torch.Tensor, ref_fp32: torch.Tensor) -> float:
    """Relative Frobenius error of ``out``; raise on an unwritten (NaN) element or an element
    beyond the bf16 tolerance."""
    from hocket.ops.tolerance import tolerance

    nan = int(out.isnan().sum())
    if nan:
        raise AssertionError(f"{nan} output elements never written (still NaN)")
    err = (out.float() - ref_fp32).abs()
    rel = float(torch.linalg.vector_norm(err) / torch.linalg.vector_norm(ref_fp32))
    tol = tolerance(out.dtype)
    scale = max(1.0, float(ref_fp32.abs().max()))
    beyond = int((err > tol.atol * scale + tol.rtol * ref_fp32.abs()).sum())
    if rel > REL_ERROR_MAX or beyond:
        raise AssertionError(f"relative error {rel:.3g} (limit {REL_ERROR_MAX}); {beyond} elements beyond bf16 "
                             f"tolerance rtol={tol.rtol} atol={tol.atol} x {scale:.3g}")
    return rel


@dataclass(frozen=True, kw_only=True)
class Row:
    shape: tuple[int, int, int]
    direction: str
    variant: str
    config: str
    group_m: int
    grid: str
    programs: int
    tiles: int
    median_ms: float
    p10_ms: float
    p90_ms: float
    tflops: float
    cublas_ms: float
    """torch.mm on the same inputs, timed in alternation with this kernel."""
    pct_of_cublas: float
    narrow_tiles: int
    rel_error: float | None
    smem_kib: float


def input_sets(shape, dev, l2_bytes: int) -> list[tuple]:
    """(A, B, C) sets: one if A, B and C together are over twice the L2, else enough to be."""
    m, k, n = shape
    one = (m * k + k * n + m * n) * ITEMSIZE
    count = 1 if one >= 2 * l2_bytes else min(8, math.ceil(2 * l2_bytes / one))
    return [(torch.randn(m, k, device=dev).to(DTYPE), torch.randn(k, n, device=dev).to(DTYPE),
             torch.empty(m, n, dtype=DTYPE, device=dev)) for _ in range(count)]


def time_one(direction, shape, cfg, ws, sets, ref, *, variant: str, grid: str, iters: int) -> Row:
    """Check ``cfg``'s kernel once on a poisoned output (first input set), then time it
    against cuBLAS in alternation."""
    m, k, n = shape
    runs = [runner(direction, ws, *s) for s in sets]
    out = sets[0][2]
    out.fill_(float("nan"))
    runs[0]()
    torch.cuda.synchronize()
    rel = check(out, ref)
    cublas = [lambda s=s: torch.mm(s[0], s[1], out=s[2]) for s in sets]
    med, p10, p90, cublas_ms = alternating_ms(runs, cublas, iters=iters)
    return Row(shape=shape, direction=direction, variant=variant, config=cfg.label(), group_m=cfg.group_m, grid=grid,
               programs=ws.num_programs, tiles=ws.num_tiles, median_ms=med, p10_ms=p10, p90_ms=p90,
               tflops=2 * m * k * n / med / 1e9, cublas_ms=cublas_ms, pct_of_cublas=cublas_ms / med,
               narrow_tiles=sum(t[2] for t in ws.schedule.tiles), rel_error=rel,
               smem_kib=shared_memory_bytes(cfg, ITEMSIZE) / 1024)


FOCUS_CONFIGS = (
    TileConfig(block_m=128, block_n=256, block_k=64, num_warps=8, num_stages=3),
    TileConfig(block_m=128, block_n=256, block_k=64, num_warps=8, num_stages=4),
    TileConfig(block_m=128, block_n=256, block_k=64, num_warps=8, num_stages=4, narrow_block_n=128),
    TileConfig(block_m=128, block_n=128, block_k=64, num_warps=4, num_stages=4),
    TileConfig(block_m=128, block_n=128, block_k=64, num_warps=4, num_stages=5),
    TileConfig(block_m=256, block_n=128, block_k=64, num_warps=8, num_stages=4),
)
"""``--focus``: the configs the full sweep ranked first, the operators' old default (s3) and
128x256 tiles with 128-wide narrow tiles (half a tile: a last wave filled with them)."""
FOCUS_VARIANTS = {
    "edge": dict(),
    "tail": dict(balance_tail=True),
    "tail/g4": dict(balance_tail=True, group_m=4),
    "edge0": dict(edge_pieces=0),
    "dynamic": dict(dynamic=True),
}
"""``edge``: narrow tiles on the edge piece only (the operators until now); ``tail``: and on
the rows that fill the last wave; ``edge0``: no narrow tiles (the plain GEMM);
``dynamic``: edge narrow tiles, tiles from a ticket counter."""


def variant_workspace(direction, shape, cfg, dev, options: dict, num_programs=None):
    options = dict(options)
    group_m = options.pop("group_m", None)
    cfg = cfg if group_m is None else replace_group(cfg, group_m)
    return cfg, workspace(direction, shape, cfg, dev, num_programs=num_programs, **options)


def sweep_shape(shape, configs, *, iters: int, top: int, focus: bool, log) -> tuple[list[Row], dict]:
    m, k, n = shape
    dev = torch.device("cuda", torch.cuda.current_device())
    props = torch.cuda.get_device_properties(dev)
    num_sms = props.multi_processor_count
    default_programs = persistent_programs(num_sms)
    sets = input_sets(shape, dev, getattr(props, "L2_cache_size", 50 * 2**20))
    ref = torch.mm(sets[0][0].float(), sets[0][1].float())
    rows: list[Row] = []

    def record(direction, cfg, ws, variant, grid="default"):
        rows.append(time_one(direction, shape, cfg, ws, sets, ref, variant=variant, grid=grid, iters=iters))
        r = rows[-1]
        log(f"  {direction} {m}x{k}x{n} {variant:8s} {cfg.label():24s} grid {grid}({ws.num_programs}) "
            f"{r.tiles} tiles ({r.narrow_tiles} narrow) {r.median_ms:.3f} ms vs cuBLAS {r.cublas_ms:.3f}: "
            f"{r.pct_of_cublas:5.1%}, rel err {r.rel_error:.1e}")
        return r

    for direction in DIRECTIONS:
        if focus:
            for cfg in configs:
                for variant, options in FOCUS_VARIANTS.items():
                    used, ws = variant_workspace(direction, shape, cfg, dev, options)
                    record(direction, used, ws, variant)
                    if variant == "tail":
                        waves = math.ceil(ws.num_tiles / ws.num_programs)
                        balanced = math.ceil(ws.num_tiles / waves)
                        if balanced != ws.num_programs:
                            used, ws = variant_workspace(direction, shape, cfg, dev, options, num_programs=balanced)
                            record(direction, used, ws, variant, grid="balanced")
            continue
        timed: dict[TileConfig, float] = {}
        for cfg in configs:
            timed[cfg] = record(direction, cfg, workspace(direction, shape, cfg, dev), "edge").median_ms
        for cfg in sorted(timed, key=timed.get)[:top]:
            base = workspace(direction, shape, cfg, dev)
            for g in GROUP_MS:
                if g != cfg.group_m:
                    variant = replace_group(cfg, g)
                    record(direction, variant, workspace(direction, shape, variant, dev), "edge")
            for grid, programs in grid_options(base.num_tiles, default_programs, cfg, num_sms).items():
                if programs != base.num_programs:
                    record(direction, cfg, workspace(direction, shape, cfg, dev, num_programs=programs), "edge", grid)
    cublas = [r.cublas_ms for r in rows]
    baseline = dict(shape=shape, cublas_ms_first=cublas[0], cublas_ms_last=cublas[-1], cublas_ms_min=min(cublas),
                    cublas_ms_max=max(cublas), cublas_tflops_best=2 * m * k * n / min(cublas) / 1e9,
                    input_sets=len(sets), num_sms=num_sms, default_programs=default_programs)
    return rows, baseline


def print_tables(rows: list[Row], baselines: list[dict], *, show: int) -> None:
    for base in baselines:
        shape = tuple(base["shape"])
        print(f"\n{'x'.join(map(str, shape))}: cuBLAS (timed beside each row) {base['cublas_ms_min']:.3f}-"
              f"{base['cublas_ms_max']:.3f} ms (first {base['cublas_ms_first']:.3f}, last {base['cublas_ms_last']:.3f}; "
              f"best {base['cublas_tflops_best']:.0f} TFLOP/s); {base['input_sets']} input set(s)")
        for direction in DIRECTIONS:
            mine = sorted((r for r in rows if r.shape == shape and r.direction == direction),
                          key=lambda r: -r.pct_of_cublas)
            print(f"  {direction}: {len(mine)} timings, best {show} by % of cuBLAS")
            print(f"    {'variant':8s} {'config':24s} {'grid':>14s} {'tiles':>6s} {'narrow':>6s} {'ms':>7s} "
                  f"{'cuBLAS':>7s} {'%cuBLAS':>8s}")
            for r in mine[:show]:
                print(f"    {r.variant:8s} {r.config:24s} {r.grid + '(' + str(r.programs) + ')':>14s} {r.tiles:6d} "
                      f"{r.narrow_tiles:6d} {r.median_ms:7.3f} {r.cublas_ms:7.3f} {r.pct_of_cublas:8.1%}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help=f"{SMOKE_SHAPE} only, 3 configs, 10 runs each")
    parser.add_argument("--list", action="store_true", help="print the config space and exit (no GPU)")
    parser.add_argument("--focus", action="store_true",
                        help="FOCUS_CONFIGS x FOCUS_VARIANTS (narrow-tile layouts, dynamic tiles) instead of the space")
    parser.add_argument("--shapes", default="weak,control",
                        help="comma-separated: weak, control, or MxKxN (default weak,control)")
    parser.add_argument("--max-configs", type=int, default=None, help="cap on compiled configs")
    parser.add_argument("--iters", type=int, default=None, help="timed runs per point (default 30; smoke 10)")
    parser.add_argument("--top", type=int, default=TOP_CONFIGS, help="configs per shape/direction given variants")
    parser.add_argument("--workers", type=int, default=None, help="compile processes (default: CPUs - 2, <= 16)")
    parser.add_argument("--out", type=Path, default=None, help="JSON path (default $OUT/sweep_tile_configs.json)")
    args = parser.parse_args(argv)
    configs = list(FOCUS_CONFIGS) if args.focus else config_space(max_configs=3 if args.smoke else args.max_configs)
    if args.list:
        for cfg in configs:
            print(f"{cfg.label():24s} smem {shared_memory_bytes(cfg, ITEMSIZE) / 1024:6.1f} KiB, "
                  f"{acc_per_thread(cfg):3d} acc/thread")
        print(f"{len(configs)} configs")
        return 0
    if not torch.cuda.is_available():
        print("sweep_tile_configs needs a CUDA GPU; use --list to see the config space", file=sys.stderr)
        return 2
    shapes = []
    for name in ([] if args.smoke else args.shapes.split(",")):
        if name == "weak":
            shapes += WEAK_SHAPES
        elif name == "control":
            shapes += CONTROL_SHAPES
        else:
            parts = name.split("x")
            if len(parts) != 3 or not all(p.isdigit() for p in parts):
                parser.error(f"--shapes: {name!r} is not weak, control or MxKxN (e.g. 8192x8192x1280)")
            shapes.append(tuple(int(p) for p in parts))
    shapes = shapes or [SMOKE_SHAPE]
    iters = args.iters or (10 if args.smoke else 30)
    top = 1 if args.smoke else args.top
    workers = args.workers or max(1, min(16, (os.cpu_count() or 4) - 2))
    out = args.out or (Path(os.environ["OUT"]) / "sweep_tile_configs.json" if os.environ.get("OUT")
                       else Path("sweep_tile_configs.json"))

    def log(text: str) -> None:
        print(text, flush=True)

    log(f"sweep on {torch.cuda.get_device_name()}: {len(configs)} configs x {len(shapes)} shape(s) x "
        f"{len(DIRECTIONS)} directions, {iters} timed runs, {workers} compile workers")
    start = time.perf_counter()
    failed = precompile_all(configs, shapes, variants=list(FOCUS_VARIANTS.values()) if args.focus else [{}],
                            workers=workers, log=log)
    compile_s = time.perf_counter() - start
    usable = [cfg for cfg in configs if cfg not in failed]
    rows, baselines = [], []
    for shape in shapes:
        shape_rows, base = sweep_shape(shape, usable, iters=iters, top=top, focus=args.focus, log=log)
        rows += shape_rows
        baselines.append(base)
    from hocket.bench.provenance import collect, command_line
    from hocket.hardware.fingerprint import fingerprint

    provenance = collect(command=command_line(argv), hardware=fingerprint(),
                         extra=dict(device=torch.cuda.get_device_name(), iters=iters, compile_s=compile_s,
                                    sweep_s=time.perf_counter() - start, pieces=PIECES))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(dict(provenance=asdict(provenance), baselines=baselines,
                                   failed={cfg.label(): err for cfg, err in failed.items()},
                                   rows=[asdict(r) for r in rows]), indent=1))
    log(f"compile {compile_s:.0f} s, total {time.perf_counter() - start:.0f} s; {len(rows)} rows -> {out}")
    if failed:
        log(f"failed to compile: {', '.join(cfg.label() for cfg in failed)}")
    print_tables(rows, baselines, show=6 if args.smoke else 8)
    return 0


if __name__ == "__main__":
    sys.exit(main())
