"""The shared chunk pipeline: piece cutting, issue order, in-flight depth, buffer-slot safety."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hocket.ops._pipeline import block_bounds, piece_bounds, run_pipeline
from hocket.ops.lowering.ring import BlockPieces, lanes_for
from hocket.ops.lowering.substituted import substituted_pieces


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 200), st.integers(1, 50))
def test_piece_bounds_cover_rows_evenly(total, parts):
    pieces = piece_bounds(total, parts)
    assert len(pieces) == min(parts, total)
    if pieces:
        assert [lo for lo, _ in pieces] == [0] + [hi for _, hi in pieces[:-1]]
        assert pieces[-1][1] == total
        sizes = [hi - lo for lo, hi in pieces]
        assert min(sizes) >= 1 and max(sizes) - min(sizes) <= 1
    blocks = block_bounds(total, parts)
    assert len(blocks) == parts and sum(hi - lo for lo, hi in blocks) == total


def test_piece_bounds_rejects_zero_parts():
    with pytest.raises(ValueError, match="parts=0"):
        piece_bounds(4, 0)


class FakePending:
    def __init__(self, log, i):
        self.log, self.i = log, i

    def wait(self):
        self.log.append(("wait", self.i))


@pytest.mark.parametrize("n, depth", [(1, 2), (5, 2), (4, 3), (3, 1)])
def test_pipeline_order_keeps_depth_and_slots_safe(n, depth):
    log, in_flight, slot_owner = [], set(), {}

    def produce(i):
        slot = i % depth
        assert slot_owner.get(slot) is None, f"slot {slot} still held by piece {slot_owner.get(slot)}"
        slot_owner[slot] = i
        log.append(("produce", i))

    def communicate(i):
        in_flight.add(i)
        assert len(in_flight) <= depth
        log.append(("comm", i))
        return FakePending(log, i)

    def consume(i):
        in_flight.discard(i)
        slot_owner[i % depth] = None
        log.append(("consume", i))

    run_pipeline(n, produce=produce, communicate=communicate, consume=consume, depth=depth)
    for i in range(n):
        assert log.index(("produce", i)) < log.index(("comm", i)) < log.index(("wait", i)) < log.index(("consume", i))
    if n > 1 and depth > 1:  # the transfer of piece 1 is issued before piece 0 is consumed
        assert log.index(("comm", 1)) < log.index(("consume", 0))


def test_lanes_and_block_pieces_cover_every_block():
    assert [(ln.direction, ln.lo, ln.hi) for ln in lanes_for(7, True)] == [(1, 0, 4), (-1, 4, 7)]
    pieces = BlockPieces([5, 0, 3], True, 2)
    for b, size in enumerate([5, 0, 3]):
        rows = sorted(r for d in (1, -1) for lo, hi in pieces(b, d) for r in range(lo, hi))
        assert rows == list(range(size))


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 60), st.integers(1, 9), st.integers(1, 8), st.integers(1, 6))
def test_substituted_pieces_are_scatterable_or_all_reduced(rows, cols, world, chunks):
    pieces = substituted_pieces(rows, cols, world, chunks)
    covered = [r for lo, hi, _ in pieces for r in range(lo, hi)]
    assert covered == list(range(rows))
    for lo, hi, scatterable in pieces:
        assert hi > lo
        if scatterable:
            assert ((hi - lo) * cols) % world == 0
