"""Uneven shards in the Site, the cost model and the plan space."""

from __future__ import annotations

import pytest

from hocket.core.plan import Plan
from hocket.core.site import Site
from hocket.cost import uneven
from hocket.hardware import load_cluster
from hocket.plan.space import enumerate_plans, group_facts
from hocket.strategies.pricing import predict


def _site(sizes, **kw):
    return Site(kind=kw.pop("kind", "ag_mm"), m=sum(sizes), k=1024, n=1024, world=len(sizes), shard_rows=tuple(sizes),
                **kw)


def test_even_sizes_keep_the_even_key():
    even = Site(kind="ag_mm", m=512, k=64, n=64, world=2)
    assert Site(kind="ag_mm", m=512, k=64, n=64, world=2, shard_rows=(256, 256)).key == even.key
    assert "shard_rows" not in even.to_dict()
    uneven_site = Site(kind="ag_mm", m=512, k=64, n=64, world=2, shard_rows=(384, 128))
    assert uneven_site.key != even.key
    assert Site.from_dict(uneven_site.to_dict()) == uneven_site


@pytest.mark.parametrize(("sizes", "match"), [((3, 2), "adds up to 5"), ((7, -1), "negative"), ((1, 2, 3), "entries")])
def test_bad_shard_rows_are_refused(sizes, match):
    with pytest.raises(ValueError, match=match):
        Site(kind="mm_rs", m=6, k=4, n=4, world=2, shard_rows=sizes)


def test_backward_site_keeps_the_shards():
    site = Site(kind="ag_mm", m=6, k=4, n=8, world=2, shard_rows=(6, 0))
    (grad,) = site.backward_sites()
    assert grad.kind == "mm_rs" and grad.shard_rows == (6, 0)


def test_pace_is_the_largest_block_and_padding_copies():
    assert uneven.pace_bytes([3, 1, 0, 2], 10.0) == 4 * 3 * 10.0
    assert uneven.real_bytes([3, 1, 0, 2], 10.0) == 60.0
    assert uneven.padding_copy_bytes([3, 1], 1.0) == 16.0
    assert uneven.extra_calls([3, 1, 0], None) == 2 and uneven.extra_calls([3, 1, 0], "padded") == 0
    assert uneven.clipped([5, 2, 0], 2, 4) == [2, 0, 0]
    assert uneven.gain_bound([2.0, 1.0]) == pytest.approx(1.5)


@pytest.mark.parametrize("strategy", ["bulk", "chunked", "ring"])
def test_uneven_is_priced_at_the_slowest_rank(strategy):
    """The same total rows cost more when one rank holds most of them: every step waits for it."""
    cluster = load_cluster("h100x8")
    plan = Plan(strategy=strategy, chunks=2, transport="p2p" if strategy == "ring" else "collective")
    even = predict(Site(kind="ag_mm", m=8192, k=4096, n=4096, world=2), plan, cluster).total_ms
    skew = predict(_site([7168, 1024], kind="ag_mm") if False else Site(
        kind="ag_mm", m=8192, k=4096, n=4096, world=2, shard_rows=(7168, 1024)), plan, cluster).total_ms
    assert skew > even


def test_padded_moves_more_memory_than_exact_on_cpu():
    cluster = load_cluster("cpu-host")
    site = Site(kind="mm_rs", m=4096, k=512, n=512, world=2, shard_rows=(3072, 1024), dtype="float32")
    exact = predict(site, Plan(strategy="bulk"), cluster)
    padded = predict(site, Plan(strategy="bulk", splits="padded"), cluster)
    assert padded.compute_ms > exact.compute_ms  # the padding copies


def test_space_offers_only_uneven_executors_both_ways():
    cluster = load_cluster("h100x8")
    site = Site(kind="ag_mm", m=8192, k=4096, n=4096, world=2, shard_rows=(6144, 2048))
    space = enumerate_plans(site, group_facts(site, cluster))
    strategies = {p.strategy for p in space.candidates}
    assert strategies <= {"sequential", "bulk", "chunked", "ring", "bidir_ring"}
    assert any(p.splits == "padded" for p in space.candidates) and any(
        p.splits is None and p.strategy == "chunked" for p in space.candidates)
    assert all(p.order == "natural" for p in space.candidates)
    assert any("uneven shards" in r.reason for r in space.pruned)
