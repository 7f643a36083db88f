"""Chunk and group layouts of the tile-fused GEMMs when the rows belong to several ranks (plain Python).

* All-gather side (consumer): the gathered A holds ``world`` shards of ``R`` rows, rank-major;
  each shard travels in ``C`` chunks, so chunk ``src * C + c`` is piece ``c`` of rank ``src``'s
  shard. Every rank pushes its shard to ``rank + 1`` first, then ``rank + 2``, ..., so this
  rank receives from ``rank - 1`` first, then ``rank - 2``, ...; its own shard needs no
  transfer, so the arrival order is: own shard, ``rank - 1``, ``rank - 2``, ...
* Reduce-scatter side (producer): the ``[world * Rb, n]`` output holds one block of ``Rb`` rows
  per destination rank; each block is cut into ``C`` groups of whole row tiles, and the
  blocks are computed in ring order starting after this rank, so the peers' blocks (which
  must travel) finish first and this rank's own block (which stays) last.
"""

from __future__ import annotations

from dataclasses import dataclass

from hocket.kernels.schedule import cdiv, even_row_offsets, producer_schedule


def _positive(name: str, value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name}={value!r} must be a positive int")


def ring_order(rank: int, world: int) -> tuple[int, ...]:
    """``(rank, rank+1, ..., rank-1)`` modulo ``world``."""
    _positive("world", world)
    if not 0 <= rank < world:
        raise ValueError(f"rank={rank} must be in [0, world={world})")
    return tuple((rank + step) % world for step in range(world))


def shard_chunk_offsets(rows_per_shard: int, world: int, chunks: int) -> tuple[tuple[int, ...], int]:
    """Row offsets of the gathered A's chunks (``world * C`` of them) and ``C``, the chunks per
    shard (``chunks`` clamped to the shard's rows, so no chunk is empty)."""
    _positive("rows_per_shard", rows_per_shard)
    _positive("chunks", chunks)
    per = min(chunks, rows_per_shard)
    base, extra = divmod(rows_per_shard, per)
    offsets = [0]
    for _ in range(world):
        for c in range(per):
            offsets.append(offsets[-1] + base + (1 if c < extra else 0))
    return tuple(offsets), per


def send_order(rank: int, world: int) -> tuple[int, ...]:
    """Peers in the order this rank pushes to them: ``rank + 1, rank + 2, ...``."""
    return ring_order(rank, world)[1:]


def receive_order(rank: int, world: int) -> tuple[int, ...]:
    """Peers in the order their pushes reach this rank: ``rank - 1, rank - 2, ...``."""
    return tuple((rank - step) % world for step in range(1, world))


def local_first_arrival(rank: int, world: int, chunks_per_shard: int) -> tuple[int, ...]:
    """Chunk indices in arrival order: this rank's own shard, then the peers in receive order."""
    _positive("chunks_per_shard", chunks_per_shard)
    sources = (rank, *receive_order(rank, world))
    return tuple(src * chunks_per_shard + c for src in sources for c in range(chunks_per_shard))


@dataclass(frozen=True, kw_only=True)
class BlockGroups:
    """Producer groups of a block-per-rank output (see the module docstring).

    Group ``b * C + g`` is group ``g`` of destination block ``b``; ``table`` is the producer
    kernel's tile table (``hocket.kernels.schedule``'s columns per tile, pid_m first and the
    group second to last), blocks in ``block_order``.
    """

    rows_per_block: int
    groups_per_block: int
    block_order: tuple[int, ...]
    group_offsets: tuple[int, ...]
    """row offsets of every group in the whole output, by group index (``world * C + 1`` entries)."""
    table: tuple[int, ...]

    @property
    def num_groups(self) -> int:
        return len(self.group_offsets) - 1

    def rows(self, group: int) -> tuple[int, int]:
        return self.group_offsets[group], self.group_offsets[group + 1]

    def groups_of(self, block: int) -> range:
        return range(block * self.groups_per_block, (block + 1) * self.groups_per_block)


def fits_block_groups(rows_per_block: int, block_m: int) -> bool:
    """Whether every destination block is a whole number of row tiles (a group never straddles two)."""
    return rows_per_block >= block_m and rows_per_block % block_m == 0


def block_groups(*, rows_per_block: int, n: int, world: int, groups: int, block_order, block_m: int,
                 block_n: int, group_m: int) -> BlockGroups:
    """Groups of ``C = min(groups, row tiles per block)`` per block, tiles of the blocks in ``block_order``."""
    _positive("groups", groups)
    if not fits_block_groups(rows_per_block, block_m):
        raise ValueError(f"rows_per_block={rows_per_block} is not a multiple of block_m={block_m}: a producer "
                         f"group would straddle two destination ranks; use a config with a smaller block_m")
    order = tuple(int(b) for b in block_order)
    if sorted(order) != list(range(world)):
        raise ValueError(f"block_order={order!r} must be a permutation of 0..{world - 1}")
    per = min(groups, rows_per_block // block_m)
    inner = producer_schedule(m=rows_per_block, n=n, block_m=block_m, block_n=block_n, groups=per, group_m=group_m)
    tiles_per_block_m = cdiv(rows_per_block, block_m)
    offsets = [0]
    for b in range(world):
        start = b * rows_per_block
        offsets.extend(start + o for o in even_row_offsets(rows_per_block, per, align=block_m)[1:])
    inner_table = inner.table()
    columns = len(inner_table) // len(inner.tiles)  # pid_m first, group second to last
    table: list[int] = []
    for b in order:
        for t in range(len(inner.tiles)):
            tile = list(inner_table[t * columns:(t + 1) * columns])
            tile[0] += b * tiles_per_block_m
            tile[-2] += b * per
            table.extend(tile)
    return BlockGroups(rows_per_block=rows_per_block, groups_per_block=per, block_order=order,
                       group_offsets=tuple(offsets), table=tuple(table))
