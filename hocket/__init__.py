"""hocket: compute-communication overlap operators for distributed accelerator clusters."""

from hocket.plan.plan import Plan
from hocket.site import Site

__version__ = "0.1.0"

__all__ = ["Plan", "Site", "__version__", "compile", "explain"]


def __getattr__(name: str) -> object:
    # hocket.compile / hocket.explain import torch.compile machinery: load them on first use only
    if name in ("compile", "explain"):
        from hocket.graph import api

        return getattr(api, name)
    raise AttributeError(f"module 'hocket' has no attribute {name!r}")
