"""Single-GPU offload benchmark: GEMM -> pinned host and pinned host -> GEMM, overlapped.

For each bf16 shape (m, k, n) and direction (``to_host``: ``A @ B`` into pinned host
memory; ``from_host``: A in pinned host memory, ``A @ B`` on the GPU) it measures, all in
one run and after a correctness check (output poisoned with NaN, compared with an fp32
reference):

* compute alone (``torch.mm``, the whole problem) and transfer alone (one copy of the bytes);
* ``sequential`` (copy then mm / mm then copy), ``chunked`` (two streams) for several
  chunk counts, even and ramped (``--ramps``: pieces growing from one row block at the
  exposed edge, ``hocket.plan.offload.ramp_sizes``), what ``plan=None`` chooses (variant
  ``planner``), ``tile_fused`` (the Triton kernels; tile config chosen first by timing
  the kernel alone) in several variants (``VARIANTS``): the operator's defaults (ramp of
  pieces, narrow edge tiles, to-host copies held by a driver wait) for several piece counts,
  other piece layouts and narrow pieces, and the previous schedule (spin-kernel waits);
* the best tile_fused plan's GEMM alone vs cuBLAS (TFLOP/s), and its timeline (when each
  piece was ready, when each copy ended, when the GEMM ended), next to the previous schedule's.
  GEMM-alone figures are timed in alternation with ``torch.mm`` on the same operands (the
  H200 drifted by up to 20% over a long run).

Times are CUDA-event medians of >= 50 back-to-back runs with p10/p90; overlap efficiency
is DESIGN.md section 4's (or the speedup when the possible saving is under 15%). Results
go as JSON lines (hocket.bench.record schema) to ``--out`` or ``$OUT/bench_single_gpu.jsonl``;
the table prints last. ``--smoke``: one shape, few runs, every check (< 2 minutes). The
calibration profile the planner prices with comes from ``hocket calibrate`` (``HOCKET_PROFILE``).

    python benchmarks/bench_single_gpu.py --smoke
    python benchmarks/bench_single_gpu.py --shapes 8192x8192x1280 --configs rule --variants operator,previous
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch

from hocket.bench.efficiency import overlap_score
from hocket.bench.paired import alternating_ms
from hocket.bench.provenance import collect, command_line
from hocket.bench.record import Baselines, make_record, write_records
from hocket.core.plan import Plan
from hocket.core.site import Site
from hocket.hardware.fingerprint import fingerprint
from hocket.kernels import (
    candidate_configs,
    consumer_gemm,
    even_row_offsets,
    producer_gemm,
    reset_producer,
    warmup_consumer,
    warmup_producer,
)
from hocket.kernels.config import NARROW_BF16
from hocket.kernels.schedule import trapezoid_row_offsets
from hocket.ops.offload import OffloadContext, matmul_from_host, matmul_to_host, offload_tile_config
from hocket.ops.offload_pieces import piece_offsets
from hocket.ops.offload_plans import planned
from hocket.ops.offload_timeline import offload_timeline
from hocket.ops.tolerance import max_error, tolerance
from hocket.plan.offload import ramp_sizes
from hocket.timing.stats import summarize

SHAPES = ((8192, 8192, 7168), (8192, 3584, 8192), (8192, 8192, 1280), (4096, 12288, 6144))
SMOKE_SHAPES = ((8192, 8192, 7168),)
DIRECTIONS = ("to_host", "from_host")
CHUNKS = (4, 8, 16, 32)
RAMP_CHUNKS = (6, 8, 10, 12)
"""``chunked`` with ramped pieces (``hocket.plan.offload.ramp_sizes``: one row block at the exposed edge)."""
DTYPE = torch.bfloat16


# -- timing -------------------------------------------------------------------
def samples_ms(fn, *, iters: int, warmup: int) -> list[float]:
    """Per-run CUDA-event times of ``fn`` run back to back on the current stream."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    pairs = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        pairs.append((start, end))
    torch.cuda.synchronize()
    return [s.elapsed_time(e) for s, e in pairs]


def median_ms(fn, *, iters: int, warmup: int = 3) -> float:
    return statistics.median(samples_ms(fn, iters=iters, warmup=warmup))


def _two_stream_copy(src: torch.Tensor, dst: torch.Tensor, side: torch.cuda.Stream) -> None:
    """Copy ``src`` -> ``dst`` as two row halves at once, on the current stream and ``side``."""
    current = torch.cuda.current_stream()
    half = src.shape[0] // 2
    side.wait_stream(current)
    dst[:half].copy_(src[:half], non_blocking=True)
    with torch.cuda.stream(side):
        dst[half:].copy_(src[half:], non_blocking=True)
    current.wait_stream(side)


def check(actual: torch.Tensor, expected_fp32: torch.Tensor, what: str) -> float:
    """Raise if any element was not written (NaN) or is beyond bf16 tolerance; return the max error."""
    actual = actual.to(expected_fp32.device)
    nan = int(actual.isnan().sum())
    if nan:
        raise AssertionError(f"{what}: {nan} output elements never written (still NaN)")
    tol = tolerance(actual.dtype)
    ref = expected_fp32.double()
    scale = max(1.0, float(ref.abs().max()))
    err = (actual.double() - ref).abs()
    if not bool((err <= tol.atol * scale + tol.rtol * ref.abs()).all()):
        raise AssertionError(f"{what}: max error {float(err.max()) / scale:.3g} (relative to the largest value) "
                             f"beyond bf16 tolerance rtol={tol.rtol} atol={tol.atol}")
    return max_error(actual.float(), expected_fp32)


# -- tile_fused variants -----------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class Variant:
    """A tile_fused setting measured side by side: pieces and the offload context's knobs."""

    name: str
    pieces: str
    """``ramp`` (the operator's default: one row block at the exposed edge, growing), ``trapezoid``
    (one block at both ends, growing towards an even middle) or ``even``."""
    chunks: tuple[int, ...]
    edge_pieces: int = 1
    copy_wait: str = "auto"
    """to host: ``auto`` (a driver stream wait on the flag value where the driver has it, the operator's
    default) or ``side_kernel`` (spin kernels on a side stream)."""
    directions: tuple[str, ...] = ("to_host", "from_host")
    """directions the variant is measured in."""
    config: str = "best"
    """tile config: ``best`` (fastest GEMM alone) or ``small_m`` (fastest with 64-row blocks:
    half-size edge pieces)."""

    def context_kwargs(self) -> dict:
        """OffloadContext knobs (the operator's defaults where the variant sets none)."""
        return dict(edge_pieces=self.edge_pieces, copy_wait=self.copy_wait)


VARIANTS = (
    Variant(name="operator", pieces="ramp", chunks=(6, 8, 12)),
    Variant(name="edge2", pieces="ramp", chunks=(8, 12, 16), edge_pieces=2),
    Variant(name="edge0", pieces="ramp", chunks=(8,), edge_pieces=0),
    Variant(name="trap1", pieces="trapezoid", chunks=(8, 12, 16, 24)),
    Variant(name="m64/edge1", pieces="ramp", chunks=(8, 12, 16), config="small_m"),
    Variant(name="even", pieces="even", chunks=(8,), edge_pieces=0),
    Variant(name="previous", pieces="ramp", chunks=(6, 8, 12), copy_wait="side_kernel"),
)
"""``operator``: ``OffloadContext``'s defaults (ramped pieces, narrow tiles on the edge piece, to-host
copies held by a driver stream wait where the driver has one). ``edge2`` / ``edge0``: two / no narrow
pieces; ``trap1``: pieces small at both ends (``trapezoid_row_offsets``); ``m64/edge1``: the fastest
config with 64-row blocks; ``even``: even pieces, full-width tiles. ``previous``: the operator's
default before the driver wait (spin-kernel flag waits on a side stream; ``hocket validate`` reads its
lines)."""
SMOKE_VARIANTS = (Variant(name="operator", pieces="ramp", chunks=(8,)),
                  Variant(name="trap1", pieces="trapezoid", chunks=(12,)),
                  Variant(name="previous", pieces="ramp", chunks=(8,), copy_wait="side_kernel"))
CONFIG_PLAN_CHUNKS = 8


def fused_plan(variant: Variant, chunks: int, m: int, *, block_m: int, direction: str) -> Plan:
    """The tile_fused plan with its pieces written out (records say exactly what ran)."""
    base = Plan(strategy="tile_fused", chunks=chunks, transport="host_staged")
    if variant.pieces == "ramp":
        offsets = piece_offsets(base, m, align=block_m, direction=direction)
    elif variant.pieces == "trapezoid":
        offsets = trapezoid_row_offsets(m, min(chunks, -(-m // block_m)), align=block_m)
    else:
        offsets = even_row_offsets(m, min(chunks, -(-m // block_m)), align=block_m)
    sizes = tuple(b - a for a, b in zip(offsets, offsets[1:]))
    return base.with_(chunks=len(sizes), split_sizes=sizes)


def fused_alone_ms(ctx: OffloadContext, direction: str, plan: Plan, a, b, out, *, iters: int) -> tuple[float, float]:
    """The tile_fused GEMM alone, with ``plan``'s schedule (consumer: every flag pre-set;
    producer: signalling, nothing waiting for the flags), and ``torch.mm`` on the same
    operands timed in alternation with it: (kernel ms, cuBLAS ms), medians."""
    m, k = a.shape
    n = b.shape[1]

    def cublas():
        torch.mm(a, b, out=out)

    if direction == "from_host":
        ws = ctx.consumer(m, n, k, a.dtype, plan)
        warmup_consumer(ws, a, b, out)
        ws.flags.fill_(1)
        ms, _, _, cublas_ms = alternating_ms([lambda: consumer_gemm(a, b, workspace=ws, out=out)], [cublas],
                                             iters=iters)
        ws.flags.zero_()
        return ms, cublas_ms
    ws = ctx.producer(m, n, k, a.dtype, plan)
    warmup_producer(ws, a, b, out)

    def run():
        reset_producer(ws)
        producer_gemm(a, b, workspace=ws, out=out)

    ms, _, _, cublas_ms = alternating_ms([run], [cublas], iters=iters)
    return ms, cublas_ms


def choose_tile_config(direction: str, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, *, configs, iters: int):
    """Time the tile-fused GEMM alone per config with the default schedule (an 8-piece ramp,
    narrow edge tiles, last wave filled with narrow tiles), beside cuBLAS; return ({"best":
    fastest, "small_m": fastest with 64-row blocks or None}, {config: ms}, {config: cuBLAS ms})."""
    results, cublas = {}, {}
    for cfg in configs:
        with OffloadContext(a.device, config=cfg) as ctx:
            plan = fused_plan(VARIANTS[0], CONFIG_PLAN_CHUNKS, a.shape[0], block_m=cfg.block_m, direction=direction)
            results[cfg], cublas[cfg] = fused_alone_ms(ctx, direction, plan, a, b, out, iters=iters)
    small = [cfg for cfg in results if cfg.block_m == 64]
    chosen = {"best": min(results, key=results.get), "small_m": min(small, key=results.get) if small else None}
    return chosen, results, cublas


# -- one shape and direction -------------------------------------------------------
def _run_fn(direction, ctx, plan, *, a_dev, a_host, b, c_dev, host_out, expected, shape):
    """Warm once, check once on poisoned outputs, return (timed callable, max error)."""
    m, k = a_dev.shape
    if direction == "to_host":
        matmul_to_host(a_dev, b, out=host_out, plan=plan, context=ctx)
        host_out.fill_(float("nan"))
        matmul_to_host(a_dev, b, out=host_out, plan=plan, context=ctx)
        err = check(host_out, expected, f"matmul_to_host {plan.describe()} {shape}")
        return (lambda: matmul_to_host(a_dev, b, out=host_out, plan=plan, context=ctx, non_blocking=True)), err
    matmul_from_host(a_host, b, out=c_dev, plan=plan, context=ctx)
    c_dev.fill_(float("nan"))
    ctx.staged.device_buffer("from_host.A", (m, k), DTYPE).fill_(float("nan"))
    matmul_from_host(a_host, b, out=c_dev, plan=plan, context=ctx)
    torch.cuda.synchronize()
    ctx.check()
    err = check(c_dev, expected, f"matmul_from_host {plan.describe()} {shape}")
    return (lambda: matmul_from_host(a_host, b, out=c_dev, plan=plan, context=ctx)), err


def _timeline(direction, ctx, plan, *, a_dev, a_host, b, c_dev, host_out):
    if direction == "to_host":
        staging = ctx.staged.device_buffer("to_host.C", tuple(c_dev.shape), DTYPE)
        return offload_timeline(direction, a=a_dev, b=b, out=host_out, staging=staging, plan=plan, context=ctx)
    staging = ctx.staged.device_buffer("from_host.A", tuple(a_dev.shape), DTYPE)
    return offload_timeline(direction, a=a_host, b=b, out=c_dev, staging=staging, plan=plan, context=ctx)


def measure(direction: str, shape, *, iters: int, chunk_counts, variants, configs, provenance, log,
            ramp_counts=RAMP_CHUNKS, with_planner: bool = True) -> dict:
    m, k, n = shape
    dev = torch.device("cuda", torch.cuda.current_device())
    a_dev = torch.randn(m, k, device=dev).to(DTYPE)
    b = torch.randn(k, n, device=dev).to(DTYPE)
    c_dev = torch.empty(m, n, dtype=DTYPE, device=dev)
    expected = torch.mm(a_dev.float(), b.float())
    a_host = a_dev.cpu().pin_memory()
    host_out = torch.empty(m, n, dtype=DTYPE, pin_memory=True)
    flops = 2 * m * k * n
    buffers = dict(a_dev=a_dev, a_host=a_host, b=b, c_dev=c_dev, host_out=host_out)

    compute_ms = median_ms(lambda: torch.mm(a_dev, b, out=c_dev), iters=iters)
    if direction == "to_host":
        comm_bytes = m * n * 2
        src, dst = c_dev, host_out
    else:
        comm_bytes = m * k * 2
        src, dst = a_host, a_dev
    one_copy_ms = median_ms(lambda: dst.copy_(src, non_blocking=True), iters=iters)
    side = torch.cuda.Stream(dev)
    two_copies_ms = median_ms(lambda: _two_stream_copy(src, dst, side), iters=iters)
    comm_ms = min(one_copy_ms, two_copies_ms)  # the fastest transport for these bytes
    if configs == "rule":
        configs = (offload_tile_config(m, n, k, DTYPE),)  # what the operators run by default
    elif configs == "narrow":
        configs = (NARROW_BF16,)  # 128x128 tiles: a shorter tile time at the exposed edge
    chosen, config_ms, config_cublas_ms = choose_tile_config(direction, a_dev, b, c_dev, configs=configs,
                                                             iters=max(30, iters // 2))
    per_config = {cfg.label(): ms for cfg, ms in config_ms.items()}
    config_pct = {cfg: config_cublas_ms[cfg] / ms for cfg, ms in config_ms.items()}
    alone_text = ", ".join(f"{cfg.label()} {pct:.0%}" for cfg, pct in config_pct.items())
    log(f"  {direction} {m}x{k}x{n}: mm {compute_ms:.3f} ms ({flops / compute_ms / 1e9:.0f} TFLOP/s), "
        f"copy {comm_ms:.3f} ms ({comm_bytes / comm_ms / 1e6:.1f} GB/s; one copy {one_copy_ms:.3f}, two streams "
        f"{two_copies_ms:.3f}); tile-fused GEMM alone vs cuBLAS (timed in alternation) with an "
        f"{CONFIG_PLAN_CHUNKS}-piece ramp: {alone_text}")

    runs = [("-", dict(), None, Plan(strategy="sequential", transport="host_staged"))]
    runs += [("-", dict(), None, Plan(strategy="chunked", chunks=c, transport="host_staged")) for c in chunk_counts]
    kind = "mm_d2h" if direction == "to_host" else "h2d_mm"
    probe_site = Site(kind=kind, m=m, k=k, n=n, dtype="bfloat16", world=1)
    for c in (c for c in ramp_counts if c <= -(-m // 128)):
        sizes = ramp_sizes(probe_site, c)
        ramp = Plan(strategy="chunked", chunks=len(sizes), split_sizes=sizes, transport="host_staged")
        runs.append(("ramp", dict(), None, ramp))
    if with_planner:  # what plan=None runs (hocket.plan.offload.choose_offload_plan on this machine)
        runs.append(("planner", dict(), None, planned(kind, m, k, n, DTYPE)))
    for variant in variants:
        cfg = chosen[variant.config]
        for c in variant.chunks if cfg is not None and direction in variant.directions else ():
            if c <= -(-m // cfg.block_m):
                runs.append((variant.name, variant.context_kwargs(), cfg,
                             fused_plan(variant, c, m, block_m=cfg.block_m, direction=direction)))
    contexts = {}
    contexts_config = {name: cfg for name, _, cfg, _ in runs if cfg is not None}
    for name, _, cfg, plan in runs:
        if cfg is None and plan.strategy == "tile_fused":  # the planner's tile_fused pick: the operators' config
            contexts_config[name] = offload_tile_config(m, n, k, DTYPE)
    timed = []
    try:
        for name, kwargs, cfg, plan in runs:
            if name not in contexts:
                contexts[name] = OffloadContext(dev, config=cfg, **kwargs)
            ctx = contexts[name]
            fn, err = _run_fn(direction, ctx, plan, expected=expected, shape=shape, **buffers)
            summary = summarize(samples_ms(fn, iters=iters, warmup=3))
            ctx.check()
            timed.append((name, plan, summary, err))
            log(f"    {plan.describe():28s} {name:13s} {summary.median_ms:.3f} ms (p10 {summary.p10_ms:.3f}, "
                f"p90 {summary.p90_ms:.3f}), max error {err:.2g}, pieces {list(plan.split_sizes or ())}")
        fused = [t for t in timed if t[1].strategy == "tile_fused" and t[0] != "planner"]
        best_name, best_plan = min(fused, key=lambda t: t[2].median_ms)[:2]
        alone_ms, alone_cublas_ms = fused_alone_ms(contexts[best_name], direction, best_plan, a_dev, b, c_dev,
                                                   iters=max(30, iters // 2))
        timelines = {}  # (variant, plan) -> OffloadTimeline: the best plan, and the best of the old schedule
        for name in dict.fromkeys((best_name, "previous")):  # once each, also when previous is the best
            options = [t for t in fused if t[0] == name]
            if options:
                plan = min(options, key=lambda t: t[2].median_ms)[1]
                timeline = _timeline(direction, contexts[name], plan, **buffers)
                timelines[(name, plan)] = timeline
                log(f"    timeline {name} {plan.describe()}: {timeline.describe()}; drain {timeline.drain_ms:.3f} ms")
    finally:
        for ctx in contexts.values():
            ctx.close()

    sequential_ms = timed[0][2].median_ms
    baselines = Baselines(sequential_ms=sequential_ms, compute_alone_ms=compute_ms, comm_alone_ms=comm_ms)
    site = Site(kind="mm_d2h" if direction == "to_host" else "h2d_mm", m=m, k=k, n=n, dtype="bfloat16", world=1)
    best_cfg = contexts_config[best_name]
    common = dict(provenance.extra, tile_configs_alone_ms=per_config,
                  tile_configs_cublas_ms={cfg.label(): ms for cfg, ms in config_cublas_ms.items()}, one_copy_ms=one_copy_ms,
                  two_stream_copy_ms=two_copies_ms,
                  cublas_tflops=flops / compute_ms / 1e9, comm_bytes=comm_bytes)
    records = []
    for name, plan, summary, err in timed:
        config = contexts_config.get(name)
        extra = dict(common, variant=name, tile_config=config.label() if config is not None else None)
        if name in {v.name for v in variants}:
            extra.update(next(v for v in variants if v.name == name).context_kwargs())
        if plan.strategy == "tile_fused":  # how its to-host copies waited (the planner's run included)
            extra.update(copy_wait_used=contexts[name].copy_wait)
        if (name, plan) == (best_name, best_plan):
            extra.update(tile_alone_ms=alone_ms, tile_alone_tflops=flops / alone_ms / 1e9,
                         tile_alone_cublas_ms=alone_cublas_ms)
        if (name, plan) in timelines:
            extra.update(timeline=asdict(timelines[(name, plan)]))
        records.append(make_record(site=site, plan=plan, timing=summary, baselines=baselines,
                                   provenance=replace(provenance, extra=extra), max_error=err))

    def best(select):
        options = [(s.median_ms, p) for name, p, s, _ in timed if select(name, p)]
        return min(options, key=lambda o: o[0]) if options else (float("nan"), None)

    row = dict(direction=direction, shape=shape, compute_ms=compute_ms, comm_ms=comm_ms, sequential_ms=sequential_ms,
               fused_alone_pct=alone_cublas_ms / alone_ms, best_config_pct=config_pct[chosen["best"]],
               tile_config=best_cfg.label(), best_variant=best_name)
    columns = {"chunked": lambda name, p: p.strategy == "chunked" and name == "-",
               "ramp": lambda name, p: name == "ramp",
               "planner": lambda name, p: name == "planner",
               "tile_fused": lambda name, p: p.strategy == "tile_fused",
               "previous": lambda name, p: name == "previous"}
    for column, select in columns.items():
        ms, plan = best(select)
        score = overlap_score(measured_ms=ms, sequential_ms=sequential_ms, compute_alone_ms=compute_ms,
                              comm_alone_ms=comm_ms) if plan else None
        row[column] = (ms, plan.chunks if plan else None, score.label() if score else "-")
    return dict(records=records, row=row)


def print_table(rows: list[dict]) -> None:
    head = (f"{'direction':9s} {'m x k x n':18s} {'mm_ms':>7s} {'copy_ms':>7s} {'seq_ms':>7s} "
            f"{'chunked_ms (c) eff':>22s} {'ramp_ms (c) eff':>22s} "
            f"{'fused_ms (c) eff':>22s} "
            f"{'planner_ms (c) eff':>22s} {'fusedGEMM/cuBLAS':>16s} {'previous_ms (c) eff':>22s} "
            f"{'bestCfg/cuBLAS':>14s}  best fused variant (tile config)")
    print("\n" + head)
    print("-" * len(head))
    for r in rows:
        shape = "x".join(str(d) for d in r["shape"])
        cells = []
        for column in ("chunked", "ramp", "tile_fused", "planner", "previous"):
            ms, chunks, label = r[column]
            cells.append(f"{ms:7.3f} ({chunks}) {label:>7s}")
        print(f"{r['direction']:9s} {shape:18s} {r['compute_ms']:7.3f} {r['comm_ms']:7.3f} {r['sequential_ms']:7.3f} "
              f"{cells[0]:>22s} {cells[1]:>22s} {cells[2]:>22s} {cells[3]:>22s} "
              f"{r['fused_alone_pct']:16.0%} {cells[4]:>22s} {r['best_config_pct']:14.0%}  {r['best_variant']} "
              f"({r['tile_config']})")
    print("eff: overlap efficiency (T_seq - T) / (T_seq - max(mm, copy)); 'x' marks a speedup where the "
          "possible saving is under 15% of T_seq. chunked: even pieces; ramp: chunked with pieces growing from one "
          "row block at the exposed edge; fused: best "
          "tile_fused plan; planner: what plan=None runs "
          "(hocket.plan.offload); fusedGEMM/cuBLAS: the best fused plan's "
          "GEMM alone (flags pre-set / nothing waiting) vs torch.mm timed in alternation with it; bestCfg/cuBLAS: the "
          "fastest tile config's GEMM alone (8-piece ramp), likewise; previous: the operators' schedule with "
          "spin-kernel flag waits (the default before the driver wait), re-measured")


# -- main ----------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="one shape, few runs, every check (< 2 minutes)")
    parser.add_argument("--out", type=Path, default=None,
                        help="results JSON lines (default: $OUT/bench_single_gpu.jsonl, else benchmarks/results/)")
    parser.add_argument("--iters", type=int, default=None, help="timed runs per measurement (default 50; smoke 10)")
    parser.add_argument("--shapes", default=None,
                        help="comma-separated MxKxN shapes (default: the four of issue 5; smoke: the first)")
    parser.add_argument("--configs", choices=("all", "rule", "narrow"), default="all",
                        help="tile configs timed alone before choosing one: all candidate_configs (default), or "
                             "only the operators' default for the shape (hocket.ops.offload.offload_tile_config), or "
                             "128x128 tiles (hocket.kernels.config.NARROW_BF16)")
    parser.add_argument("--ramps", default=",".join(map(str, RAMP_CHUNKS)),
                        help="piece counts of ramped chunked runs (empty: none)")
    parser.add_argument("--no-planner", action="store_true", help="skip the run of what plan=None chooses")
    parser.add_argument("--variants", default=None,
                        help="comma-separated tile_fused variants to run (default: all of "
                             + ", ".join(v.name for v in VARIANTS) + ")")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("bench_single_gpu needs a CUDA GPU (pinned host <-> device copies); none found", file=sys.stderr)
        return 2
    iters = args.iters or (10 if args.smoke else 50)
    if iters < 1:
        parser.error(f"--iters={iters} must be >= 1")
    if args.out is not None:
        out = args.out
    elif os.environ.get("OUT"):
        out = Path(os.environ["OUT"]) / "bench_single_gpu.jsonl"
    else:
        out = Path(__file__).resolve().parent / "results" / "h200" / "bench_single_gpu.jsonl"

    def log(text: str) -> None:
        print(text, flush=True)

    device_name = torch.cuda.get_device_name()
    provenance = collect(command=command_line(argv), hardware=fingerprint(),
                         extra={"device": device_name, "mode": "smoke" if args.smoke else "full", "iters": iters})
    shapes = SMOKE_SHAPES if args.smoke else SHAPES
    if args.shapes:
        shapes = []
        for text in args.shapes.split(","):
            parts = text.split("x")
            if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
                parser.error(f"--shapes: {text!r} is not MxKxN with positive ints (e.g. 8192x8192x1280)")
            shapes.append(tuple(int(p) for p in parts))
    configs = candidate_configs(DTYPE)
    if args.smoke:  # the first config and the first with 64-row blocks
        configs = configs[:1] + tuple(c for c in configs if c.block_m == 64)[:1]
    if args.configs in ("rule", "narrow"):
        configs = args.configs
    chunk_counts = (8,) if args.smoke else CHUNKS
    try:
        ramp_counts = tuple(int(c) for c in args.ramps.split(",") if c.strip())
    except ValueError:
        parser.error(f"--ramps={args.ramps!r} must be comma-separated piece counts, e.g. 6,8,10")
    variants = SMOKE_VARIANTS if args.smoke else VARIANTS
    if args.variants:
        names = args.variants.split(",")
        unknown = sorted(set(names) - {v.name for v in VARIANTS})
        if unknown:
            parser.error(f"--variants: {unknown} unknown; choose from {[v.name for v in VARIANTS]}")
        variants = tuple(v for v in VARIANTS if v.name in names)
    log(f"bench_single_gpu on {device_name}: {len(shapes)} shape(s), {iters} timed runs each, results -> {out}")
    rows, records = [], []
    for shape in shapes:
        for direction in DIRECTIONS:
            result = measure(direction, shape, iters=iters, chunk_counts=chunk_counts, variants=variants,
                             configs=configs, provenance=provenance, log=log, ramp_counts=ramp_counts,
                             with_planner=not args.no_planner)
            rows.append(result["row"])
            records.extend(result["records"])
            write_records(out, result["records"])
    log(f"{len(records)} result lines -> {out}")
    print_table(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
