"""Whole-graph reordering: fill the gap between a collective's start and its wait with independent compute.

After the rewrites, a functional collective that is still in the graph runs
asynchronously from its ``all_gather_into_tensor``/``reduce_scatter_tensor``/``all_reduce``
node to its ``wait_tensor``. Traced graphs wait at once; this pass (in the spirit of
Lancet) widens the gap:

1. *sink*: compute placed before the start that the collective does not need (for
   example the weight-gradient matmuls next to an input-gradient reduce-scatter)
   moves to just after the start, so communication begins earlier; this never delays
   anything;
2. *hoist*: compute after the wait that does not read the collective's result moves
   in front of the wait, until the estimated compute in the gap covers the estimated
   communication time.

Only pure ATen computations move; placeholders, outputs, mutations, random ops and
every communication node (collectives, waits, hocket operators) stay where they are,
so every rank still issues the same communication in the same order. Moving an op
never changes what it computes: numerics are identical.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from torch import fx

from hocket.graph.nodes import COLLECTIVE_TARGETS, MATMUL_TARGETS, is_call, is_communication, is_impure, single_wait
from hocket.graph.order import movable, positions


@dataclass(frozen=True, kw_only=True)
class Gap:
    start: fx.Node
    moved_before: int
    moved_after: int
    matmuls_in_gap: int
    gap_compute_ms: float | None
    comm_ms: float | None


def _is_boundary(node: fx.Node) -> bool:
    return node.op in ("placeholder", "output") or is_communication(node) or is_impure(node)


def _ancestors_within(start: fx.Node, low: int, pos: dict[fx.Node, int]) -> set[fx.Node]:
    seen: set[fx.Node] = set()
    stack = list(start.all_input_nodes)
    while stack:
        node = stack.pop()
        if node in seen or pos[node] <= low:
            continue
        seen.add(node)
        stack.extend(node.all_input_nodes)
    return seen


def _sink_candidates(nodes: list[fx.Node], start: fx.Node, pos: dict[fx.Node, int]) -> list[fx.Node]:
    """Nodes between the previous boundary and ``start`` that ``start`` does not need (graph order)."""
    index = pos[start]
    low = index - 1
    while low >= 0 and not _is_boundary(nodes[low]):
        low -= 1
    needed = _ancestors_within(start, low, pos)
    sunk: set[fx.Node] = set()
    for i in range(index - 1, low, -1):
        node = nodes[i]
        if node in needed or not movable(node):
            continue
        if all(pos[u] > index or u in sunk for u in node.users):
            sunk.add(node)
    return sorted(sunk, key=pos.__getitem__)


def _hoist_candidates(nodes: list[fx.Node], wait: fx.Node, pos: dict[fx.Node, int],
                      budget: Callable[[fx.Node], bool]) -> list[fx.Node]:
    """Nodes after ``wait`` (up to the next boundary) that do not read its result, while ``budget`` allows."""
    hoisted: list[fx.Node] = []
    chosen: set[fx.Node] = set()
    blocked: set[fx.Node] = {wait}
    index = pos[wait]
    for node in nodes[index + 1:]:
        if _is_boundary(node):
            break
        later_inputs = [n for n in node.all_input_nodes if pos[n] >= index]
        if not movable(node) or any(n in blocked or n not in chosen for n in later_inputs):
            blocked.add(node)
            continue
        if not budget(node):
            break
        hoisted.append(node)
        chosen.add(node)
    return hoisted


def fill_gaps(graph: fx.Graph, *, comm_ms: Callable[[fx.Node], float | None],
              compute_ms: Callable[[fx.Node], float | None]) -> list[Gap]:
    """Reorder around every functional collective still in ``graph`` (see module docstring)."""
    gaps: list[Gap] = []
    starts = [n for n in graph.nodes if is_call(n, COLLECTIVE_TARGETS)]
    for start in starts:
        wait = single_wait(start)
        if wait is None:
            continue
        nodes = list(graph.nodes)
        pos = {n: i for i, n in enumerate(nodes)}
        if any(_is_boundary(n) for n in nodes[pos[start] + 1:pos[wait]]):
            continue  # another communication is in flight inside this gap: leave both as they are
        sunk = _sink_candidates(nodes, start, pos)
        anchor = start
        for node in sunk:
            anchor.append(node)
            anchor = node
        nodes = list(graph.nodes)
        pos = positions(graph)
        in_gap = nodes[pos[start] + 1:pos[wait]]
        costs = [compute_ms(n) for n in in_gap]
        total = sum(c or 0.0 for c in costs)
        target = comm_ms(start)
        state = {"total": total}

        def budget(node: fx.Node) -> bool:
            if target is None or state["total"] >= target:
                return False
            state["total"] += compute_ms(node) or 0.0
            return True

        hoisted = _hoist_candidates(nodes, wait, pos, budget)
        for node in hoisted:
            wait.prepend(node)
        if not sunk and not hoisted:
            continue
        matmuls = sum(1 for n in (*in_gap, *hoisted) if is_call(n, MATMUL_TARGETS))
        gaps.append(Gap(start=start, moved_before=len(sunk), moved_after=len(hoisted), matmuls_in_gap=matmuls,
                        gap_compute_ms=state["total"], comm_ms=target))
    return gaps
