"""``matmul_all_reduce``: ``all_reduce(A @ B)``, overlapped.

Autograd follows tensor parallelism's convention: the gradient arriving at the
all-reduced output is the same on every rank (each rank computes the same loss from
the replicated output), so the backward of the all-reduce is the identity and
``dA = dOut @ B^T``, ``dB = A^T @ dOut`` need no communication; ``"avg"`` scales both by
``1/world``.

Uneven shards: each rank's local ``k`` (``A [m, k_r]``, ``B [k_r, n]``) may differ, a rank with ``k_r = 0``
included; the output ``[m, n]`` is the same on every rank, so every strategy serves it. Pass
``shard_rows``: every rank's ``k_r`` (the same list on every rank), or ``"auto"`` to exchange them on every
call (:func:`hocket.ops.agreement.agree_shard_sizes`); they enter the Site (``Site.shard_rows``;
``Site.k`` is the largest).
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from hocket.ops.agreement import agree_shard_sizes
from hocket.ops.all_gather_matmul import int_list, shard_flag, uneven_sizes
from hocket.ops.dispatch import prepare, run_prepared
from hocket.ops.eager import direct_call_ok
from hocket.ops.planning import plan_text
from hocket.ops.sites import site_for_call
from hocket.ops.validation import check_backend_device, check_matmul_all_reduce, check_shard_rows
from hocket.transport.group import group_name_of, process_group_of


def matmul_all_reduce(A: torch.Tensor, B: torch.Tensor, reduce_op: str, group: object, *,
                      plan: object = None, shard_rows: object = None) -> torch.Tensor:
    """``all_reduce(A @ B)`` over ``group`` (``reduce_op`` ``"sum"`` or ``"avg"``).

    ``plan``: a :class:`hocket.Plan`, dict, JSON string, strategy name, or None (choose).
    ``shard_rows``: every rank's local K when they differ (a list, the same on every rank, or ``"auto"``);
    None: the same K everywhere.
    """
    name = group_name_of(group)
    sizes = local_k_sizes(A, B, name, shard_rows)
    if direct_call_ok([A, B]) or not int_list(sizes):  # plain eager, nothing records: skip the custom-op dispatch
        return run_matmul_all_reduce(A, B, reduce_op, name, plan_text(plan), "forward", sizes)
    return torch.ops.hocket.matmul_all_reduce(A, B, reduce_op, name, plan_text(plan), "forward",
                                              *((list(sizes),) if sizes else ()))


def local_k_sizes(A: object, B: object, group_name: str, given: object) -> object:
    """Every rank's local ``k`` (``[]`` when the same everywhere): None even, a list as given (checked with
    the call's other inputs), ``"auto"`` exchanged."""
    if given is None:
        return []
    if not isinstance(given, str) or given != "auto":
        return uneven_sizes(given) if int_list(given) else given
    if torch.compiler.is_compiling():
        raise ValueError("shard_rows='auto' exchanges sizes at run time, which torch.compile cannot trace; "
                         "pass every rank's local K as a list")
    ok = isinstance(A, torch.Tensor) and isinstance(B, torch.Tensor) and A.dim() >= 2 and B.dim() == 2
    local = int(A.shape[-1]) if ok else -1
    device = A.device if isinstance(A, torch.Tensor) else torch.device("cpu")
    return uneven_sizes(agree_shard_sizes(group_name, "matmul_all_reduce", local, device=device))


def run_matmul_all_reduce(A, B, reduce_op, group_name, plan, direction, shard_rows=()):
    """The real implementation behind ``torch.ops.hocket.matmul_all_reduce``."""

    def check(world: int) -> int:
        sizes = check_shard_rows(shard_rows, world, total=None, what="each rank's local K")
        check_matmul_all_reduce(A, B, reduce_op, uneven=bool(sizes))
        rank = dist.get_rank(process_group_of(group_name)) if sizes else 0
        if sizes and sizes[rank] != A.shape[-1]:
            raise ValueError(f"shard_rows={list(sizes)} gives rank {rank} K={sizes[rank]} but its A has shape "
                             f"{tuple(A.shape)}; pass every rank's actual K, or shard_rows='auto'")
        return 0

    def site_of(group, dim):
        check_backend_device(group.backend, A, "A")
        return site_for_call("mm_ar", A=A, Bs=[B], world=group.world, ranks=group.ranks, direction=direction,
                             shard_rows=tuple(shard_rows))

    flags = {"reduce_op": reduce_op}
    if shard_rows:  # even calls keep the signature and descriptor they always had
        flags["shard_rows"] = shard_flag(shard_rows)
    prep = prepare("mm_ar", group_name=group_name, tensors=[A, B], dim_arg=0, plan_text=plan,
                   flags=flags, direction=direction, check=check, site_of=site_of)
    return run_prepared(prep, A, B, reduce_op, prep.runtime, prep.plan)
