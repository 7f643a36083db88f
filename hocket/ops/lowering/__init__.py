"""One executor per (strategy, operator kind), registered against the strategy's spec
(:mod:`hocket.ops.executors`, :mod:`hocket.strategies`); :func:`executor_for` picks one.

Each lowering module registers its own executors when imported (``chunked`` runs
:mod:`hocket.ops.lowering.peer_chunked`: the stream-level pipeline, plus ``order="local_first"`` and
the copy-engine protocols). Where CUDA symmetric memory exists, :func:`register_gpu_peers` registers
``tile_fused``'s executors and the ``copy_engine``, ``peer_read`` and ``host_staged`` transports.
"""

from __future__ import annotations

from hocket.ops.executors import executor_for, register_executor, register_executors, supported
from hocket.ops.lowering import bidir_ring, bulk, peer_chunked, ring, sequential, substituted  # noqa: F401

__all__ = ["executor_for", "register_executor", "register_executors", "register_gpu_peers", "supported"]


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
    tile_fused.register()
    return True


register_gpu_peers()
