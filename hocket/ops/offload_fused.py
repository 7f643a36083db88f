"""The ``tile_fused`` flows of the offload operators, event by event.

``fused_from_host``: host -> device chunks back to back on the H2D stream, each chunk's
flag raised right behind its copy there; the consumer GEMM on the current stream spins per
tile on its chunk's flag.
``fused_to_host``: the producer GEMM on the current stream raises a flag per finished
group; the D2H stream copies each group once its flag rose: held at the flag in the GPU's
front end (``copy_wait="stream"``), or behind bounded spin kernels on the flag stream and
events (``"side_kernel"``).

Both return a :class:`FusedEvents`; ``timing=True`` makes every event a timing event,
which ``hocket.ops.offload_timeline`` reads to show where a pipeline waits. ``ctx`` is the
caller's ``hocket.ops.offload.OffloadContext`` (its streams, staging buffers and workspaces).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from hocket.core.plan import Plan
from hocket.kernels.workspace import signature
from hocket.transport.stream_switch import on_stream


@dataclass(frozen=True, kw_only=True)
class FusedEvents:
    """Events of one tile_fused call, all on the calling device.

    ``start``: before any of the call's work; ``ready[i]``: piece ``i`` can move on
    (to host: its flag rose, or with ``copy_wait="stream"`` its copy may start; from host:
    its chunk landed);
    ``copied[i]``: piece ``i``'s copy ended; ``gemm_done``: the GEMM ended; ``done``:
    the last piece's copy ended (the current stream waits for it).
    """

    start: torch.cuda.Event
    ready: tuple[torch.cuda.Event, ...]
    copied: tuple[torch.cuda.Event, ...]
    gemm_done: torch.cuda.Event
    done: torch.cuda.Event
    row_offsets: tuple[int, ...]


def _event(stream: torch.cuda.Stream, timing: bool) -> torch.cuda.Event:
    event = torch.cuda.Event(enable_timing=timing)
    event.record(stream)
    return event


def fused_from_host(ctx, A_host: torch.Tensor, a_dev: torch.Tensor, B: torch.Tensor,
                    out: torch.Tensor, plan: Plan, *, timing: bool = False) -> FusedEvents:
    from hocket.kernels.launch import consumer_gemm, reset_consumer, warmup_consumer

    m, k = A_host.shape
    ws = ctx.consumer(m, B.shape[1], k, B.dtype, plan)
    if signature(a_dev, B, out) not in ws.warmed:
        warmup_consumer(ws, a_dev, B, out, flag_method=ctx.staged.flag_method)
    current = torch.cuda.current_stream(ctx.device)
    reset_consumer(ws)
    start = _event(current, timing)
    offsets = ws.schedule.chunk_offsets
    landed = ctx.staged.h2d_chunks(A_host, a_dev, offsets, flags=ws.flags, after=start, timing=timing)
    consumer_gemm(a_dev, B, workspace=ws, out=out)
    gemm_done = _event(current, timing)
    for event in landed:
        current.wait_event(event)
    ctx.timeouts.watch(ws.errors, max_spins=ws.max_spins, what="matmul_from_host (tile_fused)")
    return FusedEvents(start=start, ready=tuple(landed), copied=tuple(landed), gemm_done=gemm_done,
                       done=landed[ws.schedule.arrival[-1]], row_offsets=offsets)


def fused_to_host(ctx, A: torch.Tensor, B: torch.Tensor, c_dev: torch.Tensor, out: torch.Tensor,
                  plan: Plan, *, timing: bool = False) -> FusedEvents:
    from hocket.kernels.launch import producer_gemm, reset_producer, warmup_producer

    ws = ctx.producer(A.shape[0], B.shape[1], A.shape[1], A.dtype, plan)
    if signature(A, B, c_dev) not in ws.warmed:
        warmup_producer(ws, A, B, c_dev)
    current = torch.cuda.current_stream(ctx.device)
    reset_producer(ws)
    start = _event(current, timing)
    producer_gemm(A, B, workspace=ws, out=c_dev)
    gemm_done = _event(current, timing)
    offsets = ws.schedule.group_offsets
    wait = dict(errors=ws.errors, max_spins=ws.max_spins, after=start)
    if ctx.copy_wait == "stream":
        ready, copied = _d2h_stream_waits(ctx, c_dev, out, ws, start, timing)
    else:
        ready = ctx.staged.flag_waits(ws.flags, len(offsets) - 1, timing=timing, **wait)
        copied = ctx.staged.d2h_groups(c_dev, out, offsets, events=ready, after=start, timing=timing)
    for event in copied:  # the error mirror below must follow the copy-side waits
        current.wait_event(event)
    ctx.timeouts.watch(ws.errors, max_spins=ws.max_spins, what="matmul_to_host (tile_fused)")
    return FusedEvents(start=start, ready=tuple(ready), copied=tuple(copied), gemm_done=gemm_done,
                       done=copied[-1], row_offsets=offsets)


def _d2h_stream_waits(ctx, c_dev, out, ws, start, timing: bool):
    """On the D2H stream, per group: hold until its flag rises (driver wait-value; the
    producer enqueued before raises every flag), then copy it. Returns (events after
    each wait, events after each copy)."""
    from hocket.kernels.stream_wait import wait_value_on_stream

    stream = ctx.staged.d2h_stream
    stream.wait_event(start)
    offsets = ws.schedule.group_offsets
    ready, copied = [], []
    for group in range(len(offsets) - 1):
        with on_stream(stream):
            wait_value_on_stream(ws.flags, group, stream=stream)
            if timing:
                ready.append(_event(stream, True))
            rows = slice(offsets[group], offsets[group + 1])
            out[rows].copy_(c_dev[rows], non_blocking=True)
            copied.append(_event(stream, timing))
    return ready, copied
