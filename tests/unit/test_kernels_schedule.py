"""Tile order (consumer) and group assignment (producer), checked on random shapes."""

import random

import pytest

from hocket.kernels.schedule import (
    SPLIT_COLUMNS,
    TABLE_COLUMNS,
    cdiv,
    consumer_schedule,
    even_row_offsets,
    offsets_from_sizes,
    producer_schedule,
    ramp_row_offsets,
    trapezoid_row_offsets,
)


def _random_offsets(rng: random.Random, m: int) -> tuple[int, ...]:
    chunks = rng.randint(1, min(m, 6))
    cuts = sorted(rng.sample(range(1, m), chunks - 1)) if chunks > 1 else []
    return (0, *cuts, m)


@pytest.mark.parametrize("trial", range(25))
def test_consumer_every_tile_once_and_arrival_respected(trial):
    rng = random.Random()
    m, n = rng.randint(1, 300), rng.randint(1, 300)
    bm, bn = rng.choice([16, 32, 64]), rng.choice([16, 32, 64])
    offsets = _random_offsets(rng, m)
    arrival = list(range(len(offsets) - 1))
    rng.shuffle(arrival)
    s = consumer_schedule(m=m, n=n, block_m=bm, block_n=bn, chunk_offsets=offsets, arrival=arrival,
                          group_m=rng.randint(1, 4))
    pairs = [(t[0], t[1]) for t in s.tiles]
    assert sorted(pairs) == [(i, j) for i in range(cdiv(m, bm)) for j in range(cdiv(n, bn))]
    steps = [s.ready_step(i) for i in range(len(s.tiles))]
    assert steps == sorted(steps), "tiles must be ordered by the arrival of their last chunk"
    for pid_m, _, narrow, lo, hi in s.tiles:
        first_row, last_row = pid_m * bm, min(m, (pid_m + 1) * bm) - 1
        assert narrow == 0
        assert offsets[lo] <= first_row < offsets[lo + 1]
        assert offsets[hi] <= last_row < offsets[hi + 1]
    assert len(s.table()) == TABLE_COLUMNS * len(s.tiles)


def test_consumer_first_arrived_chunk_first():
    # 4 shards of 64 rows, rank 2's own shard lands first, then ring order 3, 0, 1
    s = consumer_schedule(m=256, n=96, block_m=32, block_n=32, chunk_offsets=(0, 64, 128, 192, 256),
                          arrival=(2, 3, 0, 1), group_m=2)
    first = s.tiles[: 2 * 3]  # 2 row blocks x 3 column blocks of chunk 2
    assert {t[0] for t in first} == {4, 5}
    assert all(t[3] == t[4] == 2 for t in first)
    # grouped-M swizzle: both row blocks of the band share a column before moving on
    assert [(t[0], t[1]) for t in first] == [(4, 0), (5, 0), (4, 1), (5, 1), (4, 2), (5, 2)]


def test_consumer_straddling_row_block_waits_on_both_chunks():
    s = consumer_schedule(m=100, n=10, block_m=32, block_n=16, chunk_offsets=(0, 40, 100), arrival=(1, 0))
    spans = {t[0]: (t[3], t[4]) for t in s.tiles}
    assert spans[1] == (0, 1)  # rows 32..63 span both chunks
    assert spans[2] == (1, 1) and spans[3] == (1, 1)
    # chunk 1 lands first: row blocks wholly inside it come first, the straddler waits for chunk 0
    assert [t[0] for t in s.tiles] == [2, 3, 0, 1]


@pytest.mark.parametrize("trial", range(25))
def test_producer_groups_contiguous_and_complete(trial):
    rng = random.Random()
    m, n = rng.randint(1, 400), rng.randint(1, 300)
    bm, bn = rng.choice([16, 32, 64]), rng.choice([16, 32, 64])
    groups = rng.randint(1, cdiv(m, bm))
    s = producer_schedule(m=m, n=n, block_m=bm, block_n=bn, groups=groups, group_m=rng.randint(1, 4))
    pairs = [(t[0], t[1]) for t in s.tiles]
    assert sorted(pairs) == [(i, j) for i in range(cdiv(m, bm)) for j in range(cdiv(n, bn))]
    assert s.group_offsets[0] == 0 and s.group_offsets[-1] == m and s.num_groups == groups
    group_seq = [t[3] for t in s.tiles]
    assert group_seq == sorted(group_seq), "groups must complete in order"
    for pid_m, _, _, g, count in s.tiles:
        lo, hi = s.group_rows(g)
        assert lo <= pid_m * bm < hi, "a tile's rows lie inside its group's row range"
        assert lo % bm == 0
        assert count == group_seq.count(g)


def test_producer_rejects_more_groups_than_row_blocks():
    with pytest.raises(ValueError, match="groups=5.*row blocks"):
        producer_schedule(m=100, n=64, block_m=32, block_n=32, groups=5)


def test_even_row_offsets_aligned_and_uneven():
    offsets = even_row_offsets(1000, 3, align=128)
    assert offsets[0] == 0 and offsets[-1] == 1000
    assert all(o % 128 == 0 for o in offsets[:-1])
    sizes = [b - a for a, b in zip(offsets, offsets[1:])]
    assert max(sizes) - min(sizes) <= 128 + 1000 % 128
    with pytest.raises(ValueError, match="chunks=9"):
        even_row_offsets(1000, 9, align=128)


def test_bad_offsets_and_arrival_named():
    with pytest.raises(ValueError, match="chunk_offsets"):
        consumer_schedule(m=64, n=64, block_m=32, block_n=32, chunk_offsets=(0, 32, 60))
    with pytest.raises(ValueError, match="arrival"):
        consumer_schedule(m=64, n=64, block_m=32, block_n=32, chunk_offsets=(0, 32, 64), arrival=(0, 0))
    with pytest.raises(ValueError, match=r"sizes\[1\]"):
        offsets_from_sizes([3, 0])
    assert offsets_from_sizes([3, 5]) == (0, 3, 8)


def _covered(tiles, m, n, bm, bn, narrow_bn):
    """Every output element covered exactly once by full-width and narrow tiles."""
    hits = [[0] * n for _ in range(m)]
    for pid_m, pid_n, narrow, *_ in tiles:
        width = narrow_bn if narrow else bn
        for r in range(pid_m * bm, min(m, (pid_m + 1) * bm)):
            for c in range(pid_n * width, min(n, (pid_n + 1) * width)):
                hits[r][c] += 1
    return all(h == 1 for row in hits for h in row)


@pytest.mark.parametrize("trial", range(20))
def test_ramp_offsets_start_small_grow_and_cover(trial):
    rng = random.Random()
    align = rng.choice([1, 16, 128])
    m = rng.randint(1, 200) * align + rng.randint(0, align - 1)
    units = cdiv(m, align)
    chunks = rng.randint(1, min(units, 24))
    offsets = ramp_row_offsets(m, chunks, align=align)
    sizes = [b - a for a, b in zip(offsets, offsets[1:])]
    assert offsets[0] == 0 and offsets[-1] == m and len(sizes) == chunks and min(sizes) > 0
    assert all(o % align == 0 for o in offsets[:-1])
    if chunks > 1:
        assert sizes[0] == min(align, m)
        assert sizes[:-1] == sorted(sizes[:-1]), "pieces grow (the last takes the remainder)"
    mirrored = ramp_row_offsets(m, chunks, align=align, reverse=True)
    mirrored_sizes = [b - a for a, b in zip(mirrored, mirrored[1:])]
    units_forward = [cdiv(size, align) for size in sizes]
    assert [cdiv(size, align) for size in mirrored_sizes] == units_forward[::-1], "the same pieces, mirrored"
    assert mirrored[-1] == m and all(o % align == 0 for o in mirrored[:-1])


def test_ramp_offsets_few_pieces_for_many_rows():
    offsets = ramp_row_offsets(8192, 6, align=128)
    assert [b - a for a, b in zip(offsets, offsets[1:])] == [128, 256, 512, 1024, 2048, 4224]
    assert ramp_row_offsets(8192, 6, align=128, reverse=True)[-2] == 8192 - 128
    with pytest.raises(ValueError, match="chunks=65"):
        ramp_row_offsets(8192, 65, align=128)


@pytest.mark.parametrize("trial", range(15))
def test_producer_narrow_head_and_explicit_groups(trial):
    rng = random.Random()
    bm, bn = rng.choice([16, 32]), rng.choice([32, 64])
    narrow_bn = rng.choice([16, bn // 2])
    m, n = rng.randint(bm + 1, 300), rng.randint(1, 200)
    groups = rng.randint(1, cdiv(m, bm))
    offsets = ramp_row_offsets(m, groups, align=bm)
    narrow_rows = rng.randint(1, m)
    s = producer_schedule(m=m, n=n, block_m=bm, block_n=bn, group_offsets=offsets, group_m=rng.randint(1, 3),
                          narrow_block_n=narrow_bn, narrow_rows=narrow_rows)
    assert s.group_offsets == offsets and s.narrow_block_n == narrow_bn
    assert _covered(s.tiles, m, n, bm, bn, narrow_bn)
    for pid_m, _, narrow, g, count in s.tiles:
        assert narrow == int(pid_m * bm < narrow_rows)
        assert s.group_rows(g)[0] <= pid_m * bm < s.group_rows(g)[1]
        assert count == sum(1 for t in s.tiles if t[3] == g)
    assert [t[3] for t in s.tiles] == sorted(t[3] for t in s.tiles)


def test_producer_group_arguments_checked():
    with pytest.raises(ValueError, match="exactly one of groups"):
        producer_schedule(m=64, n=64, block_m=32, block_n=32, groups=2, group_offsets=(0, 32, 64))
    with pytest.raises(ValueError, match="multiple of block_m=32"):
        producer_schedule(m=64, n=64, block_m=32, block_n=32, group_offsets=(0, 16, 64))
    with pytest.raises(ValueError, match="narrow_block_n=48 must divide block_n=64"):
        producer_schedule(m=64, n=64, block_m=32, block_n=64, groups=2, narrow_block_n=48, narrow_rows=32)
    with pytest.raises(ValueError, match="narrow_rows=-1"):
        producer_schedule(m=64, n=64, block_m=32, block_n=64, groups=2, narrow_block_n=16, narrow_rows=-1)


@pytest.mark.parametrize("trial", range(15))
def test_consumer_narrow_tail_in_arrival_order(trial):
    rng = random.Random()
    bm, bn = 32, 64
    m, n = rng.randint(2 * bm, 400), rng.randint(1, 200)
    offsets = ramp_row_offsets(m, rng.randint(2, cdiv(m, bm)), align=bm, reverse=True)
    arrival = list(range(len(offsets) - 1))
    if rng.random() < 0.5:
        rng.shuffle(arrival)
    narrow_rows = rng.randint(1, m)
    s = consumer_schedule(m=m, n=n, block_m=bm, block_n=bn, chunk_offsets=offsets, arrival=arrival,
                          narrow_block_n=16, narrow_rows=narrow_rows)
    assert _covered(s.tiles, m, n, bm, bn, 16)
    steps = [s.ready_step(i) for i in range(len(s.tiles))]
    assert steps == sorted(steps)
    for i, (pid_m, _, narrow, _, hi) in enumerate(s.tiles):
        chunk = arrival[steps[i]]
        landing_after = sum(offsets[c + 1] - offsets[c] for c in arrival[steps[i]:])
        from_block = landing_after - max(0, pid_m * bm - offsets[chunk])  # from the block's first row on
        assert narrow == int(from_block <= narrow_rows), "narrow exactly where the rows land in the tail"
    if narrow_rows in [sum(offsets[c + 1] - offsets[c] for c in arrival[i:]) for i in range(len(arrival))]:
        for i, (_, _, narrow, _, _) in enumerate(s.tiles):  # a whole number of last pieces: whole pieces narrow
            tail = sum(offsets[c + 1] - offsets[c] for c in arrival[steps[i]:])
            assert narrow == int(tail <= narrow_rows)


@pytest.mark.parametrize("trial", range(30))
def test_trapezoid_pieces_small_at_both_ends(trial):
    rng = random.Random()
    align = rng.choice([1, 16, 128])
    units = rng.randint(3, 200)
    m = units * align - rng.randint(0, align - 1)  # the last block may be partial
    chunks = rng.randint(3, units)
    ratio = rng.uniform(1.2, 3.0)
    offsets = trapezoid_row_offsets(m, chunks, align=align, ratio=ratio)
    sizes = [b - a for a, b in zip(offsets, offsets[1:])]
    assert len(sizes) == chunks and offsets[0] == 0 and offsets[-1] == m and min(sizes) > 0
    assert all(o % align == 0 for o in offsets[:-1]), "inner boundaries on whole row blocks"
    assert sizes[0] == align, "one block first (the to-host fill / the GEMM's first wait)"
    if m % align == 0:
        assert sizes[-1] == align, "one block last (the from-host drain)"
    middle = max(sizes)
    assert sizes.index(middle) not in (0, chunks - 1) or middle == align, "the large pieces sit in the middle"


def test_trapezoid_rejects_bad_input_by_name():
    with pytest.raises(ValueError, match="chunks=9"):
        trapezoid_row_offsets(1024, 9, align=128)
    with pytest.raises(ValueError, match="ratio"):
        trapezoid_row_offsets(1024, 4, align=128, ratio=1.0)


def _split_units(s) -> dict[tuple, list[tuple]]:
    """Split-table rows of each distinct tile (pid_m, pid_n, narrow), in table order."""
    units: dict[tuple, list[tuple]] = {}
    for tile, row in zip(s.tiles, s.splits or [(0, 1, 0, 0)] * len(s.tiles)):
        units.setdefault(tile[:3], []).append(row)
    return units


@pytest.mark.parametrize("trial", range(15))
def test_producer_split_head_slices_each_tile_once(trial):
    """Tiles of the first ``split_rows`` rows become ``splits`` consecutive entries, one per K
    slice, sharing one counter slot and consecutive partial rows; the group still counts tiles."""
    rng = random.Random()
    bm, bn = rng.choice([16, 32]), rng.choice([32, 64])
    m, n = rng.randint(bm + 1, 300), rng.randint(1, 200)
    offsets = ramp_row_offsets(m, rng.randint(1, cdiv(m, bm)), align=bm)
    split_rows, splits = rng.randint(1, m), rng.randint(2, 5)
    s = producer_schedule(m=m, n=n, block_m=bm, block_n=bn, group_offsets=offsets, narrow_block_n=bn // 2,
                          narrow_rows=rng.randint(0, m), split_rows=split_rows, splits=splits)
    plain = producer_schedule(m=m, n=n, block_m=bm, block_n=bn, group_offsets=offsets, narrow_block_n=bn // 2,
                              narrow_rows=0)
    assert len(s.splits) == len(s.tiles) and len(s.split_table()) == len(s.tiles) * SPLIT_COLUMNS
    units = _split_units(s)
    slots, bases = set(), []
    for (pid_m, _, _), rows in units.items():
        if pid_m * bm < split_rows:
            assert [r[:2] for r in rows] == [(i, splits) for i in range(splits)]
            assert len({r[2] for r in rows}) == 1 and len({r[3] for r in rows}) == 1
            slots.add(rows[0][2])
            bases.append(rows[0][3])
        else:
            assert rows == [(0, 1, 0, 0)]
    assert slots == set(range(s.split_tiles)) and sorted(bases) == list(range(0, s.split_partials, splits))
    for i, (tile, row) in enumerate(zip(s.tiles, s.splits)):  # a tile's slices are consecutive entries
        if row[0] > 0:
            assert s.tiles[i - 1] == tile and s.splits[i - 1][0] == row[0] - 1
    for g in range(s.num_groups):  # the group counter counts tiles, not slices
        counts = {t[4] for t in s.tiles if t[3] == g}
        assert counts == {len({t[:3] for t in s.tiles if t[3] == g})}
    assert len(plain.tiles) == len(plain.tiles) and plain.splits is None and plain.split_table() is None


@pytest.mark.parametrize("trial", range(15))
def test_consumer_split_tail_in_arrival_order(trial):
    """The tiles of the last ``split_rows`` rows to arrive (counted like narrow rows) are sliced;
    slices keep their tile's place in arrival order."""
    rng = random.Random()
    bm, bn = 32, 64
    m, n = rng.randint(2 * bm, 400), rng.randint(1, 200)
    offsets = ramp_row_offsets(m, rng.randint(2, cdiv(m, bm)), align=bm, reverse=True)
    arrival = list(range(len(offsets) - 1))
    rng.shuffle(arrival)
    split_rows, splits = rng.randint(1, m), rng.randint(2, 4)
    s = consumer_schedule(m=m, n=n, block_m=bm, block_n=bn, chunk_offsets=offsets, arrival=arrival,
                          narrow_block_n=16, narrow_rows=split_rows, split_rows=split_rows, splits=splits)
    steps = [s.ready_step(i) for i in range(len(s.tiles))]
    assert steps == sorted(steps)
    for (pid_m, pid_n, narrow), rows in _split_units(s).items():
        assert len(rows) == (splits if narrow else 1), "split exactly where the tiles are narrow (same rule)"


def test_split_arguments_checked():
    with pytest.raises(ValueError, match="split_rows=-1"):
        producer_schedule(m=64, n=64, block_m=32, block_n=64, groups=2, split_rows=-1, splits=2)
    with pytest.raises(ValueError, match="splits=0"):
        consumer_schedule(m=64, n=64, block_m=32, block_n=64, chunk_offsets=(0, 64), split_rows=32, splits=0)
    s = producer_schedule(m=64, n=64, block_m=32, block_n=64, groups=2, split_rows=0, splits=4)
    assert s.splits is None and s.split_tiles == 0  # no split rows: nothing split, whatever splits says


def test_workspace_refuses_split_partials_beyond_32_bit_offsets():
    import torch

    from hocket.kernels import ProducerWorkspace, TileConfig

    cfg = TileConfig(block_m=128, block_n=256, block_k=64, group_m=8, num_warps=8, num_stages=4)
    with pytest.raises(ValueError, match="split_rows cut .* fp32 partials, above the kernels' 32-bit offsets"):
        ProducerWorkspace(m=40960, n=16384, k=4096, dtype=torch.bfloat16, device="cpu", config=cfg, groups=4,
                          split_rows=40960, splits=8)
    ws = ProducerWorkspace(m=1024, n=512, k=4096, dtype=torch.bfloat16, device="cpu", config=cfg, groups=4,
                           split_rows=128, splits=8)  # the edge row block: 2 tiles x 8 slices
    assert ws.partials.shape == (16, 128 * 256) and ws.split_counters.tolist() == [0, 0]
