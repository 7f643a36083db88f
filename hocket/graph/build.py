"""Inserting nodes into a post-autograd graph with their fake-tensor metadata.

Later matching (and Inductor, when it compiles the graph) reads ``node.meta["val"]``,
so every node a rewriter adds gets one, computed by running the op on the inputs'
fake tensors in the graph's own fake mode.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import fx
from torch.utils._pytree import tree_map


def _fake_mode(values: list[object]) -> object | None:
    from torch._subclasses.fake_tensor import FakeTensor

    for value in values:
        if isinstance(value, FakeTensor):
            return value.fake_mode
    return None


def _meta(arg: object) -> object:
    if isinstance(arg, fx.Node):
        if "val" not in arg.meta:
            raise ValueError(f"node {arg.name} has no fake-tensor metadata (meta['val']); hocket's graph pass "
                             "runs on graphs traced by torch.compile/AOTAutograd")
        return arg.meta["val"]
    return arg


def insert_call(graph: fx.Graph, target: Any, args: tuple, kwargs: dict | None = None) -> fx.Node:
    """``graph.call_function`` at the current insertion point, with ``meta['val']`` filled in."""
    kwargs = kwargs or {}
    node = graph.call_function(target, args, kwargs)
    fake_args = tree_map(_meta, args)
    fake_kwargs = tree_map(_meta, kwargs)
    flat = [v for v in torch.utils._pytree.tree_leaves((fake_args, fake_kwargs))]
    mode = _fake_mode(flat)
    if mode is None:
        node.meta["val"] = target(*fake_args, **fake_kwargs)
    else:
        with mode:
            node.meta["val"] = target(*fake_args, **fake_kwargs)
    return node


def erase_unused(graph: fx.Graph, nodes: tuple[fx.Node, ...] | list[fx.Node]) -> None:
    """Erase ``nodes`` (a replaced pattern), last first; every one must be unread by now."""
    for node in sorted(set(nodes), key=list(graph.nodes).index, reverse=True):
        if node.users:
            raise RuntimeError(f"internal: node {node.name} of a replaced pattern is still read by "
                               f"{[u.name for u in node.users]}; please report this graph")
        graph.erase_node(node)
