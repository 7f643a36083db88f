"""The cost model prices ``hierarchy="intra_first"`` as :mod:`hocket.transport.hierarchical` runs it: the phases
(their ops, bytes and sub-groups), one call per phase (2 for all-gather and reduce-scatter, 3 for all-reduce),
the local reorder copy, on NCCL and on gloo; flat where the transport would refuse or run flat."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hocket.core.plan import Plan
from hocket.core.site import Site
from hocket.cost.comm import (
    CALL_OVERHEAD_US,
    LINK_EFFICIENCY,
    STEP_OVERHEAD_US,
    collective,
    group_topology,
    hierarchical_phases,
)
from hocket.hardware import load_cluster
from hocket.strategies import predict

CPU2 = load_cluster("cpu-2node")
IB2 = load_cluster("h100-ib-2node")


@given(op=st.sampled_from(["all_gather", "reduce_scatter", "all_reduce"]), nbytes=st.floats(0, 2**30),
       r=st.integers(2, 8))
def test_the_phases_move_what_the_transport_moves(op, nbytes, r):
    phases = hierarchical_phases(op, nbytes, r)
    calls = [p for p in phases if p[2] != "copy"]
    assert len(calls) == {"all_gather": 2, "reduce_scatter": 2, "all_reduce": 3}[op]
    inter = [b for o, b, where in phases if where == "inter"]
    assert inter == [pytest.approx(nbytes / r)]  # only 1/r of the buffer crosses the network
    copies = [b for _, b, where in phases if where == "copy"]
    assert copies == ([] if op == "all_reduce" else [nbytes])


def test_zero_bytes_cost_one_call_per_phase_plus_each_phase_steps():
    """At 0 bytes an NCCL hierarchical collective is its calls plus its latency steps, computed by hand."""
    topo = group_topology(IB2, range(16))
    q, r = topo.nodes, topo.ranks_per_node
    call, step = CALL_OVERHEAD_US["sm_collective"], STEP_OVERHEAD_US["sm_collective"]
    intra, inter = topo.intra_latency_us + step, topo.nic_latency_us + step
    expected_us = {
        "all_gather": 2 * call + (q - 1) * inter + (r - 1) * intra,
        "reduce_scatter": 2 * call + (r - 1) * intra + (q - 1) * inter,
        "all_reduce": 3 * call + (r - 1) * intra + 2 * (q - 1) * inter + (r - 1) * intra,
    }
    for op, us in expected_us.items():
        got = collective(op, 0.0, topo, hierarchy="intra_first")
        assert got.algorithm == "hierarchical"
        assert got.ms == pytest.approx(us / 1e3), op


def _gloo_all_gather_ms(nbytes: float, p: int, gbps: float, latency_us: float) -> float:
    """By hand: one gloo all-gather call (call overhead, ring steps and bytes, its two local copies)."""
    eff = LINK_EFFICIENCY["cpu_collective"] * 1e6
    call_us = CALL_OVERHEAD_US["cpu_collective"] + (p - 1) * (latency_us + STEP_OVERHEAD_US["cpu_collective"])
    return call_us / 1e3 + (p - 1) / p * nbytes / (gbps * eff) + (nbytes / p + nbytes) / (2 * gbps * eff)


def test_gloo_prices_each_phase_as_a_gloo_call_on_its_sub_group():
    """cpu-2node (5 GB/s, 30 us links; one NIC per node shared by its 2 ranks): the hierarchical all-gather of
    1 MiB = a gloo all-gather of 1/2 MiB over the 2 nodes at 2.5 GB/s per rank + one of 1 MiB over the
    node's 2 ranks at 5 GB/s + the reorder copy at half the link rate."""
    topo = group_topology(CPU2, range(4))
    nbytes = float(1 << 20)
    expected = (_gloo_all_gather_ms(nbytes / 2, 2, 2.5, 30.0) + _gloo_all_gather_ms(nbytes, 2, 5.0, 30.0)
                + nbytes / (2 * 5.0 * LINK_EFFICIENCY["cpu_collective"] * 1e6))
    got = collective("all_gather", nbytes, topo, hierarchy="intra_first")
    assert got.algorithm == "hierarchical"
    assert got.ms == pytest.approx(expected)


def test_the_hierarchy_is_flat_where_the_transport_does_not_run_it():
    one_node = group_topology(load_cluster("cpu-host"), range(4))
    assert collective("all_gather", 1 << 20, one_node, hierarchy="intra_first").algorithm != "hierarchical"
    topo = group_topology(CPU2, range(4))
    flat = collective("all_to_all", 1 << 20, topo)
    assert collective("all_to_all", 1 << 20, topo, hierarchy="intra_first").ms == flat.ms


def test_predict_prices_a_hierarchical_plan_on_the_two_node_cpu_preset():
    site = Site(kind="ag_mm", m=256, k=64, n=64, dtype="float32", world=4)
    flat = predict(site, Plan(strategy="bulk"), CPU2)
    hier = predict(site, Plan(strategy="bulk", hierarchy="intra_first"), CPU2)
    assert hier.total_ms != flat.total_ms
    assert hier.total_ms > 0
