"""Calls replayed from a CUDA graph: how an NCCL kernel and the library's GEMMs share the SMs.

Replayed, nothing on the host decides the order; the launch order does (``hocket.cost.stages``:
``Stage.waits_for_full_grid``, ``Stage.held_sms_by``, ``RACE_MS``). What the pipeline builder needs
for it, from 2xH200 kernel timelines (benchmarks/results/validation/2026-12-01_measured-rules.md):

* an NCCL kernel over NVLink is 24 CTAs (all-gather, reduce-scatter) or 16 (send/recv)
  (:func:`nccl_ctas`);
* a library GEMM is a persistent grid that fills the SMs, and makes an NCCL kernel launched
  behind it wait while it leaves fewer idle SMs than that kernel's CTAs (:func:`crowds_nccl`)
  until its last wave begins (:func:`last_wave_at`);
* a GEMM launched while an NCCL kernel holds its SMs loses two SMs per CTA (2-CTA clusters:
  ``contention.held_gemm_sms``) for as long as the kernel runs (:func:`held_factor`).

Eager calls keep the calibrated contention factors (``hocket.cost.contention``). ``b`` is the
pipeline's :class:`hocket.cost.builder.StageBuilder` (which calls these from its ``finish``).
"""

from __future__ import annotations

import math

from hocket.cost import comm as comm_model
from hocket.cost.compute import GPU_TILES, gpu_grid
from hocket.cost.contention import FAST_LINK_GBPS, REPLAY_NCCL_CTAS, held_gemm_sms


def nccl_ctas(b, kind: str) -> int:
    """CTAs of a replayed NCCL kernel of ``kind``: the plan's SM budget, else NCCL's own over a fast
    link (``contention.REPLAY_NCCL_CTAS``), else ``comm.DEFAULT_COMM_SMS``."""
    if b.plan.comm_sms is not None:
        return b.plan.comm_sms
    fast = (b.topo.intra_gbps or 0.0) >= FAST_LINK_GBPS and b.topo.nodes == 1
    return REPLAY_NCCL_CTAS[kind] if fast else comm_model.DEFAULT_COMM_SMS


def crowds_nccl(b, rows: int, ctas: int) -> bool:
    """A GEMM stage of ``rows`` rows makes an NCCL kernel of ``ctas`` CTAs launched after it wait
    (``Stage.fills_device``): its first wave (the wave model's grid, ``compute.gpu_grid``: a GEMM library
    fills the SMs with smaller tiles or split-K where the tiles are few) leaves fewer SMs idle than the
    kernel needs. 2xH200: an all-gather piece ready while a 1024x4096x1536 GEMM ran a grid of 128 CTAs
    (4 SMs idle) started as that GEMM ended."""
    site, sms = b.site, b.device.sm_count
    grid = gpu_grid(b.device, m=rows, k=site.k, n=site.n, dtype=site.dtype)
    return ctas > 0 and min(grid, sms) > sms - ctas


def last_wave_at(b, index: int, rows: int) -> float:
    """The fraction of a full-grid GEMM stage after which SMs go idle (``Stage.last_wave_at``): its
    first kernel's partial last wave, or that kernel's end when its grid is whole waves, or when its
    work is under one wave of the largest tiles (the library spreads it over every SM in one balanced
    persistent wave: 1024x1536 pieces, 132 tiles of 192x128)."""
    site, sms = b.site, b.device.sm_count
    tile_rows, tile_cols, _ = GPU_TILES[0]
    if math.ceil(rows / tile_rows) * math.ceil(site.n / tile_cols) < sms:
        return 1.0
    grid = gpu_grid(b.device, m=rows, k=site.k, n=site.n, dtype=site.dtype)
    waves = math.ceil(grid / sms) if grid else 1
    first = (waves - 1) / waves if grid % sms else 1.0
    return first / max(1, b.kernels.get(index, 1))


def held_factor(b, rows: int, kind: str, cache: dict) -> float:
    """GEMM slowdown beside a replayed transfer of ``kind`` that holds its SMs when the GEMM launches
    (``contention.held_gemm_sms``), memoised in ``cache`` by (rows, kind)."""
    key = (rows, kind)
    if key not in cache:
        full = b.gemm(rows)
        left = held_gemm_sms(rows, b.site.n * b.site.num_b, b.device, nccl_ctas(b, kind))
        cache[key] = b.gemm(rows, sms=left) / full if full > 0 else 1.0
    return cache[key]
