"""hocket: compute-communication overlap operators for distributed accelerator clusters.

``import hocket`` is cheap: it loads the vocabularies (:class:`Site`, :class:`Plan`) and makes every
subpackage reachable on first use, as ``torch.nn`` is from ``torch`` (``hocket.ops.all_gather_matmul``,
``hocket.hardware.load_cluster``, ...). Triton is never imported here: only the GPU kernels need it.
"""

from __future__ import annotations

import importlib

from hocket.core.plan import Plan
from hocket.core.site import Site
from hocket.core.version import __version__

SUBPACKAGES = ("bench", "calibrate", "cli", "core", "cost", "graph", "hardware", "kernels", "launch", "models",
               "ops", "plan", "search", "sim", "strategies", "timing", "transport", "validate")
"""the subpackages ``hocket.<name>`` loads on first use"""

__all__ = ["Plan", "Site", "__version__", "compile", "explain", *SUBPACKAGES]


def __getattr__(name: str) -> object:
    if name in SUBPACKAGES:
        module = importlib.import_module(f"hocket.{name}")
        globals()[name] = module
        return module
    # hocket.compile / hocket.explain import torch.compile machinery: load them on first use only
    if name in ("compile", "explain"):
        from hocket.graph import api

        return getattr(api, name)
    raise AttributeError(f"module 'hocket' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
