"""Candidate space: validity, pruning reasons, transports offered by the cluster, budgets."""

from __future__ import annotations

import random

import pytest

from hocket.core.plan import ORDERS, STRATEGIES, Plan
from hocket.core.site import Site
from hocket.plan.memory import estimate_extra_memory
from hocket.plan.space import (
    GroupFacts,
    SpaceConfig,
    chunk_options,
    enumerate_plans,
    gemm_rows,
    group_facts,
    runs_single_piece_pipeline,
    split_rows,
)

ALL = frozenset({"collective", "p2p", "copy_engine", "host_staged"})
GPU_NODE = GroupFacts(transports=ALL, sm_count=132, memory_bytes=80 << 30, device_models=("H100",))


def _site(kind="ag_mm", m=8192, k=4096, n=2048, world=8, **kw):
    return Site(kind=kind, m=m, k=k, n=n, world=world, **kw)


def _random_site(rng: random.Random) -> Site:
    world = rng.choice([1, 2, 4, 8])
    m = world * rng.randint(1, 512) * rng.choice([1, 8])
    return Site(kind=rng.choice(["ag_mm", "mm_rs", "mm_ar"]), m=m, k=rng.randint(1, 9000),
                n=rng.randint(1, 9000), world=world, dtype=rng.choice(["bfloat16", "float32"]))


def test_sequential_first_and_never_pruned_even_with_zero_budget():
    space = enumerate_plans(_site(), GPU_NODE, SpaceConfig(memory_budget_bytes=0))
    assert space.candidates[0] == space.baseline == Plan()
    assert all(p.plan != space.baseline for p in space.pruned)
    # with zero extra memory allowed, every remaining candidate needs none
    for plan in space.candidates:
        assert estimate_extra_memory(space.site, plan).device_bytes == 0


@pytest.mark.parametrize("seed", range(12))
def test_candidates_are_valid_unique_and_every_pruned_has_a_reason(seed):
    rng = random.Random(seed * 7919 + 1)
    site = _random_site(rng)
    facts = GroupFacts(transports=frozenset(rng.sample(sorted(ALL), rng.randint(1, 4))) | {"collective"},
                       sm_count=rng.choice([None, 108, 132]), memory_bytes=rng.choice([None, 1 << 30, 80 << 30]),
                       nodes=rng.choice([1, 2]), max_ranks_per_node=rng.choice([1, 4]))
    space = enumerate_plans(site, facts)
    assert len(set(space.candidates)) == len(space.candidates)
    for plan in space.candidates[1:]:
        assert plan.transport in facts.transports
        assert plan.strategy != "sequential" or plan.chunks == 1
        assert plan.chunks <= split_rows(site, plan.strategy)
        if space.memory_budget_bytes is not None:
            assert estimate_extra_memory(site, plan).device_bytes <= space.memory_budget_bytes
        if plan.comm_sms is not None:
            assert facts.sm_count is not None and plan.comm_sms < facts.sm_count
    assert not set(p.plan for p in space.pruned) & set(space.candidates)
    for pruned in space.pruned:
        assert isinstance(pruned.reason, str) and len(pruned.reason) > 15


def test_transport_missing_from_cluster_is_pruned_with_reason():
    facts = GroupFacts(transports={"collective", "host_staged"}, sm_count=132, memory_bytes=80 << 30,
                       notes={"p2p": "PCIe without peer access"})
    space = enumerate_plans(_site(), facts)
    assert not any(p.strategy in ("ring", "bidir_ring", "tile_fused") for p in space.candidates)
    ring = [p for p in space.pruned if p.plan.strategy == "ring" and p.plan.transport == "p2p"]
    assert ring and "no 'p2p'" in ring[0].reason and "PCIe without peer access" in ring[0].reason
    assert any(p.plan.transport == "copy_engine" and "no 'copy_engine'" in p.reason for p in space.pruned)


def test_strategies_follow_the_site_kind():
    ag = enumerate_plans(_site("ag_mm"), GPU_NODE)
    rs = enumerate_plans(_site("mm_rs"), GPU_NODE)
    ar = enumerate_plans(_site("mm_ar"), GPU_NODE)
    assert {p.strategy for p in ag.candidates} == {"sequential", "bulk", "chunked", "ring", "bidir_ring", "tile_fused"}
    assert {p.strategy for p in rs.candidates} == {"sequential", "bulk", "chunked", "ring", "bidir_ring",
                                                   "tile_fused"}
    assert {p.strategy for p in ar.candidates} == {"sequential", "bulk", "chunked", "substituted"}
    assert all(p.substitute == "rs_ag" for p in ar.candidates if p.strategy == "substituted")
    assert not any(p.order == "local_first" for p in ar.candidates)
    reasons = {p.plan.strategy: p.reason for p in ar.pruned if p.plan.transport == "collective"}
    assert "mm_ar" in reasons["ring"]
    sub = [p for p in ag.pruned if p.plan.strategy == "substituted"]
    assert sub and "strategy='ring'" in sub[0].reason


def test_chunk_options_are_powers_of_two_and_divisors():
    assert chunk_options(12, 64) == (1, 2, 3, 4, 6, 8, 12, 16, 32, 64)
    assert chunk_options(7, 8) == (1, 2, 4, 7, 8)
    site = _site("ag_mm", m=8 * 96, world=8)  # 96 rows per shard
    space = enumerate_plans(site, GPU_NODE)
    ring_chunks = {p.chunks for p in space.candidates if p.strategy == "ring"}
    assert ring_chunks == {c for c in chunk_options(96) if 96 // c >= 16}
    chunked = {p.chunks for p in space.candidates if p.strategy == "chunked"}
    assert 3 in chunked and 48 in chunked and 64 not in chunked
    # one piece only where it is not bulk: the peer pipe and the own-data-first order overlap with one piece
    ones = [p for p in space.candidates if p.strategy == "chunked" and p.chunks == 1]
    assert ones and all(runs_single_piece_pipeline(site, p) for p in ones)
    assert {p.transport for p in ones} >= {"copy_engine"} and any(p.order == "local_first" for p in ones)
    small = [p for p in space.pruned if p.plan.strategy == "ring" and p.plan.chunks == 12]
    assert small and "8 rows" in small[0].reason and "min_gemm_rows" in small[0].reason
    empty = [p for p in space.pruned if p.plan.strategy == "ring" and p.plan.chunks == 128]
    assert not empty  # 128 is above max_chunks, never enumerated


def test_too_many_chunks_for_the_rows_is_pruned_as_empty_pieces():
    site = _site("ag_mm", m=8 * 24, world=8)  # 24 rows per shard
    space = enumerate_plans(site, GPU_NODE, SpaceConfig(min_gemm_rows=1))
    assert max(p.chunks for p in space.candidates if p.strategy == "ring") == 24
    assert any(p.plan.chunks == 32 and "empty" in p.reason for p in space.pruned)


def test_world_one_has_only_sequential():
    space = enumerate_plans(_site(world=1, m=512), GPU_NODE)
    assert space.candidates == (Plan(),)
    assert all("world=1" in p.reason for p in space.pruned)


def test_bidir_ring_at_world_two_is_ring():
    space = enumerate_plans(_site(world=2, m=4096), GPU_NODE)
    assert not any(p.strategy == "bidir_ring" for p in space.candidates)
    assert any(p.plan.strategy == "bidir_ring" and "world=2" in p.reason for p in space.pruned)


def test_hierarchy_only_for_groups_spanning_nodes():
    one = enumerate_plans(_site(), GPU_NODE)
    assert not any(p.hierarchy for p in one.candidates)
    assert any("one node" in p.reason for p in one.pruned if p.plan.hierarchy == "intra_first")
    multi = GroupFacts(transports={"collective", "p2p", "host_staged"}, nodes=2, max_ranks_per_node=4,
                       sm_count=132, memory_bytes=80 << 30)
    two = enumerate_plans(_site(), multi)
    hier = [p for p in two.candidates if p.hierarchy == "intra_first"]
    assert hier and {p.strategy for p in hier} <= {"sequential", "bulk", "chunked"}
    assert not any(p.strategy == "tile_fused" for p in two.candidates)
    spread = GroupFacts(transports={"collective", "p2p"}, nodes=8, max_ranks_per_node=1, sm_count=132)
    flat = enumerate_plans(_site(), spread)
    assert not any(p.hierarchy for p in flat.candidates)
    assert any("each node holds one rank" in p.reason for p in flat.pruned)


def test_comm_sms_only_where_sms_drive_the_transport():
    gpu = enumerate_plans(_site(), GroupFacts(transports=ALL, sm_count=20, memory_bytes=80 << 30),
                          SpaceConfig(comm_sms_options=(None, 8, 32)))
    sms = {(p.transport, p.comm_sms) for p in gpu.candidates if p.strategy != "sequential"}
    assert ("collective", 8) in sms and ("p2p", 8) in sms
    assert not any(p.comm_sms for p in gpu.candidates if p.transport in ("copy_engine", "host_staged"))
    assert not any(p.comm_sms == 32 for p in gpu.candidates)
    assert any(p.plan.comm_sms == 32 and "leaves no SMs" in p.reason for p in gpu.pruned)
    cpu = enumerate_plans(_site(), GroupFacts(transports={"collective", "p2p"}, sm_count=None))
    assert all(p.comm_sms is None for p in cpu.candidates)


def test_memory_budget_prunes_with_reason():
    site = _site("mm_rs", m=16384, k=4096, n=8192)  # 256 MiB partial product in bf16
    loose = enumerate_plans(site, GPU_NODE, SpaceConfig(memory_budget_bytes=64 << 30))
    tight = enumerate_plans(site, GPU_NODE, SpaceConfig(memory_budget_bytes=40 << 20))
    assert len(tight.candidates) < len(loose.candidates)
    gone = set(loose.candidates) - set(tight.candidates)
    assert any(p.transport == "copy_engine" for p in gone)
    over = [p for p in tight.pruned if "budget" in p.reason]
    assert {p.plan for p in over} == gone
    assert all("40.0 MiB" in p.reason for p in over)
    assert any(p.strategy == "chunked" and p.chunks >= 16 for p in tight.candidates)


def test_default_budget_is_a_share_of_device_memory():
    facts = GroupFacts(transports=ALL, sm_count=132, memory_bytes=8 << 30)
    space = enumerate_plans(_site(), facts, SpaceConfig(memory_budget_fraction=0.5))
    assert space.memory_budget_bytes == 4 << 30
    assert enumerate_plans(_site(), GroupFacts(transports=ALL)).memory_budget_bytes is None


def test_strategy_filter_and_bad_config():
    space = enumerate_plans(_site(), GPU_NODE, SpaceConfig(strategies=("sequential", "chunked")))
    assert {p.strategy for p in space.candidates} == {"sequential", "chunked"}
    with pytest.raises(ValueError, match="strategies"):
        SpaceConfig(strategies=("warp",))
    with pytest.raises(ValueError, match="max_chunks"):
        SpaceConfig(max_chunks=0)
    with pytest.raises(ValueError, match="transports"):
        GroupFacts(transports={"smoke_signals"})


def test_no_transport_for_sequential_is_a_clear_error():
    with pytest.raises(ValueError, match="no transport for sequential"):
        enumerate_plans(_site(), GroupFacts(transports={"p2p"}))


def test_gemm_rows_per_strategy():
    site = _site("ag_mm", m=8192, world=8)
    assert gemm_rows(site, "chunked", 4) == 2048
    assert gemm_rows(site, "ring", 4) == 256
    assert split_rows(site, "chunked") == 1024
    assert split_rows(_site("mm_ar"), "chunked") == 8192
    assert set(ORDERS) >= {p.order for p in enumerate_plans(site, GPU_NODE).candidates}
    assert set(STRATEGIES) >= {p.strategy for p in enumerate_plans(site, GPU_NODE).candidates}


# -- facts from a real ClusterSpec ----------------------------------------------------
spec = pytest.importorskip("hocket.hardware.spec")


def _device(vendor="nvidia", model="H100", sms=132, mem=80.0):
    return spec.DeviceSpec(vendor=vendor, model=model, peak_tflops={"bfloat16": 989.0}, memory_gib=mem,
                           memory_gbps=3350.0, sm_count=sms)


def _cluster(nodes=1, mixed_vendor=False):
    nv = spec.LinkSpec(kind="nvlink", gbps_per_direction=450.0, latency_us=2.0)
    if mixed_vendor:
        islands = (spec.IslandSpec(device=_device(), count=2, fabric="pcie", link=nv,
                                   transports={"collective", "p2p", "copy_engine", "host_staged"}),
                   spec.IslandSpec(device=_device("amd", "MI210", 104, 64.0), count=2, fabric="pcie", link=nv,
                                   transports={"collective", "p2p", "host_staged"}))
        node = spec.NodeSpec(name="mixed", islands=islands,
                             bridge=spec.LinkSpec(kind="pcie", gbps_per_direction=25.0, latency_us=5.0))
    else:
        islands = (spec.IslandSpec(device=_device(), count=4, fabric="switch", link=nv,
                                   transports={"collective", "p2p", "copy_engine", "host_staged"}),)
        node = spec.NodeSpec(name="hgx", islands=islands, nics=4,
                             nic=spec.LinkSpec(kind="infiniband", gbps_per_direction=50.0, latency_us=5.0))
    return spec.ClusterSpec(name="toy", groups=(spec.NodeGroup(node=node, count=nodes),))


def test_group_facts_from_cluster_spec():
    facts = group_facts(_site(world=4, m=4096), _cluster())
    assert facts.transports == ALL and facts.nodes == 1 and facts.max_ranks_per_node == 4
    assert facts.sm_count == 132 and facts.memory_bytes == 80 << 30
    across = group_facts(_site(world=8, m=4096), _cluster(nodes=2))
    assert across.nodes == 2 and across.max_ranks_per_node == 4
    assert "copy_engine" not in across.transports
    live = group_facts(_site(world=4, m=4096), _cluster(), free_memory_bytes=1 << 30)
    assert live.memory_bytes == 1 << 30


def test_mixed_vendors_plan_only_host_staged():
    site = _site(world=4, m=4096)
    facts = group_facts(site, _cluster(mixed_vendor=True))
    assert facts.transports == {"host_staged"} and facts.sm_count == 104
    space = enumerate_plans(site, facts)
    assert space.baseline == Plan(transport="host_staged")
    assert {p.transport for p in space.candidates} == {"host_staged"}
    assert any("different vendors" in p.reason for p in space.pruned if p.plan.strategy == "ring")


def test_group_larger_than_cluster_is_refused():
    with pytest.raises(ValueError, match="world"):
        group_facts(_site(world=8), _cluster())


def test_last_dim_sharding_splits_all_rows():
    site = Site(kind="ag_mm", m=512, k=8 * 256, n=1024, world=8, dim=-1)  # K gathered, m local rows
    assert split_rows(site, "ring") == 512 and gemm_rows(site, "ring", 4) == 128
    space = enumerate_plans(site, GPU_NODE)
    assert max(p.chunks for p in space.candidates if p.strategy == "ring") == 32


@pytest.mark.parametrize("kind", ["ag_mm", "mm_rs", "mm_ar"])
def test_bulk_is_enumerated_where_an_executor_runs_it_and_the_model_prices_it(kind):
    from hocket.hardware import load_preset
    from hocket.ops.lowering import executor_for
    from hocket.strategies import predict

    rng = random.Random()
    site = _site(kind, m=8 * 64 * rng.randint(1, 32), k=rng.randint(64, 4096), n=rng.randint(64, 4096), world=8)
    space = enumerate_plans(site, GPU_NODE)
    bulk = [p for p in space.candidates if p.strategy == "bulk"]
    # one piece, natural order, every transport that carries whole collectives
    assert bulk and all(p.chunks == 1 and p.order == "natural" for p in bulk)
    assert {p.transport for p in bulk} == {"collective", "copy_engine", "host_staged"}
    assert not any(p.plan.strategy == "bulk" and "does not apply" in p.reason for p in space.pruned)
    assert callable(executor_for(kind, "bulk"))
    cluster = load_preset("h100x8")
    bulk_ms = predict(site, Plan(strategy="bulk"), cluster).total_ms
    sequential_ms = predict(site, Plan(), cluster).total_ms
    assert bulk_ms > 0
    if kind != "ag_mm":  # the reduction waits for the whole GEMM: one piece overlaps nothing
        assert bulk_ms >= sequential_ms * (1 - 1e-9)


def test_a_site_whose_only_chunked_plan_is_one_piece_enumerates():
    """ag_mm with 8 rows per shard: chunked(2) would issue 8-row GEMMs (pruned), so the copy-engine pipeline's
    one piece is its only chunk count; its other orders are pruned once, not looked up in an empty list."""
    from hocket.core.site import Site
    from hocket.hardware import load_cluster
    from hocket.plan.space import enumerate_plans, group_facts

    site = Site(kind="ag_mm", m=16, k=64, n=64, world=2, dtype="float32")
    space = enumerate_plans(site, group_facts(site, load_cluster("h200x2")))
    assert any(p.strategy == "chunked" and p.chunks == 1 and p.transport == "copy_engine" for p in space.candidates)
    reasons = [x.reason for x in space.pruned if x.plan.strategy == "chunked" and x.plan.transport == "copy_engine"
               and x.plan.order != "natural"]
    assert reasons and all(r == reasons[0] for r in reasons)
