"""Initialise a rank's default process group: under torchrun, or from a driver's store."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

from hocket.env import wait_timeout_s
from hocket.launch.backend import choose_backend, device_for_rank
from hocket.launch.torchrun import detect_torchrun
from hocket.launch.validate import check_seconds


@dataclass(frozen=True, kw_only=True)
class RankContext:
    """Who this rank is once its default process group is up."""

    rank: int
    world_size: int
    local_rank: int
    backend: str
    device: torch.device


def _check_timeout(timeout_s: float) -> timedelta:
    return timedelta(seconds=check_seconds("timeout_s", timeout_s))


def _context(local_rank: int) -> RankContext:
    backend = str(dist.get_backend())
    return RankContext(
        rank=dist.get_rank(),
        world_size=dist.get_world_size(),
        local_rank=local_rank,
        backend=backend,
        device=device_for_rank(local_rank, backend=backend),
    )


def init_torchrun(*, backend: str = "auto", timeout_s: float | None = None) -> RankContext:
    """Join the process group described by torchrun's environment (``env://``).

    Already initialised: returns the existing group's context. ``timeout_s`` bounds every
    collective (default ``HOCKET_TIMEOUT_S``), so a collective that never completes fails.
    """
    env = detect_torchrun()
    if env is None:
        raise ValueError(
            "not running under torchrun (RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT unset); "
            "start with `torchrun --nproc-per-node N ...` or use hocket.launch.spawn / RankPool"
        )
    if dist.is_initialized():
        return _context(env.local_rank)
    timeout = _check_timeout(wait_timeout_s() if timeout_s is None else timeout_s)
    resolved = choose_backend(backend, local_world_size=env.local_world_size)
    if resolved == "nccl":
        torch.cuda.set_device(env.local_rank)
    dist.init_process_group(resolved, init_method="env://", timeout=timeout)
    return _context(env.local_rank)


def init_from_store(
    *,
    rank: int,
    world_size: int,
    store_host: str,
    store_port: int,
    backend: str,
    timeout_s: float,
    store_prefix: str = "",
) -> RankContext:
    """Join a group rendezvousing on a driver-hosted TCPStore (ranks of one host: local = global)."""
    timeout = _check_timeout(timeout_s)
    resolved = choose_backend(backend, local_world_size=world_size)
    if resolved == "nccl":
        torch.cuda.set_device(rank)
    store: dist.Store = dist.TCPStore(store_host, store_port, is_master=False, timeout=timeout)
    if store_prefix:
        store = dist.PrefixStore(store_prefix, store)
    dist.init_process_group(resolved, store=store, rank=rank, world_size=world_size, timeout=timeout)
    return _context(rank)
