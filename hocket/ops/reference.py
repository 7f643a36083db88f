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


# -- uneven shards on a live group -----------------------------------------------------------

def all_gather_uneven(t: torch.Tensor, dim: int, group: object, dim_sizes: Sequence[int]) -> torch.Tensor:
    """``t`` (``dim_sizes[rank]`` along ``dim``) gathered along ``dim`` from every rank, rank-major, through
    the exact uneven collective (:func:`hocket.transport.uneven.all_gather_rows`)."""
    from hocket.ops._layout import from_rows_first, rows_first
    from hocket.transport.uneven import all_gather_rows

    handle = _handle(group)
    dim = dim % t.dim()
    full_shape = list(t.shape)
    full_shape[dim] = sum(dim_sizes)
    transport = TorchDistTransport(handle)
    if dim == t.dim() - 1:  # columns: gather the transposed [K_r, rows] blocks
        flat = t.reshape(-1, t.shape[-1])
        out = t.new_empty((sum(dim_sizes), flat.shape[0]))
        all_gather_rows(transport, out, flat.t().contiguous(), list(dim_sizes)).wait()
        return out.t().contiguous().view(full_shape)
    local = rows_first(t, dim)
    factor = local.shape[0] // t.shape[dim] if t.shape[dim] else _factor(t.shape, dim)
    sizes = [s * factor for s in dim_sizes]
    out = t.new_empty((sum(sizes), local.shape[1]))
    all_gather_rows(transport, out, local, sizes).wait()
    return from_rows_first(out, full_shape, dim)


def reduce_scatter_uneven(t: torch.Tensor, dim: int, group: object, dim_sizes: Sequence[int]) -> torch.Tensor:
    """The sum over ranks of ``t``, rank ``r`` receiving ``dim_sizes[r]`` entries of ``dim``, through the
    exact uneven collective (:func:`hocket.transport.uneven.reduce_scatter_rows`)."""
    from hocket.ops._layout import from_rows_first, rows_first
    from hocket.transport.uneven import reduce_scatter_rows

    handle = _handle(group)
    dim = dim % t.dim()
    own = dim_sizes[handle.rank]
    out_shape = list(t.shape)
    out_shape[dim] = own
    transport = TorchDistTransport(handle)
    if dim == t.dim() - 1:
        flat = t.reshape(-1, t.shape[-1])
        out = t.new_empty((own, flat.shape[0]))
        reduce_scatter_rows(transport, out, flat.t().contiguous(), list(dim_sizes)).wait()
        return out.t().contiguous().view(out_shape)
    full = rows_first(t, dim)
    factor = full.shape[0] // t.shape[dim]
    sizes = [s * factor for s in dim_sizes]
    out = t.new_empty((sizes[handle.rank], full.shape[1]))
    reduce_scatter_rows(transport, out, full, sizes).wait()
    return from_rows_first(out, out_shape, dim)


def _factor(shape, dim: int) -> int:
    import math

    return math.prod(s for i, s in enumerate(shape[:-1]) if i != dim)


def reference_all_gather_matmul_uneven(A_shard: torch.Tensor, Bs: Sequence[torch.Tensor], gather_dim: int,
                                       group: object, dim_sizes: Sequence[int], *, return_A: bool = True
                                       ) -> tuple[torch.Tensor | None, list[torch.Tensor]]:
    """The unfused uneven all-gather + matmul: one exact uneven all-gather, then each matmul."""
    A = all_gather_uneven(A_shard, gather_dim, group, dim_sizes)
    outs = [torch.matmul(A, B) for B in Bs]
    return (A if return_A else None), outs


def reference_matmul_reduce_scatter_uneven(A: torch.Tensor, B: torch.Tensor, reduce_op: str, scatter_dim: int,
                                           group: object, dim_sizes: Sequence[int]) -> torch.Tensor:
    """The unfused uneven matmul + reduce-scatter: the matmul, then one exact uneven reduce-scatter."""
    handle = _handle(group)
    out = reduce_scatter_uneven(torch.matmul(A, B), scatter_dim, handle, dim_sizes)
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


def matmul_reduce_scatter_uneven_global(As: Sequence[torch.Tensor], Bs: Sequence[torch.Tensor], reduce_op: str,
                                        scatter_dim: int, shard_rows: Sequence[int]) -> list[torch.Tensor]:
    """Every rank's output of an uneven ``matmul_reduce_scatter``: rank ``r`` receives ``shard_rows[r]``
    entries of ``scatter_dim`` (sums in float64, then cast)."""
    total = _reduced_sum(As, Bs, reduce_op)
    return [c.contiguous() for c in total.split(list(shard_rows), dim=scatter_dim)]


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


# -- the expert-parallel MoE layer (hocket.ops.moe_experts) -------------------------------------------------

def moe_tokens_reference(x: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor,
                         w_gate_up: torch.Tensor, w_down: torch.Tensor, shared=None) -> torch.Tensor:
    """One rank's ``moe_experts`` output given all ``E`` experts (``w_gate_up [E, hidden, 2*ffn]``,
    ``w_down [E, ffn, hidden]``): a loop over tokens' choices with plain matmuls, in ``x``'s dtype and with
    autograd. ``y_t = sum_j w[t, j] * (silu(h[:ffn]) * h[ffn:]) @ w_down[e]``, ``h = x_t @ w_gate_up[e]``."""
    ffn = w_gate_up.shape[2] // 2
    y = torch.zeros_like(x)
    for e in range(w_gate_up.shape[0]):
        hit = topk_ids == e
        rows = hit.any(1).nonzero().flatten()
        if rows.numel() == 0:
            continue
        h = x.index_select(0, rows) @ w_gate_up[e]
        out = (torch.nn.functional.silu(h[:, :ffn]) * h[:, ffn:]) @ w_down[e]
        weight = (topk_weights.index_select(0, rows) * hit.index_select(0, rows)).sum(1).to(x.dtype)
        y = y.index_add(0, rows, out * weight.unsqueeze(1))
    if shared is not None:
        y = y + shared(x)
    return y


def moe_experts_reference(xs: Sequence[torch.Tensor], topk_ids: Sequence[torch.Tensor],
                          topk_weights: Sequence[torch.Tensor], w_gate_ups: Sequence[torch.Tensor],
                          w_downs: Sequence[torch.Tensor], shared=None) -> list[torch.Tensor]:
    """The whole layer in one process: rank ``r`` passes ``xs[r]``, ``topk_ids[r]``, ``topk_weights[r]`` and
    holds experts ``w_gate_ups[r]``/``w_downs[r]`` (``[E_local, ...]``, experts ``r * E_local ...``); returns
    every rank's output. Differentiable in every tensor argument."""
    w_gate_up = torch.cat(list(w_gate_ups))
    w_down = torch.cat(list(w_downs))
    return [moe_tokens_reference(x, i, w, w_gate_up, w_down, shared)
            for x, i, w in zip(xs, topk_ids, topk_weights)]
