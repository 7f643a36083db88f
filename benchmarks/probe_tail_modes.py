"""Probe: tile_fused to host with last-wave balancing, per copy wait, in fresh contexts.

h200 run30 measured ``matmul_to_host`` tile_fused on 4096x12288x6144 at 2.12 / 2.59 ms (8 / 12 pieces) with
``OffloadContext``'s defaults (last-wave balancing, driver stream waits) where run29's probe measured 1.15 ms for
the same settings and the spin-kernel waits 1.18. This probe times, per shape, per ``balance_tail`` and per
``copy_wait`` (``auto``: the driver wait; ``side_kernel``: spin kernels), tile_fused at 8 and 12 ramped pieces
in three fresh contexts each (medians of ``--iters``, output checked first), and prints one timeline per
setting (when each group's flag rose and its copy ended).

    python3 benchmarks/probe_tail_modes.py --out $OUT/probe_tail_modes.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

SHAPES = ((4096, 12288, 6144), (8192, 8192, 1280))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=None, help="JSON lines of every measurement")
    parser.add_argument("--iters", type=int, default=30)
    parser.add_argument("--contexts", type=int, default=3, help="fresh contexts per setting")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("probe_tail_modes: no CUDA device", file=sys.stderr)
        return 2
    sys.path.insert(0, str(Path(__file__).parent))
    from bench_single_gpu import VARIANTS, _run_fn, _timeline, fused_plan, samples_ms
    from hocket.timing.stats import summarize
    from hocket.ops.offload import OffloadContext

    dev = torch.device("cuda", torch.cuda.current_device())
    rows = []
    for m, k, n in SHAPES:
        a = torch.randn(m, k, device=dev).to(torch.bfloat16)
        b = (torch.randn(k, n, device=dev) / k**0.5).to(torch.bfloat16)
        buffers = dict(a_dev=a, a_host=a.cpu().pin_memory(), b=b, c_dev=torch.empty(m, n, dtype=a.dtype, device=dev),
                       host_out=torch.empty(m, n, dtype=a.dtype, pin_memory=True))
        expected = torch.mm(a.float(), b.float())
        for balance in (False, True):
            for wait in ("auto", "side_kernel"):
                for c in (8, 12):
                    times = []
                    for trial in range(args.contexts):
                        with OffloadContext(dev, balance_tail=balance, copy_wait=wait) as ctx:
                            plan = fused_plan(VARIANTS[0], c, m, block_m=128, direction="to_host")
                            fn, err = _run_fn("to_host", ctx, plan, expected=expected, shape=(m, k, n), **buffers)
                            s = summarize(samples_ms(fn, iters=args.iters, warmup=3))
                            ctx.check()
                            ws = ctx.producer(m, n, k, a.dtype, plan)
                            narrow = sum(t[2] for t in ws.schedule.tiles)
                            times.append(s.median_ms)
                            row = dict(m=m, k=k, n=n, balance_tail=balance, copy_wait=ctx.copy_wait, pieces=c,
                                       trial=trial, median_ms=s.median_ms, p10_ms=s.p10_ms, p90_ms=s.p90_ms,
                                       max_error=err, narrow_tiles=narrow)
                            if trial == 0:
                                tl = _timeline("to_host", ctx, plan, **buffers)
                                row["timeline"] = tl.describe()
                                print(f"    timeline: {tl.describe()}", flush=True)
                            rows.append(row)
                    print(f"{m}x{k}x{n} balance={balance!s:5s} wait={wait:11s} tile_fused({c}) narrow tiles "
                          f"{narrow}: " + ", ".join(f"{t:.3f}" for t in times) + " ms", flush=True)
                    if args.out:
                        args.out.parent.mkdir(parents=True, exist_ok=True)
                        args.out.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
