"""What the finders hand the rewriters: one dataclass per matched pattern.

The finders (:mod:`hocket.graph.find`) only read the graph; the rewriters
(:mod:`hocket.graph.fuse`) only act on these matches, so every decision about a node
is made in one place.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import fx


@dataclass(frozen=True, kw_only=True)
class Unmatched:
    """A collective (or a pattern around it) the pass leaves as it is, and why."""

    node: fx.Node
    reason: str


@dataclass(frozen=True, kw_only=True)
class AllGatherMatch:
    """``all_gather_into_tensor`` + ``wait_tensor`` (+ DTensor's split/cat for a non-zero gather dim)."""

    start: fx.Node
    wait: fx.Node
    result: fx.Node
    """the gathered tensor: the ``cat`` for a non-zero gather dim, else the wait."""
    shard: fx.Node
    gather_dim: int
    """dim of ``result`` the shards are concatenated along (non-negative)."""
    group_name: str
    world: int
    pattern: tuple[fx.Node, ...]
    """every node the fused operator replaces (start, wait, split, getitems, cat)."""


@dataclass(frozen=True, kw_only=True)
class ConsumerMatmul:
    """A matmul that reads the gathered tensor, flattened to ``[rows, k]``."""

    mm: fx.Node
    source: fx.Node
    """the flattened gathered tensor the matmul reads."""
    b: fx.Node | None
    """B of ``flat(gathered) @ B``; None when ``transposed`` (B is ``P^T``, built by the rewriter)."""
    transposed: bool = False
    """``mm(P, flat(gathered)^T)``: the result is ``(flat(gathered) @ P^T)^T``."""
    p: fx.Node | None = None
    bias: fx.Node | None = None
    """``addmm``'s bias (added to the fused result)."""


@dataclass(frozen=True, kw_only=True)
class GatherUses:
    """How the gathered tensor is read: fusable matmuls, and everything else."""

    consumers: tuple[ConsumerMatmul, ...]
    others: tuple[fx.Node, ...]
    """values (the gathered tensor or reshapes/casts of it) read by non-fusable users."""
    dtype: torch.dtype | None
    """the one dtype every reader sees (a cast moves before the gather), None when mixed."""


@dataclass(frozen=True, kw_only=True)
class ScatterMatch:
    """``reduce_scatter_tensor`` or ``all_reduce`` + ``wait_tensor`` (+ DTensor's split/cat)."""

    start: fx.Node
    wait: fx.Node
    source: fx.Node
    """the tensor being reduced, before DTensor's split/cat (rank-major reordering)."""
    scatter_dim: int | None
    """dim of ``source`` scattered (non-negative); None for an all-reduce."""
    reduce_op: str
    group_name: str
    world: int | None
    pattern: tuple[fx.Node, ...]


@dataclass(frozen=True, kw_only=True)
class ProducerMatmul:
    """The matmul(s) whose result, reshaped, is reduced: ``source = reshape(sum_i A_i @ B_i)``."""

    terms: tuple[tuple[fx.Node, fx.Node, fx.Node], ...]
    """(mm node, A, B) per summed matmul, in graph order."""
    between: tuple[fx.Node, ...]
    """reshapes and adds between the matmuls and the reduced tensor (replaced too)."""
    m: int
    k: int
    """K of the fused matmul (the sum over the terms)."""
    n: int
    dtype: torch.dtype
