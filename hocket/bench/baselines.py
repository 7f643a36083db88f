"""The two ideal-case baselines of docs/validation.md, as timeable callables.

* compute-alone: the vendor GEMM (``torch.mm``) on the whole per-rank problem
  (``[m, k] @ [k, n]`` for every B), never hocket's own kernels;
* comm-alone: the operator's collective alone on the same bytes: all-gather of
  ``A_shard`` (ag_mm), reduce-scatter of ``[m, n]`` (mm_rs), all-reduce of ``[m, n]``
  (mm_ar), through every transport this group can use (torch.distributed's collective,
  P2P rings as the ring strategies use them, and the copy-engine transport between
  CUDA ranks on NCCL when it is registered); the fastest of them is the comm-alone time.

Buffers are allocated once, outside the callables, so only the work is timed. The
all-reduce runs in place on one buffer, so its values grow by ``world`` per call; that
changes no timing of a sum.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.distributed as dist

from hocket.bench.p2p_ring import ring_all_gather, ring_all_reduce, ring_reduce_scatter
from hocket.bench.workload import check_divisible, torch_dtype
from hocket.core.site import Site
from hocket.launch.same_case import shared_generator
from hocket.transport.group import GroupHandle, resolve_group
from hocket.transport.registry import available_transports, get_transport


def _random(*shape: int, dtype: torch.dtype, device, seed: int) -> torch.Tensor:
    return torch.randn(*shape, generator=shared_generator(seed)).to(device=device, dtype=dtype)


def compute_alone(site: Site, *, device: torch.device | str = "cpu", seed: int = 0) -> Callable[[], object]:
    """``torch.mm`` on the whole per-rank problem of ``site``."""
    check_divisible(site)
    dtype = torch_dtype(site)
    a = _random(site.m, site.k, dtype=dtype, device=device, seed=seed)
    bs = [_random(site.k, site.n, dtype=dtype, device=device, seed=seed + 1 + i) for i in range(site.num_b)]

    def run() -> list[torch.Tensor]:
        return [torch.mm(a, b) for b in bs]

    return run


COMM_TRANSPORTS = ("collective", "p2p", "copy_engine")
"""transports that can carry a whole collective, in the order they are tried."""


def comm_transports(handle: GroupHandle, device: torch.device) -> tuple[str, ...]:
    """The transports comm-alone is measured on for this group and device."""
    names = ["collective", "p2p"] if handle.world > 1 else ["collective"]
    if torch.device(device).type == "cuda" and "nccl" in handle.backend and "copy_engine" in available_transports():
        names.append("copy_engine")
    return tuple(names)


def comm_alone(site: Site, *, group=None, device: torch.device | str = "cpu", seed: int = 0,
               transport: str = "collective") -> Callable[[], object]:
    """The site's collective alone on the same bytes through ``transport`` (every rank of
    ``group`` must call the result)."""
    check_divisible(site)
    handle = resolve_group(dist.group.WORLD if group is None else group)
    if handle.world != site.world:
        raise ValueError(f"site.world={site.world} but the process group has {handle.world} ranks; "
                         "measure on a matching group")
    if transport not in COMM_TRANSPORTS:
        raise ValueError(f"transport={transport!r} cannot carry a comm-alone baseline; use one of {COMM_TRANSPORTS}")
    ring = transport == "p2p"
    mover = get_transport(transport, handle)
    dtype = torch_dtype(site)
    rank, world = handle.rank, handle.world
    rank_seed = seed + 7919 * rank
    if site.kind == "ag_mm":
        shard = _random(site.m // world, site.k, dtype=dtype, device=device, seed=rank_seed)
        gathered = torch.empty(site.m, site.k, dtype=dtype, device=device)
        if ring:
            gathered[rank * shard.shape[0]:(rank + 1) * shard.shape[0]].copy_(shard)
            return ring_all_gather(mover, gathered, rank, world)
        return lambda: mover.all_gather(gathered, shard).wait()
    full = _random(site.m, site.n * site.num_b, dtype=dtype, device=device, seed=rank_seed)
    if site.kind == "mm_rs":
        scattered = torch.empty(site.m // world, site.n * site.num_b, dtype=dtype, device=device)
        if ring:
            return ring_reduce_scatter(mover, full, scattered, rank, world)
        return lambda: mover.reduce_scatter(scattered, full).wait()
    if ring:
        return ring_all_reduce(mover, full, rank, world)
    return lambda: mover.all_reduce(full).wait()
