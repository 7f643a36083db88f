"""Process plumbing shared by ``spawn`` and ``RankPool``: start, stop, stack dumps, store."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from datetime import timedelta
from multiprocessing.process import BaseProcess
from pathlib import Path

import torch.distributed as dist
import torch.multiprocessing

START_METHODS = ("auto", "spawn", "forkserver")

# Modules the forkserver imports once, so that each rank it forks starts in ~0.1 s.
_FORKSERVER_PRELOAD = ["torch", "torch.distributed", "hocket.launch.rank_main"]

STACK_SIGNAL = getattr(signal, "SIGUSR1", None)


def resolve_start_method(start_method: str, fn: object = None) -> str:
    """``spawn``: a fresh interpreter per rank (imports torch in each: seconds per rank).
    ``forkserver``: ranks forked from a server that imported torch once (~0.1 s a rank);
    it cannot import functions defined in the driver's ``__main__``.
    ``auto``: forkserver, unless ``fn`` lives in ``__main__``.
    """
    if start_method not in START_METHODS:
        raise ValueError(f"start_method={start_method!r} is not one of {START_METHODS}")
    in_main = getattr(fn, "__module__", None) == "__main__"
    if start_method == "auto":
        return "spawn" if in_main else "forkserver"
    if start_method == "forkserver" and in_main:
        raise TypeError(
            f"fn={getattr(fn, '__qualname__', fn)} is defined in __main__, which forkserver ranks cannot "
            "import: move it into a module, or use start_method='spawn'"
        )
    return start_method


def mp_context(start_method: str, *, preload: tuple[str, ...] = ()) -> multiprocessing.context.BaseContext:
    """The torch.multiprocessing context for a resolved start method.

    ``preload``: more modules for the forkserver to import once (say the test
    framework), so forked ranks need not. There is one forkserver per driver process:
    the list only counts if it is given before the first forkserver rank starts.
    """
    if start_method not in START_METHODS[1:]:
        raise ValueError(f"start_method={start_method!r} is not one of {START_METHODS[1:]}")
    ctx = torch.multiprocessing.get_context(start_method)
    if start_method == "forkserver":
        ctx.set_forkserver_preload(_FORKSERVER_PRELOAD + [m for m in preload if m not in _FORKSERVER_PRELOAD])
    return ctx


def host_store(timeout_s: float) -> dist.TCPStore:
    """A TCPStore served by the driver on a free localhost port (``store.port``)."""
    return dist.TCPStore(
        "127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=timeout_s)
    )


def stop_processes(procs: list[BaseProcess], *, exit_wait_s: float = 0.0, grace_s: float = 2.0) -> None:
    """Wait up to ``exit_wait_s`` for processes to exit by themselves, then terminate,
    kill and join the rest: none is left running."""
    deadline = time.monotonic() + exit_wait_s
    for proc in procs:
        proc.join(max(0.0, deadline - time.monotonic()))
    for proc in procs:
        if proc.is_alive():
            proc.terminate()
    deadline = time.monotonic() + grace_s
    for proc in procs:
        proc.join(max(0.0, deadline - time.monotonic()))
    for proc in procs:
        if proc.is_alive():
            proc.kill()
            proc.join(grace_s)


def dump_stacks(procs: dict[int, BaseProcess], stack_paths: dict[int, Path], *, wait_s: float = 1.0) -> dict[int, str]:
    """Ask running ranks to write their Python stacks (faulthandler on SIGUSR1) and read them."""
    if STACK_SIGNAL is None:
        return {}
    sizes: dict[int, int] = {}
    stacks: dict[int, str] = {}
    for rank, proc in procs.items():
        path = stack_paths[rank]
        if proc.pid is None or not proc.is_alive():
            continue
        size = path.stat().st_size if path.exists() else 0
        if size == 0:  # the rank has not installed its handler yet: the signal would kill it
            stacks[rank] = "(still starting up: no Python stack available)"
            continue
        sizes[rank] = size
        os.kill(proc.pid, STACK_SIGNAL)
    deadline = time.monotonic() + wait_s
    while sizes and time.monotonic() < deadline:
        for rank in list(sizes):
            path = stack_paths[rank]
            if path.exists() and path.stat().st_size > sizes[rank]:
                time.sleep(0.02)  # let the handler finish writing the dump
                stacks[rank] = path.read_text(errors="replace")[sizes.pop(rank):]
        time.sleep(0.01)
    return stacks
