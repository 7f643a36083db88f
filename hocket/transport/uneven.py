"""Collectives over uneven row blocks: rank ``r`` holds (all-gather) or receives (reduce-scatter)
``sizes[r]`` rows of a 2-D ``[rows, cols]`` matrix whose blocks are stacked in rank order.

Two ways, named by the plan (``Plan.splits``: None = ``exact``, ``"padded"``):

* ``exact``: only the real rows move. On NCCL the list forms of ``all_gather`` / ``reduce_scatter``
  (PyTorch runs them as grouped broadcasts / reduces); on gloo ``all_to_all_single`` with split sizes
  for the all-gather (gloo's list ``all_gather`` refuses uneven sizes) and the list ``reduce_scatter``
  (which gloo accepts uneven, zeros included). Needs a torch.distributed transport (``collective`` /
  ``p2p``): a relay or copy-engine transport has no uneven form, so :func:`check_way` refuses it.
* ``padded``: every block padded to the largest (``max(sizes)`` rows), one equal collective of
  ``world * max(sizes)`` rows through the plan's own transport (any transport), then the real rows sliced
  out: the padding's bytes move too.

Every function takes a transport (``.group`` is its :class:`~hocket.transport.group.GroupHandle`) and
returns an object with ``wait()``; its output is valid after ``wait()``. Scratch buffers come from the
caller's ``buffer(name, shape)`` (an executor's context), else are allocated.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.distributed as dist

from hocket.transport.group import GroupHandle
from hocket.transport.pending import Pending

WAYS = ("exact", "padded")
EXACT_TRANSPORTS = ("collective", "p2p")
"""transports whose exact uneven collectives exist (torch.distributed's list forms and ``all_to_all_single``)."""


def way_of(splits: str | None) -> str:
    """``Plan.splits`` as an uneven way: ``"padded"`` or ``"exact"`` (None, ``"exchanged"``)."""
    return "padded" if splits == "padded" else "exact"


def check_way(way: str, transport_name: str, strategy: str) -> None:
    """Refuse an exact uneven collective over a transport that has none, naming the fix."""
    if way not in WAYS:
        raise ValueError(f"uneven way {way!r} is unknown; use one of {WAYS}")
    if way == "exact" and transport_name not in EXACT_TRANSPORTS:
        raise ValueError(f"strategy {strategy!r} over transport {transport_name!r} has no exact uneven collective "
                         f"(only {EXACT_TRANSPORTS} do); use Plan(splits='padded') to pad every shard to the "
                         f"largest, or transport='collective'")


def _group(transport: object) -> GroupHandle:
    return transport if isinstance(transport, GroupHandle) else transport.group


class _Then:
    """``inner.wait()``, then ``after()`` (the slices out of a padded buffer)."""

    __slots__ = ("_inner", "_after")

    def __init__(self, inner, after: Callable[[], None] | None) -> None:
        self._inner, self._after = inner, after

    def wait(self) -> None:
        inner, after, self._inner, self._after = self._inner, self._after, None, None
        if inner is not None:
            inner.wait()
        if after is not None:
            after()


def offsets(sizes: Sequence[int]) -> list[int]:
    """Start row of every rank's block (and the total last)."""
    out, at = [], 0
    for s in sizes:
        out.append(at)
        at += s
    return [*out, at]


def _scratch(buffer, name: str, shape: tuple[int, ...], like: torch.Tensor) -> torch.Tensor:
    if buffer is not None:
        return buffer(name, shape)
    return like.new_empty(shape)


def _pending(works, what: str, group: GroupHandle, t: torch.Tensor) -> Pending:
    return Pending(list(works), what=what, group_name=group.name, on_cuda=t.is_cuda)


def all_gather_rows(transport: object, out: torch.Tensor, inp: torch.Tensor, sizes: Sequence[int], *,
                    way: str = "exact", buffer=None, tag: str = "uneven") -> object:
    """``out [sum(sizes), cols]`` receives every rank's ``inp [sizes[rank], cols]``, rank-major."""
    g = _group(transport)
    w, rank = g.world, g.rank
    cols = inp.shape[-1] if inp.dim() > 1 else 1
    if inp.shape[0] != sizes[rank] or out.shape[0] != sum(sizes):
        raise ValueError(f"all_gather_rows: inp has {inp.shape[0]} rows and out {out.shape[0]} but "
                         f"sizes={tuple(sizes)} give rank {rank} {sizes[rank]} rows of {sum(sizes)}")
    if way == "padded":
        top = max(sizes)
        mine = _scratch(buffer, f"{tag}.pad_in", (top, cols), inp)
        mine[:sizes[rank]].copy_(inp)
        stage = _scratch(buffer, f"{tag}.pad_out", (w, top, cols), inp)
        inner = transport.all_gather(stage, mine)
        starts = offsets(sizes)

        def unpad() -> None:
            for r in range(w):
                if sizes[r]:
                    out[starts[r]:starts[r + 1]].copy_(stage[r, :sizes[r]])

        return _Then(inner, unpad)
    flat_out = out.view(-1)
    if "nccl" in g.backend:
        starts = offsets(sizes)
        views = [out[starts[r]:starts[r + 1]] for r in range(w)]
        work = dist.all_gather(views, inp.contiguous(), group=g.pg, async_op=True)
        return _pending([work], "uneven all-gather", g, inp)
    repeated = _scratch(buffer, f"{tag}.a2a_in", (w * sizes[rank], cols), inp)
    if sizes[rank]:
        repeated.view(w, sizes[rank], cols).copy_(inp.reshape(1, sizes[rank], cols).expand(w, -1, -1))
    work = dist.all_to_all_single(flat_out, repeated.view(-1), output_split_sizes=[s * cols for s in sizes],
                                  input_split_sizes=[sizes[rank] * cols] * w, group=g.pg, async_op=True)
    return _pending([work], "uneven all-gather (all_to_all_single)", g, inp)


def reduce_scatter_rows(transport: object, out: torch.Tensor, inp: torch.Tensor, sizes: Sequence[int], *,
                        way: str = "exact", buffer=None, tag: str = "uneven") -> object:
    """``out [sizes[rank], cols]`` receives the sum over ranks of block ``rank`` of ``inp [sum(sizes), cols]``."""
    g = _group(transport)
    w, rank = g.world, g.rank
    cols = inp.shape[-1]
    if inp.shape[0] != sum(sizes) or out.shape[0] != sizes[rank]:
        raise ValueError(f"reduce_scatter_rows: inp has {inp.shape[0]} rows and out {out.shape[0]} but "
                         f"sizes={tuple(sizes)} give rank {rank} {sizes[rank]} rows of {sum(sizes)}")
    starts = offsets(sizes)
    if way == "padded":
        top = max(sizes)
        stage = _scratch(buffer, f"{tag}.pad_in", (w, top, cols), inp)
        for r in range(w):
            if sizes[r]:
                stage[r, :sizes[r]].copy_(inp[starts[r]:starts[r + 1]])
            if sizes[r] < top:  # padding is summed and dropped: zeros keep it finite
                stage[r, sizes[r]:].zero_()
        landed = _scratch(buffer, f"{tag}.pad_out", (top, cols), inp)
        inner = transport.reduce_scatter(landed, stage)
        own = sizes[rank]
        return _Then(inner, (lambda: out.copy_(landed[:own])) if own else None)
    views = [inp[starts[r]:starts[r + 1]] for r in range(w)]
    work = dist.reduce_scatter(out, views, op=dist.ReduceOp.SUM, group=g.pg, async_op=True)
    return _pending([work], "uneven reduce-scatter", g, inp)
