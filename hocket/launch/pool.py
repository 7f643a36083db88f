"""``RankPool``: persistent local rank processes with a process group, fed tasks by the driver."""

from __future__ import annotations

import re
import weakref
from collections.abc import Callable
from typing import Any

from hocket.env import wait_timeout_s
from hocket.launch.backend import choose_backend
from hocket.launch.errors import RankError, RankExpectationError, RankFailure, RankTimeout
from hocket.launch.gather import Gathered
from hocket.launch.procs import resolve_start_method
from hocket.launch.rank_main import barrier_task, pool_rank_main
from hocket.launch.ranks import Ranks
from hocket.launch.validate import check_seconds, check_threads, check_world_size
from hocket.launch.wire import READY_TASK, STOP, Task, check_picklable_fn, dump_args, dumps

_HEALTH_TIMEOUT_S = 10.0


class RankPool:
    """``world_size`` rank processes kept alive across tasks, each in the default process group.

    ``pool.run(fn, *args)`` calls ``fn(*args)`` on every rank (``fn`` a module-level
    function; ranks learn who they are from ``torch.distributed``) and returns the
    results by rank. A failure on any rank raises ``RankError`` listing each failing
    rank's exception and traceback; a task that outlives its bound raises ``RankTimeout``
    (with the stuck ranks' Python stacks) and the pool is restarted, so the next task
    gets healthy ranks. Ranks start in the background; the first ``run`` waits for them.

    ``timeout_s`` is the default bound of a task (default ``HOCKET_TIMEOUT_S``);
    ``collective_timeout_s`` the process group's own timeout (default: ``timeout_s``), so
    a collective that never completes eventually fails inside the rank as well.
    Ranks run with the driver's environment as it was when they (re)started.
    ``start_method``: "forkserver" (default: restarts in a fraction of a second; ``fn``
    must not live in ``__main__``) or "spawn"; ``preload``: modules the forkserver imports
    once so restarted ranks need not (only before the driver's first forkserver rank).
    Not thread-safe: one driver thread.
    """

    def __init__(
        self,
        world_size: int,
        *,
        backend: str = "gloo",
        threads_per_rank: int = 1,
        timeout_s: float | None = None,
        collective_timeout_s: float | None = None,
        error_grace_s: float = 3.0,
        start_timeout_s: float = 120.0,
        start_method: str = "forkserver",
        preload: tuple[str, ...] = (),
    ) -> None:
        self.world_size = check_world_size(world_size)
        self.backend = choose_backend(backend, local_world_size=self.world_size)
        self.threads_per_rank = check_threads(threads_per_rank)
        self.timeout_s = check_seconds("timeout_s", wait_timeout_s() if timeout_s is None else timeout_s)
        self.collective_timeout_s = check_seconds(
            "collective_timeout_s", self.timeout_s if collective_timeout_s is None else collective_timeout_s
        )
        self.error_grace_s = check_seconds("error_grace_s", error_grace_s)
        self.start_timeout_s = check_seconds("start_timeout_s", start_timeout_s)
        self.start_method = resolve_start_method(start_method)
        self.preload = tuple(preload)
        self.generation = 0  # how many times the ranks were (re)started
        self._ranks: Ranks | None = None
        self._finalizer: weakref.finalize | None = None
        self._ready = False
        self._closed = False
        self._next_task = READY_TASK + 1
        self._start()

    # -- lifecycle -------------------------------------------------------------------

    def _start(self) -> None:
        ranks = Ranks(
            pool_rank_main,
            world_size=self.world_size,
            backend=self.backend,
            threads=self.threads_per_rank,
            collective_timeout_s=self.collective_timeout_s,
            start_method=self.start_method,
            preload=self.preload,
        )
        self._ranks = ranks
        self._finalizer = weakref.finalize(self, ranks.stop)
        self._ready = False
        self.generation += 1

    def _kill(self) -> None:
        if self._finalizer is not None:
            self._finalizer()  # runs ranks.stop() once
        self._ranks = None
        self._finalizer = None
        self._ready = False

    def restart(self) -> None:
        """Kill every rank and start fresh ones (in the background)."""
        self._check_open()
        self._kill()
        self._start()

    def _ensure_ready(self) -> Ranks:
        if self._ranks is None:
            self._start()
        ranks = self._ranks
        if not self._ready:
            got = ranks.gather(task_id=READY_TASK, timeout_s=self.start_timeout_s, error_grace_s=self.error_grace_s)
            if not got.complete:
                try:
                    ranks.raise_for(got, what=f"starting {self!r}", timeout_s=self.start_timeout_s)
                finally:
                    self._kill()  # the next run starts again from scratch
            self._ready = True
        return ranks

    def close(self) -> None:
        """Stop every rank process (asked first, then terminated, then killed); idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._ranks is not None and self._ready:
            for conn in self._ranks.conns:
                try:
                    conn.send_bytes(dumps(STOP))
                except (BrokenPipeError, ConnectionResetError):
                    pass  # that rank is already gone; stop() reaps it
            self._ranks.stop(exit_wait_s=2.0)
        self._kill()

    def __enter__(self) -> RankPool:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"generation {self.generation}"
        return f"RankPool(world_size={self.world_size}, backend={self.backend!r}, {state})"

    @property
    def pids(self) -> list[int]:
        """Process ids of the current ranks (waits for them to be up)."""
        self._check_open()
        return self._ensure_ready().pids

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"{self!r} is closed; create a new RankPool")

    # -- tasks -----------------------------------------------------------------------

    def _execute(self, fn: Callable[..., Any], args: tuple, timeout_s: float) -> tuple[Ranks, Gathered]:
        resolve_start_method(self.start_method, fn)
        check_picklable_fn(fn)
        fn_bytes, args_bytes = dumps(fn), dump_args(args)
        self._check_open()
        ranks = self._ensure_ready()
        task_id = self._next_task
        self._next_task += 1
        message = dumps(Task(task_id=task_id, fn=fn_bytes, args=args_bytes))  # the same bytes to every rank
        finished = False
        try:
            for conn in ranks.conns:
                try:
                    conn.send_bytes(message)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # a dead rank: the gather reports it
            got = ranks.gather(task_id=task_id, timeout_s=timeout_s, error_grace_s=self.error_grace_s)
            finished = True
        finally:
            if not finished:  # interrupted mid-task (Ctrl-C, a test timeout): ranks are in an unknown state
                self.restart()
        return ranks, got

    def _healthy(self) -> bool:
        """After a failed task: do all ranks still meet in a collective? Restart if not."""
        timeout_s = min(self.timeout_s, _HEALTH_TIMEOUT_S)
        ranks, got = self._execute(barrier_task, (), timeout_s)
        if got.complete:
            return True
        self.restart()
        return False

    def run(self, fn: Callable[..., Any], *args: Any, timeout_s: float | None = None) -> list[Any]:
        """Call ``fn(*args)`` on every rank; return the results by rank.

        Raises ``RankError`` if any rank raised or died, ``RankTimeout`` if some rank had
        not answered after ``timeout_s`` (default: the pool's). Either way the pool is
        usable afterwards (restarted when a rank was stuck or dead).
        """
        bound_s = self.timeout_s if timeout_s is None else check_seconds("timeout_s", timeout_s)
        ranks, got = self._execute(fn, args, bound_s)
        if got.complete:
            return [got.results[r] for r in range(self.world_size)]
        what = f"{self!r}.run({getattr(fn, '__qualname__', fn)})"
        dead = any(not proc.is_alive() for proc in ranks.procs)
        if got.unfinished or dead:
            try:
                ranks.raise_for(got, what=what, timeout_s=bound_s, note="the pool was restarted")
            finally:
                self.restart()
        note = "" if self._healthy() else "the ranks no longer met in a barrier afterwards; the pool was restarted"
        raise RankError(what, failures=got.failures, note=note)

    def run_expect_error(
        self,
        fn: Callable[..., Any],
        *args: Any,
        exc_type: type[BaseException] | str = Exception,
        match: str | None = None,
        timeout_s: float | None = None,
    ) -> list[RankFailure]:
        """Run ``fn(*args)`` expecting *every* rank to raise ``exc_type`` (message matching
        the regex ``match``, if given); return the failures by rank.

        Raises ``RankExpectationError`` (an AssertionError) when some rank returned or
        raised something else; ``RankTimeout`` when ranks got stuck.
        """
        try:
            results = self.run(fn, *args, timeout_s=timeout_s)
        except RankTimeout:
            raise
        except RankError as err:
            expected = exc_type if isinstance(exc_type, str) else exc_type.__qualname__
            failures = err.failures
            problems = [f"rank {r} did not raise" for r in range(self.world_size) if r not in failures]
            for f in failures.values():
                if not f.is_instance(exc_type):
                    problems.append(f"rank {f.rank} raised {f.exc_type}, not {expected}: {f.message}")
                elif match is not None and re.search(match, f.message) is None:
                    problems.append(f"rank {f.rank}'s message does not match {match!r}: {f.message}")
            if problems:
                raise RankExpectationError("; ".join(problems) + f"\n\n{err}") from err
            return [failures[r] for r in range(self.world_size)]
        shown = repr(results)
        shown = shown if len(shown) < 300 else shown[:300] + "..."
        raise RankExpectationError(f"expected {exc_type!r} on every rank; every rank returned: {shown}")
