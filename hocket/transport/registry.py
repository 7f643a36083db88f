"""Which transport moves a plan's bytes: a name -> factory table.

``collective`` and ``p2p`` are torch.distributed (collectives and P2P ops); the
copy-engine (symmetric memory) and host-staged transports register themselves here
with :func:`register_transport` when their modules land. A plan with ``hierarchy="intra_first"``
gets its transport wrapped in :class:`hocket.transport.hierarchical.HierarchicalTransport` (its
collectives run on intra-node and inter-node sub-groups), over ``collective`` / ``p2p`` only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from hocket.transport.group import GroupHandle
from hocket.transport.torch_dist import TorchDistTransport

TransportFactory = Callable[[GroupHandle], object]

_FACTORIES: dict[str, TransportFactory] = {
    "collective": TorchDistTransport,
    "p2p": TorchDistTransport,
}


def register_transport(name: str, factory: TransportFactory) -> None:
    """Make ``Plan(transport=name)`` usable; ``factory(group)`` returns the transport object."""
    _FACTORIES[name] = factory


def available_transports() -> tuple[str, ...]:
    return tuple(sorted(_FACTORIES))


SM_DRIVEN = ("collective", "p2p")
"""transports whose kernels run on SMs (NCCL): a plan's ``comm_sms`` picks their communicator."""


def get_transport(name: str, group: GroupHandle, *, comm_sms: int | None = None, sizes: object = None,
                  hierarchy: str | None = None, nodes: Sequence[int] | None = None, cluster_name: str = "?"):
    """The transport ``name`` on ``group``; for SM-driven transports with ``comm_sms`` set, on the
    capped communicator that :mod:`hocket.transport.sm_budget` made for the group (if any). ``sizes``
    (a :class:`hocket.core.sizes.TransportSizes`, for the copy-engine and host-staged transports) is passed
    to the factory as ``sizes=``; None leaves it out (the transport then uses the sizes in force).

    ``hierarchy="intra_first"``: the hierarchical transport of ``group`` whose group rank ``g`` lies on node
    ``nodes[g]`` (of cluster ``cluster_name``, named in errors); its sub-groups take no ``comm_sms`` budget.
    It runs over :data:`~hocket.transport.hierarchical.HIERARCHY_TRANSPORTS` only; another transport, a
    missing ``nodes`` or a layout it cannot run on (one node, one rank per node, unequal nodes) raise."""
    if hierarchy is not None:
        return _hierarchical(name, group, hierarchy, nodes, cluster_name)
    try:
        factory = _FACTORIES[name]
    except KeyError:
        raise ValueError(
            f"plan.transport={name!r} is not available in this build; available: {available_transports()}. "
            "Use transport='collective' (torch.distributed) or install the transport's module"
        ) from None
    if comm_sms is not None and name in SM_DRIVEN:
        from hocket.transport.sm_budget import budget_group

        picked = budget_group(group, comm_sms)
        if picked is not None:
            group = picked[1]
    return factory(group) if sizes is None else factory(group, sizes=sizes)


def _hierarchical(name: str, group: GroupHandle, hierarchy: str, nodes: Sequence[int] | None, cluster_name: str):
    from hocket.transport.hierarchical import HIERARCHY_TRANSPORTS, hierarchical_transport

    if hierarchy != "intra_first":
        raise ValueError(f"plan.hierarchy={hierarchy!r} is unknown; use 'intra_first' or None")
    if name not in HIERARCHY_TRANSPORTS:
        raise ValueError(f"plan.hierarchy='intra_first' runs over transport {HIERARCHY_TRANSPORTS} only, not "
                         f"transport={name!r}; use transport='collective' with the hierarchy, or hierarchy=None")
    if nodes is None or len(nodes) != group.world:
        raise ValueError(f"plan.hierarchy='intra_first' on group {group.name!r} needs the node of each of its "
                         f"{group.world} ranks (nodes={nodes!r}); pass nodes=[node of group rank 0, ...]")
    return hierarchical_transport(group, nodes, cluster_name=cluster_name)
