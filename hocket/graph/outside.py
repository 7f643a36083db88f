"""Run real distributed work from inside a compiler pass: on a clean thread, with a bound.

hocket's pass runs inside AOTAutograd (``aot_eager``'s graph compiler, Inductor's
post-grad passes) with the compiler's thread-local state switched on: fake tensor mode,
proxy modes and the Python dispatcher. torch.distributed work issued under that state
deadlocked: on gloo world 2, ``hocket.compile(autotune=True)`` hung in about 3 of 5
compiles (both ranks inside the same barrier or broadcast, one still issuing it), and a
plain loop of barriers and all-gathers inside an ``aot_autograd`` graph compiler hung in
2 of 2 runs, while the same loop ran in a plain Dynamo backend, on a fresh thread, or
under ``torch._C._DisablePythonDispatcher()`` (the Python dispatcher is the part that
matters; torch 2.13, CPU).

:func:`run_outside_compiler` runs ``fn`` on a fresh thread (default thread-local state;
the caller's CUDA device) and waits at most ``timeout_s``. Past that it raises
:class:`OutsideTimeout` naming what was running and on which rank: a stuck collective
becomes a clear error on the compiling rank, never a silent hang. The stuck thread is a
daemon, so the process can still exit.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

import torch

T = TypeVar("T")


class OutsideTimeout(RuntimeError):
    """Work run from a compiler pass did not finish within its bound."""


def global_rank() -> int | None:
    import torch.distributed as dist

    return dist.get_rank() if dist.is_available() and dist.is_initialized() else None


def _cuda_device() -> int | None:
    return torch.cuda.current_device() if torch.cuda.is_available() and torch.cuda.is_initialized() else None


def run_outside_compiler(fn: Callable[[], T], *, what: str, timeout_s: float) -> T:
    """``fn()`` on a fresh thread, its result or its exception here; at most ``timeout_s`` seconds."""
    if not callable(fn):
        raise TypeError(f"fn={fn!r} must be a callable taking no arguments")
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not timeout_s > 0:
        raise ValueError(f"timeout_s={timeout_s!r} must be a number of seconds > 0 (HOCKET_TIMEOUT_S)")
    device = _cuda_device()
    outcome: dict[str, object] = {}

    def body() -> None:
        try:
            if device is not None:
                torch.cuda.set_device(device)
            outcome["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread and re-raised there
            outcome["error"] = exc

    worker = threading.Thread(target=body, name=f"hocket-outside-compiler-{what[:40]}", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        rank = global_rank()
        where = f"rank {rank}" if rank is not None else "this process"
        raise OutsideTimeout(f"{what} did not finish within {timeout_s:g} s on {where} (HOCKET_TIMEOUT_S): another "
                             "rank may have stopped, crashed or compiled a different graph")
    if "error" in outcome:
        raise outcome["error"]  # type: ignore[misc]
    return outcome["value"]  # type: ignore[return-value]
