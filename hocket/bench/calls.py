"""Bind hocket's operators and their references to a site's operands.

``operator_call`` returns a no-argument callable running the operator under a plan (what
is timed); ``reference_output`` is the unfused reference result it is checked against
(hocket.ops.reference), and ``compare`` applies hocket.ops.tolerance. For ag_mm the
matmul output is compared (the operator runs with ``return_A=False``).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from hocket.bench.workload import Operands
from hocket.core.plan import Plan
from hocket.core.site import Site


def operator_call(site: Site, plan: Plan, operands: Operands, group) -> Callable[[], torch.Tensor]:
    """The operator of ``site.kind`` under ``plan``, as a callable returning its (first) output."""
    from hocket import ops

    a, bs = operands.a, list(operands.bs)
    plan_json = plan.to_json()
    if site.kind == "ag_mm":
        return lambda: ops.all_gather_matmul(a, bs, site.dim, group, return_A=False, plan=plan_json)[1][0]
    if site.kind == "mm_rs":
        return lambda: ops.matmul_reduce_scatter(a, bs[0], "sum", site.dim, group, plan=plan_json)
    if site.kind == "mm_ar":
        return lambda: ops.matmul_all_reduce(a, bs[0], "sum", group, plan=plan_json)
    raise ValueError(f"site kind {site.kind!r} has no operator to benchmark; use ag_mm, mm_rs or mm_ar")


def reference_output(site: Site, operands: Operands, group) -> torch.Tensor:
    """The unfused reference result for the same operands (every rank must call it)."""
    from hocket.ops import reference

    a, bs = operands.a, list(operands.bs)
    if site.kind == "ag_mm":
        return reference.reference_all_gather_matmul(a, bs, site.dim, group, return_A=False)[1][0]
    if site.kind == "mm_rs":
        return reference.reference_matmul_reduce_scatter(a, bs[0], "sum", site.dim, group)
    return reference.reference_matmul_all_reduce(a, bs[0], "sum", group)


def compare(site: Site, got: torch.Tensor, expected: torch.Tensor) -> tuple[float, bool, float]:
    """(max error relative to the reference's largest magnitude, within tolerance?, atol used)."""
    from hocket.ops.tolerance import max_error, tolerance, within_tolerance

    tol = tolerance(expected.dtype, world=site.world)
    if got.shape != expected.shape or got.dtype != expected.dtype:
        return float("inf"), False, tol.atol
    return max_error(got, expected), within_tolerance(got, expected, world=site.world), tol.atol
