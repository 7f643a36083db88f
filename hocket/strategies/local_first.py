"""Own-data-first pipelines over a collective transport (``chunked`` with ``order="local_first"``):
what :mod:`hocket.ops.lowering.peer_chunked` runs, as stages. An all-gather issues every piece's
collective at once and multiplies this rank's shard while they travel; a reduce-scatter computes
the peers' blocks piece by piece, sends each, and multiplies its own block last. Over ``host_staged``
the pieces travel in one relay call (:func:`relay_pieces`; :func:`hocket.strategies.pieces.one_relay_call`).
``b`` is a :class:`hocket.cost.builder.StageBuilder`."""

from __future__ import annotations

import math
from dataclasses import replace

from hocket.core.sizes import HOST_STAGE_PIECE_BYTES
from hocket.cost import comm as comm_model
from hocket.cost.builder import StageBuilder
from hocket.strategies.pieces import one_relay_call, own_data_first


def runs_local_first(b: StageBuilder) -> bool:
    """``chunked`` with ``order="local_first"`` over a collective transport (not the copy-engine
    peer pipe) runs :mod:`hocket.ops.lowering.peer_chunked`'s own-data-first pipelines
    (:func:`hocket.strategies.pieces.own_data_first`)."""
    return own_data_first(b.plan, b.site.world)


def relay_pieces(b: StageBuilder, op: str, total: float, pieces: list[int]) -> list[tuple[comm_model.Transfer, tuple]]:
    """One relay call of ``op`` over ``total`` bytes whose messages end on the pieces' edges (rows
    ``pieces``), as (transfer, host issue items before and while it runs) per piece: the call's fixed
    part (its time at no bytes and its first message's device-to-host fill) goes to the first piece,
    the rest of its time to each piece by its share of the bytes; the host issues the call and the
    first piece's messages (ramped like one call's), then each later piece's whole messages and its
    own bookkeeping (``relay_split``)."""
    whole = b.collective(op, total)
    fixed = min(whole.ms, b.collective(op, 0.0).ms + whole.queued_saving_ms)
    rows_total = sum(pieces)
    down, up = comm_model.host_stage_directions(op, total, b.site.world)
    message_bytes = max(1.0, HOST_STAGE_PIECE_BYTES)
    call, message, split = "relay_call", "relay_message", "relay_split"
    out = []
    for i, rows in enumerate(pieces):
        share = rows / rows_total if rows_total else 1.0
        busier = max(down, up) * share
        if i == 0:
            count = sum(c for _, c in comm_model.relay_messages(busier, message_bytes))
            items = (((call, 1), (message, 1)), ((message, count - 1),) if count > 1 else ())
        else:
            count = max(1, math.ceil(busier / message_bytes - 1e-9))
            items = (((message, count), (split, 1)), ())
        # a piece's messages move no faster than one per RELAY_MESSAGE_FLOOR_US, however small
        moved = max((whole.ms - fixed) * share, count * comm_model.RELAY_MESSAGE_FLOOR_US / 1e3)
        piece = replace(whole, ms=(fixed if i == 0 else 0.0) + moved,
                        egress_bytes=whole.egress_bytes * share, queued_saving_ms=0.0, messages=count)
        out.append((piece, items))
    return out


def ag_local_first(b: StageBuilder, shard_rows: int, pieces: list[int]) -> None:
    """Every piece's all-gather in flight at once, this rank's whole shard multiplied while they
    travel, then each piece's peer rows as it lands. Over ``host_staged`` the pieces travel in one
    relay call (:func:`relay_pieces`), the own-shard GEMM launched before it (its host handshakes run
    beside that GEMM; the transfer waits only on an event recorded ahead of it); other transports
    issue the collectives first."""
    site = b.site
    p, total = site.world, site.comm_bytes
    if one_relay_call(b.plan):
        # hocket.ops.lowering.peer_chunked._local_first_gather_one_call: own GEMM, one call, then each
        # piece's peer rows once its last message landed (the gathered A is the call's output)
        b.add_gemm("gemm_own", shard_rows)
        moves = [b.add_transfer(f"all_gather[{i}]", piece, piece=i, op="all_gather", nbytes=total * rows / shard_rows,
                                streamed=True, issue=items)
                 for i, (rows, (piece, items)) in enumerate(zip(pieces, relay_pieces(b, "all_gather", total, pieces)))]
        for i, (rows, t) in enumerate(zip(pieces, moves)):  # launched once the whole call is issued
            b.add_gemm(f"gemm[{i}]", rows, deps=(t,), piece=i, count=p - 1)
        return
    moves = []
    for i, rows in enumerate(pieces):
        nbytes = total * rows / shard_rows
        moves.append(b.add_transfer(f"all_gather[{i}]", b.collective("all_gather", nbytes), piece=i, op="all_gather",
                                    nbytes=nbytes))
    b.add_gemm("gemm_own", shard_rows)
    for i, (rows, t) in enumerate(zip(pieces, moves)):
        g = b.add_gemm(f"gemm[{i}]", rows, deps=(t,), piece=i, count=p - 1)
        if len(pieces) > 1:
            b.add_memory(f"copy_gathered[{i}]", 2.0 * total * rows / shard_rows, deps=(g,), piece=i, op="copy")


def rs_own_block_last(b: StageBuilder, block_rows: int, pieces: list[int]) -> None:
    """Per piece, the peers' partials (``p - 1`` GEMMs), then its reduce-scatter; this rank's own
    block is multiplied last, beside the last transfers, and added at the end (the staging's own
    blocks stay zero from the buffers' creation: no fill kernel). Over ``host_staged`` all pieces
    travel in one relay call (:func:`relay_pieces`)."""
    site = b.site
    p, total = site.world, site.comm_bytes
    row_bytes = site.n * site.num_b * site.itemsize
    if one_relay_call(b.plan):
        # hocket.ops.lowering.peer_chunked._own_block_last_scatter_one_call: every GEMM launched, then
        # one call whose piece i leaves once piece i's partials are written; the call's final sum reads
        # the own partial and the peers' (one pass: own + received -> output)
        gemms = [b.add_gemm(f"gemm[{i}]", rows, piece=i, count=p - 1) for i, rows in enumerate(pieces)]
        own = b.add_gemm("gemm_own", block_rows, piece=len(pieces) - 1)
        moves = [b.add_transfer(f"reduce_scatter[{i}]", piece, deps=(gemms[i],), piece=i, op="reduce_scatter",
                                nbytes=total * rows / block_rows, streamed=True, issue=items)
                 for i, (rows, (piece, items)) in enumerate(zip(pieces, relay_pieces(b, "reduce_scatter", total,
                                                                                     pieces)))]
        b.add_memory("sum", (p + 1.0) * block_rows * row_bytes, deps=(own, *moves), piece=len(pieces) - 1)
        return
    moves: list[int] = []
    for i, rows in enumerate(pieces):
        g = b.add_gemm(f"gemm[{i}]", rows, piece=i, count=p - 1)
        nbytes = total * rows / block_rows
        moves.append(b.add_transfer(f"reduce_scatter[{i}]", b.collective("reduce_scatter", nbytes), deps=(g,),
                                    piece=i, op="reduce_scatter", nbytes=nbytes))
    own = b.add_gemm("gemm_own", block_rows, piece=len(pieces) - 1)
    b.add_memory("add_own", 3.0 * block_rows * row_bytes, deps=(own, *moves), piece=len(pieces) - 1)
