"""One executor per strategy; :func:`executor_for` picks one for (operator kind, strategy)."""

from __future__ import annotations

from collections.abc import Callable

from hocket.ops.lowering import bidir_ring, bulk, chunked, ring, sequential, substituted
from hocket.ops.planning import OP_NAMES, SUPPORTED

_MODULES = {
    "sequential": sequential, "bulk": bulk, "chunked": chunked, "ring": ring, "bidir_ring": bidir_ring,
    "substituted": substituted,
}


def executor_for(kind: str, strategy: str) -> Callable:
    module = _MODULES.get(strategy)
    fn = module.EXECUTORS.get(kind) if module is not None else None
    if fn is None:
        raise ValueError(f"plan strategy {strategy!r} is not available for {OP_NAMES[kind]} ({kind}); it supports "
                         f"{tuple(s for s in SUPPORTED[kind] if s in _MODULES)}")
    return fn
