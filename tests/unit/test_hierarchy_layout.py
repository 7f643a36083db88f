"""The node layout of a hierarchical plan: sub-group membership, the block order its phases leave, the layouts it
refuses (one node, one rank per node, unequal nodes, a cluster that does not cover the group, a transport it
does not run over), and the phases' data movement replayed in one process for drawn layouts."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from hocket.core.plan import Plan
from hocket.hardware import load_cluster
from hocket.ops.lowering.hierarchy import group_nodes
from hocket.transport.group import GroupHandle
from hocket.transport.hierarchical import ChainedPending, NodeLayout, check_layout
from hocket.transport.registry import get_transport


def _handle(ranks) -> GroupHandle:
    return GroupHandle(pg=None, name="g", rank=0, world=len(ranks), ranks=tuple(ranks), backend="gloo")


def test_two_nodes_of_two_split_into_node_and_peer_sub_groups():
    layout = NodeLayout((0, 1, 2, 3), (0, 0, 1, 1))
    assert layout.intra == ((0, 1), (2, 3))
    assert layout.inter == ((0, 2), (1, 3))
    assert (layout.num_nodes, layout.ranks_per_node) == (2, 2)
    assert layout.permutation() == [0, 2, 1, 3]
    assert layout.problem() is None


def test_sub_groups_follow_global_rank_order_whatever_the_node_numbers():
    layout = NodeLayout((4, 5, 6, 7, 8, 9), (3, 3, 1, 1, 2, 2))
    assert layout.node_ids == (3, 1, 2)
    assert layout.intra == ((0, 1), (2, 3), (4, 5))
    assert layout.inter == ((0, 2, 4), (1, 3, 5))


@pytest.mark.parametrize(("nodes", "match"), [
    ((0, 0, 0, 0), "lie in one node"),
    ((0, 1, 2, 3), "each of its 4 nodes holds one rank"),
    ((0, 0, 0, 1), "different numbers of the group's ranks"),
])
def test_layouts_a_hierarchy_cannot_run_on_are_refused_with_the_fix(nodes, match):
    with pytest.raises(ValueError, match=match) as info:
        check_layout(NodeLayout((0, 1, 2, 3), nodes), group_name="tp", cluster_name="c")
    text = str(info.value)
    assert "plan.hierarchy='intra_first'" in text and "group 'tp'" in text and "hierarchy=None" in text
    assert f"nodes {list(nodes)}" in text


def test_group_nodes_reads_the_cluster_and_names_what_is_wrong():
    plan = Plan(strategy="bulk", hierarchy="intra_first")
    assert group_nodes(_handle(range(4)), plan, load_cluster("cpu-2node")) == ((0, 0, 1, 1), "cpu-2node")
    with pytest.raises(ValueError, match="lie in one node"):
        group_nodes(_handle(range(4)), plan, load_cluster("cpu-host"))
    with pytest.raises(ValueError, match=r"does not cover the group's global ranks \[0, 1, 2, 3, 4\]"):
        group_nodes(_handle(range(5)), plan, load_cluster("cpu-2node"))
    with pytest.raises(ValueError, match="not plan.transport='host_staged'"):
        group_nodes(_handle(range(4)), plan.with_(transport="host_staged"), load_cluster("cpu-2node"))


def test_get_transport_refuses_a_hierarchy_it_cannot_build():
    handle = _handle(range(4))
    with pytest.raises(ValueError, match="runs over transport"):
        get_transport("copy_engine", handle, hierarchy="intra_first", nodes=(0, 0, 1, 1))
    with pytest.raises(ValueError, match="needs the node of each of its 4 ranks"):
        get_transport("collective", handle, hierarchy="intra_first", nodes=(0, 0, 1))
    with pytest.raises(ValueError, match="lie in one node"):
        get_transport("collective", handle, hierarchy="intra_first", nodes=(0, 0, 0, 0))


# -- the phases replayed in one process ----------------------------------------------------------
@st.composite
def layouts(draw):
    q, r = draw(st.integers(2, 3)), draw(st.integers(2, 3))
    ranks = draw(st.permutations(range(q * r)))  # group rank g is global rank ranks[g]
    order = draw(st.permutations(range(q * r)))  # which global ranks share a node
    node_of_global = {glob: i // r for i, glob in enumerate(order)}
    return NodeLayout(tuple(ranks), tuple(node_of_global[glob] for glob in ranks))


def _all_gather(members, blocks):
    return {g: torch.cat([blocks[m] for m in members]) for g in members}


def _reduce_scatter(members, inputs):
    total = sum(inputs[m] for m in members)
    parts = total.chunk(len(members))
    return {g: parts[i] for i, g in enumerate(members)}


@settings(max_examples=40, deadline=None)
@given(layout=layouts(), n=st.integers(1, 3))
def test_the_phases_leave_the_all_gather_and_reduce_scatter_of_the_flat_group(layout, n):
    """Inter-node all-gather, intra-node all-gather, then the permutation = the flat all-gather; the permuted
    input, intra-node reduce-scatter, inter-node reduce-scatter = the flat reduce-scatter (on every rank)."""
    p = layout.world
    perm = torch.tensor(layout.permutation())
    blocks = {g: torch.full((n,), float(g)) + torch.arange(n) / 10 for g in range(p)}
    across = {}
    for members in layout.inter:
        across.update(_all_gather(members, blocks))
    node = {}
    for members in layout.intra:
        node.update(_all_gather(members, across))
    flat = torch.cat([blocks[g] for g in range(p)])
    for g in range(p):
        out = torch.empty(p, n).index_copy_(0, perm, node[g].view(p, n))
        assert torch.equal(out.view(-1), flat), (layout, g)
    inputs = {g: torch.randn(p, n, generator=torch.Generator().manual_seed(g)) for g in range(p)}
    ordered = {g: inputs[g].index_select(0, perm).view(-1) for g in range(p)}
    reduced = {}
    for members in layout.intra:
        reduced.update(_reduce_scatter(members, ordered))
    final = {}
    for members in layout.inter:
        final.update(_reduce_scatter(members, reduced))
    expected = sum(inputs.values())
    for g in range(p):
        assert torch.allclose(final[g], expected[g], atol=1e-5), (layout, g)


class _Recorded:
    """A Pending stand-in that records its wait."""

    def __init__(self, log: list[str], name: str) -> None:
        self.log, self.name = log, name

    def wait(self) -> None:
        self.log.append(f"wait {self.name}")


def _steps(log: list[str], names: list[str]):
    def step(name: str):
        def issue():
            log.append(f"issue {name}")
            return _Recorded(log, name)
        return issue
    return [step(name) for name in names]


def test_chained_phases_on_cpu_issue_the_next_phase_only_when_waited_on():
    log: list[str] = []
    pending = ChainedPending(_steps(log, ["inter", "intra"]), eager=False, after=lambda: log.append("after"))
    assert log == ["issue inter"] and not pending.done
    pending.wait()
    assert log == ["issue inter", "wait inter", "issue intra", "wait intra", "after"] and pending.done
    pending.wait()  # a second wait does nothing
    assert log[-1] == "after" and len(log) == 5


def test_chained_phases_on_cuda_are_all_issued_with_the_call():
    log: list[str] = []
    pending = ChainedPending(_steps(log, ["rs", "ar", "ag"]), eager=True, after=lambda: log.append("after"))
    assert log == ["issue rs", "wait rs", "issue ar", "wait ar", "issue ag"]
    pending.wait()
    assert log[-2:] == ["wait ag", "after"]
