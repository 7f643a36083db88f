"""Run a graph pass on a copy and keep the result only if it succeeds (a model is never broken by hocket)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from torch import fx

T = TypeVar("T")

PASS_ERRORS = (RuntimeError, ValueError, TypeError, KeyError, IndexError, AssertionError)
"""What a failing rewrite raises (an unexpected graph shape, a checker's complaint)."""


def copy_graph(graph: fx.Graph) -> fx.Graph:
    work = fx.Graph(owning_module=graph.owning_module)
    out = work.graph_copy(graph, {})
    work.output(out)
    return work


def transplant(dst: fx.Graph, src: fx.Graph) -> None:
    """Make ``dst`` compute what ``src`` computes, keeping ``dst``'s placeholders (same order)."""
    dst_inputs = [n for n in dst.nodes if n.op == "placeholder"]
    src_inputs = [n for n in src.nodes if n.op == "placeholder"]
    if len(dst_inputs) != len(src_inputs):
        raise RuntimeError("internal: a graph pass changed the number of graph inputs")
    for node in reversed(list(dst.nodes)):
        if node.op != "placeholder":
            dst.erase_node(node)
    env = dict(zip(src_inputs, dst_inputs))
    for node in src.nodes:
        if node.op != "placeholder":
            env[node] = dst.node_copy(node, lambda n: env[n])


def on_copy(graph: fx.Graph, run: Callable[[fx.Graph], T]) -> tuple[T | None, str]:
    """``run`` a pass on a copy of ``graph``; on success move the result into ``graph``.

    Returns ``(run's result, "")`` or ``(None, why it failed)`` with ``graph`` untouched.
    """
    work = copy_graph(graph)
    try:
        result = run(work)
        work.lint()
    except PASS_ERRORS as exc:
        return None, f"{type(exc).__name__}: {exc}"
    transplant(graph, work)
    return result, ""
