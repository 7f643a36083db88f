"""Probe: what one K slice of a split tile costs, step by step (h200 run37 measured ~30-45 us per slice beyond
its compute, about half a whole 128x256 tile over K=8192).

One persistent launch walks ``tiles x splits`` units (program ``p`` takes units ``p, p + P, ...``; a tile's
slices are consecutive units). Every unit accumulates its K slice with the fused GEMMs' own device code
(``hocket.kernels.gemm_tile``) and then, by ``MODE``:

0. ``store``: rounds its partial into C (no split protocol: wrong sums for splits > 1, the compute-only floor);
1. ``partial``: stores its fp32 partial (no counter);
2. ``publish``: stores the partial and bumps the tile's counter (acq_rel);
3. ``full``: as the kernels do: publish, and the last slice sums the partials into C.

The launch is timed against ``torch.mm`` in alternation; modes 3 results are checked against fp32.

    python3 benchmarks/probe_split_cost.py --out $OUT/probe_split_cost.jsonl
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).parent))
from probe_common import write_rows  # noqa: E402  (a sibling script)
from hocket.kernels.gemm_tile import (descriptor_accumulate, publish_partial, split_bounds, store_partials_sum,
                                      store_tile)

MODES = ("store", "partial", "publish", "full")


@triton.jit
def unit_kernel(a_desc, b_desc, c_ptr, part_ptr, count_ptr, M, N, K, units, splits, BLOCK_M: tl.constexpr,
                BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, MODE: tl.constexpr):
    num_n = N // BLOCK_N
    for u in range(tl.program_id(0), units, tl.num_programs(0)):
        tile = u // splits
        split = u % splits
        pid_m = tile // num_n
        pid_n = tile % num_n
        k_lo, k_hi = split_bounds(split, splits, K, BLOCK_K)
        acc = descriptor_accumulate(a_desc, b_desc, pid_m * BLOCK_M, pid_n * BLOCK_N, K, BLOCK_M, BLOCK_N, BLOCK_K,
                                    "ieee", False, k_lo, k_hi)
        if MODE == 0:
            store_tile(c_ptr, acc, pid_m, pid_n, M, N, N, 1, BLOCK_M, BLOCK_N, True, True)
        elif MODE == 1:
            offs = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
            tl.store(part_ptr + u * BLOCK_M * BLOCK_N + offs, acc)
        elif MODE == 2:
            publish_partial(acc, part_ptr, count_ptr, tile, tile * splits, split, splits, BLOCK_M, BLOCK_N,
                            BLOCK_M * BLOCK_N)
        else:
            done = publish_partial(acc, part_ptr, count_ptr, tile, tile * splits, split, splits, BLOCK_M, BLOCK_N,
                                   BLOCK_M * BLOCK_N)
            if done:
                store_partials_sum(c_ptr, part_ptr, count_ptr, tile, tile * splits, splits, pid_m, pid_n, M, N, N,
                                   1, BLOCK_M, BLOCK_N, True, True, BLOCK_M * BLOCK_N)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--shape", default="1024x8192x7168", help="m x k x n (multiples of the tile)")
    parser.add_argument("--splits", default="1,2,4,8")
    parser.add_argument("--tile", default="128x256x64", help="block_m x block_n x block_k")
    parser.add_argument("--iters", type=int, default=40)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("probe_split_cost: no CUDA device", file=sys.stderr)
        return 2
    from triton.tools.tensor_descriptor import TensorDescriptor

    from hocket.bench.paired import alternating_ms
    from hocket.kernels.config import persistent_programs

    dev = torch.device("cuda", torch.cuda.current_device())
    m, k, n = (int(x) for x in args.shape.split("x"))
    bm, bn, bk = (int(x) for x in args.tile.split("x"))
    a = torch.randn(m, k, device=dev).to(torch.bfloat16)
    b = (torch.randn(k, n, device=dev) / k**0.5).to(torch.bfloat16)
    c = torch.empty(m, n, dtype=torch.bfloat16, device=dev)
    expected = torch.mm(a.float(), b.float())
    a_desc = TensorDescriptor.from_tensor(a, [bm, bk])
    b_desc = TensorDescriptor.from_tensor(b, [bk, bn])
    tiles = (m // bm) * (n // bn)
    programs = persistent_programs(torch.cuda.get_device_properties(dev).multi_processor_count)
    rows = []
    for splits in (int(s) for s in args.splits.split(",")):
        parts = torch.empty(tiles * splits, bm * bn, dtype=torch.float32, device=dev)
        counts = torch.zeros(tiles, dtype=torch.int32, device=dev)
        for mode, name in enumerate(MODES):
            if splits == 1 and mode > 0:
                continue

            def run(mode=mode, splits=splits, parts=parts, counts=counts):
                if mode == 2:
                    counts.zero_()  # nobody resets them in this mode
                unit_kernel[(min(programs, tiles * splits),)](a_desc, b_desc, c, parts, counts, m, n, k,
                                                              tiles * splits, splits, BLOCK_M=bm, BLOCK_N=bn,
                                                              BLOCK_K=bk, MODE=mode, num_warps=8, num_stages=4)

            counts.zero_()  # the publish mode leaves every counter at `splits`
            c.fill_(float("nan"))
            run()
            torch.cuda.synchronize()
            err = float((c.float() - expected).abs().max()) if mode in (0, 3) else float("nan")
            ms, p10, p90, cublas_ms = alternating_ms([run], [lambda: torch.mm(a, b, out=c)], iters=args.iters)
            per_unit_us = 1e3 * ms / -(-tiles * splits // programs)
            row = dict(shape=args.shape, tile=args.tile, splits=splits, mode=name, median_ms=ms, p10_ms=p10, p90_ms=p90,
                       cublas_ms=cublas_ms, units=tiles * splits, programs=programs, us_per_unit_round=per_unit_us,
                       max_error=err)
            rows.append(row)
            print(f"splits={splits} {name:8s} {ms:.3f} ms (cuBLAS {cublas_ms:.3f}); {tiles * splits} units, "
                  f"{per_unit_us:.1f} us per round of units; max error {err:.3g}", flush=True)
            write_rows(args.out, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
