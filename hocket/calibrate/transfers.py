"""Transfer callables for bandwidth curves: collectives, P2P ring, peer copy, host copy, host relay.

The peer copy (``copy_engine``) is, on a NCCL group of one node's GPUs, a copy into the next rank's
symmetric memory, as the copy-engine transport does it; elsewhere (one process with two GPUs) a
plain cross-device copy. The host relay (``host_relay``) is the ``host_staged`` transport's all-gather
(``hocket.transport.host_relay``) on a NCCL group of GPUs; it does not exist elsewhere.

Byte conventions follow ``hocket.hardware.profile`` (and ``Site.comm_bytes``).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.distributed as dist

from hocket.calibrate.config import COLLECTIVES
from hocket.calibrate.gemm import torch_dtype

TRANSFERS = COLLECTIVES + ("p2p", "copy_engine", "host_link", "host_relay")


def _random(numel: int, dtype: torch.dtype, device: torch.device, *, pin: bool = False) -> torch.Tensor:
    t = torch.randn(numel).to(dtype)
    if device.type == "cpu":
        return t.pin_memory() if pin else t
    return t.to(device)


def make_transfer(name: str, nbytes: int, *, dtype: str, group, device: torch.device
                  ) -> tuple[Callable[[], None], int] | None:
    """(callable, bytes it moves in this file's convention), or None where ``name`` does
    not exist here (a single rank; peer/host copies without a second GPU / a GPU)."""
    if name not in TRANSFERS:
        raise ValueError(f"transfer {name!r} is unknown; use one of {TRANSFERS}")
    dt = torch_dtype(dtype)
    itemsize = torch.empty((), dtype=dt).element_size()
    world = dist.get_world_size(group) if dist.is_initialized() else 1
    numel = max(world, nbytes // itemsize) // world * world
    moved = numel * itemsize
    if name == "copy_engine" and world > 1 and device.type == "cuda":
        peer_copy = symmetric_peer_copy(numel, dt, device, moved, group)
        if peer_copy is not None:
            return peer_copy
    if name in ("copy_engine", "host_link"):
        return _device_copy(name, numel, dt, device, moved)
    if world < 2:
        return None
    from hocket.transport import TorchDistTransport, resolve_group

    handle = resolve_group(group if group is not None else dist.group.WORLD)
    if name == "host_relay":
        return host_relay_all_gather(numel, dt, device, moved, handle)
    transport = TorchDistTransport(handle)
    if name == "all_gather":
        shard, out = _random(numel // world, dt, device), torch.empty(numel, dtype=dt, device=device)
        return (lambda: transport.all_gather(out, shard).wait()), moved
    if name == "reduce_scatter":
        full, out = _random(numel, dt, device), torch.empty(numel // world, dtype=dt, device=device)
        return (lambda: transport.reduce_scatter(out, full).wait()), moved
    if name == "all_reduce":
        buf = _random(numel, dt, device)
        return (lambda: transport.all_reduce(buf).wait()), moved
    if name == "all_to_all":
        src, out = _random(numel, dt, device), torch.empty(numel, dtype=dt, device=device)
        return (lambda: dist.all_to_all_single(out, src, group=handle.pg)), moved
    send, recv = _random(numel, dt, device), torch.empty(numel, dtype=dt, device=device)
    to_next, from_prev = (handle.rank + 1) % world, (handle.rank - 1) % world
    return (lambda: transport.exchange([(send, to_next)], [(recv, from_prev)]).wait()), moved


def symmetric_peer_copy(numel: int, dt: torch.dtype, device: torch.device, moved: int, group
                         ) -> tuple[Callable[[], None], int] | None:
    """What the ``copy_engine`` transport's copies are: a DMA copy from this rank's memory into the next
    rank's symmetric buffer (every rank at once, as in a put or pull), no cross-process stream syncs.
    None where symmetric memory is not available (NCCL group of GPUs of one node)."""
    from hocket.transport import resolve_group
    from hocket.transport.symm_mem import SymmBuffer, symm_memory_available

    handle = resolve_group(group if group is not None else dist.group.WORLD)
    if not symm_memory_available() or "nccl" not in handle.backend:
        return None
    buf = SymmBuffer(group=handle, device=device, regions=[("dst", (numel,), dt)])  # collective: every rank
    src = _random(numel, dt, device)
    dst = buf.peer((handle.rank + 1) % handle.world, "dst")

    def copy(buf=buf) -> None:  # holds the buffer (and its mapping of the peer's) while the callable lives
        dst.copy_(src, non_blocking=True)
    return copy, moved


def _device_copy(name: str, numel: int, dt: torch.dtype, device: torch.device, moved: int
                 ) -> tuple[Callable[[], None], int] | None:
    if device.type != "cuda":
        return None
    src = _random(numel, dt, device)
    if name == "host_link":
        host = _random(numel, dt, torch.device("cpu"), pin=True)
        return (lambda: src.copy_(host, non_blocking=True)), moved
    count = torch.cuda.device_count()
    if count < 2:
        return None
    peer = torch.device("cuda", ((device.index or 0) + 1) % count)
    dst = torch.empty(numel, dtype=dt, device=peer)
    return (lambda: dst.copy_(src, non_blocking=True)), moved


def host_relay_all_gather(numel: int, dt: torch.dtype, device: torch.device, moved: int, handle
                          ) -> tuple[Callable[[], None], int] | None:
    """An all-gather of ``numel`` output elements per rank through the host-staged relay, as the
    ``host_staged`` transport runs it; None where that transport does not exist (CPU ranks, gloo)."""
    if device.type != "cuda" or "nccl" not in handle.backend:
        return None
    from hocket.transport.host_relay import HostStagedTransport

    relay = HostStagedTransport(handle)
    shard, out = _random(numel // handle.world, dt, device), torch.empty(numel, dtype=dt, device=device)
    return (lambda: relay.all_gather(out, shard).wait()), moved
