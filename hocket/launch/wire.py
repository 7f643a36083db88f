"""Driver <-> rank messages: plain pickle over multiprocessing pipes.

Messages are pickled here with the standard pickler (tensors travel by value), not by
multiprocessing's ForkingPickler: torch registers shared-memory reductions there,
whose file descriptors die with a rank that exits right after replying.
"""

from __future__ import annotations

import pickle
import traceback
from dataclasses import dataclass
from typing import Any

from hocket.launch.errors import RankFailure

# A rank answers task 0 when its process group is up (spawned ranks: with fn's result).
READY_TASK = 0


@dataclass(frozen=True, kw_only=True)
class Task:
    task_id: int
    fn: bytes  # pickled by name, so a rank that cannot import it can still say which task failed
    args: bytes


@dataclass(frozen=True, kw_only=True)
class Reply:
    task_id: int
    ok: bool
    value: Any  # the result when ok, else a RankFailure


STOP = "stop"


def dumps(obj: object) -> bytes:
    return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)


def loads(data: bytes) -> Any:
    return pickle.loads(data)


def check_picklable_fn(fn: object) -> None:
    """A task function must travel by name: module-level, importable in a fresh process."""
    if not callable(fn):
        raise TypeError(f"fn={fn!r} is not callable; pass a module-level function")
    qualname = getattr(fn, "__qualname__", "")
    if "<lambda>" in qualname or "<locals>" in qualname:
        raise TypeError(
            f"fn={qualname} cannot be sent to rank processes: define it at module level "
            "(a lambda or nested function cannot be imported by name)"
        )
    try:
        pickle.dumps(fn, protocol=pickle.HIGHEST_PROTOCOL)
    except (pickle.PicklingError, TypeError, AttributeError) as exc:
        raise TypeError(
            f"fn={qualname or fn!r} cannot be pickled by name ({exc}); define it at module level"
        ) from exc


def dump_args(args: tuple) -> bytes:
    try:
        return dumps(args)
    except (pickle.PicklingError, TypeError, AttributeError) as exc:
        raise TypeError(f"args cannot be pickled for the rank processes ({exc}); pass plain data") from exc


def failure_from(rank: int, exc: BaseException, *, note: str = "") -> RankFailure:
    names = tuple(cls.__qualname__ for cls in type(exc).__mro__ if cls is not object)
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    message = str(exc) if not note else f"{note}: {exc}"
    return RankFailure(rank=rank, type_names=names, message=message, traceback_text=text)


def reply_bytes(rank: int, task_id: int, ok: bool, value: object) -> tuple[bool, bytes]:
    """Pickle a reply; a result that cannot be pickled becomes a failure of this rank.
    Returns (whether the reply reports success, its bytes)."""
    try:
        return ok, dumps(Reply(task_id=task_id, ok=ok, value=value))
    except (pickle.PicklingError, TypeError, AttributeError) as exc:
        failure = failure_from(rank, exc, note="the result could not be pickled for the driver")
        return False, dumps(Reply(task_id=task_id, ok=False, value=failure))
