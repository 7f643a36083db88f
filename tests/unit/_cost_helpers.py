"""Shared builders for the cost-model tests (clusters with a changed link, random sites)."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import strategies as st

from hocket.core.site import Site


def with_island_link(cluster, gbps: float):
    """``cluster`` (one node group, one island) with its intra-node link set to ``gbps`` per direction."""
    group = cluster.groups[0]
    node = group.node
    island = replace(node.islands[0], link=replace(node.islands[0].link, gbps_per_direction=gbps))
    return replace(cluster, groups=(replace(group, node=replace(node, islands=(island,))),))


@st.composite
def sites(draw, kinds=("ag_mm", "mm_rs", "mm_ar"), worlds=(2, 4, 8), max_dim=1 << 16):
    kind = draw(st.sampled_from(kinds))
    world = draw(st.sampled_from(worlds))
    m = world * draw(st.integers(1, max(1, max_dim // world)))  # per-rank shards: m/w rows (DESIGN.md)
    k = draw(st.integers(1, max_dim))
    n = draw(st.integers(1, max_dim))
    dtype = draw(st.sampled_from(["bfloat16", "float32"]))
    return Site(kind=kind, m=m, k=k, n=n, world=world, dtype=dtype)
