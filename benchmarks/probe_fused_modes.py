"""Probe: is the to-host tile_fused pipeline bimodal, and what differs between its two modes?

h200 run14 measured the same ``tile_fused(8)`` to host (8192x8192x7168, same context settings and
pieces) at 2.245 ms in one OffloadContext and 2.396 in another. This probe times the plan in
``--contexts`` fresh contexts, ``--repeats`` times each (medians of ``--iters`` back-to-back calls,
CUDA events), and takes one timeline per context (``hocket.ops.offload_timeline``: when each group
was ready and when each copy ended), to show whether the mode belongs to a context (its buffers,
streams) or to the moment, and which part of the pipeline moves; the ramped ``chunked`` plan of as
many pieces is timed once per context beside it.

    python3 benchmarks/probe_fused_modes.py --out $OUT/probe_fused_modes.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

import torch


def _median_ms(fn, iters: int) -> float:
    """Median of ``iters`` CUDA-event-timed calls after 3 warm-ups (``hocket.timing.timer``)."""
    from hocket.timing.timer import TimingConfig, time_callable

    return time_callable(fn, config=TimingConfig(warmup=3, iters=iters), device=torch.device("cuda")).median_ms


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", default="8192x8192x7168", help="m x k x n")
    parser.add_argument("--chunks", type=int, default=8)
    parser.add_argument("--contexts", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--iters", type=int, default=30)
    parser.add_argument("--copy-wait", default="auto", help="OffloadContext(copy_wait=...): auto, stream, "
                        "side_kernel, copy_kernel")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("probe_fused_modes needs a CUDA GPU", file=sys.stderr)
        return 2
    from hocket.ops.offload import OffloadContext, matmul_to_host
    from hocket.ops.offload_timeline import offload_timeline
    from hocket.plan.offload import ramp_sizes
    from hocket.core.plan import Plan
    from hocket.core.site import Site

    m, k, n = (int(x) for x in args.shape.split("x"))
    dev = torch.device("cuda", torch.cuda.current_device())
    A = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
    B = torch.randn(k, n, device=dev, dtype=torch.bfloat16) / k**0.5
    ref = torch.mm(A, B).float().cpu()
    out = torch.empty(m, n, dtype=torch.bfloat16, pin_memory=True)
    plan = Plan(strategy="tile_fused", chunks=args.chunks, transport="host_staged")
    sizes = ramp_sizes(Site(kind="mm_d2h", m=m, k=k, n=n, dtype="bfloat16", world=1), args.chunks)
    ramp = Plan(strategy="chunked", chunks=len(sizes), split_sizes=sizes, transport="host_staged")
    rows = []
    contexts = []
    for c in range(args.contexts):
        ctx = OffloadContext(dev, copy_wait=args.copy_wait)
        contexts.append(ctx)  # kept alive: a freed context's buffers would be reused by the next
        out.fill_(float("nan"))
        matmul_to_host(A, B, out=out, plan=plan, context=ctx)
        err = float((out.float() - ref).abs().max() / ref.abs().max())
        if not err < 2e-2:
            print(f"context {c}: wrong result (max rel error {err:.3g})", file=sys.stderr)
            return 1
        times = [_median_ms(lambda: matmul_to_host(A, B, out=out, plan=plan, context=ctx, non_blocking=True),
                            args.iters) for _ in range(args.repeats)]
        ramp_ms = _median_ms(lambda: matmul_to_host(A, B, out=out, plan=ramp, context=ctx, non_blocking=True),
                             args.iters)
        staging = ctx.staged.device_buffer("to_host.C", (m, n), A.dtype)
        timeline = offload_timeline("to_host", a=A, b=B, out=out, staging=staging, plan=plan, context=ctx)
        ctx.check()
        row = {"context": c, "median_ms": times, "ramp_ms": ramp_ms, "staging_ptr_mod_2mb": staging.data_ptr() % (2 << 20),
               "timeline": asdict(timeline)}
        rows.append(row)
        print(f"context {c}: {' '.join(f'{t:.3f}' for t in times)} ms (ramped chunked {ramp_ms:.3f}); ready "
              f"{[round(x, 3) for x in timeline.ready_ms]}; copies end {[round(x, 3) for x in timeline.copied_ms]}",
              flush=True)
    # the first context again, after the others exist
    ctx = contexts[0]
    again = _median_ms(lambda: matmul_to_host(A, B, out=out, plan=plan, context=ctx, non_blocking=True), args.iters)
    print(f"context 0 again: {again:.3f} ms", flush=True)
    rows.append({"context": 0, "again_ms": again})
    for ctx in contexts:
        ctx.close()
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
