"""ClusterSpec's structural lookups agree with brute force over pairs."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hocket.core.plan import TRANSPORTS
from hocket.hardware import load_preset
from hocket.hardware.spec import ClusterSpec, DeviceSpec, IslandSpec, LinkSpec, NodeGroup, NodeSpec

SMALL = ["h100x8", "mi250xx8", "rtx4090x8", "mixed-nvidia-amd", "h100-ib-2node", "mixed-a100-h100", "cpu-host"]


def _brute_group_transports(cluster: ClusterSpec, ranks: list[int]) -> frozenset[str]:
    result = frozenset(TRANSPORTS)
    for a, b in itertools.combinations(ranks, 2):
        result &= cluster.transports(a, b)
    return result


@st.composite
def cluster_and_group(draw):
    cluster = load_preset(draw(st.sampled_from(SMALL)))
    ranks = draw(st.lists(st.integers(0, cluster.world_size - 1), min_size=2, max_size=12, unique=True))
    return cluster, ranks


@given(cluster_and_group())
def test_group_transports_matches_pairwise_intersection(case):
    cluster, ranks = case
    assert cluster.group_transports(ranks) == _brute_group_transports(cluster, ranks)


@given(cluster_and_group())
def test_bottleneck_link_is_the_slowest_ring_hop(case):
    cluster, ranks = case
    hops = [cluster.link(a, ranks[(i + 1) % len(ranks)]) for i, a in enumerate(ranks)]
    assert cluster.bottleneck_link(ranks).gbps_per_direction == min(h.gbps_per_direction for h in hops)


@given(cluster_and_group())
def test_subcluster_preserves_devices_links_and_transports(case):
    cluster, ranks = case
    ranks = sorted(ranks)  # node-contiguous order
    sub = cluster.subcluster(ranks)
    assert sub.world_size == len(ranks)
    for i, j in itertools.combinations(range(len(ranks)), 2):
        assert sub.device(i) == cluster.device(ranks[i])
        assert sub.link(i, j) == cluster.link(ranks[i], ranks[j])
        assert sub.transports(i, j) == cluster.transports(ranks[i], ranks[j])
        assert (sub.node_of(i) == sub.node_of(j)) == (cluster.node_of(ranks[i]) == cluster.node_of(ranks[j]))


def test_mi250x_package_pairs_are_faster_than_cross_package_pairs():
    mi = load_preset("mi250xx8")
    assert mi.link(0, 1).gbps_per_direction > mi.link(1, 2).gbps_per_direction
    assert mi.bottleneck_link([0, 1]).gbps_per_direction == mi.link(0, 1).gbps_per_direction
    assert mi.bottleneck_link(range(8)).gbps_per_direction == mi.link(1, 2).gbps_per_direction


def test_big_cluster_queries_stay_structural():
    cluster = load_preset("h100-16k")
    tp = cluster.subcluster(range(8, 16))
    assert tp.num_nodes == 1 and tp.bottleneck_link(range(8)).kind == "nvlink"
    dp = cluster.subcluster(range(3, cluster.world_size, 8))
    assert dp.world_size == 2048 and len(dp.groups) == 1
    assert dp.bottleneck_link(range(dp.world_size)).kind == "infiniband"
    assert cluster.group_transports(range(0, cluster.world_size, 8)) == cluster.network_transports


def test_node_and_rank_lookups_on_a_mixed_cluster():
    cluster = load_preset("mixed-a100-h100")
    assert [cluster.node_of(r) for r in (0, 7, 8, 31)] == [0, 0, 1, 3]
    assert cluster.local_rank(9) == 1
    assert cluster.device(0).model == "A100 SXM" and cluster.device(31).model == "H100 SXM"
    assert cluster.device_counts() == {"A100 SXM": 16, "H100 SXM": 16}


def test_bad_arguments_are_clear():
    cluster = load_preset("h100x8")
    with pytest.raises(ValueError, match="same rank"):
        cluster.link(3, 3)
    with pytest.raises(ValueError, match="empty rank list"):
        cluster.group_transports([])
    with pytest.raises(ValueError, match="repeat"):
        cluster.subcluster([1, 1])
    two = load_preset("h100-ib-2node")
    with pytest.raises(ValueError, match="not contiguous"):
        two.subcluster([0, 8, 1])


def test_spec_validation_names_fields_and_units():
    with pytest.raises(ValueError, match="gbps_per_direction=0.*GB/s"):
        LinkSpec(kind="nvlink", gbps_per_direction=0, latency_us=1)
    with pytest.raises(ValueError, match="kind='warp'"):
        LinkSpec(kind="warp", gbps_per_direction=1, latency_us=1)
    with pytest.raises(ValueError, match="memory_gbps=-1.*GB/s"):
        DeviceSpec(vendor="x", model="y", peak_tflops={}, memory_gib=1, memory_gbps=-1)
    link = LinkSpec(kind="pcie", gbps_per_direction=10, latency_us=5)
    device = DeviceSpec(vendor="x", model="y", peak_tflops={"bfloat16": 10.0}, memory_gib=1, memory_gbps=100)
    with pytest.raises(ValueError, match="count=0"):
        IslandSpec(device=device, count=0, fabric="pcie", link=link, transports=frozenset({"collective"}))
    island = IslandSpec(device=device, count=2, fabric="pcie", link=link, transports=frozenset({"collective"}))
    node = NodeSpec(name="n", islands=(island,))
    with pytest.raises(ValueError, match="no nic"):
        ClusterSpec(name="c", groups=(NodeGroup(node=node, count=2),))
