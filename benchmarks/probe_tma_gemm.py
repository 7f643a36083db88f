"""Probe: does a Triton GEMM tile that loads through TMA descriptors reach 90% of cuBLAS on issue 5's shapes?

The tile-fused kernels load their operand tiles with pointer arithmetic (``hocket.kernels.gemm_tile``)
and reach 79-94% of cuBLAS alone. On Hopper, loads through tensor descriptors (the Tensor Memory
Accelerator) free the warps from address arithmetic. This probe times, per shape and tile
configuration, a plain persistent Triton GEMM (fixed-stride tiles, grouped order, no flags) with
pointer loads and with descriptor loads, against ``torch.mm`` timed in alternation with it
(``hocket.bench.paired.alternating_ms``); every output checked against ``torch.mm`` first.

    python3 benchmarks/probe_tma_gemm.py --out $OUT/probe_tma_gemm.jsonl
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from probe_common import against_cublas, operands, probe_args, run_probe  # the probes' check, timing, rows

SHAPES = ((8192, 8192, 7168), (8192, 3584, 8192), (8192, 8192, 1280), (4096, 12288, 6144))
CONFIGS = (  # block_m, block_n, block_k, warps, stages
    (128, 128, 64, 4, 4), (128, 128, 64, 8, 4), (128, 256, 64, 8, 3), (128, 256, 64, 8, 4), (128, 128, 128, 8, 3),
)


@triton.jit
def _tile_order(t, tiles_m, tiles_n, GROUP_M: tl.constexpr):
    per_group = GROUP_M * tiles_n
    group = t // per_group
    first_m = group * GROUP_M
    rows = tl.minimum(tiles_m - first_m, GROUP_M)
    pid_m = first_m + (t % per_group) % rows
    pid_n = (t % per_group) // rows
    return pid_m, pid_n


@triton.jit
def gemm_pointers(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                  BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    for t in range(tl.program_id(0), tiles_m * tiles_n, tl.num_programs(0)):
        pid_m, pid_n = _tile_order(t, tiles_m, tiles_n, GROUP_M)
        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        offs_k = tl.arange(0, BLOCK_K)
        a_ptrs = a_ptr + offs_m[:, None] * K + offs_k[None, :]
        b_ptrs = b_ptr + offs_k[:, None] * N + offs_n[None, :]
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for _ in range(0, tl.cdiv(K, BLOCK_K)):
            acc = tl.dot(tl.load(a_ptrs), tl.load(b_ptrs), acc)
            a_ptrs += BLOCK_K
            b_ptrs += BLOCK_K * N
        tl.store(c_ptr + offs_m[:, None] * N + offs_n[None, :], acc.to(c_ptr.dtype.element_ty))


@triton.jit
def gemm_descriptors(a_desc, b_desc, c_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                     BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    for t in range(tl.program_id(0), tiles_m * tiles_n, tl.num_programs(0)):
        pid_m, pid_n = _tile_order(t, tiles_m, tiles_n, GROUP_M)
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for kk in range(0, tl.cdiv(K, BLOCK_K)):
            acc = tl.dot(a_desc.load([off_m, kk * BLOCK_K]), b_desc.load([kk * BLOCK_K, off_n]), acc)
        offs_m = off_m + tl.arange(0, BLOCK_M)
        offs_n = off_n + tl.arange(0, BLOCK_N)
        tl.store(c_ptr + offs_m[:, None] * N + offs_n[None, :], acc.to(c_ptr.dtype.element_ty))


def run(kind: str, a, b, c, cfg, programs: int) -> None:
    bm, bn, bk, warps, stages = cfg
    m, k = a.shape
    n = b.shape[1]
    grid = (min(programs, triton.cdiv(m, bm) * triton.cdiv(n, bn)),)
    if kind == "pointers":
        gemm_pointers[grid](a, b, c, m, n, k, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, num_warps=warps,
                            num_stages=stages)
    else:
        from triton.tools.tensor_descriptor import TensorDescriptor

        gemm_descriptors[grid](TensorDescriptor.from_tensor(a, [bm, bk]), TensorDescriptor.from_tensor(b, [bk, bn]),
                               c, m, n, k, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, num_warps=warps,
                               num_stages=stages)


def probe_shape(m: int, k: int, n: int, *, iters: int) -> list[dict]:
    o = operands(m, k, n)
    programs = torch.cuda.get_device_properties(o.dev).multi_processor_count
    rows: list[dict] = []
    for cfg in CONFIGS:
        for kind in ("pointers", "descriptors"):
            label = f"{kind} {cfg[0]}x{cfg[1]}x{cfg[2]} w{cfg[3]} s{cfg[4]}"
            rec = {"m": m, "k": k, "n": n, "kind": kind, "config": list(cfg)}
            try:
                against_cublas(rows, rec, lambda: run(kind, o.A, o.B, o.c_dev, cfg, programs), out=o.c_dev,
                               ref=o.ref, cublas=lambda: torch.mm(o.A, o.B, out=o.c_dev), iters=iters,
                               label=f"{m}x{k}x{n} {label}")
            except Exception as exc:  # noqa: BLE001 - a config the compiler refuses is a result too
                rows.append({**rec, "error": str(exc)[:300]})
                print(f"{m}x{k}x{n} {label:34s} ERROR {str(exc)[:120]}", flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    args = probe_args(__doc__, SHAPES, iters=30).parse_args(argv)
    return run_probe("probe_tma_gemm", args, probe_shape, width=None)


if __name__ == "__main__":
    raise SystemExit(main())
