"""Entry points of rank processes (spawned once, or persistent in a RankPool).

A rank process ends with :func:`_exit_now` (``os._exit`` once its reply is sent, its process group
destroyed and its standard streams flushed), as a forked child of ``multiprocessing`` does anyway. A rank
started by the ``spawn`` method would otherwise run the interpreter's full finalisation, in which C++
static destructors of torch's libraries may meet a native thread still joinable and abort with
``terminate called without an active exception`` on stderr after a successful run (seen in about one run
in three of a two-rank operator job on gloo).
"""

from __future__ import annotations

import faulthandler
import os
import sys
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import IO, Any

import torch.distributed as dist

from hocket.launch.process_group import init_from_store
from hocket.launch.procs import STACK_SIGNAL
from hocket.launch.threads import set_rank_threads
from hocket.launch.wire import READY_TASK, STOP, Task, failure_from, loads, reply_bytes


@dataclass(frozen=True, kw_only=True)
class RankSetup:
    """Everything a rank process needs before it can run tasks."""

    rank: int
    world_size: int
    backend: str
    store_host: str
    store_port: int
    store_prefix: str
    collective_timeout_s: float
    threads: int
    stack_path: str
    environ: dict[str, str]
    cwd: str
    sys_path: tuple[str, ...]


def _prepare(setup: RankSetup) -> IO[str]:
    """Driver's environment, directory and import path (a forkserver rank would otherwise
    see the server's, frozen when it started), thread count, stack dumps on signal, then
    the process group."""
    os.environ.clear()
    os.environ.update(setup.environ)
    os.chdir(setup.cwd)
    sys.path[:] = list(setup.sys_path)
    set_rank_threads(setup.threads)
    stack_file = open(setup.stack_path, "w")  # noqa: SIM115 - open for the process's lifetime
    if STACK_SIGNAL is not None:
        faulthandler.register(STACK_SIGNAL, file=stack_file, all_threads=True)
        # A non-empty file tells the driver the signal is safe to send (it would kill us before).
        stack_file.write(f"rank {setup.rank} pid {os.getpid()}\n")
        stack_file.flush()
    init_from_store(
        rank=setup.rank,
        world_size=setup.world_size,
        store_host=setup.store_host,
        store_port=setup.store_port,
        backend=setup.backend,
        timeout_s=setup.collective_timeout_s,
        store_prefix=setup.store_prefix,
    )
    return stack_file


def _call(rank: int, task_id: int, fn: Any, args: tuple) -> tuple[bool, bytes]:
    """Run one task and pickle its reply. The process boundary: every failure of the
    caller's function is reported to the driver (with its traceback), never swallowed."""
    try:
        result = fn(*args)
    except Exception as exc:  # noqa: BLE001 - process boundary, re-raised in the driver
        return reply_bytes(rank, task_id, False, failure_from(rank, exc))
    return reply_bytes(rank, task_id, True, result)


def _fail(conn: Connection, rank: int, task_id: int, exc: Exception) -> None:
    conn.send_bytes(reply_bytes(rank, task_id, False, failure_from(rank, exc))[1])


def _exit_now(code: int = 0) -> None:
    """Leave the rank process without the interpreter's finalisation (see the module docstring)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass
    os._exit(code)


def _wait_for_driver(conn: Connection) -> None:
    """A failed rank stays up until the driver ends it: exiting would break its peers'
    connections and bury the real failure under their secondary errors."""
    try:
        conn.recv_bytes()
    except EOFError:
        pass


def spawn_rank_main(conn: Connection, setup: RankSetup, fn_bytes: bytes, args_bytes: bytes) -> None:
    """One-shot rank of ``spawn``: set up, run ``fn(rank, world_size, *args)``, reply, exit."""
    try:
        stack_file = _prepare(setup)
        fn = loads(fn_bytes)
        args = loads(args_bytes)
    except Exception as exc:  # noqa: BLE001 - process boundary, re-raised in the driver
        _fail(conn, setup.rank, READY_TASK, exc)
        _wait_for_driver(conn)
        _exit_now(1)
    ok, reply = _call(setup.rank, READY_TASK, fn, (setup.rank, setup.world_size, *args))
    conn.send_bytes(reply)
    if not ok:
        _wait_for_driver(conn)
    dist.destroy_process_group()
    stack_file.close()
    conn.close()
    _exit_now(0 if ok else 1)


def pool_rank_main(conn: Connection, setup: RankSetup) -> None:
    """Persistent rank of a ``RankPool``: answer task 0 when ready, then run tasks until told to stop."""
    try:
        stack_file = _prepare(setup)
    except Exception as exc:  # noqa: BLE001 - process boundary, re-raised in the driver
        _fail(conn, setup.rank, READY_TASK, exc)
        _wait_for_driver(conn)
        _exit_now(1)
    conn.send_bytes(reply_bytes(setup.rank, READY_TASK, True, os.getpid())[1])
    while True:
        try:
            msg = loads(conn.recv_bytes())
        except EOFError:  # the driver is gone
            break
        if msg == STOP:
            break
        if not isinstance(msg, Task):
            continue
        try:
            fn = loads(msg.fn)
            args = loads(msg.args)
        except Exception as exc:  # noqa: BLE001 - process boundary, re-raised in the driver
            _fail(conn, setup.rank, msg.task_id, exc)
            continue
        conn.send_bytes(_call(setup.rank, msg.task_id, fn, args)[1])
    dist.destroy_process_group()
    stack_file.close()
    conn.close()
    _exit_now(0)


def barrier_task() -> None:
    """Pool health check: every rank reaches the same collective."""
    dist.barrier()
