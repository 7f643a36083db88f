"""``spawn``: run a function once on ``world_size`` freshly started local ranks."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hocket.env import wait_timeout_s
from hocket.launch.backend import choose_backend
from hocket.launch.procs import resolve_start_method
from hocket.launch.rank_main import spawn_rank_main
from hocket.launch.ranks import Ranks
from hocket.launch.threads import default_threads_per_rank
from hocket.launch.validate import check_seconds, check_threads, check_world_size
from hocket.launch.wire import READY_TASK, check_picklable_fn, dump_args, dumps


def spawn(
    fn: Callable[..., Any],
    *,
    world_size: int,
    backend: str = "auto",
    args: tuple = (),
    timeout_s: float | None = None,
    threads_per_rank: int | None = None,
    start_method: str = "auto",
    error_grace_s: float = 3.0,
    preload: tuple[str, ...] = (),
) -> list[Any]:
    """Run ``fn(rank, world_size, *args)`` in ``world_size`` new local rank processes.

    Each rank joins a default process group (``backend``: "auto" = NCCL when every rank
    has a CUDA device of its own and there are >= 2, else gloo) rendezvousing on a
    localhost TCPStore served by this process, uses ``threads_per_rank`` compute threads
    (default: cores // world_size, at least 1) and a collective timeout of ``timeout_s``.
    Returns the ranks' (picklable) return values, by rank.

    If a rank raises or dies, the others get ``error_grace_s`` to finish, are then killed,
    and ``RankError`` names the rank with its traceback. If the whole run exceeds
    ``timeout_s`` (default ``HOCKET_TIMEOUT_S``), every rank is killed and ``RankTimeout``
    names the ranks that had not finished, with their Python stacks. No rank outlives
    this call. ``start_method``: "forkserver" forks ranks from a server that imported
    torch once (fast), "spawn" starts a fresh interpreter per rank (slow on few cores),
    "auto" (default) is forkserver unless ``fn`` is defined in ``__main__``; ``preload``
    names more modules for the forkserver to import once (before its first use only).
    """
    start_method = resolve_start_method(start_method, fn)
    check_picklable_fn(fn)
    world_size = check_world_size(world_size)
    if not isinstance(args, tuple):
        raise TypeError(f"args={args!r} must be a tuple of fn's extra positional arguments")
    timeout_s = check_seconds("timeout_s", wait_timeout_s() if timeout_s is None else timeout_s)
    threads = check_threads(default_threads_per_rank(world_size) if threads_per_rank is None else threads_per_rank)
    resolved = choose_backend(backend, local_world_size=world_size)
    ranks = Ranks(
        spawn_rank_main,
        world_size=world_size,
        backend=resolved,
        threads=threads,
        collective_timeout_s=timeout_s,
        start_method=start_method,
        preload=tuple(preload),
        extra_args=(dumps(fn), dump_args(args)),
    )
    got = None
    try:
        got = ranks.gather(task_id=READY_TASK, timeout_s=timeout_s, error_grace_s=error_grace_s)
        what = f"spawn({getattr(fn, '__qualname__', fn)}, world_size={world_size})"
        ranks.raise_for(got, what=what, timeout_s=timeout_s)
    finally:
        # Ranks that answered are tearing down their process group: let them exit.
        ranks.stop(exit_wait_s=5.0 if got is not None and got.complete else 0.0)
    return [got.results[r] for r in range(world_size)]
