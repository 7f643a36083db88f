"""Chunk and group layouts of the multi-GPU tile-fused GEMMs (hocket.kernels.peer_schedule), on random shapes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hocket.kernels.peer_schedule import (
    block_groups,
    fits_block_groups,
    local_first_arrival,
    receive_order,
    ring_order,
    send_order,
    shard_chunk_offsets,
)
from hocket.kernels.schedule import cdiv


@given(world=st.integers(1, 9), data=st.data())
def test_send_and_receive_orders_pair_up(world, data):
    rank = data.draw(st.integers(0, world - 1))
    assert ring_order(rank, world)[0] == rank and sorted(ring_order(rank, world)) == list(range(world))
    # the step at which rank pushes to p is the step at which p receives from rank
    for step, peer in enumerate(send_order(rank, world), start=1):
        assert receive_order(peer, world)[step - 1] == rank


@given(rows=st.integers(1, 500), world=st.integers(1, 8), chunks=st.integers(1, 40))
def test_shard_chunks_cover_every_shard_without_empty_chunks(rows, world, chunks):
    offsets, per = shard_chunk_offsets(rows, world, chunks)
    assert per == min(chunks, rows)
    assert len(offsets) == world * per + 1 and offsets[0] == 0 and offsets[-1] == world * rows
    assert all(b > a for a, b in zip(offsets, offsets[1:]))
    for src in range(world):  # every shard boundary is a chunk boundary
        assert offsets[src * per] == src * rows


@given(world=st.integers(1, 8), per=st.integers(1, 6), data=st.data())
def test_local_first_arrival_is_own_shard_then_receive_order(world, per, data):
    rank = data.draw(st.integers(0, world - 1))
    arrival = local_first_arrival(rank, world, per)
    assert sorted(arrival) == list(range(world * per))
    sources = [arrival[i * per] // per for i in range(world)]
    assert sources == [rank, *receive_order(rank, world)]


@settings(max_examples=60)
@given(tiles_per_block=st.integers(1, 6), world=st.integers(1, 4), groups=st.integers(1, 8),
       n=st.integers(1, 700), data=st.data())
def test_block_groups_cover_each_block_in_ring_order(tiles_per_block, world, groups, n, data):
    block_m, block_n = 32, 64
    rows = tiles_per_block * block_m
    rank = data.draw(st.integers(0, world - 1))
    order = (*send_order(rank, world), rank)
    bg = block_groups(rows_per_block=rows, n=n, world=world, groups=groups, block_order=order, block_m=block_m,
                      block_n=block_n, group_m=2)
    per = bg.groups_per_block
    assert per == min(groups, tiles_per_block)
    columns = len(bg.table) // (world * tiles_per_block * cdiv(n, block_n))
    tiles = [bg.table[i:i + columns] for i in range(0, len(bg.table), columns)]
    seen = set()
    blocks_in_order = []
    for tile in tiles:
        pid_m, pid_n, group, count = tile[0], tile[1], tile[-2], tile[-1]
        lo, hi = bg.rows(group)
        assert lo <= pid_m * block_m < hi, "a tile lies in its group's rows"
        assert lo // rows == (hi - 1) // rows, "a group never straddles two destination blocks"
        assert count == sum(1 for t in tiles if t[-2] == group)
        seen.add((pid_m, pid_n))
        block = group // per
        if not blocks_in_order or blocks_in_order[-1] != block:
            blocks_in_order.append(block)
    assert blocks_in_order == list(order), "blocks are computed in ring order, own block last"
    assert len(seen) == len(tiles) == world * tiles_per_block * cdiv(n, block_n)
    for b in range(world):
        assert [bg.rows(g)[0] for g in bg.groups_of(b)][0] == b * rows


def test_block_groups_refuse_blocks_that_are_not_whole_tiles():
    assert not fits_block_groups(100, 64) and fits_block_groups(128, 64) and not fits_block_groups(32, 64)
    with pytest.raises(ValueError, match="rows_per_block=100 is not a multiple of block_m=64"):
        block_groups(rows_per_block=100, n=10, world=2, groups=2, block_order=(1, 0), block_m=64, block_n=64,
                     group_m=1)
    with pytest.raises(ValueError, match="block_order"):
        block_groups(rows_per_block=128, n=10, world=2, groups=2, block_order=(1, 1), block_m=64, block_n=64,
                     group_m=1)
