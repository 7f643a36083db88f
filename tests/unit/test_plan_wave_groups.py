"""hocket.plan.wave_groups: producer flag groups cut on the persistent kernel's wave grid."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hocket.plan.wave_groups import blocks_done, wave_of, wave_row_offsets

GRID = dict(tiles_per_block=56, programs=130)  # 8192x8192x7168 in 128x128 tiles on an H200


def _ready_and_copy_ends(offsets, *, align, wave_ms, copy_ms_per_block, **grid):
    """Replay the schedule: when each group is ready and when its copy ends."""
    copy_end, rows = 0.0, []
    for a, b in zip(offsets, offsets[1:]):
        ready = wave_of(-(-b // align), **grid) * wave_ms
        start = max(ready, copy_end)
        copy_end = start + (-(-b // align) - a // align) * copy_ms_per_block
        rows.append((ready, start, copy_end))
    return rows


def test_the_first_group_is_what_the_first_wave_completes():
    offsets = wave_row_offsets(8192, align=128, wave_ms=0.057, copy_ms_per_block=0.036, **GRID)
    assert offsets[1] == 2 * 128  # 130 tiles of 56 per block: two whole blocks in wave 1
    assert blocks_done(1, blocks=64, **GRID) == 2 and wave_of(2, **GRID) == 1 and wave_of(3, **GRID) == 2


def test_when_the_gemm_outruns_the_copies_the_engine_never_waits_after_the_first_group():
    offsets = wave_row_offsets(8192, align=128, wave_ms=0.057, copy_ms_per_block=0.036, **GRID)
    timeline = _ready_and_copy_ends(offsets, align=128, wave_ms=0.057, copy_ms_per_block=0.036, **GRID)
    for (_, _, prev_end), (ready, start, _) in zip(timeline, timeline[1:]):
        assert ready <= prev_end + 1e-9 and start == pytest.approx(prev_end)
    sizes = [b - a for a, b in zip(offsets, offsets[1:])]
    assert sizes[-1] > sizes[0] and len(sizes) < 16  # groups grow with the GEMM's lead


@settings(max_examples=200, deadline=None)
@given(m=st.integers(1, 20000), align=st.sampled_from([64, 128]), tiles=st.integers(1, 200),
       programs=st.integers(1, 200), wave=st.floats(0.001, 1.0), copy=st.floats(0.001, 1.0),
       cap=st.integers(1, 64))
def test_offsets_cover_the_rows_on_block_boundaries(m, align, tiles, programs, wave, copy, cap):
    offsets = wave_row_offsets(m, align=align, tiles_per_block=tiles, programs=programs, wave_ms=wave,
                               copy_ms_per_block=copy, max_groups=cap)
    assert offsets[0] == 0 and offsets[-1] == m and len(offsets) - 1 <= cap
    assert all(a < b for a, b in zip(offsets, offsets[1:]))
    assert all(o % align == 0 for o in offsets[1:-1])


@pytest.mark.parametrize("name,value", [("m", 0), ("programs", -1), ("wave_ms", 0.0), ("copy_ms_per_block", -2.0)])
def test_bad_arguments_are_named(name, value):
    kwargs = dict(m=1024, align=128, wave_ms=0.05, copy_ms_per_block=0.03, **GRID)
    kwargs[name] = value
    with pytest.raises(ValueError, match=name):
        wave_row_offsets(**kwargs)
