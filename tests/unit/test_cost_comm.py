"""Communication model: alpha-beta per algorithm, topology, backend differences."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hocket.cost.comm import CALL_OVERHEAD_US, COLLECTIVE_OPS, collective, group_topology, ring_step
from hocket.hardware import load_preset

H100X8 = load_preset("h100x8")
TWO_NODES = load_preset("h100-ib-2node")
CPU = load_preset("cpu-host")
MI300X = load_preset("mi300xx8")


@given(st.sampled_from(["h100x8", "h100-ib-2node", "cpu-host", "mi300xx8", "rtx4090x8"]),
       st.sampled_from(COLLECTIVE_OPS[:4]), st.integers(1, 1 << 34), st.integers(1, 1 << 30))
def test_collective_time_grows_with_bytes(preset, op, nbytes, extra):
    cluster = load_preset(preset)
    world = min(cluster.world_size, 16)
    topo = group_topology(cluster, range(world))
    small = collective(op, nbytes, topo).ms
    big = collective(op, nbytes + extra, topo).ms
    assert big >= small > 0


def test_all_reduce_moves_twice_an_all_gather_on_a_ring():
    topo = group_topology(H100X8, range(8))
    nbytes = 1 << 30
    ag, ar = collective("all_gather", nbytes, topo), collective("all_reduce", nbytes, topo)
    assert ag.algorithm == ar.algorithm == "ring"
    assert ar.ms == pytest.approx(2 * ag.ms, rel=0.05)


def test_gloo_reduce_scatter_costs_an_all_reduce_but_nccl_does_not():
    nbytes = 64 << 20
    cpu = group_topology(CPU, range(2))
    assert collective("reduce_scatter", nbytes, cpu).ms > collective("all_reduce", nbytes, cpu).ms  # plus copies
    gpu = group_topology(H100X8, range(2))
    assert collective("reduce_scatter", nbytes, gpu).ms < 0.6 * collective("all_reduce", nbytes, gpu).ms


def test_gloo_p2p_pays_one_call_per_send_and_receive():
    cpu = group_topology(CPU, range(4))
    extra_cpu = ring_step(1024, cpu, peers=2).ms - ring_step(1024, cpu, peers=1).ms
    assert extra_cpu >= 2 * CALL_OVERHEAD_US["cpu_collective"] / 1e3  # a send and a receive more, each a call
    gpu = group_topology(H100X8, range(4))
    extra_gpu = ring_step(1024, gpu, peers=2).ms - ring_step(1024, gpu, peers=1).ms
    assert extra_gpu < CALL_OVERHEAD_US["sm_collective"] / 1e3  # NCCL groups them into one launch


def test_crossing_nodes_is_slower_than_one_node_and_hierarchy_cuts_latency():
    nbytes = 256 << 20
    one_node = collective("all_gather", nbytes, group_topology(TWO_NODES, range(8))).ms
    two_nodes = group_topology(TWO_NODES, range(16))
    flat = collective("all_gather", nbytes, two_nodes).ms
    assert flat > one_node
    small = 4096
    assert collective("all_gather", small, two_nodes, hierarchy="intra_first").ms < \
        collective("all_gather", small, two_nodes).ms


def test_mesh_uses_every_pair_link_at_once():
    topo = group_topology(MI300X, range(8))
    assert topo.fabric == "mesh"
    nbytes = 1 << 30
    direct = collective("all_gather", nbytes, topo)
    assert direct.algorithm == "direct"
    one_link_ring_ms = 7 / 8 * nbytes / (64e9 * 0.75) * 1e3
    assert direct.ms < one_link_ring_ms / 3


def test_host_staged_needs_a_host_link():
    with pytest.raises(ValueError, match="host_link"):
        collective("all_gather", 1 << 20, group_topology(CPU, range(2)), transport="host_staged")
    with pytest.raises(ValueError, match="op='gather'"):
        collective("gather", 1 << 20, group_topology(CPU, range(2)))
    with pytest.raises(ValueError, match="nbytes"):
        collective("all_gather", float("nan"), group_topology(CPU, range(2)))
