"""One executor per strategy; :func:`executor_for` picks one for (operator kind, strategy).

Strategies that land later (``tile_fused`` on GPUs, other transports' executors) call
:func:`register_executor`, which also makes the planner see them (``planning.SUPPORTED``).
"""

from __future__ import annotations

from collections.abc import Callable

from hocket.ops import planning
from hocket.ops.lowering import bidir_ring, bulk, chunked, ring, sequential, substituted
from hocket.ops.planning import OP_NAMES, SUPPORTED

_MODULES = {
    "sequential": sequential, "bulk": bulk, "chunked": chunked, "ring": ring, "bidir_ring": bidir_ring,
    "substituted": substituted,
}
_TABLE: dict[tuple[str, str], Callable] = {
    (kind, strategy): fn for strategy, module in _MODULES.items() for kind, fn in module.EXECUTORS.items()
}


def register_executor(kind: str, strategy: str, fn: Callable) -> None:
    """Add (or replace) the executor of ``strategy`` for operator ``kind`` (see ``runtime.bind_executors``)."""
    if kind not in SUPPORTED:
        raise ValueError(f"kind={kind!r} is not an operator hocket.ops runs; use one of {tuple(SUPPORTED)}")
    _TABLE[(kind, strategy)] = fn
    if strategy not in SUPPORTED[kind]:
        planning.SUPPORTED[kind] = (*SUPPORTED[kind], strategy)


def executor_for(kind: str, strategy: str) -> Callable:
    fn = _TABLE.get((kind, strategy))
    if fn is None:
        raise ValueError(f"plan strategy {strategy!r} is not available for {OP_NAMES[kind]} ({kind}); it supports "
                         f"{SUPPORTED[kind]}")
    return fn
