"""``sequential``: the unfused reference (:mod:`hocket.ops.lowering.sequential`): the collective, then
the GEMM (ag_mm), or the GEMM, then the collective (mm_rs, mm_ar); an offload site copies its whole
operand, then multiplies (h2d_mm), or multiplies, then copies (mm_d2h); a halo site exchanges its halos,
then computes (:mod:`hocket.strategies.halo`). Every other plan must beat it."""

from __future__ import annotations

from hocket.core.moe import MOE_KINDS
from hocket.cost.halo import sequential_stages
from hocket.cost.moe import sequential_stages as moe_sequential_stages
from hocket.cost.moe import workspace_bytes as moe_workspace_bytes
from hocket.cost.offload import row_pieces
from hocket.strategies.memory import product_bytes
from hocket.strategies.spec import StrategySpec


def cost(b) -> None:
    site = b.site
    if site.kind == "halo":  # a halo-exchange stencil: exchange, then compute (hocket.strategies.halo)
        sequential_stages(b)
        return
    if site.kind in MOE_KINDS:  # expert-parallel MoE: the whole all-to-all and the grouped GEMM in order
        moe_sequential_stages(b)
        return
    m, total = site.m, site.comm_bytes
    if site.uneven and site.kind in ("ag_mm", "mm_rs"):  # the largest block sets the pace (hocket.cost.uneven)
        total = total * site.world * site.max_shard / site.sharded_total
        if b.plan.splits == "padded":
            b.add_memory("pad", 2.0 * site.comm_bytes, op="copy")
    if site.kind in ("h2d_mm", "mm_d2h"):
        row_pieces(b, [m])
        return

    def collective(name: str, deps=()) -> int:
        transfer = b.collective(name, total)
        # one rank: the executor issues no collective (it returns the matmul alone)
        issue = ((), ()) if transfer.algorithm == "none" else None
        return b.add_transfer(name, transfer, deps=deps, op=name, nbytes=total, issue=issue)

    if site.kind == "ag_mm":
        b.add_gemm("gemm", m, deps=(collective("all_gather"),))
    else:
        g = b.add_gemm("gemm", m)
        collective("reduce_scatter" if site.kind == "mm_rs" else "all_reduce", deps=(g,))


def workspace(site, plan) -> int:
    """Sequential gathers straight into the returned ``A`` and reduces in place; the reduce-scatter
    consumes a partial product the caller never sees."""
    if site.kind == "halo":
        return 0
    if site.kind in MOE_KINDS:  # the call's send, receive and GEMM-output rows (padded: the padded layout's)
        return moe_workspace_bytes(site, plan)
    return product_bytes(site) if site.kind == "mm_rs" else 0


SPEC = StrategySpec(uneven=True, uneven_padded=True,
    error_class="sequential",
    name="sequential", summary="one blocking collective and one GEMM, in order (the baseline)",
    kinds=("ag_mm", "mm_rs", "mm_ar", "h2d_mm", "mm_d2h", "halo", "a2a_mm", "mm_a2a"), cost=cost, workspace=workspace,
    planned_kinds=("ag_mm", "mm_rs", "mm_ar", "a2a_mm", "mm_a2a", "halo"),
    transports=("collective", "copy_engine", "host_staged"),
    fixed_chunks=True, hierarchical=True, comm_sms=False, host_staging=False,
)
