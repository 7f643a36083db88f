"""Two callables timed in alternation on one CUDA stream (a GPU's clock or power drift moves both alike)."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence

import torch


def alternating_ms(fns: Sequence[Callable[[], object]], ref_fns: Sequence[Callable[[], object]], *, iters: int,
                   warmup: int = 5) -> tuple[float, float, float, float]:
    """``(median, p10, p90)`` ms of ``fns`` and the median ms of ``ref_fns`` (e.g. the vendor
    GEMM on the same inputs), run back to back in alternation with CUDA events, cycling
    through the lists (one callable per input set, so a cache can be rotated)."""
    if not fns or not ref_fns:
        raise ValueError("fns and ref_fns must each hold at least one callable")
    if not isinstance(iters, int) or isinstance(iters, bool) or iters < 1:
        raise ValueError(f"iters={iters!r} must be an int >= 1 (timed runs)")
    for i in range(warmup):
        fns[i % len(fns)]()
        ref_fns[i % len(ref_fns)]()
    torch.cuda.synchronize()
    marks = []
    for i in range(iters):
        events = [torch.cuda.Event(enable_timing=True) for _ in range(3)]
        events[0].record()
        fns[i % len(fns)]()
        events[1].record()
        ref_fns[i % len(ref_fns)]()
        events[2].record()
        marks.append(events)
    torch.cuda.synchronize()
    times = sorted(a.elapsed_time(b) for a, b, _ in marks)
    ref_ms = statistics.median(b.elapsed_time(c) for _, b, c in marks)
    return statistics.median(times), times[len(times) // 10], times[(9 * len(times)) // 10], ref_ms
