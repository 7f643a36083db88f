"""Which protocol a ``chunked`` plan over ``transport="copy_engine"`` runs (plain Python; the
executors in :mod:`hocket.ops.lowering`, the cost model, the plan space, the memory estimate and the
capture rule all ask here).

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
nothing). ``Plan.protocol`` picks one where the call has it; None runs :data:`AUTO_ORDER`'s choice.
"""

from __future__ import annotations

PROTOCOL_KINDS = ("ag_mm", "mm_rs", "mm_ar")
"""operator kinds with copy-engine peer protocols."""
BARRIER_PROTOCOLS = ("pull", "put")
"""protocols whose calls a CUDA graph captures (inside ``hocket.ops.CapturedCall`` only, :mod:`hocket.plan.capture`)."""


def available(protocol: str, kind: str, chunks: int) -> bool:
    """Whether ``protocol`` exists for this operator kind and piece count (``push`` always does)."""
    if protocol == "pull":
        return kind == "ag_mm" or (kind == "mm_rs" and chunks == 1)
    if protocol == "put":
        return kind == "ag_mm" and chunks == 1
    return protocol == "push"


AUTO_ORDER = ("put", "pull", "push")
"""What a plan without a protocol runs: the first protocol of this list that exists for the call. Measured
on 2xH200 (steady state, ``bench_peer_protocol.py`` in benchmarks/results/h200x2/2026-12-01_probes.md): on ag_mm
8192x8192x7168 put 1.479 ms, push 1.492, pull 1.604 (its staging copy and the copy after the barrier cost more than
they save); on mm_rs pull beat push on every case (2.934 vs 3.033 ms on 8192x14336x8192, 0.251 vs 0.326 on
8192x2048x4096, where the push pipe's host work bounds the call)."""


def protocols_for(kind: str, chunks: int) -> tuple[str, ...]:
    """The protocols that exist for a ``chunked``/``copy_engine`` call of ``kind`` with ``chunks`` pieces,
    in :data:`AUTO_ORDER` (the first is what a plan without a protocol runs)."""
    _check_kind(kind)
    return tuple(p for p in AUTO_ORDER if available(p, kind, chunks))


def peer_protocol_for(kind: str, chunks: int, protocol: str | None = None) -> str:
    """``"pull"``, ``"put"`` or ``"push"`` for a ``chunked``/``copy_engine`` call of ``kind`` with ``chunks``
    pieces: ``protocol`` (a plan's ``Plan.protocol``) when given, else :data:`AUTO_ORDER`'s choice.
    A protocol the call does not have is an error naming the ones it has."""
    offered = protocols_for(kind, chunks)
    if protocol is None:
        return offered[0]
    if protocol not in offered:
        raise ValueError(f"Plan.protocol={protocol!r} does not exist for {kind} with chunks={chunks}; "
                         f"use one of {offered} or None")
    return protocol


def plan_protocol(kind: str, plan) -> str:
    """:func:`peer_protocol_for` of ``plan`` (a ``chunked``/``copy_engine`` Plan) on a site of ``kind``."""
    return peer_protocol_for(kind, plan.chunks, plan.protocol)


def _check_kind(kind: str) -> None:
    if kind not in PROTOCOL_KINDS:
        raise ValueError(f"kind={kind!r} has no copy-engine peer protocol; use one of {PROTOCOL_KINDS}")
