"""``all_gather_matmul``: ``A = all_gather(A_shard, gather_dim)``; ``[A @ B for B in Bs]``, overlapped.

Autograd: the input gradient is a matmul + reduce-scatter (``dA_shard =
reduce_scatter(sum_i dC_i @ B_i^T)``), run as its own ``hocket.matmul_reduce_scatter``
call with its own backward Site and plan; the weight gradients ``dB_i = A^T @ dC_i`` need
the gathered ``A``. By default (``save_gathered=True``) the forward keeps it for the
backward; with ``save_gathered=False`` only ``A_shard`` is kept and the backward gathers
it again, in flight while the input-gradient matmul + reduce-scatter runs (less memory
between forward and backward, one more all-gather).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from hocket.ops.dispatch import prepare, run_prepared
from hocket.ops.eager import direct_call_ok
from hocket.ops.planning import plan_text
from hocket.ops.sites import site_for_call
from hocket.ops.validation import check_all_gather_matmul, check_backend_device
from hocket.transport.group import group_name_of


def all_gather_matmul(A_shard: torch.Tensor, Bs: Sequence[torch.Tensor], gather_dim: int, group: object, *,
                      return_A: bool = True, plan: object = None,
                      save_gathered: bool = True) -> tuple[torch.Tensor | None, list[torch.Tensor]]:
    """All-gather ``A_shard`` along ``gather_dim`` over ``group`` and multiply by every B.

    Same semantics, argument names and output shapes as PyTorch's
    ``torch.ops.symm_mem.fused_all_gather_matmul`` (outputs are contiguous). ``group``: a
    ProcessGroup, a 1-D DeviceMesh or a group name. ``plan``: a :class:`hocket.Plan`, a
    dict, a JSON string, a strategy name, or None to let hocket choose.
    ``save_gathered=False`` keeps only ``A_shard`` for the backward and gathers again
    there (see the module docstring). Returns ``(A if return_A else None, outputs)``.
    """
    if isinstance(Bs, torch.Tensor) or not isinstance(Bs, (list, tuple)):
        raise TypeError(f"Bs must be a list of 2-D tensors, got {type(Bs).__name__}; wrap one B as [B]")
    if not isinstance(return_A, bool) or not isinstance(save_gathered, bool):
        raise TypeError(f"return_A and save_gathered must be bools, got {return_A!r} and {save_gathered!r}")
    Bs = list(Bs)
    if direct_call_ok([A_shard, *Bs]):  # plain eager, nothing records: skip the custom-op dispatch
        A, outs = run_all_gather_matmul(A_shard, Bs, gather_dim, group_name_of(group), return_A, save_gathered,
                                        plan_text(plan), "forward")
        return (A if return_A else None), list(outs)
    keep_A = save_gathered and torch.is_grad_enabled() and any(
        isinstance(B, torch.Tensor) and B.requires_grad for B in Bs)
    A, outs = torch.ops.hocket.all_gather_matmul(A_shard, Bs, gather_dim, group_name_of(group),
                                                 return_A or keep_A, save_gathered, plan_text(plan), "forward")
    return (A if return_A else None), list(outs)


def prepare_all_gather_matmul(A_shard, Bs, gather_dim, group_name, return_A, save_gathered, plan, direction):
    def check(world: int) -> int:
        return check_all_gather_matmul(A_shard, Bs, gather_dim, world)

    def site_of(group, dim):
        check_backend_device(group.backend, A_shard, "A_shard")
        return site_for_call("ag_mm", A=A_shard, Bs=Bs, dim=dim, world=group.world, ranks=group.ranks,
                             direction=direction)

    return prepare("ag_mm", group_name=group_name, tensors=[A_shard, *Bs], dim_arg=gather_dim, plan_text=plan,
                   flags={"return_A": return_A, "num_b": len(Bs)}, direction=direction, check=check,
                   site_of=site_of)


def run_all_gather_matmul(A_shard, Bs, gather_dim, group_name, return_A, save_gathered, plan, direction):
    """The real implementation behind ``torch.ops.hocket.all_gather_matmul``."""
    prep = prepare_all_gather_matmul(A_shard, Bs, gather_dim, group_name, return_A, save_gathered, plan,
                                     direction)
    return run_prepared(prep, A_shard, list(Bs), prep.dim, return_A, prep.runtime, prep.plan)
