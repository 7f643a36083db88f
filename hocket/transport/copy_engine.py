"""``transport="copy_engine"``: collectives between the GPUs of one node, moved by copy engines
through symmetric memory (no SMs for the data, no NCCL kernels).

This is the transport object the stream-level executors call (``all_gather``,
``reduce_scatter``, ``all_reduce``). Each (group, device) gets one :class:`Mailbox`: a
symmetric staging area of :attr:`~hocket.core.sizes.TransportSizes.mailbox_bytes` (default 256 MiB, the
sizes in force when the transport was made) and a copy stream, created on the
first transfer (every rank reaches it at the same call: the operators agree first) and
freed by :func:`close_mailboxes`. A transfer is *pull*-based, on the copy stream:

1. barrier (every rank has finished reading the mailboxes: the previous transfer is over);
2. copy this rank's data into its own mailbox;
3. barrier (every rank's data is staged);
4. copy the peers' data out of their mailboxes over NVLink (reductions add them up).

Transfers larger than the mailbox run as several such rounds. The executors that push into
peers' memory with per-chunk flags (``chunked`` and ``tile_fused`` over this transport)
use :mod:`hocket.ops.lowering.peer_pipe` instead. Peer-to-peer ``exchange`` is not offered:
the ring strategies post receives before the matching sends exist, which a pull from a
staging area cannot serve; rings use ``transport="p2p"``.
"""

from __future__ import annotations

import torch

from hocket.core.sizes import DEFAULT_SIZES, TransportSizes, sizes_in_force
from hocket.transport.group import GroupHandle
from hocket.transport.per_group import PerGroup, require_cuda, require_nccl, rounds
from hocket.transport.stream_pending import StreamPending
from hocket.transport.stream_switch import on_stream
from hocket.transport.symm_mem import SymmBuffer


class Mailbox:
    """Symmetric staging area, copy stream and scratch buffers of one (group, device)."""

    def __init__(self, group: GroupHandle, device: torch.device, nbytes: int = DEFAULT_SIZES.mailbox_bytes) -> None:
        if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 1:
            raise ValueError(f"nbytes={nbytes!r} must be a positive int: the mailbox's bytes "
                             f"(TransportSizes.mailbox_bytes, default {DEFAULT_SIZES.mailbox_bytes})")
        self.rank, self.world = group.rank, group.world
        self.device = device
        self.buf = SymmBuffer(group=group, device=device, regions=[("mail", (nbytes,), torch.uint8)])
        self.nbytes = nbytes
        self.stream = torch.cuda.Stream(device)
        self._scratch: dict[tuple, torch.Tensor] = {}
        with on_stream(self.stream):
            self.buf.barrier(channel=0)  # load the barrier kernel before any transfer
        self.stream.synchronize()

    def mail(self, rank: int, dtype: torch.dtype) -> torch.Tensor:
        """Rank ``rank``'s mailbox as a flat ``dtype`` tensor."""
        raw = self.buf.peer(rank, "mail")
        itemsize = torch.empty((), dtype=dtype).element_size()
        return raw[:self.nbytes // itemsize * itemsize].view(dtype)

    def capacity(self, dtype: torch.dtype) -> int:
        return self.nbytes // torch.empty((), dtype=dtype).element_size()

    def scratch(self, role: str, numel: int, dtype: torch.dtype) -> torch.Tensor:
        key = (role, dtype)
        buf = self._scratch.get(key)
        if buf is None or buf.numel() < numel:
            buf = torch.empty(numel, dtype=dtype, device=self.device)
            self._scratch[key] = buf
        return buf[:numel]

    def barrier(self) -> None:
        self.buf.barrier(channel=0)

    def close(self) -> None:
        self.stream.synchronize()
        self._scratch.clear()
        self.buf.close()


MAILBOXES: dict[int, PerGroup[Mailbox]] = {}
"""One mailbox per (group, device) and size in bytes (every rank switches sizes alike: they are agreed)."""


def mailboxes_for(nbytes: int = DEFAULT_SIZES.mailbox_bytes) -> PerGroup[Mailbox]:
    """The mailboxes of ``nbytes`` bytes (made on first use)."""
    if nbytes not in MAILBOXES:
        MAILBOXES[nbytes] = PerGroup(lambda group, device: Mailbox(group, device, nbytes))
    return MAILBOXES[nbytes]


def close_mailboxes(group_name: str | None = None) -> int:
    """Free the mailboxes (all, or those of one group); call on every rank. Returns how many."""
    return sum(boxes.close(group_name) for boxes in MAILBOXES.values())


class CopyEngineTransport:
    """Collectives through symmetric memory on copy engines (see the module docstring)."""

    name = "copy_engine"

    def __init__(self, group: GroupHandle, sizes: TransportSizes | None = None) -> None:
        require_nccl(group, self.name, "needs a NCCL group of GPUs on one node")
        if sizes is not None and not isinstance(sizes, TransportSizes):
            raise TypeError(f"sizes={sizes!r} must be a hocket.core.sizes.TransportSizes, or None for the sizes "
                            f"in force (hocket.core.sizes.sizes_in_force())")
        self.group = group
        self.sizes = sizes_in_force() if sizes is None else sizes
        """its mailbox's size (default: the sizes in force when it was made)"""

    def _box(self, t: torch.Tensor) -> Mailbox:
        require_cuda(t, self.name)
        return mailboxes_for(self.sizes.mailbox_bytes).get(self.group, t.device)

    def _begin(self, box: Mailbox, *tensors: torch.Tensor) -> None:
        """The copy stream follows the caller's stream; ``tensors`` (used on it) stay allocated until it is done."""
        box.stream.wait_stream(torch.cuda.current_stream(box.device))
        for t in tensors:
            t.record_stream(box.stream)

    def all_gather(self, out: torch.Tensor, inp: torch.Tensor) -> StreamPending:
        """``out`` (``world * inp.numel()`` elements) receives every rank's ``inp``, rank-major."""
        box = self._box(inp)
        src, dst = inp.reshape(-1), out.view(-1)
        n, rank = src.numel(), box.rank
        self._begin(box, src, dst)
        with on_stream(box.stream):
            for lo, hi in rounds(n, box.capacity(src.dtype)):
                box.barrier()
                box.mail(rank, src.dtype)[:hi - lo].copy_(src[lo:hi])
                box.barrier()
                for step in range(1, box.world):
                    p = (rank + step) % box.world
                    dst[p * n + lo:p * n + hi].copy_(box.mail(p, src.dtype)[:hi - lo])
            dst[rank * n:(rank + 1) * n].copy_(src)
        return StreamPending.after(box.stream, what="copy-engine all-gather")

    def reduce_scatter(self, out: torch.Tensor, inp: torch.Tensor) -> StreamPending:
        """``out`` receives the sum over ranks of block ``rank`` of ``inp`` (rank-major blocks)."""
        box = self._box(inp)
        w, rank = box.world, box.rank
        dst = out.view(-1)
        n = dst.numel()
        blocks = inp.reshape(w, n)
        self._begin(box, blocks, dst)
        with on_stream(box.stream):
            for lo, hi in rounds(n, box.capacity(dst.dtype) // w):
                size = hi - lo
                box.barrier()
                box.mail(rank, dst.dtype)[:w * size].view(w, size).copy_(blocks[:, lo:hi])
                box.barrier()
                parts = box.scratch("rs", w * size, dst.dtype).view(w, size)
                for p in range(w):
                    parts[p].copy_(blocks[rank, lo:hi] if p == rank else box.mail(p, dst.dtype)[rank * size:
                                                                                              (rank + 1) * size])
                torch.sum(parts, dim=0, out=dst[lo:hi])
        return StreamPending.after(box.stream, what="copy-engine reduce-scatter")

    def all_reduce(self, tensor: torch.Tensor) -> StreamPending:
        """In-place sum over ranks (every rank adds in rank order, so all get the same bits)."""
        box = self._box(tensor)
        w, rank = box.world, box.rank
        flat = tensor.view(-1)
        self._begin(box, flat)
        with on_stream(box.stream):
            for lo, hi in rounds(flat.numel(), box.capacity(flat.dtype)):
                size = hi - lo
                box.barrier()
                box.mail(rank, flat.dtype)[:size].copy_(flat[lo:hi])
                box.barrier()
                parts = box.scratch("ar", w * size, flat.dtype).view(w, size)
                for p in range(w):
                    parts[p].copy_(box.mail(p, flat.dtype)[:size])
                torch.sum(parts, dim=0, out=flat[lo:hi])
        return StreamPending.after(box.stream, what="copy-engine all-reduce")

    def exchange(self, sends, recvs):
        raise ValueError("transport='copy_engine' offers collectives, not peer-to-peer send/recv (the ring "
                         "strategies post receives before their sends exist); use transport='p2p' for rings")
