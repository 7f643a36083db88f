"""How a strategy cuts and orders its pieces: one description that the executors
(:mod:`hocket.ops.lowering`) and the cost builders (this package) both call, so a prediction
prices the rows, calls and order its run issues.

* :func:`pipeline_pieces`: the row pieces of a ``chunked`` pipeline over a collective transport
  (``Plan.split_sizes`` or even; :func:`hocket.core.pieces.piece_sizes`);
* :func:`own_data_first_pieces`: those of ``order="local_first"`` (own data first), capped at
  :data:`PEER_MAX_PIECES`;
* :func:`peer_pipe_pieces`: those of the copy-engine peer protocols, even, capped the same way;
* :func:`one_relay_call`: whether an own-data-first pipeline moves every piece in one relay call;
* :func:`own_block_split`: the pull reduce-scatter's own block cut into plain and epilogue-fused rows.
"""

from __future__ import annotations

from hocket.core.pieces import piece_sizes, split_even
from hocket.core.plan import Plan
from hocket.cost.epilogue import DEFAULT_GBPS, DEFAULT_TFLOPS, epilogue_split

PEER_MAX_PIECES = 256
"""Pieces one rank moves to or from one peer in one call: the peer pipe's flags per source
(``hocket.ops.lowering.peer_pipe.FLAGS_PER_SOURCE``) and the pull pipe's events per peer."""


def pipeline_pieces(rows: int, plan: Plan) -> tuple[int, ...]:
    """Row counts of a ``chunked`` (or ``bulk``: one piece) pipeline's pieces over ``rows``."""
    return piece_sizes(rows, plan)


def own_data_first_pieces(rows: int, plan: Plan) -> tuple[int, ...]:
    """Row counts of an own-data-first pipeline's pieces (``order="local_first"``): ``plan.split_sizes``
    when given, else ``min(plan.chunks, PEER_MAX_PIECES)`` even pieces; none for no rows."""
    if rows <= 0:
        return ()
    if plan.split_sizes is not None:
        return piece_sizes(rows, plan)
    return split_even(rows, min(plan.chunks, PEER_MAX_PIECES))


def peer_pipe_pieces(rows: int, chunks: int) -> tuple[int, ...]:
    """Row counts of a copy-engine protocol's pieces of one source's (or destination's) ``rows``: even,
    at most ``PEER_MAX_PIECES`` and at most one per row; none for no rows."""
    if rows <= 0:
        return ()
    return split_even(rows, min(chunks, PEER_MAX_PIECES, rows))


def bounds(sizes) -> list[tuple[int, int]]:
    """``(lo, hi)`` row ranges of consecutive pieces of ``sizes`` rows."""
    out, start = [], 0
    for size in sizes:
        out.append((start, start + size))
        start += size
    return out


def one_relay_call(plan: Plan) -> bool:
    """Whether an own-data-first pipeline (``order="local_first"``) moves all its pieces in one call of
    the transport: over ``host_staged`` it does (one relay call whose messages end on the pieces' edges,
    so the host pays one call's cost however many pieces there are); other transports issue one
    collective per piece."""
    return plan.transport == "host_staged"


def own_block_split(rows: int, k: int, cols: int, *, sources: int, itemsize: int, tflops: float | None,
                    gbps: float | None, sms: int | None) -> tuple[int, int]:
    """``(plain, fused)`` rows of this rank's own block in a pull matmul + reduce-scatter
    (:func:`hocket.cost.epilogue.epilogue_split`): ``tflops`` the device's dense peak for the dtype,
    ``gbps`` the link's rate per direction (None: :data:`~hocket.cost.epilogue.DEFAULT_TFLOPS` /
    :data:`~hocket.cost.epilogue.DEFAULT_GBPS`), ``sms`` the device's SM count."""
    return epilogue_split(rows, k, cols, sources=sources, itemsize=itemsize, tflops=tflops or DEFAULT_TFLOPS,
                          gbps=gbps or DEFAULT_GBPS, sms=sms)


def peer_pipe(plan: Plan, world: int) -> bool:
    """Whether a ``chunked`` call runs the copy-engine peer protocols (:mod:`hocket.core.peer_protocol`):
    over ``copy_engine`` on several ranks; elsewhere it runs the collective pipeline."""
    return plan.transport == "copy_engine" and world > 1


def own_data_first(plan: Plan, world: int) -> bool:
    """Whether a ``chunked`` call runs an own-data-first pipeline: ``order="local_first"`` on several
    ranks, not over ``copy_engine`` (whose peer protocols multiply the own data beside the transfer
    whatever the order)."""
    return plan.order == "local_first" and world > 1 and plan.transport != "copy_engine"
