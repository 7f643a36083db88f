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

import torch

from probe_common import Rows, efficiency, operands, probe_args, run_probe, timed_ms  # the probes' timing, check, table

SHAPES = ((8192, 8192, 7168), (8192, 3584, 8192), (8192, 8192, 1280), (4096, 12288, 6144))


def probe_shape(m: int, k: int, n: int, *, iters: int) -> list[dict]:
    from bench_single_gpu import VARIANTS, fused_alone_ms, fused_plan  # sibling benchmark: the operator's schedule

    from hocket.ops.offload import OffloadContext, matmul_to_host
    from hocket.plan.offload import ramp_sizes
    from hocket.core.plan import Plan
    from hocket.plan.wave_groups import wave_row_offsets
    from hocket.core.site import Site

    ops = operands(m, k, n)
    dev, dt, A, B, ref = ops.dev, torch.bfloat16, ops.A, ops.B, ops.ref
    c_dev, c_host = ops.c_dev, ops.c_host
    ctx = OffloadContext(dev)
    cfg = ctx.tile_config(m, n, k, dt)
    programs = ctx.programs()
    tiles_per_block = -(-n // cfg.block_n)
    blocks = -(-m // cfg.block_m)
    out = Rows(m, k, n, iters=iters, ref=ref, poison=(c_host,), width=24)

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
    out.rows.append({**out.shape, "direction": "to_host", "variant": "copy", **copy, **info})

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
        context = plain if label.endswith("full tiles") else ctx
        out.add("to_host", label, lambda p=plan, c=context: matmul_to_host(A, B, out=c_host, plan=p, context=c,
                                                                           non_blocking=True),
                check=lambda: c_host, extra={"split_sizes": list(plan.split_sizes or ())})
    ctx.close()
    plain.close()
    out.add("gemm", "mm", lambda: torch.mm(A, B, out=c_dev))
    return out.rows


def main(argv: list[str] | None = None) -> int:
    args = probe_args(__doc__, SHAPES, iters=50).parse_args(argv)
    return run_probe("probe_wave_groups", args, probe_shape, width=24, eff=efficiency)


if __name__ == "__main__":
    raise SystemExit(main())
