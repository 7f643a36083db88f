"""torchtitan 0.3's MoE layer rewritten by ``hocket.compile`` and compiled in one piece (no split around the call).

Fake group (nothing runs): the AOTAutograd forward and backward graphs of the rewritten ``RoutedExperts`` hold
``hocket.moe_route`` and both MoE ops, and none of torchtitan's all-to-alls, in one Dynamo graph, for both split
modes. Real gloo ranks at world 2 (a pool made here, every task bounded): the compiled layer's output and every
gradient match torchtitan's eager layer over two routings, both split modes and the full ``MoE`` (router and
shared expert, the planner's plan); a bad expert id on one rank after compilation raises the same error on every
rank (from the route op) and the next good step still runs; under ``splits="padded"`` ranks that traced different
token counts all raise the error naming the fix.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Iterator

import pytest
import torch

pytest.importorskip("torchtitan.models.common.moe", reason="torchtitan 0.3 is not installed")

from hocket.core.plan import Plan  # noqa: E402
from hocket.graph import GraphPlanner, PassConfig  # noqa: E402
from hocket.graph.moe import NO_DYNAMIC_ROWS, REPLAN_NOTE, capture_split_sizes, compile_with_moe  # noqa: E402
from hocket.graph.moe_find import op_name  # noqa: E402
from tests.dist._torchtitan_cases import MoeCase, build_routed_experts, ep_mesh, routing  # noqa: E402

CLUSTER = "cpu-host"
POOL_TASK_TIMEOUT_S = 150.0
TEST_TIMEOUT_S = 280
MOE_OPS = ("hocket::moe_route", "hocket::all_to_all_grouped_mm", "hocket::grouped_mm_all_to_all")


class _Captured(Exception):
    """Raised once both AOT graphs are held (nothing runs on the fake group)."""


def _schema_names(gm: torch.fx.GraphModule) -> list[str]:
    return [n.target._schema.name for n in gm.graph.nodes
            if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload)]


def _compile_with(module: torch.nn.Module, args: tuple, plan: Plan, inner, *, dynamic_rows: bool = True):
    """``hocket.compile``'s backend entry (the real ``compile_with_moe``) on ``module`` with ``inner`` as the
    inner backend, which must end the compile by raising ``_Captured``; returns the compile log."""
    from hocket.graph.backend import GraphRewriter
    from hocket.graph.report import CompileLog

    if not hasattr(torch._functorch.config, "force_non_lazy_backward_lowering"):
        pytest.skip("this torch has no force_non_lazy_backward_lowering: the backward graph is compiled lazily")
    log = CompileLog()
    rewriter = GraphRewriter(planner=GraphPlanner(cluster=CLUSTER, plan_for=lambda site: plan), config=PassConfig(),
                             log=log)
    torch._dynamo.reset()
    patches = {"capture_scalar_outputs": True, "capture_dynamic_output_shape_ops": dynamic_rows}
    with torch._dynamo.config.patch(**patches), torch._functorch.config.patch(force_non_lazy_backward_lowering=True):
        with pytest.raises(Exception, match="_Captured"):
            torch.compile(module, backend=lambda gm, inputs: compile_with_moe(gm, inputs, rewriter, inner),
                          dynamic=False)(*args)
    torch._dynamo.reset()
    return log


def _aot_graphs(module: torch.nn.Module, args: tuple, plan: Plan, *, dynamic_rows: bool = True) -> dict:
    """Dynamo's graphs, the AOT forward and backward graphs and the compile log of ``hocket.compile``'s backend on
    ``module`` (the inner compilers only keep the graphs)."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    held: dict = {"dynamo": []}

    def keep(direction: str):
        def compile_graph(gm, example_inputs):
            held[direction] = copy.deepcopy(gm)
            if "forward" in held and "backward" in held:
                raise _Captured
            return make_boxed_func(gm)
        return compile_graph

    aot = aot_autograd(fw_compiler=keep("forward"), bw_compiler=keep("backward"))

    def inner(gm, example_inputs):
        held["dynamo"].append(gm)
        return aot(gm, example_inputs)

    held["log"] = _compile_with(module, args, plan, inner, dynamic_rows=dynamic_rows)
    return held


@pytest.fixture(scope="module")
def routed_inputs(fake_world):
    fake_world(2)
    case = MoeCase(seed=0, experts=4, hidden=16, ffn=8, topk=2, tokens=6)
    x, scores, ids, counts = routing(case, rank=0, world=2)
    return build_routed_experts(case, ep_mesh(2)), (x.requires_grad_(), scores.requires_grad_(), ids, counts)


@pytest.mark.parametrize("splits", ["exchanged", "padded"])
def test_rewritten_layer_is_inside_the_aot_graphs(routed_inputs, splits):
    module, args = routed_inputs
    held = _aot_graphs(module, args, Plan(strategy="token_blocks", chunks=2, splits=splits))
    assert len(held["dynamo"]) == 1  # one Dynamo graph, compiled in one piece
    forward, backward = _schema_names(held["forward"]), _schema_names(held["backward"])
    assert all(forward.count(op) == 1 for op in MOE_OPS), forward
    assert backward.count("hocket::all_to_all_grouped_mm") == 1 and backward.count("hocket::grouped_mm_all_to_all") == 1
    assert "hocket::moe_route" not in backward  # the backward reuses the forward's counts
    assert not [n for n in forward + backward if n.startswith("_c10d_functional::")]  # torchtitan's all-to-alls gone
    (route,) = [n for n in held["forward"].graph.nodes if getattr(n.target, "_schema", None) is not None
                and n.target._schema.name == "hocket::moe_route"]
    host = route.args[4]
    assert host is (splits == "exchanged")  # exchanged: the counts reach the host; padded: they stay on the device
    (report,) = [r for r in held["log"].reports if r.graph.startswith("moe#")]
    (record,) = report.moe_sites
    assert record.rewritten and record.plan.splits == splits


def test_exchanged_splits_need_dynamic_output_shapes(routed_inputs):
    """Without ``capture_dynamic_output_shape_ops`` an exchanged plan is left alone with its reason (torchtitan's
    all-to-alls stay); a padded plan has static row counts and is still rewritten."""
    module, args = routed_inputs
    held = _aot_graphs(module, args, Plan(strategy="token_blocks", chunks=2, splits="exchanged"), dynamic_rows=False)
    (report,) = [r for r in held["log"].reports if r.graph.startswith("moe#")]
    (record,) = report.moe_sites
    assert not record.rewritten and record.reason == NO_DYNAMIC_ROWS
    assert "_c10d_functional::all_to_all_single" in _schema_names(held["forward"])
    held = _aot_graphs(module, args, Plan(strategy="per_source", splits="padded"), dynamic_rows=False)
    assert "hocket::moe_route" in _schema_names(held["forward"])


def test_a_rewritten_graph_that_fails_to_compile_is_compiled_as_traced(routed_inputs):
    module, args = routed_inputs
    seen: list[list[str]] = []

    def inner(gm, example_inputs):
        seen.append([op_name(n) for n in gm.graph.nodes])
        if any("hocket_moe" in n.meta for n in gm.graph.nodes):
            raise RuntimeError("the inner backend refused the call")
        raise _Captured

    log = _compile_with(module, args, Plan(strategy="per_source", splits="padded"), inner)
    assert len(seen) == 2 and "a2a" not in seen[0] and seen[1].count("a2a") == 3  # then torchtitan's graph as traced
    (record,) = [r for r in log.reports if r.graph.startswith("moe#")][0].moe_sites
    assert not record.rewritten and "failed to compile (RuntimeError: the inner backend refused" in record.reason


def test_traced_call_fixes_its_plan_and_defers_a_failed_check_to_the_route_op(fake_world):
    """``plan=None`` is planned for uniform routing at trace time; a shape check that fails while tracing leaves
    only the route op, carrying the error for every rank to raise."""
    import json

    import torch.distributed as dist
    from torch.fx.experimental.proxy_tensor import make_fx

    from hocket.ops.moe_traced import trace_plan, traced_moe_experts
    from hocket.ops.moe_validation import check_shapes

    fake_world(2)
    x, w1, w2 = torch.randn(6, 16), torch.randn(2, 16, 16), torch.randn(2, 8, 16)
    ids, weights = torch.tensor([[0, 1]] * 6), torch.rand(6, 2)
    shape = check_shapes(x, ids, weights, w1, w2, 2)
    assert trace_plan(shape, 2, (0, 1), None).splits in ("exchanged", "padded")
    assert trace_plan(shape, 2, (0, 1), "per_source") == Plan(strategy="per_source", splits="exchanged")

    def call(*tensors):
        return traced_moe_experts(*tensors, dist.group.WORLD, plan={"splits": "padded"})

    good = _schema_names(make_fx(call, tracing_mode="fake")(x, ids, weights, w1, w2))
    assert all(good.count(op) == 1 for op in MOE_OPS), good
    failed = make_fx(call, tracing_mode="fake")(x, ids, weights, w1, torch.randn(2, 8, 15))
    assert [n for n in _schema_names(failed) if n.startswith("hocket::")] == ["hocket::moe_route"]
    (route,) = [n for n in failed.graph.nodes if getattr(n.target, "_schema", None) is not None
                and n.target._schema.name == "hocket::moe_route"]
    assert json.loads(route.args[3])["error"].startswith("ValueError: w_down has shape (2, 8, 15)")


# -- real gloo ranks ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class TracedCase:
    seed: int
    splits: str = "exchanged"
    strategy: str | None = "token_blocks"
    """None: the planner's plan (rewritten even when sequential)."""
    shared: bool = False
    layers: int = 1
    bad_rank: int | None = None
    """this rank gets an out-of-range expert id in the step after compiling."""
    tokens_by_rank: tuple[int, ...] = ()
    """tokens per rank (default: MoeCase's 6 on every rank)."""
    backend: str = "aot_eager"


def _moe_case(case: TracedCase, rank: int, step: int) -> MoeCase:
    tokens = case.tokens_by_rank[rank] if case.tokens_by_rank else 6
    return MoeCase(seed=case.seed + 17 * step, shared=case.shared, layers=case.layers, tokens=tokens,
                   strategy=case.strategy)


def _compiled(case: TracedCase, rank: int, world: int):
    import hocket
    from tests.dist._torchtitan_cases import build_model, rewire

    torch._dynamo.reset()
    mesh = ep_mesh(world)
    ref = build_model(_moe_case(case, rank, 0), mesh, rank=rank)
    if case.strategy is None:
        options = {"config": PassConfig(rewrite_sequential=True)}
    else:
        chunks = 2 if case.strategy in ("token_blocks", "expert_groups") else 1
        plan = Plan(strategy=case.strategy, chunks=chunks, splits=case.splits)
        options = {"plan_for": lambda site: plan}
    compiled = hocket.compile(rewire(copy.deepcopy(ref), mesh), backend=case.backend, cluster=CLUSTER, dynamic=False,
                              **options)
    return ref, compiled


def compiled_matches_eager(case: TracedCase) -> dict:
    """Two steps (two routings) of the compiled layer against torchtitan's eager one; what explain says."""
    import torch.distributed as dist

    import hocket
    from hocket.ops.moe_trace import recording
    from tests.dist._torchtitan_cases import _step, compare

    rank, world = dist.get_rank(), dist.get_world_size()
    ref, compiled = _compiled(case, rank, world)
    errors: dict[str, float] = {}
    events = []
    for step in range(2):
        moe_case = _moe_case(case, rank, step)
        inputs = routing(moe_case, rank=rank, world=world)
        for module in (ref, compiled):
            module.zero_grad(set_to_none=True)
        expected = _step(ref, moe_case, inputs, full=case.shared)
        with capture_split_sizes(), recording() as seen:
            actual = _step(compiled, moe_case, inputs, full=case.shared)
        events.append([tuple(e) for e in seen])
        for name, error in compare(actual, expected, world=world).items():
            errors[name] = max(error, errors.get(name, 0.0))
    report = hocket.explain(compiled)
    torch._dynamo.reset()
    return {"errors": errors, "moe": [m.to_dict() for m in report.moe_sites], "graphs": [g.graph for g in report.graphs],
            "text": report.format(), "events": events}


def bad_id_after_compiling(case: TracedCase) -> dict:
    """A good step, a step with an out-of-range id on ``case.bad_rank`` (the error each rank raised), a good step."""
    import torch.distributed as dist

    from tests.dist._torchtitan_cases import _step

    rank, world = dist.get_rank(), dist.get_world_size()
    _, compiled = _compiled(case, rank, world)
    raised = None
    outs = []
    for step in range(3):
        moe_case = _moe_case(case, rank, step)
        x, scores, ids, counts = routing(moe_case, rank=rank, world=world)
        if step == 1 and rank == case.bad_rank:
            ids = ids.clone()
            ids[0, 2, 1] = moe_case.experts  # one id past the last expert
        try:
            with capture_split_sizes():
                outs.append(_step(compiled, moe_case, (x, scores, ids, counts), full=False)["out"].sum().item())
        except Exception as exc:  # noqa: BLE001 - the error is the result
            raised = (type(exc).__name__, str(exc))
            assert step == 1, exc
    torch._dynamo.reset()
    return {"raised": raised, "steps_run": len(outs)}


def unequal_padded_tokens(case: TracedCase) -> None:
    import torch.distributed as dist

    from tests.dist._torchtitan_cases import _step

    rank, world = dist.get_rank(), dist.get_world_size()
    _, compiled = _compiled(case, rank, world)
    moe_case = _moe_case(case, rank, 0)
    try:
        with capture_split_sizes():
            _step(compiled, moe_case, routing(moe_case, rank=rank, world=world), full=False)
    finally:
        torch._dynamo.reset()


def _direct_inputs(seed: int, rank: int, world: int, *, bad: bool = False) -> tuple[torch.Tensor, ...]:
    """This rank's ``moe_experts`` arguments (E = 2 per rank, k = 2); ``bad``: ``w_down`` one column short."""
    gen = torch.Generator().manual_seed(seed * 10 + rank)
    tokens, hidden, ffn, e_local = 5, 8, 12, 2
    x = torch.randn(tokens, hidden, generator=gen)
    top = torch.topk(torch.randn(tokens, e_local * world, generator=gen).softmax(-1), 2)
    w_gate_up = torch.randn(e_local, hidden, 2 * ffn, generator=gen) / 3
    w_down = torch.randn(e_local, ffn, hidden - 1 if bad else hidden, generator=gen) / 3
    return x, top.indices, top.values, w_gate_up, w_down


def direct_call_under_compile(plan: dict) -> dict[str, float]:
    """``hocket.ops.moe_experts`` inside ``torch.compile(fullgraph=True)`` against the same call eagerly: the
    largest difference of the output and of every gradient."""
    import torch.distributed as dist

    from hocket.ops import moe_experts

    rank, world = dist.get_rank(), dist.get_world_size()

    def call(x, ids, weights, w1, w2):
        return moe_experts(x, ids, weights, w1, w2, dist.group.WORLD, plan=plan)

    results = []
    torch._dynamo.reset()
    for fn in (call, torch.compile(call, backend="aot_eager", fullgraph=True, dynamic=False)):
        x, ids, weights, w1, w2 = (t.clone().requires_grad_(t.is_floating_point()) for t in _direct_inputs(3, rank,
                                                                                                             world))
        with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True):
            out = fn(x, ids, weights, w1, w2)
        (out * torch.arange(out.numel()).view_as(out).cos()).sum().backward()
        results.append({"out": out.detach(), "x": x.grad, "weights": weights.grad, "w1": w1.grad, "w2": w2.grad})
    torch._dynamo.reset()
    eager, compiled = results
    return {name: float((compiled[name] - eager[name]).abs().max()) for name in eager}


def deferred_shape_error(bad_rank: int) -> tuple[str, str]:
    """The traced call made with ``make_fx`` (as AOTAutograd traces it), ``bad_rank``'s ``w_down`` of a wrong
    shape: tracing succeeds everywhere, running the graph raises on every rank (type and message)."""
    import torch.distributed as dist
    from torch.fx.experimental.proxy_tensor import make_fx

    from hocket.ops.moe_traced import traced_moe_experts

    rank, world = dist.get_rank(), dist.get_world_size()
    inputs = _direct_inputs(4, rank, world, bad=rank == bad_rank)

    def call(x, ids, weights, w1, w2):
        return traced_moe_experts(x, ids, weights, w1, w2, dist.group.WORLD, plan={"splits": "padded"})

    gm = make_fx(call, tracing_mode="fake")(*inputs)
    try:
        gm(*inputs)
    except ValueError as exc:
        return type(exc).__name__, str(exc)
    raise AssertionError("the graph ran although a rank's inputs were bad")


@pytest.fixture(scope="module")
def ranks() -> Iterator[object]:
    from hocket.launch import RankPool

    with RankPool(2, backend="gloo", threads_per_rank=1, timeout_s=POOL_TASK_TIMEOUT_S,
                  preload=("numpy", "pytest")) as pool:
        yield pool


def _rewritten_once(result: dict, layers: int = 1) -> None:
    assert len(result["moe"]) == layers and all(m["rewritten"] for m in result["moe"]), result["text"]
    assert sorted(result["graphs"]) == ["backward#0", "forward#0", "moe#0"], result["graphs"]  # no split pieces
    assert f"MoE layers: {layers}, {layers} rewritten" in result["text"]
    assert "please report" not in result["text"]  # no pass failed on the compiled graphs


@pytest.mark.dist
@pytest.mark.timeout(TEST_TIMEOUT_S)
@pytest.mark.parametrize("splits", ["exchanged", "padded"])
def test_compiled_layer_matches_torchtitan_forward_and_gradients(ranks, splits):
    results = ranks.run(compiled_matches_eager, TracedCase(seed=4, splits=splits))
    for result in results:
        _rewritten_once(result)
        assert set(result["errors"]) == {"out", "x.grad", "scores.grad", "inner_experts.w1_EFD.grad",
                                         "inner_experts.w2_EDF.grad", "inner_experts.w3_EFD.grad"}
        assert result["moe"][0]["plan"]["splits"] == splits
        for events in result["events"]:  # the compiled graphs ran hocket's ops: two dispatch blocks, then combines
            issued = [label for what, label in events if what == "issue"]
            assert issued[:2] == ["dispatch:0", "dispatch:1"] and "combine:0" in issued, events


@pytest.mark.dist
@pytest.mark.timeout(TEST_TIMEOUT_S)
def test_full_moe_layers_with_the_planners_plan(ranks):
    """Router, routed experts and shared expert, two layers in one graph: every parameter's gradient agrees and
    explain lists both layers with the plan chosen when compiling."""
    results = ranks.run(compiled_matches_eager, TracedCase(seed=5, strategy=None, shared=True, layers=2))
    for result in results:
        _rewritten_once(result, layers=2)
        assert "0.shared_experts.w1.weight.grad" in result["errors"] and "1.router.gate.weight.grad" in result["errors"]
        for layer in result["moe"]:
            assert layer["source"] == "predicted" and layer["note"].endswith(REPLAN_NOTE)
            assert [s["kind"] for s in layer["sites"]] == ["a2a_mm", "mm_a2a"]
    assert results[0]["moe"] == results[1]["moe"]  # every rank compiled the same plan


@pytest.mark.dist
@pytest.mark.timeout(TEST_TIMEOUT_S)
def test_bad_id_after_compiling_raises_on_every_rank(ranks):
    results = ranks.run(bad_id_after_compiling, TracedCase(seed=6, bad_rank=1))
    (kind0, text0), (kind1, text1) = (r["raised"] for r in results)
    assert kind1 == "ValueError" and "out of range for E=4" in text1 and "token 2" in text1
    assert kind0 == "RankInputError" and "rank(s) [1]" in text0 and "out of range for E=4" in text0
    assert all(r["steps_run"] == 2 for r in results)  # the step after the error runs on every rank


@pytest.mark.dist
@pytest.mark.timeout(TEST_TIMEOUT_S)
def test_padded_splits_with_unequal_tokens_raise_on_every_rank(ranks):
    failures = ranks.run_expect_error(unequal_padded_tokens,
                                      TracedCase(seed=7, splits="padded", strategy="per_source", tokens_by_rank=(6, 4)),
                                      exc_type=ValueError, match="equal tokens|same number of tokens")
    assert len(failures) == 2



@pytest.mark.dist
@pytest.mark.timeout(TEST_TIMEOUT_S)
@pytest.mark.parametrize("plan", [{"strategy": "token_blocks", "chunks": 2}, {"strategy": "per_source",
                                                                              "splits": "padded"}, None])
def test_direct_call_under_torch_compile_matches_eager(ranks, plan):
    for errors in ranks.run(direct_call_under_compile, plan):
        assert set(errors) == {"out", "x", "weights", "w1", "w2"}
        assert max(errors.values()) < 1e-5, errors


@pytest.mark.dist
@pytest.mark.timeout(TEST_TIMEOUT_S)
def test_trace_time_check_failure_raises_on_every_rank_when_run(ranks):
    (kind0, text0), (kind1, text1) = ranks.run(deferred_shape_error, 1)
    assert kind1 == "ValueError" and "w_down has shape (2, 12, 7)" in text1
    assert kind0 == "RankInputError" and "rank(s) [1]" in text0 and "w_down has shape (2, 12, 7)" in text0
