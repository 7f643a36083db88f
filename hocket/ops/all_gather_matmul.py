"""``all_gather_matmul``: ``A = all_gather(A_shard, gather_dim)``; ``[A @ B for B in Bs]``, overlapped.

Autograd: the input gradient is a matmul + reduce-scatter (``dA_shard =
reduce_scatter(sum_i dC_i @ B_i^T)``), run as its own ``hocket.matmul_reduce_scatter``
call with its own backward Site and plan; the weight gradients ``dB_i = A^T @ dC_i`` need
the gathered ``A``. By default (``save_gathered=True``) the forward keeps it for the
backward; with ``save_gathered=False`` only ``A_shard`` is kept and the backward gathers
it again, in flight while the input-gradient matmul + reduce-scatter runs (less memory
between forward and backward, one more all-gather).

Uneven shards: ranks may hold different sizes along ``gather_dim`` (a rank with none included), given as
``shard_rows``: the same list on every rank (no exchange), or ``"auto"``: each rank's size is read from its
tensor and exchanged on every call (:func:`hocket.ops.agreement.agree_shard_sizes`: one small all-gather
and a host sync). The sizes are part of the call's Site (``Site.shard_rows``) and of its agreement.
The input gradient is reduce-scattered back to the same sizes.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.distributed as dist

from hocket.ops.agreement import agree_shard_sizes
from hocket.ops.dispatch import prepare, run_prepared
from hocket.ops.eager import direct_call_ok
from hocket.ops.lowering.uneven import run_uneven
from hocket.ops.planning import plan_text
from hocket.ops.sites import site_for_call
from hocket.ops.validation import check_all_gather_matmul, check_backend_device
from hocket.transport.group import group_name_of, process_group_of


def int_list(value: object) -> bool:
    """Whether ``value`` is a list or tuple of ints (what the schemas' ``int[] shard_rows`` carry)."""
    return isinstance(value, (list, tuple)) and all(isinstance(v, int) and not isinstance(v, bool) for v in value)


def uneven_sizes(sizes) -> list[int]:
    """``sizes`` as the schemas carry them: ``[]`` when every rank's is the same (even shards)."""
    return list(sizes) if sizes and len(set(sizes)) > 1 else []


def gather_sizes(A_shard: object, gather_dim: object, group_name: str, given: object) -> object:
    """Every rank's size along ``gather_dim`` (``[]`` when even): None is even; ``"auto"`` reads them from
    each rank's tensor and exchanges them; a list is taken as given (checked later, with the call's other
    inputs, so that a bad one is reported on every rank)."""
    if given is None:
        return []
    if not isinstance(given, str) or given != "auto":
        return uneven_sizes(given) if int_list(given) else given
    if torch.compiler.is_compiling():
        raise ValueError("shard_rows='auto' exchanges sizes at run time, which torch.compile cannot trace; "
                         "pass every rank's size as a list")
    ok = isinstance(A_shard, torch.Tensor) and A_shard.dim() >= 2 and isinstance(gather_dim, int) \
        and -A_shard.dim() <= gather_dim < A_shard.dim()
    local = int(A_shard.shape[gather_dim]) if ok else -1
    device = A_shard.device if isinstance(A_shard, torch.Tensor) else torch.device("cpu")
    sizes = agree_shard_sizes(group_name, "all_gather_matmul", local, device=device)
    return uneven_sizes(sizes)


def all_gather_matmul(A_shard: torch.Tensor, Bs: Sequence[torch.Tensor], gather_dim: int, group: object, *,
                      return_A: bool = True, plan: object = None, save_gathered: bool = True,
                      shard_rows: object = None) -> tuple[torch.Tensor | None, list[torch.Tensor]]:
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
    name = group_name_of(group)
    sizes = gather_sizes(A_shard, gather_dim, name, shard_rows)
    if direct_call_ok([A_shard, *Bs]) or not int_list(sizes):  # plain eager: skip the custom-op dispatch
        A, outs = run_all_gather_matmul(A_shard, Bs, gather_dim, name, return_A, save_gathered,
                                        plan_text(plan), "forward", sizes)
        return (A if return_A else None), list(outs)
    keep_A = save_gathered and torch.is_grad_enabled() and any(
        isinstance(B, torch.Tensor) and B.requires_grad for B in Bs)
    A, outs = torch.ops.hocket.all_gather_matmul(A_shard, Bs, gather_dim, name, return_A or keep_A,
                                                 save_gathered, plan_text(plan), "forward", *((list(sizes),) if sizes else ()))
    return (A if return_A else None), list(outs)


def shard_flag(sizes: object) -> str:
    """``shard_rows`` as one plain flag value (in the call's signature and its agreement)."""
    return ",".join(map(str, sizes)) if int_list(sizes) else repr(sizes)


def rest_of_shape(t: object, dim: object) -> str:
    """``t``'s shape with the sharded dim left out (ranks of an uneven call must agree on the rest)."""
    if not isinstance(t, torch.Tensor) or not isinstance(dim, int) or not -t.dim() <= dim < t.dim():
        return ""
    shape = list(t.shape)
    shape[dim] = -1
    return "x".join(map(str, shape))


def prepare_all_gather_matmul(A_shard, Bs, gather_dim, group_name, return_A, save_gathered, plan, direction,
                              shard_rows=()):
    def check(world: int) -> int:
        rank = dist.get_rank(process_group_of(group_name)) if shard_rows else None
        return check_all_gather_matmul(A_shard, Bs, gather_dim, world, shard_rows, rank)

    def site_of(group, dim):
        check_backend_device(group.backend, A_shard, "A_shard")
        return site_for_call("ag_mm", A=A_shard, Bs=Bs, dim=dim, world=group.world, ranks=group.ranks,
                             direction=direction, shard_rows=tuple(shard_rows))

    flags = {"return_A": return_A, "num_b": len(Bs)}
    if shard_rows:  # even calls keep the signature and descriptor they always had
        flags.update(shard_rows=shard_flag(shard_rows), shard_shape=rest_of_shape(A_shard, gather_dim))
    return prepare("ag_mm", group_name=group_name, tensors=[A_shard, *Bs], dim_arg=gather_dim, plan_text=plan,
                   flags=flags, direction=direction, check=check, site_of=site_of)


def run_all_gather_matmul(A_shard, Bs, gather_dim, group_name, return_A, save_gathered, plan, direction,
                          shard_rows=()):
    """The real implementation behind ``torch.ops.hocket.all_gather_matmul``."""
    prep = prepare_all_gather_matmul(A_shard, Bs, gather_dim, group_name, return_A, save_gathered, plan,
                                     direction, shard_rows)
    if prep.site is not None and prep.site.uneven:
        return run_uneven(prep, "ag_mm", A_shard, list(Bs), prep.dim, return_A, prep.runtime, prep.plan,
                          prep.site.shard_rows, tuple(shard_rows))
    return run_prepared(prep, A_shard, list(Bs), prep.dim, return_A, prep.runtime, prep.plan)
