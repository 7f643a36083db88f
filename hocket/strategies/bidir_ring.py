"""``bidir_ring``: :mod:`hocket.strategies.ring` in both directions at once (:mod:`hocket.ops.lowering.bidir_ring`):
two lanes, half of every shard (block) each way; each step talks to both neighbours (a mesh carries
both at once, a switched port shares its bandwidth)."""

from __future__ import annotations

from hocket.strategies.ring import RING_KIND_REASON, ring_cost, ring_gemm_rows, ring_workspace
from hocket.strategies.spec import StrategySpec


def cost(b) -> None:
    ring_cost(b, lanes=2)


def workspace(site, plan) -> int:
    return ring_workspace(site, plan, lanes=2)


def site_reason(site) -> str | None:
    if site.world == 2:
        return "world=2: both ring directions reach the same single peer, so bidir_ring is ring"
    return None


SPEC = StrategySpec(uneven=True, uneven_rows_only=True,
    error_class="ring",
    name="bidir_ring", summary="the P2P ring in both directions, half of every shard each way",
    kinds=("ag_mm", "mm_rs", "mm_ar"), cost=cost, workspace=workspace,
    planned_kinds=("ag_mm", "mm_rs"), kind_reason=RING_KIND_REASON, transports=("p2p",),
    site_reason=site_reason, gemm_rows=ring_gemm_rows,
)
