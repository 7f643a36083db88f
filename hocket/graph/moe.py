"""Expert-parallel MoE through hocket, with torchtitan as the client: an eager drop-in and the graph pass.

Eager drop-in (torchtitan 0.3's ``RoutedExperts`` = ``AllToAllTokenDispatcher`` + ``GroupedExperts``)::

    from hocket.graph.moe import use_hocket_experts
    use_hocket_experts(model)          # every RoutedExperts with an EP mesh now runs hocket.ops.moe_experts

:class:`HocketRoutedExperts` takes the module's place with the same ``forward`` arguments and result and the
same parameters (``inner_experts.w1_EFD``, ``w2_EDF``, ``w3_EFD``: state dicts and optimizers are unchanged).
torchtitan's ``GroupedExperts`` computes in bfloat16 whatever the parameters' dtype; so does the drop-in
(``compute_dtype``), returning the tokens' dtype. The weights map as ``w_gate_up[e] = [w1[e]^T | w3[e]^T]``
(``[hidden, 2 * ffn]``, gate first) and ``w_down[e] = w2[e]^T`` (``[ffn, hidden]``).

Graph pass (``hocket.compile``): :func:`moe_graph_pass` runs on Dynamo's graph before AOTAutograd, finds every
layer (:mod:`hocket.graph.moe_find`), plans it as an ``a2a_mm`` + ``mm_a2a`` pair (:class:`hocket.core.moe.MoeSite`
with uniform routing: the counts are data, unknown while compiling) and rewrites it
(:mod:`hocket.graph.moe_rewrite`) when its plan is not sequential (or ``PassConfig.rewrite_sequential``). The
plan is fixed when compiling (uniform routing; the compiled layer runs it whatever the routing). The rewritten
call traces into ``torch.ops.hocket.moe_route`` and the two MoE ops (:mod:`hocket.ops.moe_traced`), so
:func:`compile_with_moe` hands the whole graph, the layer's forward and backward included, to AOTAutograd and the
inner backend in one piece. A shared expert added to the layer's output stays in the graph, computed after the
call; it is priced with the layer (``MoeSite.shared_ffn``), and where the plan is ``shared_overlap`` the layer is
left alone (:data:`SHARED_LEFT`), so the post-autograd pass overlaps the shared expert with torchtitan's
all-to-alls instead.

The split sizes' ``.tolist()`` breaks Dynamo's graph unless ``torch._dynamo.config.capture_scalar_outputs`` is
True, and ``splits="exchanged"`` needs ``capture_dynamic_output_shape_ops`` (data-dependent row counts):
:func:`capture_split_sizes` sets both. With a break the dispatch's rows arrive as graph inputs and the layer is
left alone with that reason; without dynamic output shapes an exchanged plan is left alone with its reason. A
layer left alone keeps torchtitan's all-to-alls, and the post-autograd pass moves independent compute (the
shared expert) into their gaps (:func:`all_to_all_ms` prices them).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

import torch
from torch import fx, nn

from hocket.core.moe import MoeSite
from hocket.core.plan import SEQUENTIAL, Plan, as_plan

logger = logging.getLogger("hocket.compile")

NOT_MOE_PLAN = "plan_for's plan does not run hocket.ops.moe_experts; the layer stays as traced"
SHARED_LEFT = ("shared_overlap chosen: a rewritten call runs the shared expert after it under torch.compile, so "
               "torchtitan's all-to-alls stay and whole-graph reordering moves the shared expert into their gaps")
REPLAN_NOTE = "plan chosen for uniform routing when compiling; the compiled layer runs it whatever the routing"
NO_DYNAMIC_ROWS = ("splits='exchanged' gives data-dependent row counts, which this trace cannot hold: set "
                   "torch._dynamo.config.capture_dynamic_output_shape_ops = True (hocket.graph.moe."
                   "capture_split_sizes() and compile_moe() do), or pass a plan with splits='padded'")
ROUTED_EXPERTS = "RoutedExperts"
"""torchtitan's class name of the dispatcher + experts module (``torchtitan.models.common.moe``)."""


@contextlib.contextmanager
def capture_split_sizes() -> Iterator[None]:
    """Trace ``.tolist()``/``.item()`` into the graph (``torch._dynamo.config.capture_scalar_outputs``), so a
    dispatcher's split sizes stay in one graph with its all-to-alls (needed for the pass to find the layer), and
    allow ops with data-dependent output sizes (``capture_dynamic_output_shape_ops``: the MoE ops' row counts
    under ``splits="exchanged"``)."""
    with torch._dynamo.config.patch(capture_scalar_outputs=True, capture_dynamic_output_shape_ops=True):
        yield


# -- eager drop-in ---------------------------------------------------------------------------

def _local(param: torch.Tensor) -> torch.Tensor:
    return param.to_local() if hasattr(param, "to_local") else param


def expert_weights(inner_experts: nn.Module, dtype: torch.dtype | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(w_gate_up [E_local, hidden, 2*ffn], w_down [E_local, ffn, hidden])`` of a torchtitan ``GroupedExperts``
    (``w1_EFD``/``w3_EFD`` ``[E, ffn, hidden]``, ``w2_EDF`` ``[E, hidden, ffn]``), differentiable in them."""
    for name in ("w1_EFD", "w2_EDF", "w3_EFD"):
        if not isinstance(getattr(inner_experts, name, None), torch.Tensor):
            raise TypeError(f"inner_experts={type(inner_experts).__name__} has no tensor {name}: pass torchtitan's "
                            "GroupedExperts (RoutedExperts.inner_experts)")
    w1, w2, w3 = (_local(getattr(inner_experts, n)) for n in ("w1_EFD", "w2_EDF", "w3_EFD"))
    if w1.dim() != 3 or w3.shape != w1.shape or w2.shape != (w1.shape[0], w1.shape[2], w1.shape[1]):
        raise ValueError(f"GroupedExperts weights w1 {list(w1.shape)}, w2 {list(w2.shape)}, w3 {list(w3.shape)} are "
                         "not [E, ffn, hidden], [E, hidden, ffn], [E, ffn, hidden]")
    if dtype is not None:
        w1, w2, w3 = w1.to(dtype), w2.to(dtype), w3.to(dtype)
    return torch.cat([w1.transpose(-2, -1), w3.transpose(-2, -1)], dim=-1), w2.transpose(-2, -1)


class HocketRoutedExperts(nn.Module):
    """torchtitan's ``RoutedExperts`` computed by ``hocket.ops.moe_experts`` (module docstring)."""

    def __init__(self, routed: nn.Module, *, group: object = None, plan: object = None,
                 compute_dtype: torch.dtype | None = torch.bfloat16) -> None:
        super().__init__()
        dispatcher = getattr(routed, "token_dispatcher", None)
        if not isinstance(getattr(routed, "inner_experts", None), nn.Module) or dispatcher is None:
            raise TypeError(f"routed={type(routed).__name__} is not torchtitan's RoutedExperts (it needs "
                            "inner_experts and token_dispatcher)")
        if group is None:
            mesh = getattr(dispatcher, "ep_mesh", None)
            if mesh is None:
                raise ValueError("routed.token_dispatcher has no EP mesh (ep_mesh is None: expert parallelism is "
                                 "off, or RoutedExperts.parallelize has not run); pass group= or wire the mesh")
            group = mesh.get_group()
        if compute_dtype is not None and not isinstance(compute_dtype, torch.dtype):
            raise TypeError(f"compute_dtype={compute_dtype!r} must be a torch.dtype or None (the tokens' dtype)")
        self.inner_experts = routed.inner_experts
        self.token_dispatcher = dispatcher
        self.group = group
        self.plan = as_plan(plan)
        self.compute_dtype = compute_dtype
        self.top_k = int(dispatcher.top_k)
        self.num_experts = int(dispatcher.num_experts)

    def forward(self, x_BLD: torch.Tensor, topk_scores_BLK: torch.Tensor, topk_expert_ids_BLK: torch.Tensor,
                num_local_tokens_per_expert_E: torch.Tensor | None = None) -> torch.Tensor:
        """``RoutedExperts.forward``'s arguments and result. The tokens per expert are counted from the ids by the
        operator (``num_local_tokens_per_expert_E`` is accepted and not read)."""
        from hocket.ops import moe_experts

        hidden = x_BLD.shape[-1]
        k = topk_expert_ids_BLK.shape[-1]
        if k != self.top_k:
            raise ValueError(f"topk_expert_ids_BLK has k={k} choices per token but the dispatcher was built with "
                             f"top_k={self.top_k}")
        dtype = self.compute_dtype or x_BLD.dtype
        x = x_BLD.reshape(-1, hidden)
        w_gate_up, w_down = expert_weights(self.inner_experts, dtype)
        out = moe_experts(x.to(dtype), topk_expert_ids_BLK.reshape(-1, k), topk_scores_BLK.reshape(-1, k).to(dtype),
                          w_gate_up, w_down, self.group, plan=self.plan)
        return out.to(x_BLD.dtype).view(*x_BLD.shape[:-1], hidden)


def hocket_experts_for(routed: nn.Module, **options) -> HocketRoutedExperts:
    """The drop-in for one torchtitan ``RoutedExperts`` (options: ``group``, ``plan``, ``compute_dtype``)."""
    return HocketRoutedExperts(routed, **options)


def use_hocket_experts(model: nn.Module, **options) -> int:
    """Swap every torchtitan ``RoutedExperts`` of ``model`` for its drop-in, in place; returns how many.

    Run it after expert parallelism is applied (the dispatchers' EP meshes are wired). Raises when none is found.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    targets = [(name, module) for name, module in model.named_modules()
               if type(module).__name__ == ROUTED_EXPERTS and hasattr(module, "token_dispatcher")]
    if not targets:
        raise ValueError(f"model={type(model).__name__} has no torchtitan RoutedExperts module to replace")
    for name, module in targets:
        replacement = HocketRoutedExperts(module, **options)
        if not name:
            raise ValueError("model is itself a RoutedExperts: use hocket_experts_for(model) instead")
        parent_name, _, attr = name.rpartition(".")
        setattr(model.get_submodule(parent_name) if parent_name else model, attr, replacement)
    return len(targets)


# -- graph pass ------------------------------------------------------------------------------

def moe_site(match: object, shared: object = None) -> MoeSite:
    """The ``a2a_mm`` site of a matched layer, with uniform routing (the counts are data). A shared expert found
    beside the layer (:func:`hocket.graph.moe_rewrite.find_shared`) sets ``shared_ffn``: its parameters' elements
    over ``3 * hidden`` (a SwiGLU feed-forward's three matrices)."""
    from hocket.core.site import canonical_dtype
    from hocket.graph.moe_find import shape_of
    from hocket.graph.planning import group_ranks

    shared_ffn = 0
    if shared is not None:
        sizes = [shape_of(n) for i, n in enumerate(shared.inputs) if i != shared.token_input]
        shared_ffn = sum(torch.Size(s).numel() for s in sizes if s is not None) // (3 * match.hidden)
    ranks = group_ranks(match.group_name)
    return MoeSite(kind="a2a_mm", tokens=match.tokens, hidden=match.hidden, ffn=match.ffn, experts=match.experts,
                   topk=match.topk, world=match.world, dtype=canonical_dtype(match.compute_dtype),
                   shared_ffn=shared_ffn, direction="forward", ranks=ranks if len(ranks) == match.world else ())


def dynamic_rows_allowed(graph: fx.Graph) -> bool:
    """Whether the trace that produced ``graph`` may hold ops with data-dependent output sizes (its ShapeEnv
    allows them: ``torch._dynamo.config.capture_dynamic_output_shape_ops``), which ``splits="exchanged"`` needs."""
    from torch._guards import detect_fake_mode

    from hocket.graph.moe_find import value

    fakes = [v for v in (value(n) for n in graph.nodes if n.op == "placeholder") if isinstance(v, torch.Tensor)]
    try:
        shape_env = getattr(detect_fake_mode(fakes), "shape_env", None)
    except AssertionError:  # inputs of several fake modes: not a graph Dynamo traced
        return False
    return bool(getattr(shape_env, "allow_dynamic_output_shape_ops", False))


def _predict_ms(site: MoeSite, plan: Plan, planner: object) -> float | None:
    """Predicted time of the whole layer (both sites) under ``plan``; None when the cost model cannot price it."""
    try:
        from hocket.strategies.moe import predict_moe_layer

        return float(predict_moe_layer(site, plan, planner.cluster, planner.planner.profile).total_ms)
    except (ImportError, ValueError, TypeError, KeyError, NotImplementedError):
        return None


def choose_plan(site: MoeSite, planner: object) -> tuple[Plan, str, str]:
    """(plan, source, note) for a layer: the user's ``plan_for``, else the MoE planner's ``plan=None`` choice."""
    from hocket.env import disabled

    if disabled():
        return SEQUENTIAL, "disabled", "HOCKET_DISABLE=1"
    if planner.plan_for is not None:
        plan = as_plan(planner.plan_for(site))
        if plan is not None:
            from hocket.ops.moe_exec import check_moe_plan

            try:
                return check_moe_plan(plan), "plan_for", ""
            except ValueError as exc:
                return Plan(splits="exchanged"), "plan_for", f"{NOT_MOE_PLAN} ({exc})"
    try:
        from hocket.plan.moe import choose_moe_plan

        return choose_moe_plan(site, planner.cluster, planner.planner.profile), "predicted", ""
    except (ImportError, NotImplementedError, ValueError, TypeError) as exc:
        return Plan(splits="exchanged"), "predicted", f"the MoE planner could not price this layer ({exc})"


def moe_graph_pass(graph: fx.Graph, *, planner: object, config: object, name: str) -> object | None:
    """Find, plan and rewrite the MoE layers of Dynamo's graph in place; the report, or None when the graph has
    no all-to-all with split sizes (nothing to say). The owning module's code is not regenerated here."""
    from hocket.env import disabled
    from hocket.graph.moe_find import MoeMatch, find_moe_layers
    from hocket.graph.moe_report import MoeSiteRecord
    from hocket.graph.moe_rewrite import find_shared, rewrite_moe
    from hocket.graph.report import GraphReport, LeftAlone

    found = find_moe_layers(graph)
    if not found:
        return None
    if disabled():
        return GraphReport(graph=name, direction="forward", note="HOCKET_DISABLE=1: graph left as traced")
    records, left = [], []
    for item in found:
        if not isinstance(item, MoeMatch):
            left.append(LeftAlone(graph=name, collective="all_to_all_single", node=item.node.name, reason=item.reason))
            continue
        shared = find_shared(graph, item) if getattr(config, "reorder", True) else None
        site = moe_site(item, shared)
        plan, source, note = choose_plan(site, planner)
        reason = ""
        if not getattr(config, "rewrite", True):
            reason = "rewriting is switched off"
        elif note.startswith(NOT_MOE_PLAN):
            reason, note = note, ""
        elif plan.strategy == "shared_overlap":
            reason = SHARED_LEFT
        elif plan.strategy == "sequential" and not getattr(config, "rewrite_sequential", False):
            reason = ("sequential chosen (no plan predicted faster; torchtitan's all-to-alls stay and their gaps are "
                      "filled)")
        elif plan.splits != "padded" and not dynamic_rows_allowed(graph):
            reason = NO_DYNAMIC_ROWS
        seq_ms, plan_ms = _predict_ms(site, Plan(splits="exchanged"), planner), _predict_ms(site, plan, planner)
        if not reason and source == "predicted" and plan.strategy != "sequential" and seq_ms and plan_ms is not None:
            fraction = (seq_ms - plan_ms) / seq_ms
            if fraction < getattr(config, "min_saving_fraction", 0.0):
                reason = (f"predicted saving {fraction:.1%} is below PassConfig.min_saving_fraction "
                          f"{config.min_saving_fraction:.0%}; torchtitan's all-to-alls stay for reordering")
        nodes = (item.dispatch.name, item.combine.name)
        if not reason:
            rewrite_moe(graph, item, plan=plan)
            if source == "predicted":
                note = "; ".join(x for x in (note, REPLAN_NOTE) if x)
        records.append(MoeSiteRecord(graph=name, site=site, plan=plan, source=source, rewritten=not reason,
                                     reason=reason, nodes=nodes, predicted_sequential_ms=seq_ms,
                                     predicted_ms=plan_ms if not reason else seq_ms, note=note))
    graph.lint()
    return GraphReport(graph=name, direction="forward", left_alone=tuple(left), moe_sites=tuple(records))


def run_moe_pass(gm: fx.GraphModule, rewriter: object) -> int:
    """:func:`moe_graph_pass` on a copy of ``gm``'s graph, kept only if it succeeds, and its report added to the
    compile log (a graph with no MoE layer adds nothing); returns how many layers were rewritten."""
    from hocket.graph.moe_find import find_moe_layers
    from hocket.graph.report import GraphReport
    from hocket.graph.transplant import PASS_ERRORS, on_copy

    try:
        if not find_moe_layers(gm.graph):  # read only: a graph without a split-size all-to-all is not touched
            return 0
    except PASS_ERRORS as exc:
        logger.warning("hocket's MoE finder failed on a graph and left it as traced: %s", exc)
        return 0
    name = f"moe#{sum(1 for r in rewriter.log.reports if r.graph.startswith('moe#'))}"
    report, error = on_copy(gm.graph, lambda graph: moe_graph_pass(graph, planner=rewriter.planner,
                                                                   config=rewriter.config, name=name))
    if error:
        logger.warning("hocket's MoE pass failed on a graph and left it as traced: %s", error)
        report = GraphReport(graph=name, direction="forward",
                             note=f"hocket's MoE pass failed and left this graph as traced ({error}); please report")
    gm.recompile()
    if report is not None:
        rewriter.log.add(report)
    return sum(1 for n in gm.graph.nodes if MOE_CALL in n.meta)


MOE_CALL = "hocket_moe"
"""``node.meta`` key of a rewritten layer's call (its value: the plan's JSON)."""


def compile_with_moe(gm: fx.GraphModule, example_inputs: list, rewriter: object, inner: object) -> object:
    """The backends' entry: rewrite ``gm``'s MoE layers (:func:`run_moe_pass`), then compile the whole graph with
    ``inner`` (AOTAutograd + hocket's post-autograd pass). A rewritten layer is a call of
    :func:`hocket.ops.moe_traced.traced_moe_experts`, which traces into ``torch.ops.hocket.moe_route`` and the two
    MoE ops, so its forward and backward are part of the compiled graphs. If the rewritten graph fails to compile,
    the graph as traced is compiled instead and the layers' records say why (every rank fails alike: the graphs
    and the error are the same)."""
    from hocket.graph.moe_find import has_split_lists, op_name
    from hocket.graph.transplant import PASS_ERRORS, copy_graph, transplant

    if not any(op_name(n) == "a2a" and has_split_lists(n) for n in gm.graph.nodes):
        return inner(gm, example_inputs)  # no MoE layer can be in it
    traced = copy_graph(gm.graph)
    if not run_moe_pass(gm, rewriter):
        return inner(gm, example_inputs)
    try:
        return inner(gm, example_inputs)
    except PASS_ERRORS as exc:
        error = f"{type(exc).__name__}: {exc}".splitlines()[0]
        logger.warning("hocket's rewritten MoE graph failed to compile; compiling it as traced: %s", error)
        transplant(gm.graph, traced)
        gm.recompile()
        _undo_records(rewriter.log, f"the rewritten graph failed to compile ({error}); left as traced, please report")
    return inner(gm, example_inputs)


def _undo_records(log: object, reason: str) -> None:
    """Mark the rewritten layers of the last MoE report in ``log`` as left alone with ``reason``."""
    import dataclasses

    for i in range(len(log.reports) - 1, -1, -1):
        report = log.reports[i]
        if report.graph.startswith("moe#"):
            records = tuple(dataclasses.replace(r, rewritten=False, reason=reason,
                                                predicted_ms=r.predicted_sequential_ms) if r.rewritten else r
                            for r in report.moe_sites)
            log.reports[i] = dataclasses.replace(report, moe_sites=records)
            return


def all_to_all_ms(start: fx.Node, direction: str, planner: object) -> float | None:
    """Predicted time of an ``all_to_all_single`` with split sizes alone (None for other nodes or unknown sizes):
    priced as an all-gather moving as many bytes per rank (``rows`` rows of ``cols``), with ``rows`` the static
    row count of its input or output, else the smallest proven upper bound of either."""
    from hocket.core.site import Site, canonical_dtype
    from hocket.graph.moe_find import a2a_parts, has_split_lists, op_name, value
    from hocket.graph.planning import group_ranks

    if op_name(start) != "a2a" or not has_split_lists(start):
        return None
    rows_in, _, in_splits, group = a2a_parts(start)
    world = len(in_splits)
    bounds = [b for b in (_rows_bound(value(rows_in)), _rows_bound(value(start))) if b is not None]
    v = value(rows_in)
    if not bounds or not isinstance(v, torch.Tensor) or v.dim() < 1 or world < 2:
        return None
    cols = 1
    for d in v.shape[1:]:
        if not isinstance(d, int):
            return None
        cols *= d
    rows = max(world, -(-min(bounds) // world) * world)
    try:
        ranks = group_ranks(str(group))
        site = Site(kind="ag_mm", m=rows, k=cols, n=1, dtype=canonical_dtype(v.dtype), world=world,
                    ranks=ranks if len(ranks) == world else (), direction=direction)
    except ValueError:
        return None
    return planner.collective_ms(site)


def _rows_bound(v: object) -> int | None:
    if not isinstance(v, torch.Tensor) or v.dim() < 1:
        return None
    rows = v.shape[0]
    if isinstance(rows, int):
        return rows
    try:
        node = rows.node
        upper = node.shape_env.bound_sympy(node.expr).upper
        return int(upper) if upper.is_finite else None
    except (AttributeError, TypeError, ValueError):
        return None
