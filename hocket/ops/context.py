"""Resources the executors reuse across calls, owned by explicit context objects.

An :class:`OpContext` belongs to one (process group, device, dtype) and hands out
scratch buffers by (role, shape): the staging and ring buffers of a shape class are
allocated on its first call and reused afterwards. Buffers never leave an executor:
outputs are always fresh tensors, so nothing a caller holds aliases a context buffer.
Every executor finishes (or, on CUDA, stream-orders) its communication before it
returns, so a later call may reuse the buffers.

Contexts live in a :class:`ContextRegistry`; :func:`close_contexts` frees them, and the buffers of the
sub-groups a hierarchical plan uses on the group (call it before destroying a process group, or let
``destroy_process_group`` drop the group and the next call on a new group makes a new context).

A context keeps at most ``max_buffers`` buffers and drops the least recently used. A CUDA
graph replays the addresses it captured, so :class:`hocket.ops.CapturedCall` records every
buffer handed out while it captures (:func:`recording_buffers`) and keeps them alive as long as
the graph: a buffer the context drops later is then not freed under the graph (freed, its memory
would go to other tensors, which every replay would overwrite).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager

import torch

_RECORDERS: list[list[torch.Tensor]] = []
"""Open :func:`recording_buffers` blocks: each gets every buffer any context hands out."""


@contextmanager
def recording_buffers() -> Iterator[list[torch.Tensor]]:
    """A list that receives every buffer any :class:`OpContext` hands out inside the block
    (the caller keeps the list, and so the buffers, alive)."""
    got: list[torch.Tensor] = []
    _RECORDERS.append(got)
    try:
        yield got
    finally:
        _RECORDERS.remove(got)


class OpContext:
    """Scratch buffers for one (group, device, dtype).

    On CUDA the executors need no streams of their own: NCCL runs every async collective
    on its internal stream, ordered after the work already queued on the current stream,
    and ``wait`` orders the current stream after it.
    """

    def __init__(self, *, group_name: str, device: torch.device, dtype: torch.dtype, max_buffers: int = 64) -> None:
        self.group_name = group_name
        self.device = torch.device(device)
        self.dtype = dtype
        self.max_buffers = max_buffers
        self._buffers: OrderedDict[tuple, torch.Tensor] = OrderedDict()
        self._closed = False

    def buffer(self, role: str, shape: tuple[int, ...] | list[int], dtype: torch.dtype | None = None, *,
               zeroed: bool = False) -> torch.Tensor:
        """A scratch tensor for ``role`` of ``shape``; the same one on every call with the same key.
        ``zeroed``: filled with zeros when it is made, for a caller that never writes part of it and
        relies on that part staying zero across calls (no fill kernel on the hot path)."""
        if self._closed:
            raise RuntimeError(f"OpContext for group {self.group_name!r} is closed; get a new one from the registry")
        key = (role, tuple(int(s) for s in shape), dtype or self.dtype)
        buf = self._buffers.get(key)
        if buf is None:
            buf = (torch.zeros if zeroed else torch.empty)(key[1], dtype=key[2], device=self.device)
            self._buffers[key] = buf
            while len(self._buffers) > self.max_buffers:
                self._buffers.popitem(last=False)
        else:
            self._buffers.move_to_end(key)
        for recorder in _RECORDERS:
            recorder.append(buf)
        return buf

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def nbytes(self) -> int:
        return sum(b.numel() * b.element_size() for b in self._buffers.values())

    def close(self) -> None:
        self._buffers.clear()
        self._closed = True


class ContextRegistry:
    """Owns the live contexts, one per (group name, device, dtype)."""

    def __init__(self) -> None:
        self._contexts: dict[tuple[str, str, torch.dtype], OpContext] = {}

    def get(self, group_name: str, device: torch.device, dtype: torch.dtype) -> OpContext:
        key = (group_name, str(device), dtype)
        ctx = self._contexts.get(key)
        if ctx is None:
            ctx = OpContext(group_name=group_name, device=device, dtype=dtype)
            self._contexts[key] = ctx
        return ctx

    def close(self, group_name: str | None = None) -> int:
        """Close the contexts of ``group_name`` (all when None); returns how many were closed."""
        keys = [k for k in self._contexts if group_name is None or k[0] == group_name]
        for key in keys:
            self._contexts.pop(key).close()
        return len(keys)


REGISTRY = ContextRegistry()


def context_for(group_name: str, device: torch.device, dtype: torch.dtype) -> OpContext:
    return REGISTRY.get(group_name, device, dtype)


def close_contexts(group_name: str | None = None) -> int:
    """Free the buffers of every context (or those of one group), and those of the intra-node and inter-node
    sub-groups that hierarchical plans use on the group (:func:`hocket.transport.hierarchical.close_sub_groups`);
    returns how many contexts were closed."""
    from hocket.transport.hierarchical import close_sub_groups

    close_sub_groups(group_name)
    return REGISTRY.close(group_name)
