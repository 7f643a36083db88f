"""A cheap "make this stream current" for transports that enqueue many small copies per call.

``torch.cuda.stream(s)`` resolves the current device through several Python layers on every
enter and exit (about 40 Python calls); the host-staged relay switched streams twice per
message, which made a ``chunked(4)`` relay call spend ~1.7 ms of host time on a 1.5 ms device
call (2xH200, benchmarks/results/validation/2026-12-01_measured-rules.md). :class:`on_stream` asks for the stream of an
explicit device index (the fast path of ``torch.cuda.current_stream``) and restores the caller's
current device if selecting the stream moved it.
"""

from __future__ import annotations

import torch


class on_stream:  # noqa: N801 - used like torch.cuda.stream
    """``with on_stream(stream):`` work enqueued inside runs on ``stream`` (a CUDA stream)."""

    __slots__ = ("stream", "index", "_prev", "_device")

    def __init__(self, stream: torch.cuda.Stream) -> None:
        self.stream = stream
        self.index = stream.device_index

    def __enter__(self) -> torch.cuda.Stream:
        self._device = torch.cuda.current_device()
        self._prev = torch.cuda.current_stream(self.index)
        torch.cuda.set_stream(self.stream)
        return self.stream

    def __exit__(self, *exc) -> None:
        torch.cuda.set_stream(self._prev)
        if self._device != self.index:
            torch.cuda.set_device(self._device)
