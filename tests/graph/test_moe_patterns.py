"""The MoE part of the pass on torchtitan 0.3's traced graphs (fake group, world 2: nothing is communicated).

Dynamo's graph of ``RoutedExperts`` (and of the full ``MoE`` with router and shared expert) is captured with the
split sizes traced (``capture_scalar_outputs``); the finder must read the layer off it, the rewrite must leave one
call of ``moe_experts``'s traced path and nothing of torchtitan's dispatch (a shared expert stays beside it), and a
sequential plan must leave the graph as traced. On the post-autograd forward graph, the all-to-alls with split sizes are priced, so the shared expert's
matmuls move into their gaps.
"""

from __future__ import annotations

import copy
import operator

import pytest
import torch
from torch import fx

pytest.importorskip("torchtitan.models.common.moe", reason="torchtitan 0.3 is not installed")

from hocket.core.plan import Plan  # noqa: E402
from hocket.graph import Explanation, GraphPlanner, PassConfig, overlap_pass  # noqa: E402
from hocket.graph.moe import all_to_all_ms, capture_split_sizes, moe_graph_pass  # noqa: E402
from hocket.graph.moe_find import MoeMatch, MoeUnmatched, find_moe_layers, op_name  # noqa: E402
from tests.dist._torchtitan_cases import MoeCase, build_moe, build_routed_experts, ep_mesh, routing  # noqa: E402

CLUSTER = "cpu-host"


class _Captured(Exception):
    """Raised by the capturing backends once they hold the graph (nothing runs on the fake group)."""


def _dynamo_graph(module: torch.nn.Module, args: tuple) -> fx.GraphModule:
    graphs: list[fx.GraphModule] = []

    def backend(gm, example_inputs):
        graphs.append(copy.deepcopy(gm))
        raise _Captured

    torch._dynamo.reset()
    with capture_split_sizes(), pytest.raises(Exception, match="_Captured"):
        torch.compile(module, backend=backend, dynamic=False)(*args)
    torch._dynamo.reset()
    return graphs[0]


def _forward_graph(module: torch.nn.Module, args: tuple) -> fx.GraphModule:
    from torch._dynamo.backends.common import aot_autograd

    graphs: list[fx.GraphModule] = []

    def forward_compiler(gm, example_inputs):
        graphs.append(copy.deepcopy(gm))
        raise _Captured

    torch._dynamo.reset()
    with capture_split_sizes(), pytest.raises(Exception, match="_Captured"):
        torch.compile(module, backend=aot_autograd(fw_compiler=forward_compiler), dynamic=False)(*args)
    torch._dynamo.reset()
    return graphs[0]


def _backward_graph(module: torch.nn.Module, args: tuple) -> fx.GraphModule:
    """The post-autograd backward graph of ``module(*args).sum()`` (the forward runs as traced on the fake group)."""
    from torch._dynamo.backends.common import aot_autograd

    graphs: list[fx.GraphModule] = []

    def backward_compiler(gm, example_inputs):
        graphs.append(copy.deepcopy(gm))
        raise _Captured

    torch._dynamo.reset()
    with capture_split_sizes(), pytest.raises(_Captured):  # the backward compiles lazily, in .backward()
        out = torch.compile(module, backend=aot_autograd(fw_compiler=lambda gm, _: gm, bw_compiler=backward_compiler),
                            dynamic=False)(*args)
        out.sum().backward()
    torch._dynamo.reset()
    return graphs[0]


class _ThenProjection(torch.nn.Module):
    """A MoE layer followed by a projection (the next block's first matmul): in the backward, the projection's
    weight gradient does not depend on the MoE layer's all-to-alls."""

    def __init__(self, moe: torch.nn.Module, hidden: int) -> None:
        super().__init__()
        self.moe = moe
        self.proj = torch.nn.Linear(hidden, hidden, bias=False)

    def forward(self, x):
        return self.proj(self.moe(x))


@pytest.fixture(scope="module")
def graphs(fake_world) -> dict[str, fx.GraphModule]:
    fake_world(2)
    mesh = ep_mesh(2)
    routed_case = MoeCase(seed=0, experts=4, hidden=16, ffn=8, topk=2, tokens=6)
    x, scores, ids, counts = routing(routed_case, rank=0, world=2)
    x.requires_grad_()
    full_case = MoeCase(seed=0, experts=4, hidden=16, ffn=8, topk=2, tokens=6, shared=True)
    return {
        "routed": _dynamo_graph(build_routed_experts(routed_case, mesh), (x, scores, ids, counts)),
        "moe": _dynamo_graph(build_moe(full_case, mesh), (x,)),
        "moe_forward": _forward_graph(build_moe(full_case, mesh), (x,)),
        "moe_backward": _backward_graph(_ThenProjection(build_moe(full_case, mesh), full_case.hidden), (x,)),
    }


def _planner(strategy: str | None) -> GraphPlanner:
    chunks = 2 if strategy in ("token_blocks", "expert_groups") else 1
    plan = Plan(strategy=strategy, chunks=chunks, splits="exchanged")
    return GraphPlanner(cluster=CLUSTER, plan_for=lambda site: plan)


def _names(gm: fx.GraphModule) -> list[str | None]:
    return [op_name(n) for n in gm.graph.nodes]


def test_finder_reads_torchtitans_layer(graphs):
    (match,) = find_moe_layers(graphs["routed"].graph)
    assert isinstance(match, MoeMatch)
    assert (match.tokens, match.hidden, match.ffn, match.topk, match.world, match.e_local) == (6, 16, 8, 2, 2, 2)
    assert match.experts == 4 and match.compute_dtype == torch.bfloat16  # GroupedExperts computes in bf16
    assert match.ids.op == "placeholder" and "expert_ids" in match.ids.name
    assert match.scores.op == "placeholder" and "scores" in match.scores.name
    assert op_name(match.dispatch) == op_name(match.combine) == "a2a"
    assert op_name(match.out) == "scatter_add"


def test_rewrite_leaves_one_hocket_call_and_none_of_torchtitans_dispatch(graphs):
    gm = copy.deepcopy(graphs["routed"])
    before = _names(gm)
    assert before.count("a2a") == 3 and before.count("grouped_mm") == 3  # count exchange, dispatch, combine
    report = moe_graph_pass(gm.graph, planner=_planner("token_blocks"), config=PassConfig(), name="moe#0")
    gm.recompile()
    after = _names(gm)
    assert not {"a2a", "wait", "grouped_mm", "scatter_add", "argsort", "setitem"} & set(after)
    calls = [n for n in gm.graph.nodes if "hocket_moe" in n.meta]
    assert len(calls) == 1 and Plan.from_json(calls[0].meta["hocket_moe"]).strategy == "token_blocks"
    assert not any(n.target is torch.ops.aten._assert_scalar.default for n in gm.graph.nodes)  # .tolist() gone
    (record,) = report.moe_sites
    assert record.rewritten and record.source == "plan_for"
    assert [s.kind for s in record.sites] == ["a2a_mm", "mm_a2a"]
    text = Explanation(graphs=(report,)).format()
    assert "MoE layers: 1, 1 rewritten" in text and "rewritten into hocket.ops.moe_experts" in text


def test_shared_expert_stays_in_the_graph_beside_the_call(graphs):
    """The full MoE layer under a plan that does not overlap the shared expert: the routed part becomes the call,
    the shared expert's matmuls and the sum stay (after the call); the site carries the shared expert's width."""
    gm = copy.deepcopy(graphs["moe"])
    before = [n for n in gm.graph.nodes if n.target is torch._C._nn.linear]
    report = moe_graph_pass(gm.graph, planner=_planner("token_blocks"), config=PassConfig(), name="moe#0")
    gm.recompile()
    (record,) = report.moe_sites
    assert record.rewritten and record.site.shared_ffn == 8  # three [16, 8]-sized matrices over 3 * hidden
    (call,) = [n for n in gm.graph.nodes if "hocket_moe" in n.meta]
    assert len(call.args) == 5 and not any("shared_experts" in str(a) for a in call.args)
    linears = [n for n in gm.graph.nodes if n.target is torch._C._nn.linear]
    assert len(before) == 4 and linears == before  # the router's gate and the shared expert's three
    (add,) = [n for n in gm.graph.nodes if op_name(n) == "add"]
    assert any(a is call or call in _ancestors(a) for a in add.args)  # out + shared(x) reads the call


def test_shared_overlap_leaves_the_layer_for_reordering(graphs):
    """``shared_overlap`` cannot run inside a compiled call (the shared expert would run after it), so the layer
    keeps torchtitan's all-to-alls, whose gaps the post-autograd pass fills with the shared expert."""
    from hocket.graph.moe import SHARED_LEFT

    gm = copy.deepcopy(graphs["moe"])
    report = moe_graph_pass(gm.graph, planner=_planner("shared_overlap"), config=PassConfig(), name="moe#0")
    gm.recompile()
    (record,) = report.moe_sites
    assert not record.rewritten and record.reason == SHARED_LEFT and record.site.shared_ffn == 8
    assert not [n for n in gm.graph.nodes if "hocket_moe" in n.meta]
    assert _names(gm).count("a2a") == 3
    plain = copy.deepcopy(graphs["routed"])  # no shared expert: nothing to overlap, shared_ffn 0
    (other,) = moe_graph_pass(plain.graph, planner=_planner("token_blocks"), config=PassConfig(),
                              name="moe#1").moe_sites
    assert other.site.shared_ffn == 0


def test_sequential_plan_leaves_the_graph_as_traced(graphs):
    gm = copy.deepcopy(graphs["moe"])
    before = [(n.op, n.target) for n in gm.graph.nodes]
    report = moe_graph_pass(gm.graph, planner=_planner("sequential"), config=PassConfig(), name="moe#0")
    assert [(n.op, n.target) for n in gm.graph.nodes] == before
    (record,) = report.moe_sites
    assert not record.rewritten and "sequential chosen" in record.reason
    off = moe_graph_pass(gm.graph, planner=_planner("token_blocks"), config=PassConfig(rewrite=False), name="moe#1")
    assert off.moe_sites[0].reason == "rewriting is switched off"
    tp_plan = GraphPlanner(cluster=CLUSTER, plan_for=lambda site: Plan(strategy="chunked", chunks=2))
    refused = moe_graph_pass(gm.graph, planner=tp_plan, config=PassConfig(), name="moe#2")
    assert "does not run hocket.ops.moe_experts" in refused.moe_sites[0].reason  # a TP plan given to every site
    assert [(n.op, n.target) for n in gm.graph.nodes] == before


def test_a_changed_pattern_is_left_alone_with_its_reason(graphs):
    gm = copy.deepcopy(graphs["routed"])
    silu = next(n for n in gm.graph.nodes if op_name(n) == "silu")
    with gm.graph.inserting_after(silu):
        gelu = gm.graph.call_function(torch.nn.functional.gelu, (silu.args[0],))
    silu.replace_all_uses_with(gelu)
    gm.graph.erase_node(silu)
    (item,) = find_moe_layers(gm.graph)
    assert isinstance(item, MoeUnmatched) and "SwiGLU" in item.reason
    report = moe_graph_pass(gm.graph, planner=_planner("token_blocks"), config=PassConfig(), name="moe#0")
    assert not report.moe_sites and "SwiGLU" in report.left_alone[0].reason
    assert report.left_alone[0].collective == "all_to_all_single"


def test_swapped_combine_splits_are_not_a_layer(graphs):
    gm = copy.deepcopy(graphs["routed"])
    (match,) = find_moe_layers(gm.graph)
    combine = match.combine
    combine.args = (combine.args[0], combine.args[2], combine.args[1], *combine.args[3:])  # not the dispatch's swap
    items = find_moe_layers(gm.graph)
    assert not [i for i in items if isinstance(i, MoeMatch)]
    (item,) = [i for i in items if i.node is match.dispatch]
    assert "swapped" in item.reason
    assert {i.node for i in items} == {match.dispatch, combine}  # the combine is reported as well


def test_post_autograd_all_to_alls_are_priced_and_their_gaps_filled(graphs):
    gm = copy.deepcopy(graphs["moe_forward"])
    planner = GraphPlanner(cluster=CLUSTER)
    a2as = [n for n in gm.graph.nodes if op_name(n) == "a2a"]
    assert len(a2as) == 3
    count_exchange, *data = a2as
    assert all(all_to_all_ms(n, "forward", planner) > 0 for n in data)  # the dispatch and the combine
    assert all_to_all_ms(count_exchange, "forward", planner) is None  # int64 counts: no dtype to price
    assert all_to_all_ms(next(n for n in gm.graph.nodes if n.op == "placeholder"), "forward", planner) is None
    report = overlap_pass(gm.graph, planner=planner, name="forward", direction="forward")
    combine = a2as[-1]
    (gap,) = [g for g in report.gaps if g.node == combine.name]
    assert gap.matmuls_in_gap >= 1 and gap.comm_ms is not None  # the shared expert's matmuls
    order = list(gm.graph.nodes)
    wait = next(iter(combine.users))
    moved = [n for n in order[order.index(combine) + 1:order.index(wait)]
             if n.target in (torch.ops.aten.mm.default, torch.ops.aten.addmm.default)]
    assert moved and all(combine not in _ancestors(n) for n in moved)


def test_backward_all_to_all_gaps_take_the_next_blocks_weight_gradient(graphs):
    """Lancet's backward reordering on a layer left as traced: the projection after the MoE layer has its weight
    gradient (``[hidden, hidden]``) computed before the layer's backward all-to-alls as traced; the pass sinks it
    into the first one's gap, with the shared expert's gradients."""
    gm = copy.deepcopy(graphs["moe_backward"])
    hidden = 16

    def wgrad_of_projection(n: fx.Node) -> bool:
        val = n.meta.get("val")
        return n.target is torch.ops.aten.mm.default and val is not None and tuple(val.shape) == (hidden, hidden)

    (wgrad,) = [n for n in gm.graph.nodes if wgrad_of_projection(n)]
    a2as = [n for n in gm.graph.nodes if op_name(n) == "a2a" and n.meta.get("val") is not None
            and n.meta["val"].dtype.is_floating_point]
    first = a2as[0]
    order = list(gm.graph.nodes)
    assert order.index(wgrad) < order.index(first)  # as traced: before the transfer starts
    report = overlap_pass(gm.graph, planner=GraphPlanner(cluster=CLUSTER), name="backward", direction="backward")
    order = list(gm.graph.nodes)
    wait = next(iter(first.users))
    assert order.index(first) < order.index(wgrad) < order.index(wait)
    (gap,) = [g for g in report.gaps if g.node == first.name]
    assert gap.matmuls_in_gap >= 2 and gap.comm_ms is not None and gap.comm_ms > 0


def _ancestors(node: fx.Node) -> set[fx.Node]:
    seen, stack = set(), [node]
    while stack:
        current = stack.pop()
        if current not in seen:
            seen.add(current)
            stack.extend(current.all_input_nodes)
    return seen


def test_op_names_cover_dynamo_python_and_aten_spellings():
    g = fx.Graph()
    x = g.placeholder("x")
    assert op_name(g.call_method("bfloat16", (x,))) == "cast"
    assert op_name(g.call_function(operator.getitem, (x, 0))) == "getitem"
    assert op_name(g.call_function(torch._grouped_mm, (x, x))) == op_name(
        g.call_function(torch.ops.aten._grouped_mm.default, (x, x))) == "grouped_mm"
    assert op_name(g.call_function(torch.ops._c10d_functional.all_to_all_single, (x, [1], [1], "0"))) == "a2a"
    assert op_name(g.call_function(torch.ops._c10d_functional.all_to_all_single.default, (x, [1], [1], "0"))) == "a2a"
    assert op_name(g.call_function(torch.nn.functional.gelu, (x,))) is None
    assert op_name(x) is None
