"""``bulk``: the one-piece pipeline the executors run (``chunked``'s executors with one piece,
:mod:`hocket.ops.lowering.bulk`): ag_mm gathers once, then runs the per-source GEMMs; mm_rs runs the
``p`` per-block GEMMs into a staging buffer, then one reduce-scatter; mm_ar one GEMM, then one
all-reduce. It overlaps nothing, but pays the executor's per-block kernels and issue overhead."""

from __future__ import annotations

import math

from hocket.strategies.chunked import ag_pieces, ar_pieces, rs_pieces, uneven_pieces, uneven_rows
from hocket.strategies.sequential import workspace
from hocket.strategies.spec import StrategySpec


def cost(b) -> None:
    site = b.site
    if site.uneven and site.kind in ("ag_mm", "mm_rs"):  # one uneven collective (hocket.cost.uneven)
        uneven_pieces(b, [uneven_rows(site)])
        return
    rows = math.ceil(site.m / site.world)
    if site.kind == "ag_mm":
        ag_pieces(b, rows, [rows])
    elif site.kind == "mm_rs":
        rs_pieces(b, rows, [rows])
    else:
        ar_pieces(b, [site.m])


SPEC = StrategySpec(uneven=True, uneven_padded=True,
    name="bulk", summary="one async collective for the whole operand, then the GEMMs (one piece)",
    kinds=("ag_mm", "mm_rs", "mm_ar"), cost=cost, workspace=workspace,
    planned_kinds=("ag_mm", "mm_rs", "mm_ar"),
    kind_reason="bulk is the one-piece pipeline of ag_mm, mm_rs and mm_ar (hocket.ops.lowering.bulk)",
    transports=("collective", "copy_engine", "host_staged"), fixed_chunks=True, hierarchical=True,
)
