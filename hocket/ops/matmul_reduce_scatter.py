"""``matmul_reduce_scatter``: ``reduce_scatter(A @ B, scatter_dim)``, overlapped.

Autograd: the input gradient is an all-gather + matmul (``dA = all_gather(dOut) @ B^T``),
run as its own ``hocket.all_gather_matmul`` call with its own backward Site and plan;
that call also returns the gathered ``dOut`` the weight gradient ``dB = A^T @ dOut``
needs. ``reduce_op="avg"`` scales the incoming gradient by ``1/world`` first.

Uneven shards: ``shard_rows`` names the size along ``scatter_dim`` each rank receives (the same list on
every rank, adding up to that dim of ``A @ B``; zeros allowed); default even (the dim divided by the
group size). The sizes are part of the call's Site (``Site.shard_rows``) and of its agreement.
"""

from __future__ import annotations

import torch
from torch.profiler import record_function

from hocket.ops._layout import merge_rank_axis
from hocket.ops.all_gather_matmul import int_list, rest_of_shape, shard_flag, uneven_sizes
from hocket.ops.dispatch import prepare, run_prepared
from hocket.ops.eager import direct_call_ok
from hocket.ops.lowering.uneven import run_uneven
from hocket.ops.planning import plan_text
from hocket.ops.reference import all_gather_uneven
from hocket.ops.sites import site_for_call
from hocket.ops.validation import check_backend_device, check_dim, check_matmul_reduce_scatter
from hocket.transport.group import group_name_of


def matmul_reduce_scatter(A: torch.Tensor, B: torch.Tensor, reduce_op: str, scatter_dim: int, group: object, *,
                          plan: object = None, shard_rows: object = None) -> torch.Tensor:
    """``reduce_scatter(A @ B)`` along ``scatter_dim`` of the output over ``group``.

    Same semantics as PyTorch's ``torch.ops.symm_mem.fused_matmul_reduce_scatter``:
    ``reduce_op`` is ``"sum"`` or ``"avg"``; rank ``r`` gets block ``r`` of ``scatter_dim``.
    ``plan``: a :class:`hocket.Plan`, dict, JSON string, strategy name, or None (choose).
    ``shard_rows``: the size along ``scatter_dim`` each rank receives (uneven shards, the same list on
    every rank); None: even.
    """
    sizes = [] if shard_rows is None else (uneven_sizes(shard_rows) if int_list(shard_rows) else shard_rows)
    if direct_call_ok([A, B]) or not int_list(sizes):  # plain eager: skip the custom-op dispatch
        return run_matmul_reduce_scatter(A, B, reduce_op, scatter_dim, group_name_of(group), plan_text(plan),
                                         "forward", sizes)
    return torch.ops.hocket.matmul_reduce_scatter(A, B, reduce_op, scatter_dim, group_name_of(group),
                                                  plan_text(plan), "forward", *((list(sizes),) if sizes else ()))


def prepare_matmul_reduce_scatter(A, B, reduce_op, scatter_dim, group_name, plan, direction, shard_rows=()):
    def check(world: int) -> int:
        return check_matmul_reduce_scatter(A, B, reduce_op, scatter_dim, world, shard_rows)

    def site_of(group, dim):
        check_backend_device(group.backend, A, "A")
        return site_for_call("mm_rs", A=A, Bs=[B], dim=dim, world=group.world, ranks=group.ranks,
                             direction=direction, shard_rows=tuple(shard_rows))

    flags = {"reduce_op": reduce_op}
    if shard_rows:  # even calls keep the signature and descriptor they always had
        flags.update(shard_rows=shard_flag(shard_rows), shard_shape=rest_of_shape(A, -1))
    return prepare("mm_rs", group_name=group_name, tensors=[A, B], dim_arg=scatter_dim, plan_text=plan,
                   flags=flags, direction=direction, check=check, site_of=site_of)


def run_matmul_reduce_scatter(A, B, reduce_op, scatter_dim, group_name, plan, direction, shard_rows=()):
    """The real implementation behind ``torch.ops.hocket.matmul_reduce_scatter``."""
    prep = prepare_matmul_reduce_scatter(A, B, reduce_op, scatter_dim, group_name, plan, direction, shard_rows)
    if prep.site is not None and prep.site.uneven:
        return run_uneven(prep, "mm_rs", A, B, reduce_op, prep.dim, prep.runtime, prep.plan, prep.site.shard_rows,
                          tuple(shard_rows))
    return run_prepared(prep, A, B, reduce_op, prep.dim, prep.runtime, prep.plan)


def run_matmul_reduce_scatter_and_gather(A, B, reduce_op, scatter_dim, gather_input, gather_dim, group_name, plan,
                                         direction, shard_rows=()):
    """``matmul_reduce_scatter`` while ``all_gather(gather_input, gather_dim)`` runs in the background.

    The backward of ``all_gather_matmul(save_gathered=False)`` uses it: the gathered A
    the weight gradient needs travels while the input gradient is computed. With uneven shards
    (``shard_rows``) the gather runs after the reduce-scatter, not beside it.
    """
    prep = prepare_matmul_reduce_scatter(A, B, reduce_op, scatter_dim, group_name, plan, direction, shard_rows)
    dim = check_dim("gather_dim", gather_dim, gather_input.dim(), f"gather_input of shape {tuple(gather_input.shape)}")
    rt = prep.runtime
    if prep.site is not None and prep.site.uneven:
        out = run_uneven(prep, "mm_rs", A, B, reduce_op, prep.dim, rt, prep.plan, prep.site.shard_rows,
                         tuple(shard_rows))
        return out, all_gather_uneven(gather_input, dim, rt.group, list(shard_rows))
    if rt.world == 1:  # nothing to gather: a copy, since outputs never alias inputs
        with record_function(prep.label + "+regather"):
            return prep.run(A, B, reduce_op, prep.dim, rt, prep.plan), \
                gather_input.clone(memory_format=torch.contiguous_format)
    stacked = gather_input.new_empty((rt.world, *gather_input.shape))
    pending = rt.transport.all_gather(stacked, gather_input.contiguous())
    with record_function(prep.label + "+regather"):
        out = prep.run(A, B, reduce_op, prep.dim, rt, prep.plan)
        pending.wait()
    return out, merge_rank_axis(stacked, dim)
