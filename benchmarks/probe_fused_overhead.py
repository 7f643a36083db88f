"""Probe: where the tile-fused GEMMs lose against a plain persistent Triton GEMM of the same tiles.

With 128x128x64 tiles (4 warps, 4 stages) a plain persistent Triton GEMM ran at 92-96% of cuBLAS
on issue 5's shapes (``probe_tma_gemm.py``, h200 run21) while the offload operators' producer and
consumer GEMMs alone ran at 83-92%. This probe adds their features one at a time, each timed in
alternation with ``torch.mm`` (``hocket.bench.paired.alternating_ms``), flags pre-set, every output
checked first:

* ``plain``: ``probe_tma_gemm.gemm_pointers`` on the same grid (130 programs);
* ``producer 1 group``: one flag group, no narrow tiles compiled in, without and with signalling;
* ``producer 1 group, narrow branch``: the narrow-tile branch compiled in (no narrow tile used);
* ``producer operator``: the operator's schedule (8-piece ramp, narrow edge tiles);
* ``consumer 1 chunk`` without and with flag waits, and ``consumer operator``.

    python3 benchmarks/probe_fused_overhead.py --out $OUT/probe_fused_overhead.jsonl
"""

from __future__ import annotations

import dataclasses

import torch

from probe_common import against_cublas, operands, probe_args, run_probe  # the probes' check, timing, rows

SHAPES = ((8192, 8192, 7168), (8192, 3584, 8192), (8192, 8192, 1280), (4096, 12288, 6144))


def variants(m: int, k: int, n: int, a, b, out):
    """(label, callable) pairs; each callable computes ``out = a @ b``."""
    from bench_single_gpu import VARIANTS, fused_plan  # sibling benchmark: the operator's schedule
    from probe_tma_gemm import gemm_pointers

    from hocket.kernels import (ConsumerWorkspace, ProducerWorkspace, consumer_gemm, producer_gemm, reset_producer,
                                warmup_consumer, warmup_producer)
    from hocket.kernels.config import persistent_programs
    from hocket.ops.offload import OffloadContext

    dev = a.device
    ctx = OffloadContext(dev)
    cfg = ctx.tile_config(m, n, k, a.dtype)
    plain_cfg = dataclasses.replace(cfg, narrow_block_n=cfg.block_n)  # NARROW_N = 0: no narrow branch
    programs = persistent_programs(torch.cuda.get_device_properties(dev).multi_processor_count)
    grid = (min(programs, -(-m // cfg.block_m) * -(-n // cfg.block_n)),)
    yield f"plain {cfg.label()}", lambda: gemm_pointers[grid](
        a, b, out, m, n, k, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k, GROUP_M=cfg.group_m,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages)

    def producer(ws, signal):
        warmup_producer(ws, a, b, out)

        def run():
            reset_producer(ws)
            producer_gemm(a, b, workspace=ws, out=out, signal=signal)
        return run

    def consumer(ws, wait):
        warmup_consumer(ws, a, b, out)
        ws.flags.fill_(1)
        return lambda: consumer_gemm(a, b, workspace=ws, out=out, wait=wait)

    one = dict(m=m, n=n, k=k, dtype=a.dtype, device=dev)
    p_plain = ProducerWorkspace(groups=1, config=plain_cfg, **one)
    yield "producer 1 group, no signal", producer(p_plain, False)
    yield "producer 1 group", producer(p_plain, True)
    yield "producer 1 group, narrow branch", producer(ProducerWorkspace(groups=1, config=cfg, **one), True)
    plan = fused_plan(VARIANTS[0], 8, m, block_m=cfg.block_m, direction="to_host")
    yield "producer operator", producer(ctx.producer(m, n, k, a.dtype, plan), True)
    c_plain = ConsumerWorkspace(chunk_offsets=(0, m), config=plain_cfg, **one)
    yield "consumer 1 chunk, no wait", consumer(c_plain, False)
    yield "consumer 1 chunk", consumer(c_plain, True)
    plan = fused_plan(VARIANTS[0], 8, m, block_m=cfg.block_m, direction="from_host")
    yield "consumer operator", consumer(ctx.consumer(m, n, k, a.dtype, plan), True)


def probe_shape(m: int, k: int, n: int, *, iters: int) -> list[dict]:
    o = operands(m, k, n)
    rows: list[dict] = []
    for label, fn in variants(m, k, n, o.A, o.B, o.c_dev):
        against_cublas(rows, {"m": m, "k": k, "n": n, "variant": label}, fn, out=o.c_dev, ref=o.ref,
                       cublas=lambda: torch.mm(o.A, o.B, out=o.c_dev), iters=iters, label=f"{m}x{k}x{n} {label}")
    return rows


def main(argv: list[str] | None = None) -> int:
    args = probe_args(__doc__, SHAPES, iters=30).parse_args(argv)
    return run_probe("probe_fused_overhead", args, probe_shape, width=None)


if __name__ == "__main__":
    raise SystemExit(main())
