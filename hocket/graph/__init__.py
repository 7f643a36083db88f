"""hocket.graph: find overlap sites in post-autograd graphs, rewrite them into hocket operators,
reorder independent compute into the gaps of the collectives that stay.

``hocket.compile`` / ``hocket.explain`` (:mod:`hocket.graph.api`) are the entry points;
:func:`overlap_pass` is the pass itself, usable on any traced ATen graph.
"""

from hocket.graph.api import compile, explain
from hocket.graph.passes import PassConfig, overlap_pass
from hocket.graph.planning import GraphPlanner
from hocket.graph.report import Explanation, GapRecord, GraphReport, LeftAlone, SiteRecord

__all__ = ["Explanation", "GapRecord", "GraphPlanner", "GraphReport", "LeftAlone", "PassConfig", "SiteRecord",
           "compile", "explain", "overlap_pass"]
