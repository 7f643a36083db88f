"""hocket.graph: find overlap sites in post-autograd graphs, rewrite them into hocket operators,
reorder independent compute into the gaps of the collectives that stay.

``hocket.compile`` / ``hocket.explain`` (:mod:`hocket.graph.api`) are the entry points;
:func:`overlap_pass` is the pass itself, usable on any traced ATen graph. The report records
load with the package; the names that need torch.compile machinery load on first use (PEP 562).
"""

from hocket.graph.report import Explanation, GapRecord, GraphReport, LeftAlone, SiteRecord

_API = ("compile", "explain")
_PASSES = ("PassConfig", "overlap_pass")
_PLANNING = ("GraphPlanner",)

__all__ = ["Explanation", "GapRecord", "GraphReport", "LeftAlone", "SiteRecord", *_API, *_PASSES, *_PLANNING]


def __getattr__(name: str) -> object:
    if name in _API:
        from hocket.graph import api as home
    elif name in _PASSES:
        from hocket.graph import passes as home
    elif name in _PLANNING:
        from hocket.graph import planning as home
    else:
        raise AttributeError(f"module 'hocket.graph' has no attribute {name!r}")
    value = getattr(home, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
