"""Node order in an fx graph: positions, dependency closures, and moving nodes without breaking them."""

from __future__ import annotations

import operator

import torch
from torch import fx

from hocket.graph.nodes import is_communication, is_impure, is_noop_wait


def positions(graph: fx.Graph) -> dict[fx.Node, int]:
    return {node: i for i, node in enumerate(graph.nodes)}


def descendants(node: fx.Node) -> set[fx.Node]:
    """Every node that reads ``node``'s result, directly or not."""
    seen: set[fx.Node] = set()
    stack = list(node.users)
    while stack:
        current = stack.pop()
        if current not in seen:
            seen.add(current)
            stack.extend(current.users)
    return seen


def movable(node: fx.Node) -> bool:
    """A pure ATen/prims computation (or a getitem of one): safe to place anywhere its inputs allow."""
    if node.op != "call_function" or is_communication(node) or is_impure(node):
        return False
    if node.target is operator.getitem:
        return True
    return isinstance(node.target, torch._ops.OpOverload) and node.target.namespace in ("aten", "prims")


def ancestors_after(nodes: list[fx.Node], anchor: fx.Node, pos: dict[fx.Node, int]) -> list[fx.Node] | None:
    """``nodes`` and their ancestors placed after ``anchor``, in graph order; None if one cannot move."""
    limit = pos[anchor]
    found: set[fx.Node] = set()
    stack = [n for n in nodes if pos[n] > limit]
    while stack:
        current = stack.pop()
        if current in found:
            continue
        if current is anchor or not movable(current):
            return None
        found.add(current)
        stack.extend(n for n in current.all_input_nodes if pos[n] > limit)
    return sorted(found, key=pos.__getitem__)


def hoist_before(nodes: list[fx.Node], anchor: fx.Node) -> bool:
    """Move ``nodes`` (and what they need) before ``anchor``; False, changing nothing, when impossible."""
    pos = positions(anchor.graph)
    needed = ancestors_after(nodes, anchor, pos)
    if needed is None:
        return False
    for node in needed:
        anchor.prepend(node)
    return True


def can_hoist(nodes: list[fx.Node], anchor: fx.Node) -> bool:
    return ancestors_after(nodes, anchor, positions(anchor.graph)) is not None


def remove_dead_code(graph: fx.Graph) -> int:
    """Erase pure nodes nothing reads (collectives, waits and random ops stay); returns how many."""
    removed = 0
    for node in reversed(list(graph.nodes)):
        if node.users or node.op in ("placeholder", "output", "get_attr"):
            continue
        if not is_noop_wait(node) and (is_impure(node) or is_communication(node)):
            continue  # side effects, random state, or a collective every rank must still run in order
        graph.erase_node(node)
        removed += 1
    return removed
