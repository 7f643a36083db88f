"""The ``collective`` / ``p2p`` transports: torch.distributed collectives and P2P ops.

Every call is issued with ``async_op=True`` (or ``batch_isend_irecv``) and returns a
:class:`~hocket.transport.pending.Pending`; the same code serves gloo (CPU) and NCCL
(CUDA). Reductions are always sums: callers divide for ``avg`` so every backend gives
the same semantics.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.distributed as dist

from hocket.transport.group import GroupHandle
from hocket.transport.pending import Pending

# torch 2.13 renames the tensor collectives (*_single); torch 2.11 only has the old names.
_all_gather_into = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_reduce_scatter_into = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


class TorchDistTransport:
    """Moves bytes with torch.distributed on one process group."""

    name = "collective"

    def __init__(self, group: GroupHandle) -> None:
        self.group = group

    def _pending(self, works: Sequence[dist.Work | None], what: str, tensor: torch.Tensor) -> Pending:
        return Pending(list(works), what=what, group_name=self.group.name, on_cuda=tensor.is_cuda)

    def all_gather(self, out: torch.Tensor, inp: torch.Tensor) -> Pending:
        """``out`` (contiguous, ``world * inp.numel()`` elements) receives every rank's ``inp``, rank-major.

        Both are passed flat: backends differ in which shapes they accept, never in flat layouts.
        """
        work = _all_gather_into(out.view(-1), inp.reshape(-1), group=self.group.pg, async_op=True)
        return self._pending([work], "all-gather", inp)

    def reduce_scatter(self, out: torch.Tensor, inp: torch.Tensor) -> Pending:
        """``out`` receives the sum over ranks of block ``rank`` of ``inp`` (rank-major blocks)."""
        work = _reduce_scatter_into(out.view(-1), inp.reshape(-1), op=dist.ReduceOp.SUM, group=self.group.pg,
                                    async_op=True)
        return self._pending([work], "reduce-scatter", inp)

    def all_reduce(self, tensor: torch.Tensor) -> Pending:
        """In-place sum over ranks."""
        work = dist.all_reduce(tensor, op=dist.ReduceOp.SUM, group=self.group.pg, async_op=True)
        return self._pending([work], "all-reduce", tensor)

    def all_to_all(self, out: torch.Tensor, inp: torch.Tensor, out_splits: Sequence[int] | None,
                   in_splits: Sequence[int] | None) -> Pending:
        """Rows of the first dim: block ``d`` of ``inp`` (``in_splits[d]`` rows) goes to rank ``d``, and ``out``
        receives rank ``s``'s block for this rank in block ``s`` (``out_splits[s]`` rows), rank-major. ``None``
        splits mean equal blocks (the first dim divided by the world). ``out`` and ``inp`` must be contiguous;
        every rank's ``in_splits[d]`` must equal rank ``d``'s ``out_splits`` entry for it."""
        work = dist.all_to_all_single(out, inp, None if out_splits is None else [int(v) for v in out_splits],
                                      None if in_splits is None else [int(v) for v in in_splits],
                                      group=self.group.pg, async_op=True)
        return self._pending([work], "all-to-all", inp)

    def exchange(self, sends: Sequence[tuple[torch.Tensor, int]],
                 recvs: Sequence[tuple[torch.Tensor, int]]) -> Pending:
        """Point-to-point: send/receive ``(tensor, peer group rank)`` pairs as one batch."""
        ops = [dist.P2POp(dist.isend, t, self.group.global_rank(peer), self.group.pg) for t, peer in sends]
        ops += [dist.P2POp(dist.irecv, t, self.group.global_rank(peer), self.group.pg) for t, peer in recvs]
        if not ops:
            return Pending([], what="p2p", group_name=self.group.name, on_cuda=False)
        works = dist.batch_isend_irecv(ops)
        return self._pending(works, "p2p send/recv", ops[0].tensor)
