"""Collectives built from P2P ring steps, so comm-alone can be measured on the ``p2p`` transport.

The ring strategies move their bytes with send/recv, not with the backend's collective,
and on some backends that is much faster for the same bytes (gloo at world 2: a P2P
exchange of a shard takes a fraction of ``all_gather``'s time). docs/validation.md asks
comm-alone to use the fastest allowed transport, so it is timed on these rings too.

Blocks are row ranges of a contiguous tensor (``block_bounds``: uneven allowed). Each
ring runs ``world - 1`` steps; at every step rank ``r`` sends to ``r + 1`` and receives
from ``r - 1``, each side deriving the same block index, so sends and receives pair up.
Scratch buffers are allocated once, when the ring is built.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from hocket.ops._pipeline import block_bounds


def _blocks(t: torch.Tensor, world: int) -> list[torch.Tensor]:
    return [t[lo:hi] for lo, hi in block_bounds(t.shape[0], world)]


def _step(transport, rank: int, world: int, send: torch.Tensor, recv: torch.Tensor) -> None:
    transport.exchange([(send, (rank + 1) % world)], [(recv, (rank - 1) % world)]).wait()


def ring_all_gather(transport, out: torch.Tensor, rank: int, world: int) -> Callable[[], None]:
    """In-place all-gather of the row blocks of ``out`` (rank ``r``'s block already holds its data)."""
    blocks = _blocks(out, world)

    def run() -> None:
        for s in range(world - 1):
            _step(transport, rank, world, blocks[(rank - s) % world], blocks[(rank - s - 1) % world])

    return run


def ring_reduce_scatter(transport, full: torch.Tensor, out: torch.Tensor, rank: int,
                        world: int) -> Callable[[], None]:
    """``out`` = sum over ranks of row block ``rank`` of ``full`` (``full`` is left unchanged)."""
    blocks = _blocks(full, world)
    rows = max(b.shape[0] for b in blocks)
    recv_buf = full.new_empty((rows, *full.shape[1:]))
    acc_buf = full.new_empty((rows, *full.shape[1:]))

    def run() -> None:
        send = blocks[(rank - 1) % world]
        for s in range(world - 1):
            b = (rank - s - 2) % world
            n = blocks[b].shape[0]
            _step(transport, rank, world, send, recv_buf[:n])
            target = out if s == world - 2 else acc_buf[:n]
            torch.add(recv_buf[:n], blocks[b], out=target)
            send = target

    return run


def ring_all_reduce(transport, tensor: torch.Tensor, rank: int, world: int) -> Callable[[], None]:
    """In-place sum over ranks: a reduce-scatter ring, then an all-gather ring of the sums."""
    own = _blocks(tensor, world)[rank]
    reduced = own.new_empty(own.shape)
    scatter = ring_reduce_scatter(transport, tensor, reduced, rank, world)
    gather = ring_all_gather(transport, tensor, rank, world)

    def run() -> None:
        scatter()
        own.copy_(reduced)
        gather()

    return run
