"""``matmul_all_reduce``: ``all_reduce(A @ B)``, overlapped.

Autograd follows tensor parallelism's convention: the gradient arriving at the
all-reduced output is the same on every rank (each rank computes the same loss from
the replicated output), so the backward of the all-reduce is the identity and
``dA = dOut @ B^T``, ``dB = A^T @ dOut`` need no communication; ``"avg"`` scales both by
``1/world``.
"""

from __future__ import annotations

import torch

from hocket.ops.dispatch import prepare, run_prepared
from hocket.ops.eager import direct_call_ok
from hocket.ops.planning import plan_text
from hocket.ops.sites import site_for_call
from hocket.ops.validation import check_backend_device, check_matmul_all_reduce
from hocket.transport.group import group_name_of


def matmul_all_reduce(A: torch.Tensor, B: torch.Tensor, reduce_op: str, group: object, *,
                      plan: object = None) -> torch.Tensor:
    """``all_reduce(A @ B)`` over ``group`` (``reduce_op`` ``"sum"`` or ``"avg"``).

    ``plan``: a :class:`hocket.Plan`, dict, JSON string, strategy name, or None (choose).
    """
    if direct_call_ok([A, B]):  # plain eager, nothing records: skip the custom-op dispatch
        return run_matmul_all_reduce(A, B, reduce_op, group_name_of(group), plan_text(plan), "forward")
    return torch.ops.hocket.matmul_all_reduce(A, B, reduce_op, group_name_of(group), plan_text(plan), "forward")


def run_matmul_all_reduce(A, B, reduce_op, group_name, plan, direction):
    """The real implementation behind ``torch.ops.hocket.matmul_all_reduce``."""

    def check(world: int) -> int:
        check_matmul_all_reduce(A, B, reduce_op)
        return 0

    def site_of(group, dim):
        check_backend_device(group.backend, A, "A")
        return site_for_call("mm_ar", A=A, Bs=[B], world=group.world, ranks=group.ranks, direction=direction)

    prep = prepare("mm_ar", group_name=group_name, tensors=[A, B], dim_arg=0, plan_text=plan,
                   flags={"reduce_op": reduce_op}, direction=direction, check=check, site_of=site_of)
    return run_prepared(prep, A, B, reduce_op, prep.runtime, prep.plan)
