"""Layout moves shared by the reference and the executors.

An all-gather along ``dim`` of ``A_shard`` (shape ``S``) equals the rank-major stack
``[world, *S]`` with the rank axis merged into ``dim``; a reduce-scatter along ``dim``
sends block ``r`` of that dim to rank ``r``. For any dim but the last, moving ``dim`` to
the front turns both into contiguous row blocks of a 2-D ``[rows, cols]`` matrix, which
is the canonical form the executors pipeline over.
"""

from __future__ import annotations

import math

import torch


def merge_rank_axis(stacked: torch.Tensor, dim: int) -> torch.Tensor:
    """``[world, *S]`` (rank-major) -> the tensor concatenated along ``dim`` of ``S``, contiguous."""
    world, shape = stacked.shape[0], list(stacked.shape[1:])
    if dim == 0:
        return stacked.reshape(world * shape[0], *shape[1:])
    moved = stacked.movedim(0, dim)  # [..., world, S_dim, ...]
    shape[dim] *= world
    # reshape copies, except where size-1 dims let it return a strided view (S = [2, 1], dim 1)
    return moved.reshape(shape).contiguous()


def split_rank_axis(full: torch.Tensor, dim: int, world: int) -> torch.Tensor:
    """Inverse of :func:`merge_rank_axis`: ``[..., world*s, ...]`` -> ``[world, ..., s, ...]`` contiguous."""
    shape = list(full.shape)
    shape[dim] //= world
    split = full.reshape(*shape[:dim], world, *shape[dim:])
    return split.movedim(dim, 0).contiguous()


def rows_first(t: torch.Tensor, dim: int) -> torch.Tensor:
    """``t`` with ``dim`` moved to the front, flattened to 2-D ``[rows, last]`` (contiguous, copies if needed)."""
    moved = t.movedim(dim, 0) if dim else t
    return moved.reshape(math.prod(moved.shape[:-1]), moved.shape[-1]).contiguous()


def rows_first_shape(shape: tuple[int, ...] | list[int], dim: int) -> list[int]:
    """Shape of ``t.movedim(dim, 0)`` for ``t`` of ``shape``."""
    shape = list(shape)
    return [shape[dim], *shape[:dim], *shape[dim + 1:]]


def dense(t: torch.Tensor) -> torch.Tensor:
    """``t`` with row-major strides, also for size-1 dims (where ``.contiguous()`` keeps any stride).

    Fake implementations return ``torch.empty(shape)``; the real outputs must stride alike.
    """
    expected, step = [], 1
    for size in reversed(t.shape):
        expected.append(step)
        step *= size
    if t.stride() == tuple(reversed(expected)):
        return t
    out = torch.empty(t.shape, dtype=t.dtype, device=t.device)
    out.copy_(t)
    return out


def from_rows_first(rows2d: torch.Tensor, shape: list[int], dim: int) -> torch.Tensor:
    """Undo :func:`rows_first`: a 2-D canonical matrix back to ``shape`` (the original layout), row-major."""
    moved = rows2d.view(rows_first_shape(shape, dim))
    return dense(moved.movedim(0, dim)) if dim else moved


def gathered_shape(shape: tuple[int, ...], dim: int, world: int) -> list[int]:
    out = list(shape)
    out[dim] *= world
    return out
