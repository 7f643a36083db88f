"""Probe: how much a device-to-host copy slows beside each GEMM the offload operators can run.

Answer (1xH200 run24): not at all (x0.99-1.00), so the group copies' extra time in tile_fused's
timeline is their hand-over, not memory contention.

In tile_fused to host (1xH200 run18's timeline) the group copies that ran beside the Triton producer
took 8-17% longer than the same bytes alone, where the calibration measured 1% beside cuBLAS; run22
found the producer's small ramp groups re-read B from memory every wave. This probe times one copy of
C (device to pinned host, on a side stream) alone and while a GEMM runs on the main stream (calls back to
back, started with the copy), for: cuBLAS, the Triton producer with one flag group, and the
Triton producer with the operator's 8-group ramp. Medians of ``--iters`` (CUDA events around the copy);
each GEMM's output is checked against ``torch.mm`` first.

    python3 benchmarks/probe_copy_contention.py --out $OUT/probe_copy_contention.jsonl
"""

from __future__ import annotations

import statistics

import torch

from probe_common import operands, probe_args, rel_error, run_probe

SHAPES = ((8192, 8192, 7168), (8192, 3584, 8192))
COVER = 1.3
"""The GEMM calls launched with the copy last at least this many copy times (the copy never runs alone)."""


def _copy_ms(c_dev, c_host, side: torch.cuda.Stream, gemm=None, calls: int = 0) -> float:
    """One copy's time on ``side``, started together with ``calls`` calls of ``gemm`` (None: alone)."""
    cur = torch.cuda.current_stream()
    go = cur.record_event()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    side.wait_event(go)
    with torch.cuda.stream(side):
        start.record()
        c_host.copy_(c_dev, non_blocking=True)
        end.record()
    if gemm is not None:
        for _ in range(calls):
            gemm()
    cur.wait_stream(side)
    end.synchronize()
    return start.elapsed_time(end)


def probe_shape(m: int, k: int, n: int, *, iters: int) -> list[dict]:
    from bench_single_gpu import VARIANTS, fused_plan  # sibling benchmark: the operator's schedule

    from hocket.kernels import ProducerWorkspace, producer_gemm, reset_producer, warmup_producer
    from hocket.ops.offload import OffloadContext

    ops = operands(m, k, n)
    dev, dt, A, B, ref = ops.dev, torch.bfloat16, ops.A, ops.B, ops.ref
    c_dev = ref.clone()  # what is copied (the GEMMs write elsewhere)
    out, c_host = ops.c_dev, ops.c_host
    side = torch.cuda.Stream(dev)
    ctx = OffloadContext(dev)
    cfg = ctx.tile_config(m, n, k, dt)

    def producer(ws):
        warmup_producer(ws, A, B, out)

        def run():
            reset_producer(ws)
            producer_gemm(A, B, workspace=ws, out=out)
        return run

    one = ProducerWorkspace(m=m, n=n, k=k, dtype=dt, device=dev, groups=1, config=cfg)
    ramp = ctx.producer(m, n, k, dt, fused_plan(VARIANTS[0], 8, m, block_m=cfg.block_m, direction="to_host"))
    gemms = {"cuBLAS": lambda: torch.mm(A, B, out=out), "Triton, 1 group": producer(one),
             "Triton, operator ramp(8)": producer(ramp)}
    rows = []
    alone = None
    for name, gemm in [("alone", None), *gemms.items()]:
        record = {"m": m, "k": k, "n": n, "direction": "to_host", "variant": f"copy beside {name}",
                  "config": cfg.label()}
        if gemm is not None:
            out.fill_(float("nan"))
            gemm()
            torch.cuda.synchronize()
            record["rel_err"] = rel_error(out, ref)
            if record["rel_err"] > 2e-2:
                rows.append({**record, "correct": False})
                print(f"  {name:26s} WRONG rel_err={record['rel_err']:.3g}", flush=True)
                continue
        calls = 0
        if gemm is not None:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            gemm()
            end.record()
            end.synchronize()
            calls = max(1, -int(-COVER * alone // start.elapsed_time(end)))
            record["gemm_calls"] = calls
        for _ in range(2):
            _copy_ms(c_dev, c_host, side, gemm, calls)  # warm-up
        times = sorted(_copy_ms(c_dev, c_host, side, gemm, calls) for _ in range(iters))
        record.update(median_ms=statistics.median(times), p10_ms=times[len(times) // 10],
                      p90_ms=times[(9 * len(times)) // 10], samples=len(times))
        rows.append(record)
        alone = alone or record["median_ms"]
        print(f"  copy beside {name:26s} {record['median_ms']:8.3f} ms", flush=True)
    for r in rows:
        if "median_ms" in r:
            r["slowdown"] = r["median_ms"] / alone
    ctx.close()
    return rows


def _slowdown(rows: list[dict], r: dict) -> str:
    return f"x{r['slowdown']:.3f}" if "slowdown" in r else ""


def main(argv: list[str] | None = None) -> int:
    args = probe_args(__doc__, SHAPES, iters=20).parse_args(argv)
    return run_probe("probe_copy_contention", args, probe_shape, width=36, eff=_slowdown)


if __name__ == "__main__":
    raise SystemExit(main())
