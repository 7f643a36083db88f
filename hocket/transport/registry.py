"""Which transport moves a plan's bytes: a name -> factory table.

``collective`` and ``p2p`` are torch.distributed (collectives and P2P ops); the
copy-engine (symmetric memory) and host-staged transports register themselves here
with :func:`register_transport` when their modules land.
"""

from __future__ import annotations

from collections.abc import Callable

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


def get_transport(name: str, group: GroupHandle, *, comm_sms: int | None = None, sizes: object = None):
    """The transport ``name`` on ``group``; for SM-driven transports with ``comm_sms`` set, on the
    capped communicator that :mod:`hocket.transport.sm_budget` made for the group (if any). ``sizes``
    (a :class:`hocket.core.sizes.TransportSizes`, for the copy-engine and host-staged transports) is passed
    to the factory as ``sizes=``; None leaves it out (the transport then uses the sizes in force)."""
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
