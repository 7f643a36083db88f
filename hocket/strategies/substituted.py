"""``substituted``: mm_ar's all-reduce as per-piece reduce-scatter, each piece's all-gather queued behind
the next piece's reduce-scatter (``substitute="rs_ag"``, :mod:`hocket.ops.lowering.substituted`); ag_mm
with ``substitute="ring_p2p"`` is priced as the ring (:mod:`hocket.strategies.ring`; it has no executor
of its own: run ``strategy="ring"``)."""

from __future__ import annotations

from hocket.cost.builder import split_even
from hocket.strategies.memory import ceil_div, row_bytes
from hocket.strategies.ring import ring_cost
from hocket.strategies.spec import StrategySpec


def cost(b) -> None:
    site, plan = b.site, b.plan
    if site.kind == "ag_mm":
        if plan.substitute not in (None, "ring_p2p"):
            raise ValueError(f"plan.substitute={plan.substitute!r} does not apply to ag_mm; use 'ring_p2p' "
                             "(or strategy='ring')")
        ring_cost(b, lanes=1)
        return
    if plan.substitute not in (None, "rs_ag"):
        raise ValueError(f"plan.substitute={plan.substitute!r} does not apply to mm_ar; use 'rs_ag'")
    m, total = site.m, site.comm_bytes
    pieces = split_even(m, plan.chunks)
    pending_ag = None
    for i, rows in enumerate(pieces):
        nbytes = total * rows / m
        g = b.add_gemm(f"gemm[{i}]", rows, piece=i)
        rs = b.add_transfer(f"reduce_scatter[{i}]", b.collective("reduce_scatter", nbytes), deps=(g,), piece=i,
                            op="reduce_scatter", nbytes=nbytes)
        if pending_ag is not None:  # the previous piece's all-gather runs behind this reduce-scatter
            b.add_transfer(f"all_gather[{i - 1}]", b.collective("all_gather", pending_ag[1]),
                           deps=(pending_ag[0],), piece=i - 1, op="all_gather", nbytes=pending_ag[1])
        pending_ag = (rs, nbytes)
    b.add_transfer(f"all_gather[{len(pieces) - 1}]", b.collective("all_gather", pending_ag[1]),
                   deps=(pending_ag[0],), piece=len(pieces) - 1, op="all_gather", nbytes=pending_ag[1])


def workspace(site, plan) -> int:
    """Two pieces staged; an all-reduce's reduce-scatter + all-gather stages one reduced shard per piece."""
    piece = ceil_div(site.m, plan.chunks) * row_bytes(site)
    if site.kind in ("ag_mm", "mm_rs"):
        return 2 * piece
    return 2 * ceil_div(piece, site.world)


def split_rows(site) -> int:
    """Each rank's shard of the output's rows (the reduce-scatter's), or all of ``m`` gathering K."""
    return site.m if site.dim == -1 else max(1, site.m // site.world)


SPEC = StrategySpec(
    name="substituted", summary="a collective replaced by others: all-reduce -> reduce-scatter + all-gather",
    kinds=("mm_ar",), priced_kinds=("ag_mm", "mm_ar"), cost=cost, workspace=workspace,
    planned_kinds=("mm_ar",),
    kind_reason="substitution replaces an all-reduce by reduce-scatter + all-gather (mm_ar only); "
                "ag_mm's P2P-ring substitute is strategy='ring'",
    transports=("collective", "copy_engine", "host_staged"),
    min_chunks=2, hierarchical=True, substitute="rs_ag", split_rows=split_rows,
)
