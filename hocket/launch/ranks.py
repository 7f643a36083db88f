"""A set of started rank processes with their pipes, store and stack-dump files."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path

from hocket.launch.errors import RankError, RankTimeout
from hocket.launch.gather import Gathered, gather_replies
from hocket.launch.procs import dump_stacks, host_store, mp_context, stop_processes
from hocket.launch.rank_main import RankSetup


class Ranks:
    """``world_size`` processes started on ``target(conn, setup, *extra)``, rendezvousing on
    a store this driver serves. ``stop()`` leaves none behind; it is idempotent."""

    def __init__(
        self,
        target: Callable[..., None],
        *,
        world_size: int,
        backend: str,
        threads: int,
        collective_timeout_s: float,
        start_method: str,
        preload: tuple[str, ...] = (),
        extra_args: tuple = (),
    ) -> None:
        ctx = mp_context(start_method, preload=preload)
        self.store = host_store(collective_timeout_s)
        self.tmpdir = Path(tempfile.mkdtemp(prefix="hocket-ranks-"))
        self.stack_paths = {r: self.tmpdir / f"rank{r}.stack" for r in range(world_size)}
        self.conns: list[Connection] = []
        self.procs: list[BaseProcess] = []
        environ = dict(os.environ)
        cwd = os.getcwd()
        sys_path = tuple(sys.path)
        for rank in range(world_size):
            setup = RankSetup(
                rank=rank,
                world_size=world_size,
                backend=backend,
                store_host="127.0.0.1",
                store_port=self.store.port,
                store_prefix="",
                collective_timeout_s=collective_timeout_s,
                threads=threads,
                stack_path=str(self.stack_paths[rank]),
                environ=environ,
                cwd=cwd,
                sys_path=sys_path,
            )
            driver_end, rank_end = ctx.Pipe(duplex=True)
            proc = ctx.Process(
                target=target, args=(rank_end, setup, *extra_args), name=f"hocket-rank{rank}", daemon=True
            )
            proc.start()
            rank_end.close()
            self.conns.append(driver_end)
            self.procs.append(proc)

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs if p.pid is not None]

    def gather(self, *, task_id: int, timeout_s: float, error_grace_s: float) -> Gathered:
        return gather_replies(
            self.conns, self.procs, task_id=task_id, deadline=time.monotonic() + timeout_s, error_grace_s=error_grace_s
        )

    def raise_for(self, got: Gathered, *, what: str, timeout_s: float, note: str = "") -> None:
        """Turn an incomplete gather into RankError/RankTimeout (stacks of silent ranks included)."""
        if got.complete:
            return
        stacks = dump_stacks({r: self.procs[r] for r in got.unfinished}, self.stack_paths)
        if got.failures:
            raise RankError(what, failures=got.failures, unfinished=got.unfinished, stacks=stacks, note=note)
        raise RankTimeout(what, timeout_s=timeout_s, unfinished=got.unfinished, stacks=stacks, note=note)

    def stop(self, *, exit_wait_s: float = 0.0, grace_s: float = 2.0) -> None:
        stop_processes(self.procs, exit_wait_s=exit_wait_s, grace_s=grace_s)
        for conn in self.conns:
            conn.close()
        self.conns = []
        shutil.rmtree(self.tmpdir, ignore_errors=True)
