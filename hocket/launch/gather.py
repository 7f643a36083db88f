"""Wait for one reply per rank, watching for dead ranks, errors and the deadline."""

from __future__ import annotations

import pickle
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess

from hocket.launch.errors import RankFailure
from hocket.launch.wire import Reply, failure_from, loads


@dataclass(kw_only=True)
class Gathered:
    """Replies of one task: results and failures by rank; ranks that never answered."""

    results: dict[int, object] = field(default_factory=dict)
    failures: dict[int, RankFailure] = field(default_factory=dict)
    unfinished: tuple[int, ...] = ()

    @property
    def complete(self) -> bool:
        return not self.failures and not self.unfinished


def _died(rank: int, proc: BaseProcess) -> RankFailure:
    code = proc.exitcode
    how = f"was killed by signal {-code}" if code is not None and code < 0 else f"exited with code {code}"
    return RankFailure(
        rank=rank,
        type_names=("RankProcessDied",),
        message=f"rank process (pid {proc.pid}) {how} without answering",
        traceback_text="",
    )


def _read(rank: int, conn: Connection, task_id: int) -> Reply | RankFailure | None:
    """One message from a rank: its reply, a failure, or None for a stale message."""
    try:
        msg = loads(conn.recv_bytes())
    except (EOFError, OSError):
        return None
    except (pickle.UnpicklingError, AttributeError, ImportError, TypeError) as exc:
        return failure_from(rank, exc, note="the driver could not unpickle this rank's reply")
    if not isinstance(msg, Reply) or msg.task_id != task_id:
        return None
    return msg


def gather_replies(
    conns: list[Connection],
    procs: list[BaseProcess],
    *,
    task_id: int,
    deadline: float,
    error_grace_s: float,
) -> Gathered:
    """Collect task ``task_id``'s replies until all answered or ``deadline`` (monotonic s).

    Once a rank fails, the others get ``error_grace_s`` more to answer; ranks still
    silent after that are usually blocked in a collective the failed rank never joined.
    """
    out = Gathered()
    pending = set(range(len(conns)))
    grace_end: float | None = None
    while pending:
        limit = deadline if grace_end is None else min(deadline, grace_end)
        remaining = limit - time.monotonic()
        if remaining <= 0:
            break
        waitables = [conns[r] for r in pending] + [procs[r].sentinel for r in pending]
        wait(waitables, timeout=remaining)
        for rank in sorted(pending):
            if conns[rank].poll():
                got = _read(rank, conns[rank], task_id)
            elif not procs[rank].is_alive():
                got = _died(rank, procs[rank])
            else:
                continue
            if got is None:
                if procs[rank].is_alive():
                    continue
                got = _died(rank, procs[rank])
            pending.discard(rank)
            if isinstance(got, RankFailure):
                out.failures[rank] = got
            elif got.ok:
                out.results[rank] = got.value
            else:
                out.failures[rank] = got.value
        if out.failures and grace_end is None:
            grace_end = time.monotonic() + error_grace_s
    out.unfinished = tuple(sorted(pending))
    return out
