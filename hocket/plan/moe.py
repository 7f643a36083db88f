"""The plan space and search of an expert-parallel MoE site (:class:`hocket.core.moe.MoeSite`).

Interface (filled in by the MoE planner work): :func:`choose_moe_plan` is what a ``plan=None`` call of
``hocket.ops.moe_experts`` asks; :func:`search_moe` prices every candidate and returns a
:class:`hocket.plan.search.SearchResult` like ``search_halo``.
"""

from __future__ import annotations

from hocket.core.moe import MoeSite
from hocket.core.plan import Plan


def choose_moe_plan(site: MoeSite, cluster=None, profile=None) -> Plan:
    """The plan a ``plan=None`` call of ``site`` runs (sequential until the MoE space is priced)."""
    if not isinstance(site, MoeSite):
        raise TypeError(f"site={site!r} must be a hocket.core.moe.MoeSite")
    return Plan(splits="exchanged")
