"""Contention: a GEMM timed while a transfer runs beside it, and the transfer beside GEMMs.

The background work runs on a side CUDA stream (GPU) or a second thread (CPU ranks:
gloo and torch.mm both release the GIL). Background loops are sized from the
stand-alone times so they outlast the timed foreground. While a background loop of
collectives runs, the main thread issues none (that would interleave two collective
streams on one group); the reverse direction runs only GEMMs in the background.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import torch
import torch.distributed as dist

from hocket.env import wait_timeout_s
from hocket.hardware.profile import ContentionPoint
from hocket.timing.stats import summarize
from hocket.timing.timer import TimingConfig, max_across_ranks, time_callable

CPU_KINDS = {"cpu_collective": "all_gather", "cpu_p2p": "p2p"}
GPU_KINDS = {"sm_collective": "all_gather", "sm_p2p": "p2p", "copy_engine": "copy_engine", "host_link": "host_link"}
"""Contention kinds (the cost model's names, hocket.cost.contention.TRANSFER_KINDS, plus
P2P variants) -> the transfer that represents them."""
OUTLAST_FACTOR = 2.0
MAX_BACKGROUND_REPEATS = 10_000


def kinds_for(device: torch.device) -> dict[str, str]:
    return GPU_KINDS if device.type == "cuda" else CPU_KINDS


def _barrier(group, device: torch.device) -> None:
    if dist.is_initialized() and dist.get_world_size(group) > 1:
        if device.type == "cuda":
            dist.barrier(group=group, device_ids=[device.index or 0])
        else:
            dist.barrier(group=group)


def _time_local(fn: Callable[[], object], *, iters: int, device: torch.device,
                barrier_group=None) -> list[float]:
    """Per-iteration ms of ``fn`` without synchronising the device first (so work queued
    on a side stream keeps running); on CPU optionally behind a barrier per iteration."""
    if device.type == "cuda":
        pairs = []
        for _ in range(iters):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            pairs.append((start, end))
        torch.cuda.synchronize(device)
        return [s.elapsed_time(e) for s, e in pairs]
    samples = []
    for _ in range(iters):
        if barrier_group is not None:
            _barrier(barrier_group, device)
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1e3)
    return samples


def _beside(background: Callable[[], object], repeats: int, foreground: Callable[[], list[float]],
            device: torch.device) -> list[float]:
    """Run ``background`` ``repeats`` times while ``foreground`` times its own work."""
    if device.type == "cuda":
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            for _ in range(repeats):
                background()
        samples = foreground()
        torch.cuda.synchronize(device)
        return samples

    def loop() -> None:
        for _ in range(repeats):
            background()

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="hocket-calibrate-bg") as pool:
        future = pool.submit(loop)
        samples = foreground()
        future.result(timeout=wait_timeout_s())  # re-raises the background's error, if any
    return samples


def _repeats(cover_ms: float, each_ms: float) -> int:
    return max(2, min(MAX_BACKGROUND_REPEATS, math.ceil(OUTLAST_FACTOR * cover_ms / max(each_ms, 1e-6)) + 1))


def measure_pair(gemm: Callable[[], None], transfer: Callable[[], None], *, timing: TimingConfig, group,
                 device: torch.device) -> ContentionPoint:
    """Slowdown of ``gemm`` beside ``transfer`` and of ``transfer`` beside ``gemm`` (every rank calls)."""
    gemm_ms = time_callable(gemm, config=timing, group=group, device=device).median_ms
    transfer_ms = time_callable(transfer, config=timing, group=group, device=device).median_ms
    iters = timing.iters
    # repeat counts come from max-over-ranks medians: equal on every rank, so collectives match
    _barrier(group, device)
    gemm_beside = _beside(transfer, _repeats(iters * gemm_ms, transfer_ms),
                          lambda: _time_local(gemm, iters=iters, device=device), device)
    gemm_beside = max_across_ranks(gemm_beside, group=group, device=device)
    _barrier(group, device)
    transfer_beside = _beside(gemm, _repeats(iters * transfer_ms, gemm_ms),
                              lambda: _time_local(transfer, iters=iters, device=device,
                                                  barrier_group=group if device.type == "cpu" else None), device)
    transfer_beside = max_across_ranks(transfer_beside, group=group, device=device)
    return ContentionPoint(gemm_slowdown=summarize(gemm_beside).median_ms / gemm_ms,
                           transfer_slowdown=summarize(transfer_beside).median_ms / transfer_ms)

