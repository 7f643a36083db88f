"""Gap filling: independent compute moves between a collective's start and its wait, nothing else changes."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.fx.experimental.proxy_tensor import make_fx

from hocket.graph import overlap_pass
from hocket.graph.nodes import MATMUL_TARGETS, is_call, is_communication
from hocket.graph.reorder import fill_gaps

c10d = torch.ops._c10d_functional


def _pos(gm):
    return {n: i for i, n in enumerate(gm.graph.nodes)}


def _structure(gm):
    """Each node's inputs, the multiset of ops, and the order of communication."""
    inputs = {n.name: tuple(a.name for a in n.all_input_nodes) for n in gm.graph.nodes}
    ops = Counter(str(n.target) for n in gm.graph.nodes)
    comm = [n.name for n in gm.graph.nodes if is_communication(n)]
    return inputs, ops, comm


def test_weight_gradients_fill_the_reduce_scatter_gap(fake_world, planner_for):
    group = fake_world(2)

    def backward_like(dy, x, w):
        dx = dy @ w                                # input gradient: feeds the reduce-scatter
        dw1 = x.t() @ dy                           # weight gradient: independent of it
        out = c10d.wait_tensor(c10d.reduce_scatter_tensor(dx, "sum", 2, group))
        return out * 2.0, dw1

    gm = make_fx(backward_like, tracing_mode="fake")(torch.randn(64, 32), torch.randn(64, 48),
                                                     torch.randn(32, 32))
    before = _structure(gm)
    report = overlap_pass(gm.graph, planner=planner_for("sequential"), direction="backward")
    gm.recompile()
    gm.graph.lint()
    assert _structure(gm) == before  # same ops, same inputs, same communication order
    pos = _pos(gm)
    start = next(n for n in gm.graph.nodes if "reduce_scatter_tensor" in str(n.target))
    wait = next(iter(start.users))
    by_rows = {n.meta["val"].shape[0]: n for n in gm.graph.nodes if is_call(n, MATMUL_TARGETS)}
    dx, dw1 = by_rows[64], by_rows[48]
    assert pos[dx] < pos[start]  # the collective still needs it first
    assert pos[start] < pos[dw1] < pos[wait]  # sunk into the gap
    (gap,) = report.gaps
    assert gap.moved_before == 2 and gap.matmuls_in_gap == 1  # dw1 and its transpose
    assert gap.comm_ms is not None and gap.comm_ms > 0 and gap.gap_compute_ms > 0


def test_hoisting_stops_once_the_gap_is_covered(fake_world):
    group = fake_world(2)

    def fn(a, b, c):
        out = c10d.wait_tensor(c10d.all_reduce(a @ b, "sum", group))
        dependent = out + 1.0                   # reads the result: must stay after the wait
        independent = [c @ c.t() for _ in range(4)]
        return dependent, *independent

    gm = make_fx(fn, tracing_mode="fake")(torch.randn(8, 8), torch.randn(8, 8), torch.randn(8, 8))
    (gap,) = fill_gaps(gm.graph, comm_ms=lambda n: 1.0,
                       compute_ms=lambda n: 0.4 if is_call(n, MATMUL_TARGETS) else 0.0)
    gm.graph.lint()
    pos = _pos(gm)
    start = next(n for n in gm.graph.nodes if "all_reduce" in str(n.target))
    wait = next(iter(start.users))
    in_gap = list(gm.graph.nodes)[pos[start] + 1:pos[wait]]
    assert sum(is_call(n, MATMUL_TARGETS) for n in in_gap) == 3  # 3 x 0.4 ms first covers 1 ms
    assert gap.matmuls_in_gap == 3 and gap.gap_compute_ms == pytest.approx(1.2)
    assert all(wait not in n.all_input_nodes for n in in_gap)


OPS = ("mm", "add", "relu", "ag", "ar", "rs")


@settings(max_examples=25, deadline=None)
@given(program=st.lists(st.tuples(st.sampled_from(OPS), st.integers(0, 99), st.integers(0, 99)),
                        min_size=3, max_size=14),
       comm_ms=st.floats(0.0, 3.0), mm_ms=st.floats(0.0, 1.0))
def test_reordering_keeps_every_dependency_and_the_communication_order(fake_world, program, comm_ms, mm_ms):
    group = fake_world(2)

    def fn(a, b):
        values = [a, b]
        for op, i, j in program:
            x, y = values[i % len(values)], values[j % len(values)]
            if op == "mm":
                values.append(x @ y)
            elif op == "add":
                values.append(x + y)
            elif op == "relu":
                values.append(torch.relu(x))
            elif op == "ag":
                values.append(c10d.wait_tensor(c10d.all_gather_into_tensor(x[:4], 2, group)))
            elif op == "ar":
                values.append(c10d.wait_tensor(c10d.all_reduce(x, "sum", group)))
            else:
                values.append(c10d.wait_tensor(c10d.reduce_scatter_tensor(torch.cat([x, y]), "sum", 2, group)))
        return tuple(values[2:])

    gm = make_fx(fn, tracing_mode="fake")(torch.randn(8, 8), torch.randn(8, 8))
    before = _structure(gm)
    gaps = fill_gaps(gm.graph, comm_ms=lambda n: comm_ms,
                     compute_ms=lambda n: mm_ms if is_call(n, MATMUL_TARGETS) else 0.0)
    gm.graph.lint()  # every node after its inputs
    assert _structure(gm) == before
    pos = _pos(gm)
    for gap in gaps:
        wait = next(iter(gap.start.users))
        between = list(gm.graph.nodes)[pos[gap.start] + 1:pos[wait]]
        assert not any(wait in n.all_input_nodes for n in between)
        assert gap.gap_compute_ms is not None
