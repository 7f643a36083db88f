"""The expert-parallel MoE strategies (site kinds ``a2a_mm`` / ``mm_a2a``, :class:`hocket.core.moe.MoeSite`).

* ``sequential`` (its spec in :mod:`hocket.strategies.sequential` serves the MoE kinds too): the whole
  all-to-all, then the grouped GEMM (``a2a_mm``), or the grouped GEMM, then the whole all-to-all (``mm_a2a``);
* ``token_blocks``: ``Plan.chunks`` token blocks; the all-to-all of block i+1 (dispatch) or i-1 (combine) in
  flight while block i's grouped GEMM runs (Lancet's partition);
* ``per_source``: one all-to-all per source rank's rows; the rank's own rows are computed first while the
  peers' arrive, then each source as it lands;
* ``expert_groups``: the dispatch split by expert group; experts whose rows have arrived are computed first
  (Comet's order);
* ``shared_overlap``: one all-to-all in flight while the shared expert computes.

Every plan carries ``Plan.splits`` (``exchanged`` or ``padded``, :data:`hocket.core.plan.SPLITS`).
"""

from __future__ import annotations

from hocket.core.moe import MOE_KINDS
from hocket.strategies.spec import StrategySpec

NOT_MOE = "runs expert-parallel MoE sites (hocket.ops.moe_experts) only"


def _cost(b) -> None:  # replaced by the MoE cost builders (hocket.cost.moe)
    raise NotImplementedError(f"the MoE cost builder of {b.plan.strategy!r} is not written yet")


def _workspace(site, plan) -> int:
    return 0


TOKEN_BLOCKS_SPEC = StrategySpec(
    name="token_blocks", summary="token blocks pipelined: block i+1's all-to-all in flight while block i computes",
    kinds=MOE_KINDS, cost=_cost, workspace=_workspace, planned_kinds=MOE_KINDS, kind_reason=NOT_MOE,
    transports=("collective", "host_staged"), min_chunks=2, comm_sms=False, checks_gemm_rows=False,
)
PER_SOURCE_SPEC = StrategySpec(
    name="per_source", summary="own rows first while the peers' arrive, then each source rank as it lands",
    kinds=MOE_KINDS, cost=_cost, workspace=_workspace, planned_kinds=MOE_KINDS, kind_reason=NOT_MOE,
    transports=("collective", "host_staged"), fixed_chunks=True, comm_sms=False, checks_gemm_rows=False,
)
EXPERT_GROUPS_SPEC = StrategySpec(
    name="expert_groups", summary="the all-to-all split by expert group; arrived experts computed first",
    kinds=MOE_KINDS, cost=_cost, workspace=_workspace, planned_kinds=MOE_KINDS, kind_reason=NOT_MOE,
    transports=("collective", "host_staged"), min_chunks=2, comm_sms=False, checks_gemm_rows=False,
)
SHARED_OVERLAP_SPEC = StrategySpec(
    name="shared_overlap", summary="one all-to-all in flight while the shared expert computes",
    kinds=MOE_KINDS, cost=_cost, workspace=_workspace, planned_kinds=MOE_KINDS, kind_reason=NOT_MOE,
    transports=("collective", "host_staged"), fixed_chunks=True, comm_sms=False, checks_gemm_rows=False,
)
SPECS = (TOKEN_BLOCKS_SPEC, PER_SOURCE_SPEC, EXPERT_GROUPS_SPEC, SHARED_OVERLAP_SPEC)
