"""The sustained GEMM level: one large GEMM in a short burst against the same GEMM back to back.

The ``gemm`` grid times every shape in short bursts (a few calls, each behind a barrier): the GPU
starts each from near idle and holds its boost clock. A training loop keeps it busy for seconds;
it reaches its power cap and lowers its clocks (2xH200: 740-790 TFLOP/s in the grid against
677-694 TFLOP/s for the same shapes run back to back for seconds). This phase measures both on the
grid's fastest whole GEMM (``runner.fastest_whole_gemm``: the most power-hungry, so the one held
by the cap): ``burst_ms`` exactly as the grid times it, then calls queued back to back for
``duration_s``, timed with device events per segment; the sustained figure is the mean per call
over the last half of the segments (the first half lets the clocks settle). Its rate is the
ceiling the cost model holds steady-state GEMMs under (``hocket.cost.compute``).

GPU ranks only: a CPU rank's GEMM has no power-capped boost clock in the model.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable

import torch

from hocket.hardware.profile import SustainedGemm
from hocket.timing.timer import TimingConfig, max_across_ranks, time_callable

SEGMENTS = 10
"""Event-timed segments of the back-to-back run; the last half give the sustained figure."""
MAX_CALLS = 100_000


def back_to_back_ms(call: Callable[[], None], *, calls: int, device: torch.device,
                    segments: int = SEGMENTS) -> list[float]:
    """Mean ms per call of each of ``segments`` consecutive segments of ``calls`` calls queued back
    to back on the current stream (no host sync between them: the host stays ahead)."""
    if device.type != "cuda":
        raise ValueError(f"device={device} must be a CUDA device: back-to-back timing uses CUDA events")
    if calls < segments or segments < 2:
        raise ValueError(f"calls={calls} must be >= segments={segments} >= 2")
    bounds = [(i * calls) // segments for i in range(segments + 1)]
    events = [torch.cuda.Event(enable_timing=True) for _ in bounds]
    events[0].record()
    for i in range(segments):
        for _ in range(bounds[i + 1] - bounds[i]):
            call()
        events[i + 1].record()
    torch.cuda.synchronize(device)
    return [events[i].elapsed_time(events[i + 1]) / (bounds[i + 1] - bounds[i]) for i in range(segments)]


def measure_sustained(call: Callable[[], None], shape: tuple[int, int, int], *, dtype: str, duration_s: float,
                      timing: TimingConfig, group, device: torch.device) -> SustainedGemm | None:
    """Burst and sustained time of ``call`` (the GEMM of ``shape``); None on CPU ranks or with
    ``duration_s == 0``. Every rank calls this (the figures are maxima over ranks)."""
    if not math.isfinite(duration_s) or duration_s < 0:
        raise ValueError(f"duration_s={duration_s!r} must be a finite number of seconds >= 0 (0 skips the phase)")
    if device.type != "cuda" or duration_s == 0:
        return None
    burst_ms = time_callable(call, config=timing, group=group, device=device).median_ms
    # the call count comes from the max-over-ranks burst time: equal on every rank
    calls = max(2 * SEGMENTS, min(MAX_CALLS, math.ceil(duration_s * 1e3 / burst_ms)))
    per_call = back_to_back_ms(call, calls=calls, device=device)
    local_ms = statistics.fmean(per_call[len(per_call) // 2:])
    sustained_ms = max_across_ranks([local_ms], group=group, device=device)[0]
    m, k, n = shape
    return SustainedGemm(m=m, k=k, n=n, dtype=dtype, burst_ms=burst_ms, sustained_ms=sustained_ms,
                         duration_s=calls * sustained_ms / 1e3)
