"""A transfer that runs on a CUDA side stream: waiting on it orders the current stream after it.

The copy-engine and host-staged transports issue their copies on their own streams and
return a :class:`StreamPending` (the same ``wait()`` / ``done`` interface as
:class:`hocket.transport.pending.Pending`). Waiting never blocks the host: the current
stream waits on the event recorded after the transfer, as NCCL work handles do.
"""

from __future__ import annotations

import torch


class StreamPending:
    """The side-stream work of one transfer; call :meth:`wait` before touching its buffers."""

    __slots__ = ("_event", "what", "_device")

    def __init__(self, event: torch.cuda.Event, *, what: str, device: int | None = None) -> None:
        self._event = event
        self.what = what
        self._device = device
        """the CUDA device index whose current stream waits (None: the current device's; an index
        skips torch's lookup of the current device, ~10 us of host time per wait)"""

    @classmethod
    def after(cls, stream: torch.cuda.Stream, *, what: str) -> StreamPending:
        """A pending transfer that ends with the work enqueued on ``stream`` so far."""
        return cls(stream.record_event(), what=what)

    def wait(self) -> None:
        event, self._event = self._event, None
        if event is not None:
            torch.cuda.current_stream(self._device).wait_event(event)

    @property
    def done(self) -> bool:
        return self._event is None
