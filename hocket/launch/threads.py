"""Compute threads per rank: ranks sharing a host must not oversubscribe its cores."""

from __future__ import annotations

import os

import torch


def default_threads_per_rank(world_size: int) -> int:
    """Cores of this host (those this process may use) divided among ``world_size`` ranks, at least 1."""
    if world_size < 1:
        raise ValueError(f"world_size={world_size} must be >= 1")
    if hasattr(os, "sched_getaffinity"):
        cores = len(os.sched_getaffinity(0))
    else:
        cores = os.cpu_count() or 1
    return max(1, cores // world_size)


def set_rank_threads(threads: int) -> None:
    """Use ``threads`` compute threads in this rank (torch intra-op and OMP for children)."""
    if threads < 1:
        raise ValueError(f"threads_per_rank={threads} must be >= 1")
    os.environ["OMP_NUM_THREADS"] = str(threads)
    torch.set_num_threads(threads)
