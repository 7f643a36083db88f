"""Uneven ``split_sizes`` in the candidate space: shapes, where they are enumerated, pruning reasons."""

from __future__ import annotations

import random

import pytest

from hocket.core.pieces import piece_ranges, piece_sizes, ramp_sizes, split_pattern
from hocket.core.plan import Plan
from hocket.core.site import Site
from hocket.plan.bucket import fit_plan
from hocket.plan.search import SearchConfig, price_space
from hocket.plan.space import GroupFacts, SpaceConfig, enumerate_plans, split_rows

FACTS = GroupFacts(transports={"collective", "p2p", "copy_engine"}, sm_count=132, memory_bytes=80 << 30)


@pytest.mark.parametrize("pattern", ["fill", "drain", "fill_drain"])
def test_ramp_shapes_cover_the_rows(pattern):
    rows, chunks = random.randrange(64, 4096), random.randint(3, 16)
    sizes = ramp_sizes(rows, chunks, pattern, align=1)
    assert sizes is not None and sum(sizes) == rows and len(sizes) == chunks
    assert split_pattern(sizes) == pattern
    small = min(sizes)
    assert (sizes[0] == small) == (pattern != "drain") and (sizes[-1] == small) == (pattern != "fill")
    assert ramp_sizes(rows, 2, "fill_drain") is None and ramp_sizes(8, 4, "fill", align=8) is None


def test_split_sizes_enumerated_for_chunked_only_with_reasons():
    site = Site(kind="ag_mm", m=8192, k=4096, n=4096, world=8)
    space = enumerate_plans(site, FACTS)
    uneven = [p for p in space.candidates if p.split_sizes is not None]
    assert uneven and all(p.strategy == "chunked" and p.order == "natural" for p in uneven)
    rows = split_rows(site, "chunked")
    assert all(sum(p.split_sizes) == rows and len(p.split_sizes) == p.chunks <= 16 for p in uneven)
    assert {split_pattern(p.split_sizes) for p in uneven} == {"fill", "drain", "fill_drain"}
    reasons = [r.reason for r in space.pruned if r.plan.split_sizes is not None]
    assert any("ring executor cuts its pieces evenly" in r for r in reasons)
    assert any("tile_fused executor cuts its pieces evenly" in r for r in reasons)
    assert any("split_max_chunks=16" in r for r in reasons)
    assert any("'fill_drain' does not fit chunks=2" in r for r in reasons)
    # bounded: at most 3 shapes per even chunked candidate with natural order and <= 16 chunks
    even = [p for p in space.candidates if p.strategy == "chunked" and p.split_sizes is None
            and p.order == "natural" and p.chunks <= 16]
    assert len(uneven) <= 3 * len(even)
    assert not [p for p in enumerate_plans(site, FACTS, SpaceConfig(split_patterns=())).candidates
                if p.split_sizes is not None]


def test_small_piece_under_min_gemm_rows_is_pruned():
    site = Site(kind="mm_ar", m=256, k=512, n=512, world=2)
    space = enumerate_plans(site, FACTS, SpaceConfig(min_gemm_rows=32))
    assert all(min(p.split_sizes) >= 32 for p in space.candidates if p.split_sizes is not None)
    assert any("small piece's GEMM has" in r.reason for r in space.pruned)


def test_search_prices_uneven_plans_as_their_own_family():
    site = Site(kind="mm_rs", m=4096, k=2048, n=2048, world=4)
    space = enumerate_plans(site, FACTS)
    fill = next(p for p in space.candidates if split_pattern(p.split_sizes) == "fill")

    def cost(s, plan):  # the fill plan is the only clear win
        return 5.0 if plan == fill else 10.0

    result = price_space(space, cost, config=SearchConfig(uncertainty=None))
    assert result.chosen == fill


def test_piece_sizes_and_bucket_fit():
    plan = Plan(strategy="chunked", chunks=3, split_sizes=(8, 28, 28))
    assert piece_ranges(64, plan) == [(0, 8), (8, 36), (36, 64)]
    with pytest.raises(ValueError, match="adds up to 64"):
        piece_sizes(60, plan)
    with pytest.raises(ValueError, match="chunks=2"):
        piece_sizes(64, plan.with_(chunks=2))
    site = Site(kind="ag_mm", m=1000, k=64, n=64, world=2)  # splits 500 shard rows
    fitted = fit_plan(plan, site)
    assert sum(fitted.split_sizes) == 500 and fitted.chunks == len(fitted.split_sizes)
    assert fitted.split_sizes[0] < fitted.split_sizes[1]


def test_uneven_pieces_count_their_extra_staging_memory():
    from hocket.plan.memory import estimate_extra_memory

    site = Site(kind="ag_mm", m=8192, k=4096, n=1024, world=4)
    even = Plan(strategy="chunked", chunks=4)
    rows = split_rows(site, "chunked")
    fill = even.with_(split_sizes=ramp_sizes(rows, 4, "fill"))
    full = site.m * site.k * site.itemsize
    sizes = fill.split_sizes
    expected = 2 * -(-full * max(sizes) // rows) + 2 * -(-full * min(sizes) // rows)
    assert estimate_extra_memory(site, fill).workspace_bytes == expected
    assert estimate_extra_memory(site, fill).workspace_bytes > estimate_extra_memory(site, even).workspace_bytes


@pytest.mark.parametrize("sizes,pattern", [
    ((128, 256, 256, 512, 768, 1280, 1920, 3072), "ramp"),   # hocket.plan.offload's ramp to host
    ((3072, 1920, 1280, 768, 512, 256, 256, 128), "ramp"),   # and from host
    ((128, 256, 128, 512), "custom"),                         # not monotone
    ((100, 200), "fill"),                                     # two sizes: a small first piece
    ((64, 64, 64), "custom"),                                 # even, given explicitly
])
def test_ramps_are_named(sizes, pattern):
    assert split_pattern(sizes) == pattern
