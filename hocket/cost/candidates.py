"""A small, reasonable candidate list for one Site on one cluster.

The planner's full space (``hocket.plan.space``) replaces this; it is kept in this one
function so ``hocket predict`` and the validation tool have something to rank meanwhile.
"""

from __future__ import annotations

from hocket.core.plan import Plan

CHUNK_CHOICES = (2, 4, 8, 16)
RING_CHUNKS = (1, 2, 4)
TILE_GROUPS = (4, 8, 16)
SUBSTITUTE_CHUNKS = (2, 4, 8)
COLLECTIVE_TRANSPORTS = ("collective", "copy_engine", "host_staged")
RING_TRANSPORTS = ("p2p", "copy_engine")


def sequential_plan(offered: frozenset[str]) -> Plan:
    """The baseline: sequential over ``collective`` when offered, else the first offered whole-collective path."""
    for transport in COLLECTIVE_TRANSPORTS:
        if transport in offered:
            return Plan(strategy="sequential", transport=transport)
    raise ValueError(f"the group offers no transport that carries a whole collective (offered: {sorted(offered)})")


def candidate_plans(site, cluster) -> list[Plan]:
    """Sequential first, then overlapped plans the cluster's transports allow for ``site``."""
    ranks = site.group_ranks
    offered = cluster.group_transports(ranks) if site.world > 1 else frozenset({"collective"})
    spans_nodes = site.world > 1 and len({cluster.node_of(r) for r in (ranks[0], ranks[-1])}) > 1
    whole = [t for t in COLLECTIVE_TRANSPORTS if t in offered]
    rings = [t for t in RING_TRANSPORTS if t in offered]
    hierarchies = (None, "intra_first") if spans_nodes else (None,)
    base = sequential_plan(offered)
    plans = [base]
    for transport in whole:
        for hierarchy in hierarchies:
            if transport == "copy_engine" and hierarchy:
                continue
            if (transport, hierarchy) != (base.transport, None):
                plans.append(Plan(strategy="sequential", transport=transport, hierarchy=hierarchy))
            if site.kind == "ag_mm":
                plans.append(Plan(strategy="bulk", transport=transport, hierarchy=hierarchy))
            for chunks in CHUNK_CHOICES:
                plans.append(Plan(strategy="chunked", chunks=chunks, transport=transport, hierarchy=hierarchy))
                if site.kind == "ag_mm":
                    plans.append(Plan(strategy="chunked", chunks=chunks, transport=transport, hierarchy=hierarchy,
                                      order="local_first"))
            if site.kind == "mm_ar":
                for chunks in SUBSTITUTE_CHUNKS:
                    plans.append(Plan(strategy="substituted", substitute="rs_ag", chunks=chunks,
                                      transport=transport, hierarchy=hierarchy))
    if site.kind in ("ag_mm", "mm_rs") and site.world > 1:
        for transport in rings:
            for strategy in ("ring", "bidir_ring"):
                for chunks in RING_CHUNKS:
                    plans.append(Plan(strategy=strategy, chunks=chunks, transport=transport))
        if "copy_engine" in offered:
            for groups in TILE_GROUPS:
                plans.append(Plan(strategy="tile_fused", chunks=groups, transport="copy_engine",
                                  order="local_first" if site.kind == "ag_mm" else "natural"))
    return list(dict.fromkeys(plans))
