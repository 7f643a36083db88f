"""Which protocol a ``chunked`` plan over ``transport="copy_engine"`` runs (plain Python; the
executors in :mod:`hocket.ops.lowering`, the cost model and the memory estimate all ask here).

* ``put`` (all-gather in one piece; :func:`hocket.ops.lowering.peer_pull.gather_matmul_put`): each
  rank copies its shard straight into the peers' double-buffered symmetric slots, then the group
  meets at one device-side barrier; CUDA events order the peers' GEMMs after it.
* ``pull`` (:mod:`hocket.ops.lowering.peer_pull`): every rank stages what its peers need in its
  own slot (double-buffered by call parity), the group meets at the barrier, then each rank's
  copy stream copies the peers' data out of their memory, an event per piece for the GEMMs.
* ``push`` (:mod:`hocket.ops.lowering.peer_pipe`): every rank copies into the peers' memory and
  raises one flag per landed piece; the receiver's GEMMs wait on the flags (a bounded spin
  kernel). It needs no barrier between producing and sending, so pieces of a reduce-scatter
  travel while later pieces compute.

The barrier protocols issue a handful of stream operations per call and no kernel of their
own. A pull reduce-scatter can only start after every rank has produced its partials (one
barrier per piece would cost more than the overlap gains), so ``mm_rs`` pulls one piece
(``chunks=1``) and pushes several; ``mm_ar`` always pushes (its one-piece form overlaps
nothing). ``HOCKET_PEER_PROTOCOL`` (``hocket.env.peer_protocol``) forces a protocol where the
call has it.
"""

from __future__ import annotations

from hocket import env


def available(protocol: str, kind: str, chunks: int) -> bool:
    """Whether ``protocol`` exists for this operator kind and piece count (``push`` always does)."""
    if protocol == "pull":
        return kind == "ag_mm" or (kind == "mm_rs" and chunks == 1)
    if protocol == "put":
        return kind == "ag_mm" and chunks == 1
    return protocol == "push"


AUTO_ORDER = ("put", "pull", "push")
"""What ``auto`` runs: the first protocol of this list that exists for the call. Measured on 2xH200
(``benchmarks/results/h200x2/run14``, steady state): on ag_mm 8192x8192x7168 put 1.481 ms, push 1.492,
pull 1.599 (its staging copy and the copy after the barrier cost more than they save); on mm_rs pull
beat push on every case (2.948 vs 3.002 ms on 8192x14336x8192, 0.336 vs 0.717 on 8192x2048x4096, where
the push pipe's host work bounds the call)."""


def peer_protocol_for(kind: str, chunks: int) -> str:
    """``"pull"``, ``"put"`` or ``"push"`` for a ``chunked``/``copy_engine`` call of ``kind`` with ``chunks``
    pieces: ``HOCKET_PEER_PROTOCOL`` where that protocol exists for the call, else ``auto``'s choice."""
    if kind not in ("ag_mm", "mm_rs", "mm_ar"):
        raise ValueError(f"kind={kind!r} has no copy-engine peer protocol; use ag_mm, mm_rs or mm_ar")
    setting = env.peer_protocol()
    if setting != "auto" and available(setting, kind, chunks):
        return setting
    return next(p for p in AUTO_ORDER if available(p, kind, chunks))
