"""How bytes move: torch.distributed collectives and P2P (copy-engine and host-staged transports register later)."""

from hocket.transport.group import GroupHandle, process_group_of, resolve_group
from hocket.transport.pending import Pending, TransportError, wait_all
from hocket.transport.registry import available_transports, get_transport, register_transport
from hocket.transport.sm_budget import budget_group, close_sm_budgets, create_sm_budgets
from hocket.transport.torch_dist import TorchDistTransport

__all__ = [
    "GroupHandle", "Pending", "TorchDistTransport", "TransportError", "available_transports", "get_transport",
    "process_group_of", "register_transport", "resolve_group", "wait_all", "create_sm_budgets", "close_sm_budgets",
    "budget_group",
]
