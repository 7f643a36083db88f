"""PyTorch symmetric memory as hocket's peer transports use it: one allocation, named regions.

A :class:`SymmBuffer` is one ``torch.distributed._symmetric_memory`` allocation of raw
bytes, rendezvoused once over a group, split into named regions (a flag array, a
gathered operand, partial-result slots, ...) at 256-byte aligned offsets. Every rank
allocates the same layout, so region ``name`` of rank ``p`` is reachable from every
other rank as a tensor (:meth:`SymmBuffer.peer`): the copy engines copy into or out of
it over NVLink, and kernels raise flags in it. :meth:`SymmBuffer.barrier` is the
handle's device-side barrier on the current stream.

The layout (:func:`plan_layout`) is plain Python; allocation needs CUDA, a NCCL group
and symmetric-memory support (:func:`symm_memory_available`). Allocation and rendezvous
are collective: call them at the same point on every rank (hocket does so on an
operator's first call, after the cross-rank agreement).
"""

from __future__ import annotations

import importlib
import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from hocket import env

ALIGN_BYTES = 256


@dataclass(frozen=True, kw_only=True)
class Region:
    """Where one named tensor lives inside the symmetric allocation."""

    name: str
    offset_bytes: int
    shape: tuple[int, ...]
    dtype: torch.dtype

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def itemsize(self) -> int:
        return torch.empty((), dtype=self.dtype).element_size()

    @property
    def nbytes(self) -> int:
        return self.numel * self.itemsize


def plan_layout(regions: Sequence[tuple[str, Sequence[int], torch.dtype]]) -> tuple[dict[str, Region], int]:
    """Offsets of ``(name, shape, dtype)`` regions, each starting on a 256-byte boundary;
    returns ``({name: Region}, total bytes)``."""
    layout: dict[str, Region] = {}
    offset = 0
    for name, shape, dtype in regions:
        if name in layout:
            raise ValueError(f"region {name!r} appears twice in the symmetric layout; give each region its own name")
        shape = tuple(int(s) for s in shape)
        if any(s < 0 for s in shape):
            raise ValueError(f"region {name!r} has a negative dim in shape {shape}")
        region = Region(name=name, offset_bytes=offset, shape=shape, dtype=dtype)
        layout[name] = region
        offset += -(-max(region.nbytes, 1) // ALIGN_BYTES) * ALIGN_BYTES
    return layout, max(offset, ALIGN_BYTES)


def symm_memory_available() -> bool:
    """Whether this torch build offers CUDA symmetric memory and a GPU is present."""
    if not torch.cuda.is_available():
        return False
    try:
        importlib.import_module("torch.distributed._symmetric_memory")
    except ImportError:
        return False
    return True


def _rendezvous(tensor: torch.Tensor, group_name: str):
    import torch.distributed._symmetric_memory as symm_mem

    enable = getattr(symm_mem, "enable_symm_mem_for_group", None)
    if enable is not None:  # needed before torch 2.9, a deprecated no-op after
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            enable(group_name)
    return symm_mem.rendezvous(tensor, group_name)


class SymmBuffer:
    """One symmetric allocation split into named regions (see the module docstring).

    ``group``: a :class:`hocket.transport.group.GroupHandle` of a NCCL group whose ranks
    each own one GPU of this node. Collective: every rank constructs it with the same regions.
    """

    def __init__(self, *, group, device: torch.device, regions: Sequence[tuple[str, Sequence[int], torch.dtype]]
                 ) -> None:
        if not symm_memory_available():
            raise RuntimeError("symmetric memory needs CUDA and torch.distributed._symmetric_memory; "
                               "use transport='collective' on this machine")
        if "nccl" not in group.backend:
            raise ValueError(f"group {group.name!r} uses backend {group.backend!r}; symmetric memory needs a NCCL "
                             f"group of GPUs on one node (use transport='collective' for gloo)")
        import torch.distributed._symmetric_memory as symm_mem

        self.group_name = group.name
        self.rank, self.world = group.rank, group.world
        self.device = torch.device(device)
        self.layout, self.nbytes = plan_layout(regions)
        self._raw = symm_mem.empty(self.nbytes, dtype=torch.uint8, device=self.device)
        self.handle = _rendezvous(self._raw, group.name)
        self._views: dict[tuple[int, str], torch.Tensor] = {}
        self._closed = False

    def region(self, name: str) -> Region:
        try:
            return self.layout[name]
        except KeyError:
            raise KeyError(f"symmetric buffer has no region {name!r}; regions: {sorted(self.layout)}") from None

    def local(self, name: str) -> torch.Tensor:
        """This rank's region ``name``."""
        return self.peer(self.rank, name)

    def peer(self, rank: int, name: str) -> torch.Tensor:
        """Region ``name`` of group rank ``rank`` (this rank's own when ``rank`` is ours)."""
        if self._closed:
            raise RuntimeError(f"the symmetric buffer of group {self.group_name!r} was closed; build a new one")
        key = (rank, name)
        view = self._views.get(key)
        if view is None:
            region = self.region(name)
            if rank == self.rank:
                raw = self._raw[region.offset_bytes:region.offset_bytes + region.nbytes]
                view = raw.view(region.dtype).view(region.shape)
            else:
                view = self.handle.get_buffer(rank, region.shape, region.dtype,
                                              storage_offset=region.offset_bytes // region.itemsize)
            self._views[key] = view
        return view

    def barrier(self, channel: int = 0) -> None:
        """Device-side barrier of the group on the current stream (bounded by ``HOCKET_TIMEOUT_S``)."""
        self.handle.barrier(channel=channel, timeout_ms=int(env.wait_timeout_s() * 1000))

    def close(self) -> None:
        """Drop the allocation (after the device finished using it)."""
        if self._closed:
            return
        torch.cuda.synchronize(self.device)
        self._views.clear()
        self.handle = None
        self._raw = None
        self._closed = True
