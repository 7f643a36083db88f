"""Last-wave balancing with narrow tiles: the makespan model, the choice of narrow rows, and
that the schedules put narrow tiles where the model assumes (a prefix to host, a suffix from host)."""

import random

import pytest
import torch

from hocket.kernels.config import TileConfig
from hocket.kernels.schedule import (
    TAIL_MIN_GAIN,
    TILE_OVERHEAD_COLUMNS,
    cdiv,
    fixed_stride_makespan,
    narrow_tile_cost,
    ramp_row_offsets,
    tail_narrow_rows,
)
from hocket.kernels.workspace import ConsumerWorkspace, ProducerWorkspace
from hocket.ops.offload import fused_narrow_rows
from hocket.ops.offload_pieces import edge_rows

WIDE = TileConfig(block_m=128, block_n=256, block_k=64, num_warps=8, num_stages=4, narrow_block_n=128)


def _busiest(costs, programs):
    """Reference: program p runs tiles p, p + programs, ... of the table."""
    return max(sum(costs[p::programs]) for p in range(min(programs, len(costs))))


def _table_busiest(tiles, programs, cost):
    return _busiest([cost if tile[2] else 1.0 for tile in tiles], programs)


@pytest.mark.parametrize("trial", range(40))
def test_makespan_matches_a_simulated_table(trial):
    rng = random.Random()
    wide, narrow, programs = rng.randint(0, 400), rng.randint(0, 400), rng.randint(1, 140)
    cost = rng.uniform(0.05, 1.0)
    first = rng.random() < 0.5
    costs = [cost] * narrow + [1.0] * wide if first else [1.0] * wide + [cost] * narrow
    expected = _busiest(costs, programs) if costs else 0.0
    assert fixed_stride_makespan(wide=wide, narrow=narrow, programs=programs, narrow_cost=cost,
                                 narrow_first=first) == pytest.approx(expected)


def test_narrow_cost_rule():
    assert narrow_tile_cost(block_n=256, narrow_block_n=256) == 1.0
    assert narrow_tile_cost(block_n=256, narrow_block_n=128) == pytest.approx(
        (128 + TILE_OVERHEAD_COLUMNS) / (256 + TILE_OVERHEAD_COLUMNS))
    assert narrow_tile_cost(block_n=256, narrow_block_n=64) < narrow_tile_cost(block_n=256, narrow_block_n=128)
    with pytest.raises(ValueError, match="narrow_block_n=512 must be <= block_n=256"):
        narrow_tile_cost(block_n=256, narrow_block_n=512)


def test_the_h200_case_fills_the_last_wave():
    # 8192x1280 output, 128x256 tiles: 320 tiles on 130 programs take 3 full-tile times;
    # 12 row blocks of 128x128 tiles (120 of them) fill the third wave instead.
    rows = tail_narrow_rows(m=8192, n=1280, block_m=128, block_n=256, narrow_block_n=128, programs=130,
                            candidates=list(range(128, 8192, 128)), narrow_first=True)
    assert rows == 12 * 128
    cost = narrow_tile_cost(block_n=256, narrow_block_n=128)
    assert fixed_stride_makespan(wide=260, narrow=120, programs=130, narrow_cost=cost,
                                 narrow_first=True) == pytest.approx(2 + cost)


def test_full_waves_take_no_extra_narrow_rows():
    # 4096 rows of 6144 with 128x128 tiles... on 64 programs: 32 x 48 = 1536 tiles = 24 full waves
    for first in (True, False):
        assert tail_narrow_rows(m=4096, n=6144, block_m=128, block_n=128, narrow_block_n=64, programs=64,
                                candidates=[128, 256, 512, 1024], narrow_first=first) == 128


@pytest.mark.parametrize("trial", range(40))
def test_choice_is_the_best_candidate_or_the_fewest(trial):
    rng = random.Random()
    block_m, block_n = rng.choice([(64, 128), (128, 256), (128, 128)])
    narrow_n = rng.choice([w for w in (16, 32, 64, 128) if w < block_n])
    m, n = rng.randint(1, 64) * block_m, rng.randint(1, 4000)
    programs = rng.randint(2, 140)
    first = rng.random() < 0.5
    candidates = sorted(rng.sample(range(0, m + 1, block_m), rng.randint(1, min(8, m // block_m + 1))))
    cost = narrow_tile_cost(block_n=block_n, narrow_block_n=narrow_n)

    def span(rows):
        blocks = cdiv(rows, block_m)
        return fixed_stride_makespan(wide=(m // block_m - blocks) * cdiv(n, block_n), narrow=blocks * cdiv(n, narrow_n),
                                     programs=programs, narrow_cost=cost, narrow_first=first)

    chosen = tail_narrow_rows(m=m, n=n, block_m=block_m, block_n=block_n, narrow_block_n=narrow_n, programs=programs,
                              candidates=candidates, narrow_first=first)
    assert chosen in candidates
    best = min(span(r) for r in candidates)
    if best > (1 - TAIL_MIN_GAIN) * span(candidates[0]):
        assert chosen == candidates[0], "no gain worth more narrow tiles: the fewest rows"
    else:
        assert span(chosen) == pytest.approx(best)
        assert chosen == min(r for r in candidates if span(r) == pytest.approx(best))


def test_tail_rows_checked():
    kw = dict(m=1024, n=512, block_m=128, block_n=256, narrow_block_n=128, programs=8, narrow_first=True)
    with pytest.raises(ValueError, match="candidates is empty"):
        tail_narrow_rows(candidates=[], **kw)
    with pytest.raises(ValueError, match=r"candidates \[2048\] must be ints in \[0, m=1024\]"):
        tail_narrow_rows(candidates=[128, 2048], **kw)
    with pytest.raises(ValueError, match="programs=0 must be a positive int"):
        fixed_stride_makespan(wide=3, narrow=1, programs=0, narrow_cost=0.5, narrow_first=True)
    with pytest.raises(ValueError, match="narrow_cost=1.5"):
        fixed_stride_makespan(wide=3, narrow=1, programs=2, narrow_cost=1.5, narrow_first=True)


@pytest.mark.parametrize("direction", ["to_host", "from_host"])
@pytest.mark.parametrize("trial", range(6))
def test_workspace_tables_put_narrow_tiles_where_the_model_does(direction, trial):
    """The tile tables the kernels walk have the model's makespan: narrow tiles form a prefix
    (to host) or suffix (from host) of the table, a whole number of row blocks."""
    rng = random.Random()
    cfg = TileConfig(block_m=32, block_n=64, block_k=32, num_warps=4, num_stages=2, narrow_block_n=32)
    m, n, k = rng.randint(4, 40) * 32, rng.randint(1, 8) * 64, 32
    programs = rng.randint(2, 24)
    offsets = ramp_row_offsets(m, rng.randint(2, min(8, m // 32)), align=32, reverse=direction == "from_host")
    rows = fused_narrow_rows(offsets, direction=direction, n=n, config=cfg, programs=programs)
    edge = edge_rows(offsets, direction=direction)
    assert edge <= rows < m and rows % 32 == 0
    common = dict(m=m, n=n, k=k, dtype=torch.bfloat16, device="cpu", config=cfg, narrow_rows=rows,
                  num_programs=programs)
    ws = (ProducerWorkspace(group_offsets=offsets, **common) if direction == "to_host"
          else ConsumerWorkspace(chunk_offsets=offsets, **common))
    cost = narrow_tile_cost(block_n=64, narrow_block_n=32)
    blocks = rows // 32
    predicted = fixed_stride_makespan(wide=(m // 32 - blocks) * cdiv(n, 64), narrow=blocks * cdiv(n, 32),
                                      programs=programs, narrow_cost=cost, narrow_first=direction == "to_host")
    assert _table_busiest(ws.schedule.tiles, programs, cost) == pytest.approx(predicted)
    narrow_blocks = {t[0] for t in ws.schedule.tiles if t[2]}
    expected = set(range(blocks)) if direction == "to_host" else set(range(m // 32 - blocks, m // 32))
    assert narrow_blocks == expected
    off = fused_narrow_rows(offsets, direction=direction, n=n, config=cfg, programs=programs, balance_tail=False)
    assert off == edge


def test_no_narrow_tiles_when_narrow_is_full_width():
    cfg = TileConfig(block_m=128, block_n=256, narrow_block_n=256)
    offsets = ramp_row_offsets(8192, 8, align=128)
    assert fused_narrow_rows(offsets, direction="to_host", n=1280, config=cfg, programs=130) == 128
    assert fused_narrow_rows(offsets, direction="to_host", n=1280, config=WIDE, programs=130) == 12 * 128


def test_narrow_rows_are_computed_once_per_shape_class():
    """The operators ask on every call; the balanced search is milliseconds of Python, so a
    repeated question must be a cache hit with the same answer as the search itself."""
    offsets = tuple(ramp_row_offsets(8192, 8, align=128))
    kw = dict(direction="to_host", n=1280, config=WIDE, programs=130)
    first = fused_narrow_rows(offsets, **kw)
    hits = fused_narrow_rows.cache_info().hits
    assert fused_narrow_rows(offsets, **kw) == first == fused_narrow_rows.__wrapped__(offsets, **kw)
    assert fused_narrow_rows.cache_info().hits == hits + 1
