"""Probe: the tile_fused offload pipelines with their exposed piece's tiles split along K.

``OffloadContext(edge_splits=s)`` cuts each tile of the exposed piece (the first group to host, the last
chunk from host) into ``s`` K slices that run on different programs of the persistent launch (fp32
partials; the last slice adds them). Without it that piece waits one whole K loop of one tile per
program (0.09 ms for a 128x256 tile over K=8192 on an H200), which is most of what stands between
tile_fused and issue 5's 0.95 overlap efficiency (benchmarks/results/h200/README.md, "Where the time goes").

Per shape and direction: cuBLAS alone, the copy alone, sequential, the ramped ``chunked`` plan, and
tile_fused at ``--chunks`` ramped pieces for every ``--splits`` value (one context per value, the operator's
defaults otherwise), each checked on NaN-poisoned outputs first, then timed in ``--rounds`` interleaved rounds
of ``--iters`` back-to-back calls (median of all samples, p10/p90); one timeline per split value at 8 pieces.

    python3 benchmarks/probe_edge_splits.py --out $OUT/probe_edge_splits.jsonl
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from probe_common import write_rows  # noqa: E402  (a sibling script)

SHAPES = ("8192x8192x7168", "8192x3584x8192", "4096x12288x6144", "8192x8192x1280")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=None, help="JSON lines of every measurement")
    parser.add_argument("--shapes", default=",".join(SHAPES[:2]), help="m x k x n, comma separated")
    parser.add_argument("--directions", default="to_host,from_host")
    parser.add_argument("--splits", default="1,2,4,8", help="edge_splits values")
    parser.add_argument("--chunks", default="6,8,12", help="tile_fused piece counts (ramped)")
    parser.add_argument("--iters", type=int, default=25, help="timed calls per round")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--alone", action="store_true",
                        help="instead: the fused GEMMs alone (no copies; consumer flags pre-set) with every tile, "
                             "or the first/last 128 rows, split, against unsplit: what one K slice costs")
    parser.add_argument("--dynamic", default="0", help="tile tickets: 0 (fixed stride, the operator's default), "
                        "1, or 0,1 for both (extra entries shift a fixed-stride table's balance)")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("probe_edge_splits: no CUDA device", file=sys.stderr)
        return 2
    from bench_single_gpu import DTYPE, VARIANTS, _run_fn, _timeline, fused_plan, median_ms, samples_ms
    from hocket.bench.efficiency import overlap_score
    from hocket.timing.stats import summarize
    from hocket.ops.offload import OffloadContext
    from hocket.core.plan import Plan

    operator = next(v for v in VARIANTS if v.name == "operator")
    if args.alone:
        return _alone(args, dev=torch.device("cuda", torch.cuda.current_device()))
    splits = [int(s) for s in args.splits.split(",")]
    chunk_counts = [int(c) for c in args.chunks.split(",")]
    dev = torch.device("cuda", torch.cuda.current_device())
    rows: list[dict] = []

    def emit(row: dict) -> None:
        rows.append(row)
        write_rows(args.out, rows)

    for shape in args.shapes.split(","):
        m, k, n = (int(x) for x in shape.split("x"))
        torch.manual_seed(m + k + n)
        a = torch.randn(m, k, device=dev).to(DTYPE)
        b = (torch.randn(k, n, device=dev) / k**0.5).to(DTYPE)
        buffers = dict(a_dev=a, a_host=a.cpu().pin_memory(), b=b, c_dev=torch.empty(m, n, dtype=DTYPE, device=dev),
                       host_out=torch.empty(m, n, dtype=DTYPE, pin_memory=True))
        expected = torch.mm(a.float(), b.float())
        mm_ms = median_ms(lambda: torch.mm(a, b, out=buffers["c_dev"]), iters=50)
        for direction in args.directions.split(","):
            src, dst = ((buffers["c_dev"], buffers["host_out"]) if direction == "to_host"
                        else (buffers["a_host"], a))
            copy_ms = median_ms(lambda: dst.copy_(src, non_blocking=True), iters=50)
            contexts = {(s, dyn): OffloadContext(dev, edge_splits=s, **(operator.context_kwargs() | dict(dynamic=dyn)))
                        for dyn in (bool(int(d)) for d in args.dynamic.split(",")) for s in splits}
            runs = {}  # name -> (callable, record fields)
            base = next(iter(contexts.values()))
            for name, plan in (("sequential", Plan(strategy="sequential", transport="host_staged")),
                               ("chunked(8)", Plan(strategy="chunked", chunks=8, transport="host_staged"))):
                fn, err = _run_fn(direction, base, plan, expected=expected, shape=(m, k, n), **buffers)
                runs[name] = (fn, dict(strategy=plan.strategy, chunks=plan.chunks, edge_splits=1, max_error=err))
            for (s, dyn), ctx in contexts.items():
                for c in chunk_counts:
                    plan = fused_plan(operator, c, m, block_m=128, direction=direction)
                    fn, err = _run_fn(direction, ctx, plan, expected=expected, shape=(m, k, n), **buffers)
                    ws = ctx.producer(m, n, k, DTYPE, plan) if direction == "to_host" else ctx.consumer(m, n, k, DTYPE,
                                                                                                         plan)
                    runs[f"tile_fused({c}) splits={s}{' dyn' if dyn else ''}"] = (fn, dict(
                        strategy="tile_fused", chunks=c, edge_splits=s, dynamic=dyn, max_error=err,
                        split_sizes=plan.split_sizes,
                        split_tiles=ws.schedule.split_tiles, entries=len(ws.schedule.tiles)))
            samples = {name: [] for name in runs}
            for _ in range(args.rounds):
                for name, (fn, _) in runs.items():
                    samples[name] += samples_ms(fn, iters=args.iters, warmup=3)
            for ctx in contexts.values():
                ctx.check()
            seq_ms = statistics.median(samples["sequential"])
            print(f"{direction} {m}x{k}x{n}: mm {mm_ms:.3f} copy {copy_ms:.3f} sequential {seq_ms:.3f} ms", flush=True)
            for name, (fn, fields) in runs.items():
                st = summarize(samples[name])
                score = overlap_score(measured_ms=st.median_ms, sequential_ms=seq_ms, compute_alone_ms=mm_ms,
                                      comm_alone_ms=copy_ms)
                emit(dict(direction=direction, m=m, k=k, n=n, run=name, median_ms=st.median_ms, p10_ms=st.p10_ms,
                          p90_ms=st.p90_ms, samples=len(samples[name]), mm_ms=mm_ms, copy_ms=copy_ms,
                          sequential_ms=seq_ms, efficiency=score.overlap_efficiency, metric=score.metric, **fields))
                print(f"  {name:28s} {st.median_ms:.3f} ms (p10 {st.p10_ms:.3f} p90 {st.p90_ms:.3f}) "
                      f"{score.label()}", flush=True)
            for (s, dyn), ctx in contexts.items():
                plan = fused_plan(operator, 8, m, block_m=128, direction=direction)
                tl = _timeline(direction, ctx, plan, **buffers)
                name = f"timeline splits={s}{' dyn' if dyn else ''}"
                emit(dict(direction=direction, m=m, k=k, n=n, run=name, timeline=tl.describe()))
                print(f"  {name}: {tl.describe()}", flush=True)
            for ctx in contexts.values():
                ctx.close()
    return 0


def _alone(args, *, dev) -> int:
    """The producer (signalling, nothing waiting) and consumer (flags pre-set) GEMMs alone, timed in
    alternation with cuBLAS, per split count and split rows (0, the edge row block, all rows)."""
    from bench_single_gpu import DTYPE
    from hocket.bench.paired import alternating_ms
    from hocket.kernels import (ConsumerWorkspace, ProducerWorkspace, consumer_gemm, producer_gemm, ramp_row_offsets,
                                reset_producer, warmup_consumer, warmup_producer)
    from hocket.ops.offload import offload_tile_config

    rows = []
    for shape in args.shapes.split(","):
        m, k, n = (int(x) for x in shape.split("x"))
        a = torch.randn(m, k, device=dev).to(DTYPE)
        b = (torch.randn(k, n, device=dev) / k**0.5).to(DTYPE)
        out = torch.empty(m, n, dtype=DTYPE, device=dev)
        expected = torch.mm(a.float(), b.float())
        cfg = offload_tile_config(m, n, k, DTYPE)
        offsets = ramp_row_offsets(m, 8, align=cfg.block_m)
        for kind in ("producer", "consumer"):
            for split_rows in (0, cfg.block_m, m):
                for s in ([1] if split_rows == 0 else [int(x) for x in args.splits.split(",") if int(x) > 1]):
                    common = dict(m=m, n=n, k=k, dtype=DTYPE, device=dev, config=cfg, split_rows=split_rows, splits=s)
                    if kind == "producer":
                        ws = ProducerWorkspace(group_offsets=offsets, **common)
                        warmup_producer(ws, a, b, out)

                        def run(ws=ws):
                            reset_producer(ws)
                            producer_gemm(a, b, workspace=ws, out=out)
                    else:
                        ws = ConsumerWorkspace(chunk_offsets=tuple(m - o for o in reversed(offsets)),
                                               **common)
                        warmup_consumer(ws, a, b, out)
                        ws.flags.fill_(1)

                        def run(ws=ws):
                            consumer_gemm(a, b, workspace=ws, out=out)
                    out.fill_(float("nan"))
                    run()
                    torch.cuda.synchronize()
                    err = float((out.float() - expected).abs().max())
                    ms, _, _, cublas_ms = alternating_ms([run], [lambda: torch.mm(a, b, out=out)],
                                                         iters=args.iters * args.rounds)
                    row = dict(kind=kind, m=m, k=k, n=n, split_rows=split_rows, splits=s, median_ms=ms,
                               cublas_ms=cublas_ms, entries=len(ws.schedule.tiles), split_tiles=ws.schedule.split_tiles,
                               programs=ws.num_programs, max_error=err, config=cfg.label())
                    rows.append(row)
                    print(f"{kind} {m}x{k}x{n} split_rows={split_rows} splits={s}: {ms:.3f} ms (cuBLAS {cublas_ms:.3f}),"
                          f" {row['entries']} entries, max error {err:.3g}", flush=True)
                    write_rows(args.out, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
