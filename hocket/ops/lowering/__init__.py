"""One executor per strategy; :func:`executor_for` picks one for (operator kind, strategy).

Strategies that land later (``tile_fused`` on GPUs, other transports' executors) call
:func:`register_executor`, which also makes the planner see them (``planning.SUPPORTED``).
``chunked`` runs :mod:`hocket.ops.lowering.peer_chunked` (the stream-level pipeline, plus
``order="local_first"`` and the copy-engine pipeline). Where CUDA symmetric memory exists,
:func:`register_gpu_peers` adds ``tile_fused`` and registers the ``copy_engine``, ``peer_read``
and ``host_staged`` transports.
"""

from __future__ import annotations

from collections.abc import Callable

from hocket.ops import planning
from hocket.ops.lowering import bidir_ring, bulk, peer_chunked, ring, sequential, substituted
from hocket.ops.planning import OP_NAMES, SUPPORTED

_MODULES = {
    "sequential": sequential, "bulk": bulk, "chunked": peer_chunked, "ring": ring, "bidir_ring": bidir_ring,
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


def register_gpu_peers() -> bool:
    """Register the GPU-only strategies and transports (no-op without CUDA symmetric memory)."""
    from hocket.transport.symm_mem import symm_memory_available

    if not symm_memory_available():
        return False
    from hocket.ops.lowering import tile_fused
    from hocket.transport.copy_engine import CopyEngineTransport
    from hocket.transport.host_relay import HostStagedTransport
    from hocket.transport.registry import register_transport

    register_transport("copy_engine", CopyEngineTransport)
    register_transport("peer_read", CopyEngineTransport)  # collectives of its fallbacks; the GEMM reads peers itself
    register_transport("host_staged", HostStagedTransport)
    for kind, fn in tile_fused.EXECUTORS.items():
        register_executor(kind, "tile_fused", fn)
    return True


register_gpu_peers()
