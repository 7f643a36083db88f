"""Hierarchical plans (``hierarchy="intra_first"``) executed on gloo world 4 described as two nodes of two ranks
(the ``cpu-2node`` preset): ag_mm, mm_rs and mm_ar with every strategy the space enumerates with a hierarchy
(sequential, bulk, chunked in both orders, substituted), forward and gradients against the reference; the
collectives of a hierarchical plan run on the intra-node and inter-node sub-groups and none on the flat group;
a hierarchy on a group that lies in one node raises on every rank."""

from __future__ import annotations

import pytest
from _hierarchy_cases import (
    closed_and_made_again,
    forward_case,
    grads_case,
    groups_used,
    hierarchy_chosen_on_cluster,
    hierarchy_on_cluster,
    hierarchy_on_mixed_clusters,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

STRATEGIES = {"ag_mm": ["sequential", "bulk", "chunked"], "mm_rs": ["sequential", "bulk", "chunked"],
              "mm_ar": ["sequential", "bulk", "chunked", "substituted"]}
"""what :func:`hocket.plan.space.enumerate_plans` pairs with ``hierarchy="intra_first"`` per kind (the specs with
``hierarchical=True`` that serve the kind)."""


@st.composite
def cases(draw, world: int = 4):
    kind = draw(st.sampled_from(sorted(STRATEGIES)))
    strategy = draw(st.sampled_from(STRATEGIES[kind]))
    ndim = draw(st.integers(2, 3))
    shape = [draw(st.integers(1, 5)) for _ in range(ndim)]
    dim = draw(st.integers(0, ndim - 1)) if kind != "mm_ar" else 0
    ns = [draw(st.integers(1, 4))]
    case = dict(kind=kind, strategy=strategy, shape=shape, dim=dim, ns=ns, seed=draw(st.integers(0, 2**30)),
                dtype=draw(st.sampled_from(["float32", "bfloat16"])))
    if strategy in ("chunked", "substituted"):
        case["chunks"] = draw(st.integers(2, 4))
    if strategy == "chunked" and kind != "mm_ar":
        case["order"] = draw(st.sampled_from(["natural", "local_first"]))
    if kind == "ag_mm":
        case["save_gathered"] = draw(st.booleans())  # False: the backward gathers A again beside dA's mm_rs
    else:
        case["reduce_op"] = draw(st.sampled_from(["sum", "avg"]))
    if kind == "mm_rs":
        if dim == ndim - 1:
            case["ns"] = [ns[0] * world]
        else:
            shape[dim] *= world
    if kind == "mm_ar" and strategy == "substituted":
        shape[0] = max(shape[0], 2)  # at least one scatterable piece at world 4 for some n
    return case


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_hierarchical_forward_matches_the_reference(pool4, data):
    case = data.draw(cases())
    errors = pool4.run(forward_case, case)
    assert len(errors) == 4 and all(e >= 0.0 for e in errors)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_hierarchical_gradients_match_the_reference(pool4, data):
    case = data.draw(cases())
    checks = pool4.run(grads_case, case)
    assert checks == [2, 2, 2, 2]


RECORDED = [("ag_mm", "sequential", {}), ("ag_mm", "bulk", {}), ("ag_mm", "chunked", {"chunks": 3}),
            ("ag_mm", "chunked", {"chunks": 2, "order": "local_first"}), ("mm_rs", "sequential", {}),
            ("mm_rs", "chunked", {"chunks": 2}), ("mm_rs", "chunked", {"chunks": 2, "order": "local_first"}),
            ("mm_ar", "bulk", {}), ("mm_ar", "chunked", {"chunks": 2}), ("mm_ar", "substituted", {"chunks": 2})]


def _recorded_case(kind: str, strategy: str, extra: dict) -> dict:
    shape = [16, 6] if kind == "mm_rs" else [8, 6]
    return dict(kind=kind, strategy=strategy, shape=shape, dim=0, ns=[5], seed=7, dtype="float32",
                reduce_op="sum", **extra)


@pytest.mark.parametrize(("kind", "strategy", "extra"), RECORDED,
                         ids=[f"{k}-{s}{'-' + e.get('order', '') if e.get('order') else ''}" for k, s, e in RECORDED])
def test_hierarchical_plans_run_on_the_sub_groups_only(pool4, kind, strategy, extra):
    case = _recorded_case(kind, strategy, extra)
    for rank, got in enumerate(pool4.run(groups_used, case)):
        groups = {name for _, name in got["seen"]}
        assert got["seen"], f"rank {rank} recorded no collective for {case}"
        assert got["flat"] not in groups, f"rank {rank} ran {got['seen']} on the flat group {got['flat']!r}"
        assert len(got["intra"]) == 1 and len(got["inter"]) == 1, got
        assert groups == {got["intra"][0], got["inter"][0]}, (
            f"rank {rank}: {case} ran on {sorted(groups)}, not on both its intra-node {got['intra']} and "
            f"inter-node {got['inter']} sub-groups")


def test_the_recorder_sees_a_flat_plan_on_the_flat_group(pool4):
    """The control: the same calls without the hierarchy run every collective on the flat group."""
    case = {**_recorded_case("ag_mm", "chunked", {"chunks": 2}), "flat": True}
    for got in pool4.run(groups_used, case):
        assert got["seen"] and {name for _, name in got["seen"]} == {got["flat"]}


@pytest.mark.parametrize("kind", ["ag_mm", "mm_rs", "mm_ar"])
def test_a_hierarchy_on_a_group_in_one_node_raises_on_every_rank(pool4, kind):
    pool4.run_expect_error(hierarchy_on_cluster, {"kind": kind, "cluster": "cpu-host"}, exc_type=ValueError,
                           match=r"plan.hierarchy='intra_first' on group .* lie in one node .*HOCKET_CLUSTER")


def test_a_hierarchy_over_the_host_relay_raises_on_every_rank(pool4):
    pool4.run_expect_error(hierarchy_on_cluster, {"kind": "ag_mm", "cluster": "cpu-2node", "transport": "host_staged"},
                           exc_type=ValueError, match=r"runs over transport .* not plan.transport='host_staged'")


def test_ranks_whose_clusters_disagree_all_raise(pool4):
    failures = pool4.run_expect_error(hierarchy_on_mixed_clusters, {"kind": "mm_ar"}, exc_type=ValueError,
                                      match=r"lie in one node")
    assert failures[0].type_names[0] == "RankInputError" and failures[1].type_names[0] == "ValueError"


def test_a_chosen_hierarchy_the_layout_cannot_run_runs_flat_with_a_warning(pool4):
    for got in pool4.run(hierarchy_chosen_on_cluster, {"cluster": "cpu-host"}):
        assert any("lie in one node" in text and "without the hierarchy" in text for text in got["warned"]), got
        assert got["groups"] == [got["flat"]], got


def test_close_contexts_frees_the_sub_groups_and_the_next_call_reuses_their_process_groups(pool4):
    """A sub-group destroyed and made again would rendezvous under its old name's store keys: closing keeps
    the process groups and the next call runs on them."""
    for got in pool4.run(closed_and_made_again, {}):
        assert len(got["before"]) == 2 and got["after"] == got["before"], got
