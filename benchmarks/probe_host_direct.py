"""Probe: can the tile-fused GEMMs reach pinned host memory directly, without copy engines?

Issue 5's offload operators move data over PCIe with copy-engine copies of row pieces; each
piece costs a few microseconds and the first piece waits for whole tiles, which keeps the
overlap efficiency at 0.88-0.91 where 0.95 is asked. This probe measures the alternative on
one GPU (medians of ``--iters`` CUDA-event-timed calls, every output checked first):

* ``direct_to``: the producer GEMM stores its tiles straight into pinned host memory (the
  host buffer's device-mapped address), no copy and no flags;
* ``direct_from``: the consumer GEMM loads A's tiles straight from pinned host memory;
* ``smcopy``: an SM-driven copy between device and pinned host memory with k programs
  (the bandwidth an in-kernel transport could reach over PCIe).

Beside them: the GEMM alone (cuBLAS and the same Triton kernel into device memory), the
copy alone, sequential, and today's tile_fused operator (8 pieces).

    python3 benchmarks/probe_host_direct.py --out $OUT/probe_host_direct.jsonl
"""

from __future__ import annotations

import torch

from probe_common import Rows, operands, parse_shapes, probe_args, run_probe, timed_ms  # the probes' timing, check, table

SHAPES = ((8192, 8192, 7168), (8192, 3584, 8192), (8192, 8192, 1280), (4096, 12288, 6144))


def probe_shape(m: int, k: int, n: int, *, iters: int, programs_list: tuple[int, ...]) -> list[dict]:
    from hocket.kernels.config import NARROW_BF16
    from hocket.kernels.launch import _launch_consumer, _launch_producer
    from hocket.kernels.workspace import ConsumerWorkspace, ProducerWorkspace
    from hocket.ops.offload import OffloadContext, matmul_from_host, matmul_to_host, offload_tile_config
    from hocket.core.plan import Plan

    ops = operands(m, k, n, seed=m + k + n)
    dev, dt, A, B, ref = ops.dev, torch.bfloat16, ops.A, ops.B, ops.ref
    c_dev, c_host, a_host, a_dev = ops.c_dev, ops.c_host, ops.a_host, ops.a_dev
    cfgs = {"wide": offload_tile_config(m, n, k, dt), "128x128": NARROW_BF16}
    out = Rows(m, k, n, iters=iters, ref=ref, poison=(c_host, c_dev), width=24)
    rows, add = out.rows, out.add

    # -- to host ----------------------------------------------------------------------------
    add("to_host", "mm", lambda: torch.mm(A, B, out=c_dev), check=lambda: c_dev)
    add("to_host", "copy", lambda: c_host.copy_(c_dev, non_blocking=True))
    add("to_host", "sequential", lambda: (torch.mm(A, B, out=c_dev), c_host.copy_(c_dev, non_blocking=True)),
        check=lambda: c_host)
    ctx = OffloadContext(dev)
    plan = Plan(strategy="tile_fused", chunks=8, transport="host_staged")
    add("to_host", "tile_fused(8)", lambda: matmul_to_host(A, B, out=c_host, plan=plan, context=ctx, non_blocking=True),
        check=lambda: c_host)
    for label, cfg in cfgs.items():
        ws = ProducerWorkspace(m=m, n=n, k=k, dtype=dt, device=dev, groups=1, config=cfg)
        add("to_host", f"triton_dev/{label}", lambda ws=ws: _launch_producer(ws, A, B, c_dev, signal=False),
            check=lambda: c_dev)
        add("to_host", f"direct/{label}", lambda ws=ws: _launch_producer(ws, A, B, c_host, signal=False),
            check=lambda: c_host)
    # -- from host --------------------------------------------------------------------------
    add("from_host", "copy", lambda: a_dev.copy_(a_host, non_blocking=True))
    add("from_host", "sequential", lambda: (a_dev.copy_(a_host, non_blocking=True), torch.mm(a_dev, B, out=c_dev)),
        check=lambda: c_dev)
    add("from_host", "tile_fused(8)", lambda: matmul_from_host(a_host, B, out=c_dev, plan=plan, context=ctx),
        check=lambda: c_dev)
    for label, cfg in cfgs.items():
        ws = ConsumerWorkspace(m=m, n=n, k=k, dtype=dt, device=dev, chunk_offsets=(0, m), config=cfg)
        first = timed_ms(lambda ws=ws: _launch_consumer(ws, a_host, B, c_dev, wait=False), iters=1, warmup=1)
        if first["median_ms"] > 40:
            rows.append({"m": m, "k": k, "n": n, "direction": "from_host", "variant": f"direct/{label}",
                         "median_ms": first["median_ms"], "samples": 1, "note": "one call (too slow to repeat)"})
            print(f"  from_host direct/{label:17s} {first['median_ms']:8.3f} ms (one call)", flush=True)
            continue
        add("from_host", f"direct/{label}", lambda ws=ws: _launch_consumer(ws, a_host, B, c_dev, wait=False),
            check=lambda: c_dev)
    ctx.close()
    # -- SM-driven copies over PCIe ---------------------------------------------------------
    from hocket.kernels.sm_copy import sm_copy

    for programs in programs_list:
        add("to_host", f"smcopy/k{programs}", lambda p=programs: sm_copy(c_dev, c_host, programs=p))
        add("from_host", f"smcopy/k{programs}", lambda p=programs: sm_copy(a_host, a_dev, programs=p))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = probe_args(__doc__, SHAPES, iters=30)
    parser.add_argument("--programs", default="8,16,32,66,130", help="SM-copy program counts (empty: none)")
    args = parser.parse_args(argv)
    programs = tuple(int(p) for p in args.programs.split(",") if p)
    first = parse_shapes(args.shapes)[:1]

    def shape(m, k, n, *, iters):  # the SM-copy sweep on the first shape only
        return probe_shape(m, k, n, iters=iters, programs_list=programs if (m, k, n) in first else ())
    return run_probe("probe_host_direct", args, shape, width=24)


if __name__ == "__main__":
    raise SystemExit(main())
