"""How bytes move: torch.distributed collectives and P2P (copy-engine and host-staged transports register later).

The names below load their modules on first use (PEP 562): the cost model and the planner import
plain-Python modules of this package (``peer_protocol``, ``relay_layout``) without importing torch.
"""

_HOME = {
    **dict.fromkeys(("GroupHandle", "process_group_of", "resolve_group"), "hocket.transport.group"),
    **dict.fromkeys(("Pending", "TransportError", "wait_all"), "hocket.transport.pending"),
    **dict.fromkeys(("available_transports", "get_transport", "register_transport"), "hocket.transport.registry"),
    **dict.fromkeys(("budget_group", "close_sm_budgets", "create_sm_budgets"), "hocket.transport.sm_budget"),
    "TorchDistTransport": "hocket.transport.torch_dist",
}
"""public name -> the module that defines it."""

__all__ = [
    "GroupHandle", "Pending", "TorchDistTransport", "TransportError", "available_transports", "get_transport",
    "process_group_of", "register_transport", "resolve_group", "wait_all", "create_sm_budgets", "close_sm_budgets",
    "budget_group",
]


def __getattr__(name: str) -> object:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'hocket.transport' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
