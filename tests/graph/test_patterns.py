"""Pattern coverage of hocket's graph pass on small traced graphs (fake process group, no communication).

Graphs are traced with ``make_fx`` from the functional collectives exactly as DTensor
emits them (all-gather + wait + split/cat for a gather dim > 0; split/cat +
reduce-scatter + wait for a scatter dim > 0), with random shapes and world sizes.
"""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.fx.experimental.proxy_tensor import make_fx

from hocket.core.plan import Plan
from hocket.graph import GraphPlanner, PassConfig, overlap_pass
from hocket.graph.planning import Choice
from hocket.graph.transplant import on_copy

c10d = torch.ops._c10d_functional
RAW = ("all_gather_into_tensor", "reduce_scatter_tensor", "_c10d_functional.all_reduce")


def gather(x: torch.Tensor, dim: int, world: int, group: str) -> torch.Tensor:
    full = c10d.wait_tensor(c10d.all_gather_into_tensor(x, world, group))
    if dim == 0:
        return full
    return torch.cat(torch.split(full, x.shape[0]), dim=dim)


def scatter(y: torch.Tensor, dim: int, world: int, group: str, op: str = "sum") -> torch.Tensor:
    if dim != 0:
        y = torch.cat(torch.split(y, y.shape[dim] // world, dim=dim))
    return c10d.wait_tensor(c10d.reduce_scatter_tensor(y, op, world, group))


def trace(fn, *args) -> torch.fx.GraphModule:
    return make_fx(fn, tracing_mode="fake")(*args)


def output_shapes(gm: torch.fx.GraphModule) -> list[tuple[int, ...]]:
    out = next(n for n in gm.graph.nodes if n.op == "output")
    values = out.args[0] if isinstance(out.args[0], (list, tuple)) else [out.args[0]]
    return [tuple(v.meta["val"].shape) for v in values]


def targets(gm: torch.fx.GraphModule) -> Counter:
    return Counter(str(n.target) for n in gm.graph.nodes if n.op == "call_function")


def run_pass(gm, planner, direction="forward"):
    before = output_shapes(gm)
    report = overlap_pass(gm.graph, planner=planner, direction=direction)
    gm.recompile()
    gm.graph.lint()
    assert output_shapes(gm) == before  # the rewrite keeps every output's shape
    return report


def rand(*shape, dtype=torch.float32):
    return torch.randn(*shape, dtype=dtype)


# -- all-gather + matmul -------------------------------------------------------------------

@settings(max_examples=12, deadline=None)
@given(world=st.sampled_from([2, 4]), batch=st.integers(1, 3), rows=st.integers(1, 5), k=st.integers(2, 9),
       widths=st.lists(st.integers(1, 7), min_size=1, max_size=3), dim=st.sampled_from([0, 1]),
       keep_gathered=st.booleans())
def test_gather_feeding_matmuls_becomes_one_all_gather_matmul(fake_world, planner_for, world, batch, rows, k,
                                                              widths, dim, keep_gathered):
    group = fake_world(world)

    def fn(x, *ws):
        full = gather(x, dim, world, group)
        flat = full.reshape(-1, k)
        outs = [flat @ w for w in ws]
        return (*outs, full * 2) if keep_gathered else tuple(outs)

    gm = trace(fn, rand(batch, rows, k), *[rand(k, n) for n in widths])
    report = run_pass(gm, planner_for("chunked"))
    text = str(gm.graph)
    assert text.count("hocket.all_gather_matmul") == 1
    assert not any(raw in text for raw in RAW)
    assert "aten.mm" not in text  # every matmul was fused
    (site,) = report.sites
    assert site.rewritten and site.kind == "ag_mm" and site.site.world == world
    gathered_rows = batch * rows * world
    assert (site.site.m, site.site.k) == (gathered_rows, k)
    assert site.site.n == (widths[0] if len(set(widths)) == 1 else sum(widths))
    fused = next(n for n in gm.graph.nodes if "all_gather_matmul" in str(n.target))
    assert fused.args[4] is keep_gathered  # return_A only when something else reads the gathered tensor
    assert fused.args[2] == dim and fused.args[7] == "forward"


def test_cast_after_the_gather_moves_before_it(fake_world, planner_for):
    group = fake_world(2)

    def fn(x, w):
        return gather(x, 1, 2, group).to(torch.bfloat16).reshape(-1, 8) @ w

    gm = trace(fn, rand(2, 3, 8), rand(8, 5, dtype=torch.bfloat16))
    report = run_pass(gm, planner_for("ring"))
    fused = next(n for n in gm.graph.nodes if "all_gather_matmul" in str(n.target))
    shard = fused.args[0]
    assert "convert_element_type" in str(shard.target) and shard.meta["val"].dtype == torch.bfloat16
    assert report.sites[0].site.dtype == "bfloat16"  # half the bytes travel


def test_transposed_and_bias_consumers_are_fused(fake_world, planner_for):
    group = fake_world(4)

    def fn(x, w, bias, p):
        flat = gather(x, 0, 4, group).reshape(-1, 6)
        return torch.addmm(bias, flat, w), p @ flat.t()

    gm = trace(fn, rand(3, 6), rand(6, 5), rand(5), rand(7, 6))
    report = run_pass(gm, planner_for("chunked"))
    text = str(gm.graph)
    assert "aten.mm" not in text and "aten.addmm" not in text and "all_gather_into_tensor" not in text
    assert report.sites[0].site.num_b == 1 and report.sites[0].site.n == 5 + 7


def test_weight_gradient_reads_the_gathered_tensor_from_the_operator(fake_world, planner_for):
    """Backward of a row-parallel linear: dX = ag(dY) @ W^T (fused), dW = ag(dY)^T @ X (reads A)."""
    group = fake_world(2)

    def fn(dy, w, x):
        full = gather(dy, 1, 2, group).reshape(-1, 6)
        return full @ w.t(), full.t() @ x

    gm = trace(fn, rand(2, 4, 6), rand(9, 6), rand(16, 9))
    run_pass(gm, planner_for("bidir_ring"), direction="backward")
    fused = next(n for n in gm.graph.nodes if "all_gather_matmul" in str(n.target))
    assert fused.args[4] is True and fused.args[7] == "backward"
    assert Counter(str(n.target) for n in gm.graph.nodes)["aten.mm.default"] == 1  # the weight gradient


# -- matmul + reduce-scatter / all-reduce --------------------------------------------------

@settings(max_examples=12, deadline=None)
@given(world=st.sampled_from([2, 4]), batch=st.integers(1, 3), seq_per_rank=st.integers(1, 4),
       ks=st.lists(st.integers(1, 8), min_size=1, max_size=3), n=st.integers(1, 9), dim=st.sampled_from([0, 1]),
       op=st.sampled_from(["sum", "avg"]))
def test_matmuls_feeding_reduce_scatter_become_matmul_reduce_scatter(fake_world, planner_for, world, batch,
                                                                     seq_per_rank, ks, n, dim, op):
    group = fake_world(world)
    seq = seq_per_rank * world
    if dim == 0:
        batch *= world

    def fn(*operands):
        total = None
        for a, b in zip(operands[::2], operands[1::2]):
            term = (a @ b).view(batch, seq, n)
            total = term if total is None else total + term
        return scatter(total, dim, world, group, op)

    operands = [t for kk in ks for t in (rand(batch * seq, kk), rand(kk, n))]
    gm = trace(fn, *operands)
    report = run_pass(gm, planner_for("chunked"), direction="backward")
    text = str(gm.graph)
    assert text.count("hocket.matmul_reduce_scatter") == 1
    assert "reduce_scatter_tensor" not in text and "aten.mm" not in text
    (site,) = report.sites
    assert site.kind == "mm_rs" and (site.site.m, site.site.k, site.site.n) == (batch * seq, sum(ks), n)
    fused = next(n_ for n_ in gm.graph.nodes if "matmul_reduce_scatter" in str(n_.target))
    assert fused.args[2] == op and fused.args[3] == dim and fused.args[6] == "backward"


def test_matmul_feeding_all_reduce_becomes_matmul_all_reduce(fake_world, planner_for):
    group = fake_world(2)

    def fn(a, b):
        return c10d.wait_tensor(c10d.all_reduce((a @ b).view(2, 3, 5), "sum", group))

    gm = trace(fn, rand(6, 4), rand(4, 5))
    report = run_pass(gm, planner_for("substituted"))
    assert "hocket.matmul_all_reduce" in str(gm.graph) and "_c10d_functional.all_reduce" not in str(gm.graph)
    assert report.sites[0].kind == "mm_ar" and report.sites[0].plan.strategy == "substituted"


# -- left alone, with the reason -----------------------------------------------------------

@pytest.mark.parametrize("case,reason", [
    ("gather_no_matmul", "no matmul reads"),
    ("cast_before_scatter", "dtype cast"),
    ("matmul_read_twice", "also read elsewhere"),
    ("max_reduction", "reduce op 'max'"),
    ("bias_before_scatter", "bias"),
    ("elementwise_before_scatter", "not by a matmul"),
])
def test_unsupported_patterns_stay_with_a_reason(fake_world, planner_for, case, reason):
    group = fake_world(2)
    a, b, bias = rand(8, 4), rand(4, 6), rand(6)

    def fn(a, b, bias):
        if case == "gather_no_matmul":
            return torch.relu(gather(a, 0, 2, group))
        if case == "cast_before_scatter":
            return scatter((a @ b).to(torch.bfloat16), 0, 2, group)
        if case == "matmul_read_twice":
            y = a @ b
            return scatter(y, 0, 2, group), y.sum()
        if case == "max_reduction":
            return scatter(a @ b, 0, 2, group, "max")
        if case == "bias_before_scatter":
            return scatter(torch.addmm(bias, a, b), 0, 2, group)
        return scatter(torch.relu(a @ b), 0, 2, group)

    gm = trace(fn, a, b, bias)
    before = targets(gm)
    report = run_pass(gm, planner_for("chunked"))
    assert not report.sites
    (left,) = report.left_alone
    assert reason in left.reason
    after = targets(gm)
    assert not any("hocket" in t for t in after)
    assert {t: c for t, c in after.items() if "c10d" in t} == {t: c for t, c in before.items() if "c10d" in t}


def test_sequential_choice_keeps_the_collective(fake_world, planner_for):
    group = fake_world(2)

    def fn(x, w):
        return gather(x, 0, 2, group) @ w

    gm = trace(fn, rand(4, 8), rand(8, 8))
    report = run_pass(gm, planner_for(None))  # the planner's own choice: tiny shapes on CPU ranks
    (site,) = report.sites
    assert site.plan.strategy == "sequential" and not site.rewritten
    assert "sequential chosen" in site.reason and site.predicted_saving_ms == 0.0
    assert "all_gather_into_tensor" in str(gm.graph) and "hocket" not in str(gm.graph)


def test_hocket_disable_leaves_the_graph_untouched(fake_world, planner_for, monkeypatch):
    group = fake_world(2)
    monkeypatch.setenv("HOCKET_DISABLE", "1")
    gm = trace(lambda x, w: gather(x, 0, 2, group) @ w, rand(4, 8), rand(8, 3))
    before = str(gm.graph)
    report = run_pass(gm, planner_for("chunked"))
    assert str(gm.graph) == before and not report.sites and "HOCKET_DISABLE" in report.note


def test_a_failing_pass_leaves_the_graph_as_traced(fake_world):
    group = fake_world(2)
    gm = trace(lambda x, w: gather(x, 0, 2, group) @ w, rand(4, 8), rand(8, 3))
    before = str(gm.graph)

    def broken(graph):
        mm = next(n for n in graph.nodes if n.target is torch.ops.aten.mm.default)
        mm.replace_all_uses_with(mm.args[0])  # half-done rewrite, then an error
        raise RuntimeError("boom")

    result, error = on_copy(gm.graph, broken)
    assert result is None and "boom" in error
    assert str(gm.graph) == before


class _Saving(GraphPlanner):
    """A planner whose ``chunked(2)`` saves ``fraction`` of sequential: predicted (of 1 ms) or, when
    ``measured``, timed alone by autotune (of 4 ms; its prediction then says it saves half)."""

    def __init__(self, fraction: float, measured: bool) -> None:
        super().__init__(cluster="cpu-host")
        self.fraction, self.measured = fraction, measured

    def choose(self, site, *, group_name):
        plan = Plan(strategy="chunked", chunks=2)
        if self.measured:
            return Choice(plan=plan, source="autotune", sequential_ms=1.0, chosen_ms=0.5,
                          measured_sequential_ms=4.0, measured_chosen_ms=4.0 * (1.0 - self.fraction))
        return Choice(plan=plan, source="predicted", sequential_ms=1.0, chosen_ms=1.0 - self.fraction)


@pytest.mark.parametrize("measured,fraction,config,rewritten", [
    (False, 0.05, PassConfig(), False),
    (False, 0.25, PassConfig(), True),
    (False, 0.05, PassConfig(min_saving_fraction=0.0), True),
    (True, 0.04, PassConfig(), False),
    (True, 0.30, PassConfig(), True),
    (True, 0.04, PassConfig(min_measured_saving_fraction=0.0), True),
])
def test_small_savings_keep_the_collective(fake_world, measured, fraction, config, rewritten):
    group = fake_world(2)
    gm = trace(lambda x, w: gather(x, 0, 2, group) @ w, rand(4, 8), rand(8, 3))
    report = overlap_pass(gm.graph, planner=_Saving(fraction, measured), direction="forward", config=config)
    (site,) = report.sites
    assert site.rewritten is rewritten
    assert ("hocket.all_gather_matmul" in str(gm.graph)) is rewritten
    if not rewritten:
        rule = "min_measured_saving_fraction" if measured else "min_saving_fraction"
        assert rule in site.reason and f"{fraction:.1%}" in site.reason and site.predicted_saving_ms == 0.0
