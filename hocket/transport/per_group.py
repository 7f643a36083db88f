"""Helpers the GPU transports share: one resource per (group, device), and transfers in rounds."""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

import torch

from hocket.transport.group import GroupHandle

R = TypeVar("R")


class PerGroup(Generic[R]):
    """Resources built on first use, one per (group name, device), closed explicitly."""

    def __init__(self, build: Callable[[GroupHandle, torch.device], R]) -> None:
        self._build = build
        self._items: dict[tuple[str, str], R] = {}

    def get(self, group: GroupHandle, device: torch.device) -> R:
        key = (group.name, str(device))
        item = self._items.get(key)
        if item is None:
            item = self._items[key] = self._build(group, device)
        return item

    def close(self, group_name: str | None = None) -> int:
        """Close the resources of ``group_name`` (all when None); returns how many."""
        keys = [k for k in self._items if group_name is None or k[0] == group_name]
        for key in keys:
            self._items.pop(key).close()
        return len(keys)


def rounds(total: int, per_round: int) -> list[tuple[int, int]]:
    """``[lo, hi)`` element ranges of at most ``per_round`` covering ``total`` (one empty round for 0)."""
    per_round = max(1, per_round)
    return [(lo, min(total, lo + per_round)) for lo in range(0, total, per_round)] or [(0, 0)]


def ramped_rounds(total: int, per_round: int) -> list[tuple[int, int]]:
    """Like :func:`rounds`, but the first two rounds are a quarter and a half of ``per_round``: the
    second stage of a two-stage pipeline (device->host, then host->device) starts sooner. A total
    that fits one round stays one round."""
    per_round = max(1, per_round)
    if total <= per_round:
        return [(0, total)]
    bounds, lo = [], 0
    for size in (max(1, per_round // 4), max(1, per_round // 2)):
        if lo < total:
            bounds.append((lo, min(total, lo + size)))
            lo = bounds[-1][1]
    if lo >= total:
        return bounds or [(0, 0)]
    return bounds + [(a + lo, b + lo) for a, b in rounds(total - lo, per_round)]


def require_nccl(group: GroupHandle, transport: str, why: str) -> None:
    if "nccl" not in group.backend:
        raise ValueError(f"transport={transport!r} {why}; group {group.name!r} uses {group.backend!r} "
                         f"(CPU tensors): use transport='collective'")


def require_cuda(t: torch.Tensor, transport: str) -> None:
    if not t.is_cuda:
        raise ValueError(f"transport={transport!r} moves CUDA tensors; got one on {t.device}")
