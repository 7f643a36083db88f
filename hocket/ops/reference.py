"""Unfused reference semantics of the three operators.

Semantics, argument names and output shapes follow PyTorch's unfused fallbacks of
``torch.ops.symm_mem.fused_all_gather_matmul`` / ``fused_matmul_reduce_scatter``:

* ``all_gather_matmul``: ``A = all_gather(A_shard, dim=gather_dim)`` (rank-major
  concatenation), outputs ``[A @ B for B in Bs]``. Gathering the last dim gathers K, so
  each output is the sum over ranks of ``A_shard_r @ B[r-th K block]``.
* ``matmul_reduce_scatter``: ``reduce_scatter(A @ B, dim=scatter_dim)``; rank ``r``
  receives block ``r`` of that dim, summed (``avg``: divided by the world size).
* ``matmul_all_reduce``: ``all_reduce(A @ B)``.

Every output is a fresh contiguous tensor (never a view of an input). For a gather dim
strictly between the first and the last, PyTorch's fallback returns ``movedim`` views;
hocket returns the same shapes, contiguous.

Two forms are here: ``reference_*`` run on a live process group (this is the
``sequential`` strategy), and ``*_global`` compute every rank's result from all ranks'
inputs in one process (for tests that need no processes).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from hocket.ops._layout import merge_rank_axis, split_rank_axis
from hocket.transport.group import GroupHandle, resolve_group
from hocket.transport.torch_dist import TorchDistTransport


def _handle(group: object) -> GroupHandle:
    return group if isinstance(group, GroupHandle) else resolve_group(group)


# -- on a live group ----------------------------------------------------------------------

def reference_all_gather_matmul(A_shard: torch.Tensor, Bs: Sequence[torch.Tensor], gather_dim: int, group: object,
                                *, return_A: bool = True) -> tuple[torch.Tensor | None, list[torch.Tensor]]:
    handle = _handle(group)
    dim = gather_dim % A_shard.dim()
    stacked = A_shard.new_empty((handle.world, *A_shard.shape))
    TorchDistTransport(handle).all_gather(stacked, A_shard.contiguous()).wait()
    A = merge_rank_axis(stacked, dim)
    outs = [torch.matmul(A, B) for B in Bs]
    return (A if return_A else None), outs


def reference_matmul_reduce_scatter(A: torch.Tensor, B: torch.Tensor, reduce_op: str, scatter_dim: int,
                                    group: object) -> torch.Tensor:
    handle = _handle(group)
    full = torch.matmul(A, B)
    dim = scatter_dim % full.dim()
    stacked = split_rank_axis(full, dim, handle.world)
    out = stacked.new_empty(stacked.shape[1:])
    TorchDistTransport(handle).reduce_scatter(out, stacked).wait()
    if reduce_op == "avg":
        out.div_(handle.world)
    return out


def reference_matmul_all_reduce(A: torch.Tensor, B: torch.Tensor, reduce_op: str, group: object) -> torch.Tensor:
    handle = _handle(group)
    out = torch.matmul(A, B)
    TorchDistTransport(handle).all_reduce(out).wait()
    if reduce_op == "avg":
        out.div_(handle.world)
    return out


# -- every rank's result in one process ---------------------------------------------------

def all_gather_matmul_global(A_shards: Sequence[torch.Tensor], Bs: Sequence[torch.Tensor], gather_dim: int,
                             *, return_A: bool = True) -> tuple[torch.Tensor | None, list[torch.Tensor]]:
    """What a rank holding ``Bs`` gets when rank ``r`` passes ``A_shards[r]``."""
    A = torch.cat(list(A_shards), dim=gather_dim)
    outs = [torch.matmul(A, B) for B in Bs]
    return (A if return_A else None), outs


def _reduced_sum(As: Sequence[torch.Tensor], Bs: Sequence[torch.Tensor], reduce_op: str) -> torch.Tensor:
    if len(As) != len(Bs):
        raise ValueError(f"As and Bs need one entry per rank, got {len(As)} and {len(Bs)}")
    total = sum(torch.matmul(A, B).double() for A, B in zip(As, Bs))
    if reduce_op == "avg":
        total = total / len(As)
    return total.to(As[0].dtype)


def matmul_reduce_scatter_global(As: Sequence[torch.Tensor], Bs: Sequence[torch.Tensor], reduce_op: str,
                                 scatter_dim: int) -> list[torch.Tensor]:
    """Every rank's output when rank ``r`` passes ``As[r]``, ``Bs[r]`` (sums in float64, then cast)."""
    total = _reduced_sum(As, Bs, reduce_op)
    return [c.contiguous() for c in total.chunk(len(As), dim=scatter_dim)]


def matmul_all_reduce_global(As: Sequence[torch.Tensor], Bs: Sequence[torch.Tensor], reduce_op: str) -> torch.Tensor:
    """The output every rank gets when rank ``r`` passes ``As[r]``, ``Bs[r]``."""
    return _reduced_sum(As, Bs, reduce_op)
