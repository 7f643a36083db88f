"""Rewriters: replace a matched pattern by one ``torch.ops.hocket`` operator carrying its Plan.

The operators are called on the graph's own tensors without autograd (the graphs are
post-autograd), with the plan as JSON and the graph's direction, so the runtime never
plans again. Replaced nodes are erased; readers of the gathered tensor that are not
fused get it from the operator (``return_A``).
"""

from __future__ import annotations

import operator

import torch
from torch import fx

import hocket.ops._library  # noqa: F401  (registers torch.ops.hocket)
from hocket.graph.build import erase_unused, insert_call
from hocket.graph.matches import AllGatherMatch, GatherUses, ProducerMatmul, ScatterMatch
from hocket.graph.nodes import (
    TRANSPOSE_TARGETS,
    VIEW_TARGETS,
    aten,
    is_call,
    is_contiguous,
    is_noop_wait,
    is_plain_cast,
    static_shape,
    val,
)
from hocket.graph.order import hoist_before

hocket_ops = torch.ops.hocket
RESHAPE_LIKE = VIEW_TARGETS | TRANSPOSE_TARGETS


def gathered_operands(uses: GatherUses) -> list[fx.Node]:
    """The nodes the fused all-gather+matmul reads besides the shard (Bs, transposed Ps, biases)."""
    needed = []
    for consumer in uses.consumers:
        needed.append(consumer.p if consumer.transposed else consumer.b)
        if consumer.bias is not None:
            needed.append(consumer.bias)
    return needed


def fuse_all_gather_matmul(graph: fx.Graph, match: AllGatherMatch, uses: GatherUses, *, plan_json: str,
                           direction: str) -> fx.Node:
    """Replace the gather and its consumer matmuls by ``hocket.all_gather_matmul``; returns the new node."""
    anchor = match.start
    if not hoist_before(gathered_operands(uses), anchor):
        raise RuntimeError("internal: the matmul operands cannot move before the all-gather; the finder "
                           "should have left this consumer out")
    gathered_shape = static_shape(match.result)
    return_a = bool(uses.others)
    with graph.inserting_before(anchor):
        shard = match.shard
        if val(shard).dtype != uses.dtype:
            shard = insert_call(graph, torch.ops.prims.convert_element_type.default, (shard, uses.dtype))
        bs = [insert_call(graph, aten.t.default, (c.p,)) if c.transposed else c.b for c in uses.consumers]
        fused = insert_call(graph, hocket_ops.all_gather_matmul.default,
                            (shard, bs, match.gather_dim, match.group_name, return_a, False, plan_json, direction))
        gathered = insert_call(graph, operator.getitem, (fused, 0)) if return_a else None
        out_list = insert_call(graph, operator.getitem, (fused, 1))
        outs = [insert_call(graph, operator.getitem, (out_list, i)) for i in range(len(bs))]
    for consumer, out in zip(uses.consumers, outs):
        rows = static_shape(consumer.source)[0]
        with graph.inserting_before(consumer.mm):
            result = insert_call(graph, aten.view.default, (out, [rows, static_shape(out)[-1]]))
            if consumer.transposed:
                result = insert_call(graph, aten.t.default, (result,))
            elif consumer.bias is not None:
                result = insert_call(graph, aten.add.Tensor, (result, consumer.bias))
        consumer.mm.replace_all_uses_with(result)
        graph.erase_node(consumer.mm)
    if gathered is not None:
        anchor_after = outs[-1]
        for other in uses.others:
            if static_shape(other) == gathered_shape and other is match.result:
                replacement = gathered
            else:
                with graph.inserting_after(anchor_after):
                    replacement = insert_call(graph, aten.view.default, (gathered, list(static_shape(other))))
                anchor_after = replacement
            other.replace_all_uses_with(replacement)
    _erase_dead_chain(graph, match.result)
    erase_unused(graph, match.pattern)
    return fused


def _erase_dead_chain(graph: fx.Graph, root: fx.Node) -> None:
    """Erase reshapes/casts hanging off ``root`` that nothing reads any more (leaves first)."""
    stack, order, seen = [root], [], {root}
    while stack:
        node = stack.pop()
        order.append(node)
        for user in node.users:
            if user not in seen and (is_call(user, RESHAPE_LIKE) or is_plain_cast(user) or is_noop_wait(user)):
                seen.add(user)
                stack.append(user)
    for node in reversed(order):
        if node is not root and not node.users:
            graph.erase_node(node)


def _reshaped(graph: fx.Graph, node: fx.Node, shape: list[int]) -> fx.Node:
    if static_shape(node) == tuple(shape):
        return node
    target = aten.view.default if is_contiguous(node) else aten.reshape.default
    return insert_call(graph, target, (node, shape))


def fused_operands(graph: fx.Graph, producer: ProducerMatmul) -> tuple[fx.Node, fx.Node]:
    """(A, B) of the one matmul equal to the sum of the producer's matmuls (K concatenated)."""
    if len(producer.terms) == 1:
        _, a, b = producer.terms[0]
        return a, b
    a = insert_call(graph, aten.cat.default, ([a for _, a, _ in producer.terms], 1))
    b = insert_call(graph, aten.cat.default, ([b for _, _, b in producer.terms], 0))
    return a, b


def fuse_matmul_reduce(graph: fx.Graph, match: ScatterMatch, producer: ProducerMatmul, *, plan_json: str,
                       direction: str) -> fx.Node:
    """Replace matmul(s) + reduce-scatter/all-reduce by ``hocket.matmul_reduce_scatter``/``matmul_all_reduce``."""
    source_shape = list(static_shape(match.source))
    with graph.inserting_before(match.start):
        a, b = fused_operands(graph, producer)
        a = _reshaped(graph, a, [*source_shape[:-1], producer.k])
        if match.scatter_dim is None:
            fused = insert_call(graph, hocket_ops.matmul_all_reduce.default,
                                (a, b, match.reduce_op, match.group_name, plan_json, direction))
        else:
            fused = insert_call(graph, hocket_ops.matmul_reduce_scatter.default,
                                (a, b, match.reduce_op, match.scatter_dim, match.group_name, plan_json, direction))
    if static_shape(fused) != static_shape(match.wait):
        raise RuntimeError(f"internal: fused result {static_shape(fused)} differs from the collective's "
                           f"{static_shape(match.wait)}; please report this graph")
    match.wait.replace_all_uses_with(fused)
    erase_unused(graph, match.pattern)
    erase_unused(graph, (*producer.between, *(mm for mm, _, _ in producer.terms)))
    return fused


def expected_reduced_shape(match: ScatterMatch) -> tuple[int, ...]:
    shape = list(static_shape(match.source))
    if match.scatter_dim is not None:
        shape[match.scatter_dim] //= match.world
    return tuple(shape)
