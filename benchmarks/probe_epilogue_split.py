"""Probe: the own block of a one-piece matmul + reduce-scatter, summed in a pass or in the GEMM's epilogue.

The copy-engine ``pull`` executor (``hocket.ops.lowering.peer_pull``) ends with this rank's own block
``A_own @ B`` plus the partial a peer computed for it. This probe times, on one GPU, the compute stream's
share of that (the peer's partial ``recv`` is already in memory; the copy engine is not involved):

* ``mm``: the GEMM alone (the floor); ``addmm``: the GEMM adding ``out`` in its epilogue (``out.addmm_``);
* ``pass``: the GEMM, then ``out.add_(recv)`` (the executor before session 18);
* ``epilogue(p)``: ``p`` plain rows by ``mm``, the other rows by ``addmm_`` into an output that already
  holds their partial, then ``add_`` of the plain rows' partial (``HOCKET_OWN_BLOCK_SUM=epilogue``),
  for ``p`` in multiples of 128 and for the split :func:`hocket.cost.epilogue.epilogue_split` picks
  (marked ``*``; at the nominal H200 rates and this GPU's SM count).

Each variant's output is checked against ``A_own @ B + recv`` (fp32) first; medians of ``--iters``
CUDA-event-timed calls, back to back, the variants of a block interleaved in ``--rounds`` rounds (run32, one
variant after another, was bimodal where the clocks moved between variants).

    python benchmarks/probe_epilogue_split.py --out $OUT/probe_epilogue_split.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

BLOCKS = ((4096, 14336, 8192), (2048, 24576, 12288), (4096, 2048, 4096), (4096, 7168, 8192))
"""(own block rows, k, cols) of the pull executor on 2 ranks for mm_rs 8192x14336x8192, 4096x24576x12288,
8192x2048x4096 and 8192x7168x8192."""
PLAIN_ROWS = (256, 512, 640, 768, 1024, 1536, 2048, 3072)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=None, help="JSON lines of every measurement")
    parser.add_argument("--iters", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("probe_epilogue_split: no CUDA device", file=sys.stderr)
        return 2
    from hocket.timing.timer import TimingConfig, time_interleaved
    from hocket.ops.tolerance import max_error
    from hocket.cost.epilogue import epilogue_split

    dev = torch.device("cuda", torch.cuda.current_device())
    dt = torch.bfloat16
    rows_out = []
    for rows, k, cols in BLOCKS:
        g = torch.Generator(device=dev).manual_seed(rows + k + cols)
        A = torch.randn(rows, k, device=dev, dtype=dt, generator=g)
        B = torch.randn(k, cols, device=dev, dtype=dt, generator=g) / k**0.5
        recv = torch.randn(rows, cols, device=dev, dtype=dt, generator=g)
        ref = (A.float() @ B.float() + recv.float()).cpu()
        out = torch.empty(rows, cols, device=dev, dtype=dt)
        sms = torch.cuda.get_device_properties(dev).multi_processor_count
        chosen, _ = epilogue_split(rows, k, cols, sources=1, itemsize=2, tflops=989.0, gbps=450.0, sms=sms)

        def plain_then_fused(p):
            def fn():
                torch.mm(A[:p], B, out=out[:p])
                out[p:].addmm_(A[p:], B)
                out[:p].add_(recv[:p])
            return fn

        def whole_pass():
            torch.mm(A, B, out=out)
            out.add_(recv)

        variants = {"mm": lambda: torch.mm(A, B, out=out), "addmm": lambda: out.addmm_(A, B), "pass": whole_pass}
        for p in sorted({*PLAIN_ROWS, chosen}):
            if p < rows:
                variants[f"epilogue({p})" + ("*" if p == chosen else "")] = plain_then_fused(p)
        errors = {}
        for name, fn in variants.items():
            if name in ("mm", "addmm"):
                continue
            out.fill_(float("nan"))
            if name != "pass":
                p = int(name.split("(")[1].split(")")[0])
                out[p:].copy_(recv[p:])  # the pull lands the fused rows' partial in the output first
            fn()
            torch.cuda.synchronize()
            got = out.float().cpu()
            errors[name] = max_error(got, ref) if torch.isfinite(got).all() else float("inf")
        timings = time_interleaved(variants, config=TimingConfig(warmup=3, iters=args.iters), rounds=args.rounds,
                                   device=dev)
        for name, s in timings.items():
            err = errors.get(name)
            row = {"rows": rows, "k": k, "cols": cols, "variant": name, "median_ms": s.median_ms, "p10_ms": s.p10_ms,
                   "p90_ms": s.p90_ms, "samples": s.n, "max_error": err}
            rows_out.append(row)
            print(f"{rows}x{k}x{cols} {name:16s} {s.median_ms:7.4f} ms (p10 {s.p10_ms:.4f}, p90 {s.p90_ms:.4f})"
                  + (f" err {err:.2e}" if err is not None else ""), flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("".join(json.dumps(r) + "\n" for r in rows_out))
    print("\nblock rows x k x cols       mm     pass   best epilogue          split's choice")
    for rows, k, cols in BLOCKS:
        mine = {r["variant"]: r["median_ms"] for r in rows_out if (r["rows"], r["k"], r["cols"]) == (rows, k, cols)}
        eps = {v: ms for v, ms in mine.items() if v.startswith("epilogue")}
        best = min(eps, key=eps.get)
        chosen = next((v for v in eps if v.endswith("*")), "-")
        print(f"{rows}x{k}x{cols:<8d} {mine['mm']:7.4f} {mine['pass']:7.4f}  {best:14s} {eps[best]:7.4f}   "
              f"{chosen} {eps.get(chosen, float('nan')):7.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
