"""How bytes move: torch.distributed collectives and P2P (copy-engine and host-staged transports register later),
and the hierarchical form of the collectives (intra-node and inter-node sub-groups).

The names in ``__all__`` load their modules on first use (PEP 562), so importing this package
imports neither torch.distributed machinery nor any transport until a name is used.
"""

_GROUP = ("GroupHandle", "resolve_group")
_HIERARCHICAL = ("HierarchicalTransport", "NodeLayout", "close_sub_groups")
_PENDING = ("Pending", "TransportError", "wait_all")
_REGISTRY = ("available_transports", "get_transport", "register_transport")
_TORCH_DIST = ("TorchDistTransport",)

__all__ = [*_GROUP, *_HIERARCHICAL, *_PENDING, *_REGISTRY, *_TORCH_DIST]


def __getattr__(name: str) -> object:
    if name in _GROUP:
        from hocket.transport import group as home
    elif name in _HIERARCHICAL:
        from hocket.transport import hierarchical as home
    elif name in _PENDING:
        from hocket.transport import pending as home
    elif name in _REGISTRY:
        from hocket.transport import registry as home
    elif name in _TORCH_DIST:
        from hocket.transport import torch_dist as home
    else:
        raise AttributeError(f"module 'hocket.transport' has no attribute {name!r}")
    value = getattr(home, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
