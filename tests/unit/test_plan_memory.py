"""Extra-memory estimates per plan and the budget check."""

from __future__ import annotations

import pytest

from hocket.core.plan import Plan
from hocket.core.site import Site
from hocket.plan.memory import (
    MemoryEstimate,
    budget_from_memory,
    estimate_extra_memory,
    over_budget_reason,
)
from hocket.transport.host_relay import SCRATCH_RING

AG = Site(kind="ag_mm", m=8192, k=4096, n=1024, world=8, dtype="bf16")
RS = Site(kind="mm_rs", m=8192, k=1024, n=4096, world=8, dtype="bf16")
AR = Site(kind="mm_ar", m=8192, k=1024, n=4096, world=8, dtype="float32")


def test_sequential_needs_only_what_the_collective_itself_needs():
    assert estimate_extra_memory(AG, Plan()).device_bytes == 0
    assert estimate_extra_memory(RS, Plan()).device_bytes == 8192 * 4096 * 2  # the un-scattered product
    assert estimate_extra_memory(AR, Plan()).device_bytes == 0


def test_pipeline_buffers_shrink_with_more_chunks():
    for site in (AG, RS):
        sizes = [estimate_extra_memory(site, Plan(strategy="chunked", chunks=c)).workspace_bytes
                 for c in (2, 4, 8, 16)]
        assert sizes == sorted(sizes, reverse=True) and sizes[0] > sizes[-1] > 0
    ring = estimate_extra_memory(AG, Plan(strategy="ring", chunks=2, transport="p2p"))
    bidir = estimate_extra_memory(AG, Plan(strategy="bidir_ring", chunks=2, transport="p2p"))
    assert bidir.workspace_bytes == 2 * ring.workspace_bytes


def test_symmetric_memory_and_pinned_host_are_counted_where_they_belong():
    # the flag pipe: the whole gathered A is symmetric
    ce = estimate_extra_memory(AG, Plan(strategy="chunked", chunks=4, transport="copy_engine", protocol="push"))
    assert ce.symmetric_bytes >= AG.m * AG.k * 2
    assert ce.device_bytes == ce.workspace_bytes + ce.symmetric_bytes
    tile = estimate_extra_memory(RS, Plan(strategy="tile_fused", chunks=4, transport="copy_engine"))
    assert tile.symmetric_bytes >= RS.m * RS.n * 2
    host = estimate_extra_memory(AG, Plan(transport="host_staged"))
    assert host.host_pinned_bytes > 0 and host.symmetric_bytes == 0
    assert "pinned host" in host.describe()
    sub = estimate_extra_memory(AR, Plan(strategy="substituted", chunks=4, substitute="rs_ag"))
    assert 0 < sub.workspace_bytes < AR.m * AR.n * 4
    hier = estimate_extra_memory(AR, Plan(hierarchy="intra_first"))
    assert hier.workspace_bytes > 0


def test_the_host_relay_counts_its_reduction_scratch():
    for site, parts in ((RS, 1), (AR, AR.world)):
        for chunks in (1, 4):
            plan = Plan(strategy="chunked", chunks=chunks)
            extra = (estimate_extra_memory(site, plan.with_(transport="host_staged")).workspace_bytes
                     - estimate_extra_memory(site, plan).workspace_bytes)
            product = site.m * site.n * site.itemsize
            staging = 2 * -(-product // chunks)
            # a ring of SCRATCH_RING buffers the calls in flight take turns on, each up to the whole product
            assert extra == staging + SCRATCH_RING * product * parts, (site.kind, chunks)


def test_estimates_scale_with_dtype_and_num_b():
    wide = Site(kind="mm_rs", m=8192, k=1024, n=4096, world=8, dtype="float32", num_b=2)
    plan = Plan(strategy="chunked", chunks=4)
    assert estimate_extra_memory(wide, plan).workspace_bytes == 4 * estimate_extra_memory(RS, plan).workspace_bytes


def test_budget_check():
    est = MemoryEstimate(workspace_bytes=3 << 30, symmetric_bytes=1 << 30, host_pinned_bytes=0)
    assert over_budget_reason(est, None) is None
    assert over_budget_reason(est, 4 << 30) is None
    reason = over_budget_reason(est, (4 << 30) - 1)
    assert reason and "4.00 GiB" in reason and "budget" in reason and "symmetric 1.00 GiB" in reason
    assert budget_from_memory(80 << 30) == 20 << 30
    assert budget_from_memory(None) is None
    with pytest.raises(ValueError, match="fraction"):
        budget_from_memory(1 << 30, fraction=0.0)
    with pytest.raises(ValueError, match="memory_bytes"):
        budget_from_memory(-1)


@pytest.mark.parametrize("world", [2, 8])
def test_the_barrier_protocols_keep_two_slots(world):
    ag = Site(kind="ag_mm", m=1024 * world, k=4096, n=1024, world=world, dtype="bf16")
    rs = Site(kind="mm_rs", m=1024 * world, k=1024, n=4096, world=world, dtype="bf16")
    gathered, product = ag.m * ag.k * 2, rs.m * rs.n * 2
    one = Plan(strategy="chunked", chunks=1, transport="copy_engine")
    symmetric = {}
    for protocol in (None, "push", "pull", "put"):
        plan = one.with_(protocol=protocol)
        symmetric[protocol] = (estimate_extra_memory(ag, plan).symmetric_bytes,
                               estimate_extra_memory(rs, plan).symmetric_bytes if protocol != "put" else None)
    assert symmetric["pull"][0] == 2 * gathered // world, "pull stages this rank's shard twice (parity)"
    assert symmetric["put"][0] == 2 * gathered, "put receives every peer's shard, twice"
    assert symmetric["pull"][1] == 2 * product, "a pulled reduce-scatter stages every rank's partials, twice"
    assert symmetric["push"][0] >= gathered and symmetric["push"][1] >= product
    assert symmetric[None] == (symmetric["put"][0], symmetric["pull"][1]), "no protocol: put gathers, pull scatters"
    with pytest.raises(ValueError, match="'put' does not exist for mm_rs"):
        estimate_extra_memory(rs, one.with_(protocol="put"))
