"""The ``tile_fused`` flows of the offload operators, event by event.

``fused_from_host``: host -> device chunks back to back on the H2D stream; each chunk's
flag is raised behind it: from the flag stream after the chunk's event for every chunk
but the last (``chunk_flags="side"``: the copy engine never waits for a flag write), the
last one right behind its copy; or all on the H2D stream (``chunk_flags="copy"``). The
consumer GEMM on the current stream spins per tile on its chunk's flag.
``fused_to_host``: the producer GEMM on the current stream raises a flag per finished
group; the D2H stream copies each group once its flag rose: held at the flag in the GPU's
front end (``copy_wait="stream"``), or behind bounded spin kernels on the flag stream and
events (``"side_kernel"``), or behind spin kernels on the D2H stream (``"copy_kernel"``).

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
    if ctx.chunk_flags == "copy":
        landed = ctx.staged.h2d_chunks(A_host, a_dev, offsets, flags=ws.flags, after=start, timing=timing)
        flags_done = None
    else:
        landed, flags_done = _h2d_with_side_flags(ctx, A_host, a_dev, ws, start, timing)
    consumer_gemm(a_dev, B, workspace=ws, out=out)
    gemm_done = _event(current, timing)
    for event in landed:
        current.wait_event(event)
    if flags_done is not None:
        current.wait_event(flags_done)
    ctx.timeouts.watch(ws.errors, max_spins=ws.max_spins, what="matmul_from_host (tile_fused)")
    return FusedEvents(start=start, ready=tuple(landed), copied=tuple(landed), gemm_done=gemm_done,
                       done=landed[ws.schedule.arrival[-1]], row_offsets=offsets)


def _copy_streams(ctx, first: torch.cuda.Stream, start) -> list[torch.cuda.Stream]:
    """``first`` and, with ``copy_streams=2``, the context's second copy stream; each waits for ``start``."""
    streams = [first] if ctx.second_copy_stream is None else [first, ctx.second_copy_stream]
    for stream in streams:
        stream.wait_event(start)
    return streams


def _h2d_with_side_flags(ctx, A_host, a_dev, ws, start, timing: bool):
    """Chunks back to back on the H2D stream(s) (an event after each); the flag stream raises
    each chunk's flag after its event, except the last chunk's, raised on the H2D stream
    right behind it (nothing follows it there). Returns (events by chunk, flag stream's end)."""
    from hocket.kernels.flags import set_flag_on_stream

    staged = ctx.staged
    offsets, order = ws.schedule.chunk_offsets, ws.schedule.arrival
    landed: list = [None] * len(order)
    streams = _copy_streams(ctx, staged.h2d_stream, start)
    for step, chunk in enumerate(order):
        stream = streams[step % len(streams)]
        with on_stream(stream):
            rows = slice(offsets[chunk], offsets[chunk + 1])
            a_dev[rows].copy_(A_host[rows], non_blocking=True)
            if step == len(order) - 1:
                set_flag_on_stream(ws.flags, chunk, method=staged.flag_method)
            landed[chunk] = _event(stream, timing)
    with on_stream(staged.flag_stream):
        staged.flag_stream.wait_event(start)
        for chunk in order[:-1]:
            staged.flag_stream.wait_event(landed[chunk])
            set_flag_on_stream(ws.flags, chunk, method=staged.flag_method)
        flags_done = _event(staged.flag_stream, False)
    return landed, flags_done


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
    elif ctx.copy_wait == "side_kernel":
        ready = ctx.staged.flag_waits(ws.flags, len(offsets) - 1, timing=timing, **wait)
        copied = _d2h_after_events(ctx, c_dev, out, offsets, ready, start, timing)
    else:
        ready = []
        copied = ctx.staged.d2h_groups(c_dev, out, offsets, flags=ws.flags, side_waits=False, timing=timing, **wait)
    for event in copied:  # the error mirror below must follow the copy-side waits (every copy stream)
        current.wait_event(event)
    ctx.timeouts.watch(ws.errors, max_spins=ws.max_spins, what="matmul_to_host (tile_fused)")
    return FusedEvents(start=start, ready=tuple(ready), copied=tuple(copied), gemm_done=gemm_done,
                       done=copied[-1], row_offsets=offsets)  # with two copy streams: see every copied event


def _d2h_after_events(ctx, c_dev, out, offsets, ready, start, timing: bool):
    """Each group's copy after its ready event, on the D2H stream (or alternating between
    two copy streams, ``copy_streams=2``). Returns the events after each copy."""
    if ctx.second_copy_stream is None:
        return ctx.staged.d2h_groups(c_dev, out, offsets, events=ready, after=start, timing=timing)
    streams = _copy_streams(ctx, ctx.staged.d2h_stream, start)
    copied = []
    for group in range(len(offsets) - 1):
        stream = streams[group % len(streams)]
        with on_stream(stream):
            stream.wait_event(ready[group])
            rows = slice(offsets[group], offsets[group + 1])
            out[rows].copy_(c_dev[rows], non_blocking=True)
            copied.append(_event(stream, timing))
    return copied


def _d2h_stream_waits(ctx, c_dev, out, ws, start, timing: bool):
    """On the D2H stream, per group: hold until its flag rises (driver wait-value; the
    producer enqueued before raises every flag), then copy it. Returns (events after
    each wait, events after each copy)."""
    from hocket.kernels.stream_wait import wait_value_on_stream

    streams = _copy_streams(ctx, ctx.staged.d2h_stream, start)
    offsets = ws.schedule.group_offsets
    ready, copied = [], []
    for group in range(len(offsets) - 1):
        stream = streams[group % len(streams)]
        with on_stream(stream):
            wait_value_on_stream(ws.flags, group, stream=stream)
            if timing:
                ready.append(_event(stream, True))
            rows = slice(offsets[group], offsets[group + 1])
            out[rows].copy_(c_dev[rows], non_blocking=True)
            copied.append(_event(stream, timing))
    return ready, copied
