"""Async work handles whose every wait is bounded.

On CPU (gloo) ``wait`` blocks the calling thread for at most ``hocket.env.wait_timeout_s()``
seconds and turns a timeout or a broken peer into :class:`TransportError`. On CUDA
(NCCL) ``wait`` only makes the current stream wait on the communication (blocking the
host would stall kernel launches); that wait is bounded by the process group's own
timeout, which NCCL's watchdog enforces.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence

import torch.distributed as dist

from hocket.env import wait_timeout_s


class TransportError(RuntimeError):
    """A transfer failed or did not finish in time (a rank stopped, diverged or died)."""


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
        timeout_s = wait_timeout_s()
        limit = datetime.timedelta(seconds=timeout_s)
        for work in works:
            try:
                work.wait(timeout=limit)
            except RuntimeError as exc:
                raise TransportError(
                    f"hocket: {self._what} on group {self._group_name!r} failed or did not finish within "
                    f"{timeout_s:g} s (HOCKET_TIMEOUT_S). Another rank may have stopped, crashed, or called a "
                    f"different operator or shape. Underlying error: {exc}"
                ) from exc

    @property
    def done(self) -> bool:
        return not self._works


def wait_all(pendings: Sequence[Pending | None]) -> None:
    for pending in pendings:
        if pending is not None:
            pending.wait()
