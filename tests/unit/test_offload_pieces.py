"""Row pieces of the offload operators: explicit split_sizes, the tile_fused ramp (small
piece at the exposed edge of each direction), even chunked pieces, narrow edge rows."""

import random

import pytest

from hocket.core.plan import Plan
from hocket.ops.offload_pieces import edge_rows, piece_offsets


def _sizes(offsets):
    return [b - a for a, b in zip(offsets, offsets[1:])]


@pytest.mark.parametrize("trial", range(10))
def test_tile_fused_ramp_small_piece_at_exposed_edge(trial):
    rng = random.Random()
    m = rng.randint(4, 80) * 128 + rng.choice([0, rng.randint(1, 127)])
    chunks = rng.randint(2, 12)
    plan = Plan(strategy="tile_fused", chunks=chunks, transport="host_staged")
    to_host = piece_offsets(plan, m, align=128, direction="to_host")
    from_host = piece_offsets(plan, m, align=128, direction="from_host")
    assert to_host[-1] == from_host[-1] == m and len(to_host) == len(from_host) == min(chunks, -(-m // 128)) + 1
    assert _sizes(to_host)[0] == 128, "the copy to host waits only for one row block"
    assert _sizes(from_host)[-1] <= 128, "the GEMM from host ends one row block after the last chunk lands"
    assert all(o % 128 == 0 for o in to_host[:-1] + from_host[:-1])
    assert edge_rows(to_host, direction="to_host") == 128
    assert edge_rows(from_host, direction="from_host") == _sizes(from_host)[-1]
    assert edge_rows(to_host, direction="to_host", pieces=0) == 0


def test_chunked_stays_even_and_clamps():
    offsets = piece_offsets(Plan(strategy="chunked", chunks=4, transport="host_staged"), 1024, align=128,
                            direction="to_host")
    assert _sizes(offsets) == [256] * 4
    clamped = piece_offsets(Plan(strategy="chunked", chunks=64, transport="host_staged"), 300, align=128,
                            direction="from_host")
    assert len(clamped) == 4 and clamped[-1] == 300


def test_split_sizes_used_as_given_and_checked():
    rng = random.Random()
    sizes = [128 * rng.randint(1, 5) for _ in range(rng.randint(2, 6))]
    plan = Plan(strategy="tile_fused", chunks=len(sizes), split_sizes=tuple(sizes), transport="host_staged")
    assert _sizes(piece_offsets(plan, sum(sizes), align=128, direction="to_host")) == sizes
    with pytest.raises(ValueError, match=rf"adds up to {sum(sizes)} rows but the strategy splits {sum(sizes) + 128}"):
        piece_offsets(plan, sum(sizes) + 128, align=128, direction="to_host")
    with pytest.raises(ValueError, match="chunks=3"):
        piece_offsets(Plan(strategy="tile_fused", chunks=3, split_sizes=(128, 128), transport="host_staged"), 256,
                      align=128, direction="to_host")
    with pytest.raises(ValueError, match="rows \\[100\\], not multiples of 128"):
        piece_offsets(Plan(strategy="tile_fused", chunks=2, split_sizes=(100, 156), transport="host_staged"), 256,
                      align=128, direction="from_host")
    with pytest.raises(ValueError, match="empty piece"):
        piece_offsets(Plan(strategy="chunked", chunks=3, split_sizes=(128, 0, 128), transport="host_staged"), 256,
                      align=128, direction="from_host")


def test_single_piece_has_no_narrow_edge_and_bad_direction_named():
    assert edge_rows((0, 512), direction="to_host") == 0
    assert edge_rows((0, 128, 512), direction="from_host", pieces=5) == 384
    with pytest.raises(ValueError, match="direction='sideways'"):
        piece_offsets(Plan(strategy="tile_fused", chunks=2), 256, align=128, direction="sideways")
