"""Probe: tile_fused to host with flag groups cut on the persistent kernel's wave grid (one GPU).

``hocket.plan.wave_groups.wave_row_offsets`` cuts the producer's groups where its waves end, each as
large as what is done when the copy before it ends. This probe measures, per shape, the wave time
(the operator's fused GEMM alone, timed in alternation with cuBLAS, over its waves) and a row block's
copy time (one copy of C alone), cuts the groups, and times ``matmul_to_host`` with them beside the
operator's ramped ``tile_fused(8)``, the ramped ``chunked(8)`` stream pipeline and sequential; medians of
``--iters`` CUDA-event-timed calls (the host ahead), every output checked against ``torch.mm`` first.

    python3 benchmarks/probe_wave_groups.py --out $OUT/probe_wave_groups.jsonl
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from probe_host_direct import rel_error, row_text, timed_ms, write_rows

SHAPES = ((8192, 8192, 7168), (8192, 3584, 8192), (8192, 8192, 1280), (4096, 12288, 6144))


def probe_shape(m: int, k: int, n: int, *, iters: int) -> list[dict]:
    from bench_single_gpu import VARIANTS, fused_alone_ms, fused_plan  # sibling benchmark: the operator's schedule

    from hocket.ops.offload import OffloadContext, matmul_to_host
    from hocket.plan.offload import ramp_sizes
    from hocket.plan.plan import Plan
    from hocket.plan.wave_groups import wave_row_offsets
    from hocket.site import Site

    dev = torch.device("cuda", torch.cuda.current_device())
    dt = torch.bfloat16
    g = torch.Generator(device=dev).manual_seed(m + 3 * k + 7 * n)
    A = torch.randn(m, k, device=dev, dtype=dt, generator=g)
    B = torch.randn(k, n, device=dev, dtype=dt, generator=g) / k**0.5
    ref = torch.mm(A, B)
    c_dev = torch.empty(m, n, device=dev, dtype=dt)
    c_host = torch.empty(m, n, dtype=dt, pin_memory=True)
    ctx = OffloadContext(dev)
    cfg = ctx.tile_config(m, n, k, dt)
    programs = ctx.programs()
    tiles_per_block = -(-n // cfg.block_n)
    blocks = -(-m // cfg.block_m)
    rows: list[dict] = []
    base = {"m": m, "k": k, "n": n, "direction": "to_host"}

    default = fused_plan(VARIANTS[0], 8, m, block_m=cfg.block_m, direction="to_host")
    alone_ms, cublas_ms = fused_alone_ms(ctx, "to_host", default, A, B, c_dev, iters=iters)
    waves = -(-(blocks * tiles_per_block) // programs)
    copy = timed_ms(lambda: c_host.copy_(c_dev, non_blocking=True), iters=iters)
    wave_ms, block_ms = alone_ms / waves, copy["median_ms"] / blocks
    offsets = wave_row_offsets(m, align=cfg.block_m, tiles_per_block=tiles_per_block, programs=programs,
                               wave_ms=wave_ms, copy_ms_per_block=block_ms)
    sizes = tuple(b - a for a, b in zip(offsets, offsets[1:]))
    info = {"config": cfg.label(), "programs": programs, "fused_alone_ms": alone_ms, "cublas_ms": cublas_ms,
            "wave_ms": wave_ms, "copy_ms_per_block": block_ms, "wave_sizes": list(sizes)}
    print(f"  {cfg.label()} on {programs} programs: alone {alone_ms:.3f} ms ({waves} waves, {wave_ms * 1e3:.1f} us "
          f"each), copy {copy['median_ms']:.3f} ms ({block_ms * 1e3:.1f} us a block); wave groups {list(sizes)}",
          flush=True)
    rows.append({**base, "variant": "copy", **copy, **info})

    site = Site(kind="mm_d2h", m=m, k=k, n=n, dtype="bfloat16", world=1)
    ramp8 = ramp_sizes(site, 8)
    plans = [("sequential", Plan(strategy="sequential", transport="host_staged")),
             ("chunked ramp(8)", Plan(strategy="chunked", chunks=len(ramp8), split_sizes=ramp8,
                                      transport="host_staged")),
             ("tile_fused(8) ramp", default),
             (f"tile_fused({len(sizes)}) wave", Plan(strategy="tile_fused", chunks=len(sizes), split_sizes=sizes,
                                                     transport="host_staged"))]
    plain = OffloadContext(dev, edge_pieces=0)  # the wave grid assumes full tiles: no narrow first group
    plans.append((f"tile_fused({len(sizes)}) wave, full tiles", plans[-1][1]))
    for label, plan in plans:
        def call(p=plan, c=plain if label.endswith("full tiles") else ctx):
            matmul_to_host(A, B, out=c_host, plan=p, context=c, non_blocking=True)
        record = {**base, "variant": label, "split_sizes": list(plan.split_sizes or ())}
        c_host.fill_(float("nan"))
        call()
        torch.cuda.synchronize()
        record["rel_err"] = rel_error(c_host, ref)
        if record["rel_err"] > 2e-2:
            rows.append({**record, "correct": False})
            print(f"  {label:24s} WRONG rel_err={record['rel_err']:.3g}", flush=True)
            continue
        record.update(timed_ms(call, iters=iters))
        rows.append(record)
        print(f"  {label:24s} {record['median_ms']:8.3f} ms", flush=True)
    ctx.close()
    plain.close()
    mm = timed_ms(lambda: torch.mm(A, B, out=c_dev), iters=iters)
    rows.append({**base, "direction": "gemm", "variant": "mm", **mm})
    return rows


def _eff(rows: list[dict], r: dict) -> str:
    def med(v, d="to_host"):
        return next((x["median_ms"] for x in rows if x["variant"] == v and x["direction"] == d and "median_ms" in x),
                    None)
    seq, copy, mm = med("sequential"), med("copy"), med("mm", "gemm")
    if r["direction"] != "to_host" or "median_ms" not in r or None in (seq, copy, mm) or seq <= max(copy, mm):
        return ""
    return f"{(seq - r['median_ms']) / (seq - max(copy, mm)):.3f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", default=",".join("x".join(map(str, s)) for s in SHAPES))
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("probe_wave_groups needs a CUDA GPU", file=sys.stderr)
        return 2
    table = []
    for i, shape in enumerate(tuple(int(x) for x in s.split("x")) for s in args.shapes.split(",") if s):
        print(f"[{i + 1}] m x k x n = {shape}", flush=True)
        rows = probe_shape(*shape, iters=args.iters)
        table += [(r, _eff(rows, r)) for r in rows]
    write_rows(args.out, [r for r, _ in table])
    print(f"\n{'direction':9s} {'m x k x n':18s} {'variant':24s} {'median':>8s} {'p10':>8s} {'p90':>8s}  eff")
    for r, eff in table:
        print(f"{row_text(r, 24)}  {eff}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
