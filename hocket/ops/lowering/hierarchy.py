"""What a plan with ``hierarchy="intra_first"`` needs at run time besides its strategy's executor.

* :func:`group_nodes`: the node of each of the group's ranks, from the cluster the process planner
  describes (``HOCKET_CLUSTER``, else the probe of this machine: :attr:`hocket.ops.live.LivePlanner.cluster`),
  checked (:func:`hocket.transport.hierarchical.check_layout`) so a group that lies in one node, holds one rank
  per node or unequal nodes, or is not covered by the cluster raises a ValueError naming the plan field,
  the group and the fix. :mod:`hocket.ops.dispatch` runs it before the agreement (an explicit plan: the error
  is the rank's local error, reported on every rank, and the layout is part of the call's descriptor) or
  after the plan is settled (a chosen plan: rank 0's layout is used on every rank).
* :func:`hierarchical_executor`: the executor a hierarchical plan runs. Every strategy the space enumerates
  with a hierarchy moves its bytes through ``rt.transport`` (the hierarchical transport) except
  ``sequential``, whose executor is the reference on the flat group; its hierarchical form is one
  collective through the transport, then the matmul (:data:`SEQUENTIAL_OVER_TRANSPORT`).
"""

from __future__ import annotations

from collections.abc import Callable

from hocket.core.plan import Plan
from hocket.ops.lowering.chunked import gather_matmul, matmul_all_reduce, matmul_scatter
from hocket.ops.lowering.runtime import bind_executors
from hocket.transport.group import GroupHandle
from hocket.transport.hierarchical import HIERARCHY_TRANSPORTS, NodeLayout, check_layout

SEQUENTIAL_OVER_TRANSPORT = bind_executors(ag_mm=gather_matmul, mm_rs=matmul_scatter, mm_ar=matmul_all_reduce,
                                           chunks=1)
"""``sequential`` with a hierarchy: the whole operand's collective through the plan's transport (blocking
until it lands), then the matmul."""


def hierarchical_executor(kind: str, plan: Plan, run: Callable) -> Callable:
    """The executor of ``plan`` (hierarchical) for ``kind``, given its strategy's executor ``run``."""
    if plan.strategy == "sequential":
        return SEQUENTIAL_OVER_TRANSPORT[kind]
    return run


def _planner_cluster() -> object:
    from hocket.ops.live import process_planner

    return process_planner().cluster


def group_nodes(group: GroupHandle, plan: Plan, cluster: object = None, *,
                uneven: bool = False) -> tuple[tuple[int, ...], str]:
    """``(node of each group rank, cluster name)`` for ``plan``'s hierarchy on ``group`` (``cluster``: the
    process planner's when None); a plan or layout the hierarchy cannot run raises ValueError. ``uneven``: the
    site's shards differ in rows, whose exact collectives (:mod:`hocket.transport.uneven`) run on the flat group,
    so only ``Plan(splits="padded")`` (equal collectives through the plan's transport) runs hierarchically."""
    if plan.transport not in HIERARCHY_TRANSPORTS:
        raise ValueError(f"plan.hierarchy={plan.hierarchy!r} runs over transport {HIERARCHY_TRANSPORTS} only, not "
                         f"plan.transport={plan.transport!r}; use transport='collective' with the hierarchy, or "
                         f"hierarchy=None")
    if uneven and getattr(plan, "splits", None) != "padded":
        raise ValueError(f"plan.hierarchy={plan.hierarchy!r} with uneven shards runs only with plan.splits='padded' "
                         f"(every shard padded to the largest: equal collectives, which run hierarchically); the "
                         f"exact uneven collectives have no hierarchical form. Use splits='padded', or hierarchy=None")
    cluster = _planner_cluster() if cluster is None else cluster
    name = getattr(cluster, "name", "?")
    try:
        nodes = tuple(cluster.node_of(r) for r in group.ranks)
    except ValueError as exc:
        raise ValueError(f"plan.hierarchy={plan.hierarchy!r} on group {group.name!r}: cluster {name!r} does not "
                         f"cover the group's global ranks {list(group.ranks)} ({exc}); describe the job's nodes "
                         f"with HOCKET_CLUSTER=<preset or YAML>, or use hierarchy=None") from None
    check_layout(NodeLayout(group.ranks, nodes), group_name=group.name, cluster_name=name)
    return nodes, name
