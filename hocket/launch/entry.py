"""One entry for scripts that run a function on every rank: under ``torchrun`` on this process's rank, else on
self-spawned local ranks (the examples' ``main``)."""

from __future__ import annotations

from collections.abc import Callable

import torch.distributed as dist

from hocket.launch.process_group import init_torchrun
from hocket.launch.spawn import spawn
from hocket.launch.torchrun import detect_torchrun


def run_everywhere(fn: Callable[[int, int, dict], str], options: dict, *, world_size: int, backend: str = "gloo",
                   timeout_s: float = 300.0) -> str | None:
    """``fn(rank, world_size, options)`` on every rank; rank 0's result is printed and returned (None on the other
    ranks under torchrun). Under torchrun the process group is the one it describes and is destroyed afterwards;
    otherwise ``world_size`` local ranks are spawned on ``backend``, bounded by ``timeout_s``."""
    if detect_torchrun() is not None:
        ctx = init_torchrun()
        try:
            text = fn(ctx.rank, ctx.world_size, options)
        finally:
            dist.destroy_process_group()
        if ctx.rank != 0:
            return None
    else:
        text = spawn(fn, world_size=world_size, backend=backend, args=(options,), timeout_s=timeout_s)[0]
    print(text)
    return text
