"""Where a tile_fused offload pipeline waits: per-piece GPU times of one call.

``offload_timeline`` runs one ``tile_fused`` call with timing events, behind a short GPU
sleep so that the host has enqueued everything before the clock starts (the times are
then the GPU's, not the Python launcher's), and returns, in ms from the call's start,
when each piece was ready, when its copy ended and when the GEMM ended. The fill (first
piece ready), the copy link's idle time between pieces and the drain (GEMM end after the
last chunk landed) follow from it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from hocket.core.plan import Plan
from hocket.ops.offload_fused import FusedEvents, fused_from_host, fused_to_host

HEAD_START_CYCLES = 2_000_000
"""GPU sleep (about 1 ms) enqueued before the call so the host is ahead of the GPU."""


@dataclass(frozen=True, kw_only=True)
class OffloadTimeline:
    """Times in ms from the call's start. ``ready_ms``: to host, each group's flag seen;
    from host, each chunk landed."""

    direction: str
    piece_rows: tuple[int, ...]
    ready_ms: tuple[float, ...]
    copied_ms: tuple[float, ...]
    gemm_done_ms: float
    end_ms: float

    @property
    def first_ready_ms(self) -> float:
        return self.ready_ms[0] if self.ready_ms else float("nan")

    @property
    def drain_ms(self) -> float:
        """from host: GEMM end after the last chunk landed; to host: last copy after the GEMM end."""
        if self.direction == "from_host":
            return self.gemm_done_ms - max(self.copied_ms)
        return self.end_ms - self.gemm_done_ms

    def describe(self) -> str:
        fmt = ", ".join
        return (f"{self.direction} pieces {list(self.piece_rows)} rows; ready at [{fmt(f'{t:.3f}' for t in self.ready_ms)}]"
                f" ms; copies end at [{fmt(f'{t:.3f}' for t in self.copied_ms)}] ms; GEMM ends {self.gemm_done_ms:.3f}"
                f" ms; end {self.end_ms:.3f} ms")


def _timeline(direction: str, events: FusedEvents) -> OffloadTimeline:
    torch.cuda.synchronize()
    since = events.start.elapsed_time
    offsets = events.row_offsets
    copied = tuple(since(e) for e in events.copied)
    return OffloadTimeline(direction=direction, piece_rows=tuple(b - a for a, b in zip(offsets, offsets[1:])),
                           ready_ms=tuple(since(e) for e in events.ready), copied_ms=copied,
                           gemm_done_ms=since(events.gemm_done), end_ms=max(max(copied), since(events.gemm_done)))


def offload_timeline(direction: str, *, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, staging: torch.Tensor,
                     plan: Plan, context) -> OffloadTimeline:
    """One timed tile_fused call of ``a @ b -> out`` (an ``OffloadContext``'s ``context``).

    ``to_host``: ``a``, ``b`` on the GPU, ``staging`` the device result [m, n], ``out``
    pinned host memory; ``from_host``: ``a`` pinned host memory, ``staging`` its device
    copy [m, k], ``out`` on the GPU. Outputs are overwritten with the product.
    """
    if plan.strategy != "tile_fused":
        raise ValueError(f"plan.strategy={plan.strategy!r}: a timeline is only taken of tile_fused plans")
    if direction not in ("to_host", "from_host"):
        raise ValueError(f"direction={direction!r} must be 'to_host' or 'from_host'")
    torch.cuda.synchronize()
    with torch.cuda.device(context.device):
        torch.cuda._sleep(HEAD_START_CYCLES)
        if direction == "to_host":
            events = fused_to_host(context, a, b, staging, out, plan, timing=True)
        else:
            events = fused_from_host(context, a, staging, b, out, plan, timing=True)
        timeline = _timeline(direction, events)
    context.check()
    return timeline
