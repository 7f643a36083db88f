"""A background thread that enqueues a transport's copies, so the launching thread never waits.

The host-staged transport must wait on the host for the other processes to have *enqueued* their
side of each message (a cross-process event wait refers to the latest record, see
:mod:`hocket.transport.host_relay`). Done on the thread that launches the GEMMs, those waits delay
every kernel launched after the collective: with the transfers issued before the GEMM that should
hide them (``order="local_first"``), the GPU idles for the whole handshake, once per piece.

An :class:`IssueThread` runs those waits and the copy launches on one worker thread per
transport context, in submission order. The launching thread records a "ready" event on its
stream, submits, and goes on launching kernels; the :class:`ThreadPending` it gets back blocks
the host in :meth:`ThreadPending.wait` only until the worker has *enqueued* the transfer (never
for the transfer itself), then makes the caller's stream wait for it. Every wait is bounded
(``HOCKET_TIMEOUT_S``); a failure on the worker is raised on the launching thread, at the wait of
the failed transfer or, if that is never waited, at the next submission.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures

import torch

from hocket.env import wait_timeout_s
from hocket.transport.pending import TransportError


class IssueThread:
    """One worker thread (bound to ``device`` when it is a CUDA device); jobs run one after another
    in submission order."""

    def __init__(self, device: torch.device | str, *, name: str) -> None:
        self.device = torch.device(device)
        self.name = name
        bind = (torch.cuda.set_device, (self.device,)) if self.device.type == "cuda" else (None, ())
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"hocket-{name}",
                                        initializer=bind[0], initargs=bind[1])
        self._last: Future | None = None
        self._closed = False

    def submit(self, job: Callable[[], torch.cuda.Event | None], *, what: str) -> "ThreadPending":
        """Run ``job`` on the worker (it enqueues work on side streams and returns an event recorded
        after it, or None when nothing is left to wait for on a stream); returns the pending
        transfer. Raises the previous job's failure, if any."""
        if self._closed:
            raise RuntimeError(f"issue thread {self.name!r} was closed; its transport context must be rebuilt")
        previous = self._last
        if previous is not None and previous.done() and previous.exception() is not None:
            raise TransportError(f"hocket: an earlier transfer on {self.name!r} failed, so this rank's transfer "
                                 f"sequence is out of step with its peers: {previous.exception()}")
        self._last = self._pool.submit(job)
        return ThreadPending(self._last, what=what, thread=self.name)

    def drain(self) -> None:
        """Wait (bounded) until every submitted job has been enqueued; raise a job's failure."""
        if self._last is not None:
            ThreadPending(self._last, what="the last transfer", thread=self.name).enqueued()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._pool.shutdown(wait=True)


class ThreadPending:
    """A transfer an :class:`IssueThread` enqueues; :meth:`wait` orders the current stream after it."""

    __slots__ = ("_future", "what", "thread")

    def __init__(self, future: Future, *, what: str, thread: str) -> None:
        self._future = future
        self.what = what
        self.thread = thread

    def enqueued(self) -> torch.cuda.Event | None:
        """Block until the worker has enqueued the transfer (bounded); its completion event."""
        future = self._future
        if future is None:
            return None
        limit_s = wait_timeout_s()
        wait_futures([future], timeout=limit_s)  # a job's own TimeoutError must not read as this one
        if not future.done():
            raise TransportError(
                f"hocket: {self.what} was not even enqueued within {limit_s:g} s (HOCKET_TIMEOUT_S) on "
                f"{self.thread!r}: a peer process stopped or called a different operator")
        return future.result()

    def wait(self) -> None:
        event = self.enqueued()
        self._future = None
        if event is not None:
            torch.cuda.current_stream().wait_event(event)

    @property
    def done(self) -> bool:
        return self._future is None
