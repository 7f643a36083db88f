"""A watchdog that bounds the stream waits of the host-staged relay's device signals.

The relay's copy streams wait for the peers' slot
flags with ``cuStreamWaitValue32`` (``hocket.kernels.stream_memops``), which has no timeout: a
peer that stops would leave this rank's streams, and any host sync behind them, waiting forever.

The :class:`RelayWatchdog` thread (one per relay, a daemon polling every ``poll_s``) watches the
completion event of every call the relay enqueued, oldest first. A call's clock starts when it
becomes the oldest unfinished one (so calls queued behind a long GEMM do not time out early). If the
oldest call has not finished within ``timeout_s`` (``HOCKET_TIMEOUT_S``), the watchdog calls
``release()`` (the relay writes values into the shared header that satisfy every wait, so the
streams drain and no sync hangs), records why, and from then on :meth:`check` raises
:class:`~hocket.transport.pending.TransportError` naming the call and what ``describe()`` says
(which slots a peer left unread or unwritten). The relay checks at every call and when it closes; outputs of the
timed-out call are invalid, as NCCL's are after its watchdog aborts a communicator.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable

from hocket.transport.pending import TransportError


class RelayWatchdog:
    """Times out unfinished relay calls (module docstring). ``events`` need ``query() -> bool``."""

    def __init__(self, *, name: str, timeout_s: float, release: Callable[[], None],
                 describe: Callable[[], str] = lambda: "", poll_s: float = 0.05,
                 on_start: Callable[[], None] | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        if not timeout_s > 0:
            raise ValueError(f"timeout_s={timeout_s!r} must be > 0 seconds (HOCKET_TIMEOUT_S)")
        if not poll_s > 0:
            raise ValueError(f"poll_s={poll_s!r} must be > 0 seconds")
        self.name = name
        self.timeout_s = float(timeout_s)
        self._release, self._describe, self._clock = release, describe, clock
        self._poll_s = float(poll_s)
        self._lock = threading.Lock()
        self._calls: deque[list] = deque()  # [what, event, clock start or None]
        self._error: str | None = None
        self._stop = threading.Event()
        self._on_start = on_start
        self._thread: threading.Thread | None = None

    def start(self) -> RelayWatchdog:
        self._thread = threading.Thread(target=self._run, name=f"hocket-watchdog-{self.name}", daemon=True)
        self._thread.start()
        return self

    def track(self, what: str, event) -> None:
        """Watch one enqueued call until ``event`` has passed."""
        self.check()
        with self._lock:
            self._calls.append([what, event, None])

    def check(self) -> None:
        """Raise if a call timed out (every later call of this relay raises too)."""
        if self._error is not None:
            raise TransportError(self._error)

    @property
    def outstanding(self) -> int:
        with self._lock:
            return len(self._calls)

    def poll(self) -> None:
        """One watchdog step (the thread runs it every ``poll_s``; tests call it directly)."""
        with self._lock:
            while self._calls and self._calls[0][1].query():
                self._calls.popleft()
            if not self._calls or self._error is not None:
                return
            front = self._calls[0]
            now = self._clock()
            if front[2] is None:
                front[2] = now
                return
            if now - front[2] <= self.timeout_s:
                return
            self._calls.clear()
            detail = self._describe()
            self._error = (f"hocket: {front[0]} on {self.name!r} did not finish within {self.timeout_s:g} s "
                           f"(HOCKET_TIMEOUT_S){': ' + detail if detail else ''}. A peer process stopped, called "
                           f"a different operator, or is slower than the bound; the relay released its waits, so "
                           f"that call's output is invalid and this relay is unusable (rebuild the group).")
            self._release()

    def wait_idle(self) -> None:
        """Block until every tracked call finished or timed out (bounded: about ``timeout_s``)."""
        while self.outstanding and self._error is None:
            self.poll()
            time.sleep(self._poll_s)

    def _run(self) -> None:
        if self._on_start is not None:
            self._on_start()
        while not self._stop.wait(self._poll_s):
            self.poll()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=max(1.0, 10 * self._poll_s))
            self._thread = None
