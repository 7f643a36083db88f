"""Rewrite a matched MoE layer (:class:`hocket.graph.moe_find.MoeMatch`) into one ``moe_experts`` call.

The rewrite runs on Dynamo's graph, before AOTAutograd. The new node calls
:func:`hocket.ops.moe_traced.traced_moe_experts` (``moe_experts``'s path under ``torch.compile``) with the plan
fixed, so AOTAutograd traces it into ``torch.ops.hocket.moe_route``, ``all_to_all_grouped_mm`` and
``grouped_mm_all_to_all`` (forward, and through their autograd the backward) and the inner backend compiles the
whole graph in one piece. The call reads the layer's tokens, expert ids, routing scores and the grouped GEMMs'
own weight operands (``w_gate_up`` is the gate and up operands concatenated along their last dim; ``w_down`` the
down operand), all in the grouped GEMMs' dtype, and returns the combined rows in the scatter-add's dtype.
Everything the layer computed only for itself (the count exchange, the split sizes' ``.tolist()``, the
permutations, both all-to-alls) is erased. A shared expert added to the output (torchtitan's ``MoE.forward``)
stays in the graph as traced, computed after the call. :func:`find_shared` finds it (a computation that reads only
the layer's tokens and parameters, added to the layer's output), so the pass can price the layer with it: where
overlapping it is the plan (``shared_overlap``), the layer is left alone and whole-graph reordering moves the shared
expert into the gaps of torchtitan's all-to-alls instead.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import fx

from hocket.core.plan import Plan
from hocket.graph.moe_find import MoeMatch, op_name, reachable, shape_of, source


def _ancestors(node: fx.Node) -> set[fx.Node]:
    seen: set[fx.Node] = set()
    stack = [node]
    while stack:
        current = stack.pop()
        if current in seen:
            continue
        seen.add(current)
        stack.extend(current.all_input_nodes)
    return seen


def _pure(node: fx.Node) -> bool:
    if node.op not in ("call_function", "call_method"):
        return False
    if op_name(node) in ("a2a", "wait", "setitem"):
        return False
    target = node.target
    if isinstance(target, torch._ops.OpOverload) and (target._schema.is_mutable
                                                      or torch.Tag.nondeterministic_seeded in target.tags):
        return False
    if node.op == "call_method" and str(target).endswith("_"):
        return False  # in-place method
    return not node.is_impure()


@dataclass(frozen=True, kw_only=True)
class SharedExpert:
    """A computation ``s`` with ``out + s`` the layer's result and no dependence on the layer."""

    add: fx.Node
    """the ``out + s`` node (replaced by the call's result)."""
    routed_side: fx.Node
    """the operand of ``add`` that is (a reshape of) the layer's output."""
    nodes: tuple[fx.Node, ...]
    """the shared expert's nodes, graph order (moved into its module)."""
    inputs: tuple[fx.Node, ...]
    """what those nodes read from the rest of the graph (the module's arguments)."""
    token_input: int
    """which of ``inputs`` is the layer's tokens (the others are parameters)."""
    result: fx.Node


def find_shared(graph: fx.Graph, match: MoeMatch) -> SharedExpert | None:
    """The shared expert added to ``match``'s output (module docstring), or None. Read only: nothing moves."""
    chain = reachable(match.out)
    if any(u not in chain and op_name(u) != "add" for n in chain for u in n.users):
        return None  # the routed output is read elsewhere: the sum without the shared expert is needed
    adds = [u for n in chain for u in n.users if op_name(u) == "add"]
    if len(adds) != 1 or adds[0].kwargs:
        return None
    add = adds[0]
    sides = [a for a in add.args[:2] if isinstance(a, fx.Node)]
    if len(sides) != 2 or sum(a in chain for a in sides) != 1:
        return None
    routed_side = sides[0] if sides[0] in chain else sides[1]
    result = sides[1] if routed_side is sides[0] else sides[0]
    if shape_of(result) is None or shape_of(result) != shape_of(routed_side):
        return None
    position = {n: i for i, n in enumerate(graph.nodes)}
    anchor = position[match.out]
    nodes = []
    for node in sorted(_ancestors(result), key=position.__getitem__):
        if node.op in ("placeholder", "get_attr") or position[node] < anchor:
            continue  # computed before the layer's output: read by the shared expert, not moved
        if not _pure(node):
            return None
        nodes.append(node)
    inputs: list[fx.Node] = []
    moved = set(nodes)
    for node in nodes:
        for arg in node.all_input_nodes:
            if arg not in moved and arg not in inputs:
                inputs.append(arg)
        if any(u not in moved and u is not add for u in node.users):
            return None  # the shared expert's intermediate values are read elsewhere
    if not nodes or any(position[i] >= anchor for i in inputs):
        return None
    token_inputs = [i for i in inputs if i in _token_chain(match.x)]
    if len(token_inputs) != 1 or not all(i is token_inputs[0] or _is_parameter(i) for i in inputs):
        return None  # the shared expert reads more than the tokens and parameters: its gradient would need them
    return SharedExpert(add=add, routed_side=routed_side, nodes=tuple(nodes), inputs=tuple(inputs),
                        token_input=inputs.index(token_inputs[0]), result=result)


def _token_chain(x: fx.Node) -> list[fx.Node]:
    """``x`` and the nodes it is a reshape or cast of (the same tokens), up to their source."""
    chain = [x]
    while chain[-1] is not source(chain[-1]):
        chain.append(chain[-1].args[0])
    return chain


def _is_parameter(node: fx.Node) -> bool:
    """A graph input Dynamo lifted from a module parameter (``L_self_..._parameters_...``)."""
    return node.op == "placeholder" and "_parameters_" in str(node.target)


def _resolve_group(group_name: str) -> object:
    from torch.distributed.distributed_c10d import _resolve_process_group

    return _resolve_process_group(group_name)


def moe_call(*, group: object, plan: Plan, topk: int, compute_dtype: torch.dtype, out_dtype: torch.dtype) -> object:
    """The function a rewritten graph calls: ``(x, ids, scores, w_gate_up, w_down) -> out``, traced by
    AOTAutograd into :func:`hocket.ops.moe_traced.traced_moe_experts`'s ops (``plan`` fixed)."""

    def hocket_moe_experts(x, ids, scores, w_gate_up, w_down):
        from hocket.ops.moe_traced import traced_moe_experts

        tokens = x.shape[0]
        weights = scores.reshape(tokens, topk).to(compute_dtype)
        out = traced_moe_experts(x.to(compute_dtype), ids.reshape(tokens, topk), weights, w_gate_up, w_down, group,
                                 plan=plan)
        return out.to(out_dtype)

    return hocket_moe_experts


def _region(out: fx.Node) -> set[fx.Node]:
    """The layer's nodes: ``out``'s ancestors, and what reads only them (the write into the unpermute buffer,
    the split sizes' runtime asserts and their comparisons), transitively."""
    region = _ancestors(out)
    graph_nodes = list(out.graph.nodes)
    grew = True
    while grew:
        grew = False
        for node in graph_nodes:
            if node in region or not node.all_input_nodes or not all(n in region for n in node.all_input_nodes):
                continue
            if _pure(node) or op_name(node) == "setitem" or node.target is torch.ops.aten._assert_scalar.default:
                region.add(node)
                grew = True
    return region


def rewrite_moe(graph: fx.Graph, match: MoeMatch, *, plan: Plan) -> fx.Node:
    """Replace ``match`` by one call that traces into hocket's MoE ops (module docstring); returns its node."""
    region = _region(match.out)
    keep = _ancestors(match.x) | _ancestors(match.ids) | _ancestors(match.scores)
    keep |= _ancestors(match.b_gate) | _ancestors(match.b_up) | _ancestors(match.b_down)
    out_value = match.out.meta.get("example_value", match.out.meta.get("val"))
    call = moe_call(group=_resolve_group(match.group_name), plan=plan, topk=match.topk,
                    compute_dtype=match.compute_dtype, out_dtype=out_value.dtype)
    with graph.inserting_before(match.out):
        w_gate_up = graph.call_function(torch.cat, ([match.b_gate, match.b_up], -1))
        fused = graph.call_function(call, (match.x, match.ids, match.scores, w_gate_up, match.b_down))
    fused.meta["hocket_moe"] = plan.to_json()
    fused.meta["example_value"] = out_value
    match.out.replace_all_uses_with(fused)
    for node in reversed(list(graph.nodes)):
        if node in region and node not in keep and node is not fused and not node.users and node.op != "placeholder":
            graph.erase_node(node)
    return fused
