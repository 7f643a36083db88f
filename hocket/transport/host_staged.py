"""Host-staged transport: pinned host memory and copy-engine CUDA streams (``transport="host_staged"``).

This is the PCIe leg of every host-staged path: single-device offload (activations,
optimizer state), and GPUs without a peer path (different vendors) that exchange data
through pinned host memory (:mod:`hocket.transport.shared_host_buffer` between processes).

How the two directions meet the tile-fused kernels (``hocket.kernels``):

* host -> device: each chunk is one ``cudaMemcpyAsync`` on the H2D stream, followed on
  the same stream by the chunk's flag write. The write is ``cuStreamWriteValue32``
  (torch's ``symm_mem.stream_write_value32_``): it needs no SM and fences the copy
  system-wide before the write, so a consumer GEMM spinning with acquire loads sees the
  rows. Without that op a one-program Triton kernel raises the flag instead.
* device -> host: the producer GEMM raises a group flag when the group's rows are done.
  torch offers no stream *wait* on a memory value, so a one-program Triton kernel spins
  (bounded) on the flag. That costs one SM while waiting, which the persistent producer
  grid leaves free (``hocket.kernels.persistent_programs``). Events cannot do this: a
  single kernel launch has one completion event, not one per group. The spin kernels
  run on a third stream (``flag_stream``), each followed by an event the D2H stream
  waits on before the group's copy: the copy engine then goes from one group's copy to
  the next without waiting for a kernel launch in between (a spin on the copy stream itself
  would leave the link idle for a launch at every group boundary).

Ordering rule: every flag a kernel spins on is raised by work that is already enqueued
when the spinning kernel is launched, and every kernel is compiled and loaded by a
warm-up first, so a spin always ends (and is bounded regardless).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from hocket.transport.stream_switch import on_stream


def require_cuda(what: str) -> None:
    if not torch.cuda.is_available():
        raise RuntimeError(
            f"{what} needs a CUDA device: the host-staged transport moves data between pinned host memory "
            f"and a GPU with copy engines; this machine has none (torch.cuda.is_available() is False)"
        )


def cuda_device(device: torch.device | str | int | None) -> torch.device:
    """``torch.device('cuda', index)`` with the index filled in (current device by default)."""
    if device is None:
        return torch.device("cuda", torch.cuda.current_device())
    dev = torch.device(f"cuda:{device}" if isinstance(device, int) else device)
    if dev.type != "cuda":
        raise ValueError(f"device={device!r} must be a CUDA device for the host-staged transport")
    return torch.device("cuda", torch.cuda.current_device() if dev.index is None else dev.index)


def _rows(offsets: Sequence[int], i: int) -> slice:
    return slice(offsets[i], offsets[i + 1])


class HostStagedContext:
    """Copy-engine streams and pinned staging buffers of one CUDA device.

    Buffers are allocated once per (name, shape, dtype) and reused; ``close()`` releases
    them. Use as a context manager or call ``close()``.
    """

    def __init__(self, device: torch.device | str | int | None = None, *, flag_method: str = "auto") -> None:
        require_cuda("HostStagedContext")
        if flag_method not in ("auto", "stream_write", "kernel"):
            raise ValueError(f"flag_method={flag_method!r} must be 'auto', 'stream_write' or 'kernel'")
        self.device = cuda_device(device)
        self.flag_method = flag_method
        self.h2d_stream = torch.cuda.Stream(self.device)
        self.d2h_stream = torch.cuda.Stream(self.device)
        self.flag_stream = torch.cuda.Stream(self.device)
        self._buffers: dict[tuple, torch.Tensor] = {}
        self._closed = False

    # -- buffers --------------------------------------------------------------
    def pinned(self, name: str, shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
        """A pinned host buffer, allocated on first request of this (name, shape, dtype)."""
        return self._buffer("host", name, tuple(shape), dtype)

    def device_buffer(self, name: str, shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
        """A device buffer owned by the context (e.g. the staging copy of A or C)."""
        return self._buffer("device", name, tuple(shape), dtype)

    def _buffer(self, where: str, name: str, shape: tuple, dtype: torch.dtype) -> torch.Tensor:
        if self._closed:
            raise RuntimeError("this HostStagedContext was closed; create a new one")
        key = (where, name, shape, dtype)
        buf = self._buffers.get(key)
        if buf is None:
            if where == "host":
                buf = torch.empty(shape, dtype=dtype, pin_memory=True)
            else:
                buf = torch.empty(shape, dtype=dtype, device=self.device)
            self._buffers[key] = buf
        return buf

    # -- transfers ------------------------------------------------------------
    def h2d_chunks(self, src: torch.Tensor, dst: torch.Tensor, row_offsets: Sequence[int], *,
                   order: Sequence[int] | None = None, flags: torch.Tensor | None = None,
                   after: torch.cuda.Event | None = None, timing: bool = False) -> list[torch.cuda.Event]:
        """Copy row chunks ``src[rows] -> dst[rows]`` (pinned host -> device) on the H2D stream,
        in ``order``; after each chunk raise ``flags[chunk]`` (if given) and record an event.

        Returns one event per chunk, indexed by chunk. ``after``: an event the stream waits
        for first (e.g. the consumer's flag reset).
        """
        from hocket.kernels.flags import set_flag_on_stream

        order = range(len(row_offsets) - 1) if order is None else order
        events: list[torch.cuda.Event | None] = [None] * (len(row_offsets) - 1)
        with on_stream(self.h2d_stream):
            if after is not None:
                self.h2d_stream.wait_event(after)
            for chunk in order:
                rows = _rows(row_offsets, chunk)
                dst[rows].copy_(src[rows], non_blocking=True)
                if flags is not None:
                    set_flag_on_stream(flags, chunk, method=self.flag_method)
                events[chunk] = torch.cuda.Event(enable_timing=timing)
                events[chunk].record(self.h2d_stream)
        return events

    def d2h_groups(self, src: torch.Tensor, dst: torch.Tensor, row_offsets: Sequence[int], *,
                   flags: torch.Tensor | None = None, errors: torch.Tensor | None = None,
                   max_spins: int | None = None, events: Sequence[torch.cuda.Event] | None = None,
                   after: torch.cuda.Event | None = None, timing: bool = False) -> list[torch.cuda.Event]:
        """Copy row groups ``src[rows] -> dst[rows]`` (device -> pinned host) on the D2H stream,
        each once it is ready: after ``flags[g]`` rises (a bounded spin kernel; pass the
        producer workspace's ``errors`` and ``max_spins``; the spin kernels run on ``flag_stream``
        and hand over with events) or after ``events[g]``.

        Returns one event per group, recorded after its copy (the last one marks the end;
        ``timing=True`` makes them timing events).
        """
        if flags is not None and (errors is None or max_spins is None):
            raise ValueError("d2h_groups with flags needs errors= and max_spins= (the producer workspace's)")
        groups = len(row_offsets) - 1
        if flags is not None:
            events = self.flag_waits(flags, groups, errors=errors, max_spins=max_spins, after=after)
        copied = []
        with on_stream(self.d2h_stream):
            if after is not None:
                self.d2h_stream.wait_event(after)
            for group in range(groups):
                if events is not None:
                    self.d2h_stream.wait_event(events[group])
                rows = _rows(row_offsets, group)
                dst[rows].copy_(src[rows], non_blocking=True)
                copied.append(torch.cuda.Event(enable_timing=timing))
                copied[-1].record(self.d2h_stream)
        return copied

    def flag_waits(self, flags: torch.Tensor, count: int, *, errors: torch.Tensor, max_spins: int,
                   after: torch.cuda.Event | None = None, timing: bool = False) -> list[torch.cuda.Event]:
        """On ``flag_stream``: for each of ``flags[0:count]`` in order, a bounded spin kernel
        until it rises, then an event (returned, one per flag) that another stream can wait on."""
        from hocket.kernels.flags import wait_flag_on_stream

        ready = []
        with on_stream(self.flag_stream):
            if after is not None:
                self.flag_stream.wait_event(after)
            for index in range(count):
                wait_flag_on_stream(flags, index, errors, max_spins=max_spins)
                ready.append(torch.cuda.Event(enable_timing=timing))
                ready[-1].record(self.flag_stream)
        return ready

    # -- lifetime -------------------------------------------------------------
    def close(self) -> None:
        """Wait for this context's streams, then release its buffers."""
        if self._closed:
            return
        self.h2d_stream.synchronize()
        self.d2h_stream.synchronize()
        self.flag_stream.synchronize()
        self._buffers.clear()
        self._closed = True

    def __enter__(self) -> HostStagedContext:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
