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

import argparse
import json
import sys
from pathlib import Path

import torch

SHAPES = ((8192, 8192, 7168), (8192, 3584, 8192), (8192, 8192, 1280), (4096, 12288, 6144))


def timed_ms(fn, *, iters: int, warmup: int = 3) -> dict:
    """Median, p10, p90 of ``iters`` CUDA-event-timed calls (``hocket.bench.timer``)."""
    from hocket.bench.timer import TimingConfig, time_callable

    summary = time_callable(fn, config=TimingConfig(warmup=warmup, iters=iters), device=torch.device("cuda"))
    return {"median_ms": summary.median_ms, "p10_ms": summary.p10_ms, "p90_ms": summary.p90_ms,
            "samples": summary.n}


def rel_error(got: torch.Tensor, ref: torch.Tensor) -> float:
    """``hocket.ops.tolerance.max_error`` on the host (inf where a NaN poison survived)."""
    from hocket.ops.tolerance import max_error

    got = got.float().cpu()
    return max_error(got, ref.float().cpu()) if torch.isfinite(got).all() else float("inf")


def write_rows(path, rows: list[dict]) -> None:
    """The probe's records as JSON lines (``path`` None: nothing)."""
    if path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))


def row_text(r: dict, width: int) -> str:
    """One table line: direction, shape, variant (``width`` wide), median, p10, p90 (WRONG if unchecked)."""
    med = f"{r['median_ms']:8.3f}" if "median_ms" in r else "   WRONG"
    p10 = f"{r['p10_ms']:8.3f}" if "p10_ms" in r else ""
    p90 = f"{r['p90_ms']:8.3f}" if "p90_ms" in r else ""
    return f"{r['direction']:9s} {r['m']}x{r['k']}x{r['n']:<8d} {r['variant']:{width}s} {med} {p10} {p90}"


def probe_shape(m: int, k: int, n: int, *, iters: int, programs_list: tuple[int, ...]) -> list[dict]:
    from hocket.kernels.config import NARROW_BF16
    from hocket.kernels.launch import _launch_consumer, _launch_producer
    from hocket.kernels.workspace import ConsumerWorkspace, ProducerWorkspace
    from hocket.ops.offload import OffloadContext, matmul_from_host, matmul_to_host, offload_tile_config
    from hocket.plan.plan import Plan

    dev = torch.device("cuda", torch.cuda.current_device())
    dt = torch.bfloat16
    g = torch.Generator(device=dev).manual_seed(m + k + n)
    A = torch.randn(m, k, device=dev, dtype=dt, generator=g)
    B = torch.randn(k, n, device=dev, dtype=dt, generator=g) / k**0.5
    ref = torch.mm(A, B)
    c_dev = torch.empty(m, n, device=dev, dtype=dt)
    c_host = torch.empty(m, n, dtype=dt, pin_memory=True)
    a_host = A.cpu().pin_memory()
    a_dev = torch.empty_like(A)
    rows: list[dict] = []
    cfgs = {"wide": offload_tile_config(m, n, k, dt), "128x128": NARROW_BF16}

    def add(direction: str, variant: str, fn, *, check=None, extra=None) -> None:
        record = {"m": m, "k": k, "n": n, "direction": direction, "variant": variant}
        if check is not None:
            c_host.fill_(float("nan"))
            c_dev.fill_(float("nan"))
            fn()
            torch.cuda.synchronize()
            record["rel_err"] = rel_error(check(), ref)
            record["correct"] = record["rel_err"] < 2e-2
            if not record["correct"]:
                rows.append(record)
                print(f"  {direction:9s} {variant:24s} WRONG rel_err={record['rel_err']:.3g}", flush=True)
                return
        record.update(timed_ms(fn, iters=iters))
        record.update(extra or {})
        rows.append(record)
        print(f"  {direction:9s} {variant:24s} {record['median_ms']:8.3f} ms", flush=True)

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
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", default=",".join("x".join(map(str, s)) for s in SHAPES),
                        help="m x k x n, comma separated")
    parser.add_argument("--iters", type=int, default=30)
    parser.add_argument("--programs", default="8,16,32,66,130", help="SM-copy program counts (empty: none)")
    parser.add_argument("--out", type=Path, default=None, help="JSON lines file")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("probe_host_direct needs a CUDA GPU", file=sys.stderr)
        return 2
    shapes = [tuple(int(x) for x in s.split("x")) for s in args.shapes.split(",") if s]
    programs = tuple(int(p) for p in args.programs.split(",") if p)
    rows: list[dict] = []
    for i, (m, k, n) in enumerate(shapes):
        print(f"[{i + 1}/{len(shapes)}] m={m} k={k} n={n}", flush=True)
        rows += probe_shape(m, k, n, iters=args.iters, programs_list=programs if i == 0 else ())
    write_rows(args.out, rows)
    print(f"\n{'direction':9s} {'m x k x n':18s} {'variant':24s} {'median':>8s} {'p10':>8s} {'p90':>8s}")
    for r in rows:
        print(row_text(r, 24))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
