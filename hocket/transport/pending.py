"""Async work handles whose every wait is bounded.

On CPU (gloo) ``wait`` blocks the calling thread for at most ``hocket.env.wait_timeout_s()``
seconds and turns a timeout or a broken peer into :class:`TransportError`. On CUDA
(NCCL) ``wait`` only makes the current stream wait on the communication (blocking the
host would stall kernel launches); that wait is bounded by the process group's own
timeout, which NCCL's watchdog enforces.

The error names the call it happened in (the operator, its site's shapes and dtype, the group and this
rank: :func:`set_current_call`, set by :mod:`hocket.ops.dispatch`), says whether the peer failed at
once (it closed its connection: stopped or crashed) or the wait ran out, and points at
``HOCKET_AGREEMENT=always``, which checks every call (a rank on another operator or shape then raises a
clear ``AgreementError`` instead of waiting).
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Sequence

import torch.distributed as dist

from hocket.env import wait_timeout_s


class TransportError(RuntimeError):
    """A transfer failed or did not finish in time (a rank stopped, diverged or died)."""


DEFAULT_TIMEOUT_S = 300.0
"""the bound of a wait while ``HOCKET_TIMEOUT_S`` holds a value :func:`hocket.env.wait_timeout_s` refuses."""

_CURRENT_CALL = [""]
"""what this process is running now (one string: set per call on the hot path, so kept to one store)."""


def set_current_call(description: str) -> None:
    """Name the call whose transfers follow (``hocket.all_gather_matmul on ag_mm m=... on group 'g' rank r of
    w``), for the error a failed or timed-out wait raises."""
    _CURRENT_CALL[0] = description


def current_call() -> str:
    return _CURRENT_CALL[0]


AGREEMENT_HINT = ("Ranks may be calling different operators or shapes (a rank that changed its shape after the "
                  "first call is not checked by default): run with HOCKET_AGREEMENT=always to check every call, "
                  "so that such a rank raises a clear AgreementError instead of waiting")


def failure_message(what: str, group_name: str, *, timeout_s: float, elapsed_s: float, error: object) -> str:
    """The text of a failed or timed-out wait (see the module docstring)."""
    call = current_call()
    head = f"hocket: {what} in {call}" if call else f"hocket: {what} on group {group_name!r}"
    if elapsed_s < 0.9 * timeout_s:
        how = (f"failed after {elapsed_s:.2f} s (the limit is {timeout_s:g} s, HOCKET_TIMEOUT_S): a peer closed "
               f"its connection, so it stopped, crashed or raised")
    else:
        how = f"did not finish within {timeout_s:g} s (HOCKET_TIMEOUT_S): a peer stopped or is waiting elsewhere"
    return f"{head} {how}. {AGREEMENT_HINT}. Underlying error: {error}"


class Pending:
    """The in-flight work of one transfer; call :meth:`wait` before touching its buffers."""

    __slots__ = ("_works", "_what", "_group_name", "_on_cuda")

    def __init__(self, works: Sequence[dist.Work], *, what: str, group_name: str, on_cuda: bool) -> None:
        self._works = [w for w in works if w is not None]
        self._what = what
        self._group_name = group_name
        self._on_cuda = on_cuda

    def wait(self) -> None:
        works, self._works = self._works, []
        if self._on_cuda:
            for work in works:
                work.wait()
            return
        try:
            timeout_s = wait_timeout_s()
        except ValueError:  # reported to every rank by the call's agreement (hocket.ops.dispatch), which waits
            timeout_s = DEFAULT_TIMEOUT_S  # here too: raising mid-exchange would leave the peers waiting
        limit = datetime.timedelta(seconds=timeout_s)
        start = time.monotonic()
        for work in works:
            try:
                work.wait(timeout=limit)
            except RuntimeError as exc:
                raise TransportError(failure_message(self._what, self._group_name, timeout_s=timeout_s,
                                                     elapsed_s=time.monotonic() - start, error=exc)) from exc

    @property
    def done(self) -> bool:
        return not self._works


def wait_all(pendings: Sequence[Pending | None]) -> None:
    for pending in pendings:
        if pending is not None:
            pending.wait()
