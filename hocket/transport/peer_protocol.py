"""Which protocol a ``chunked`` plan over ``transport="copy_engine"`` runs (plain Python; the
executors in :mod:`hocket.ops.lowering` and the cost model both ask here).

* ``pull`` (:mod:`hocket.ops.lowering.peer_pull`): every rank stages what its peers need in its
  own symmetric memory (double-buffered by call parity), the group meets at one device-side
  barrier, then each rank's copy stream copies the peers' data out of their memory; CUDA events
  order the GEMMs after the copies. Per call the host issues a handful of stream operations and
  no kernel of its own.
* ``push`` (:mod:`hocket.ops.lowering.peer_pipe`): every rank copies into the peers' memory and
  raises one flag per landed piece; the receiver's GEMMs wait on the flags (a bounded spin
  kernel). It needs no barrier between producing and sending, so pieces of a reduce-scatter
  travel while later pieces compute.

A pull reduce-scatter can only start after every rank has produced its partials (one barrier
per piece would cost more than the overlap gains), so ``mm_rs`` pulls one piece (``chunks=1``)
and pushes several; ``mm_ar`` always pushes (its one-piece form overlaps nothing).
``HOCKET_PEER_PROTOCOL`` (``hocket.env.peer_protocol``) forces one protocol where both exist.
"""

from __future__ import annotations

from hocket import env

PULL_KINDS = ("ag_mm", "mm_rs")


def pull_available(kind: str, chunks: int) -> bool:
    """Whether the pull protocol exists for this operator kind and piece count."""
    if kind == "ag_mm":
        return True
    if kind == "mm_rs":
        return chunks == 1
    return False


def peer_protocol_for(kind: str, chunks: int) -> str:
    """``"pull"`` or ``"push"`` for a ``chunked``/``copy_engine`` call of ``kind`` with ``chunks`` pieces."""
    if kind not in ("ag_mm", "mm_rs", "mm_ar"):
        raise ValueError(f"kind={kind!r} has no copy-engine peer protocol; use ag_mm, mm_rs or mm_ar")
    setting = env.peer_protocol()
    if setting == "push" or not pull_available(kind, chunks):
        return "push"
    return "pull"
