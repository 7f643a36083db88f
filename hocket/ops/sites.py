"""Build the :class:`~hocket.core.site.Site` of one operator call (used by the ops and the graph pass).

Shapes follow docs/operators.md's convention (per-rank operands, leading dims folded into m):

* ``ag_mm``: ``m`` = rows after the gather, ``k`` = the matmul's K, ``n`` = B's N;
  gathering the last dim of ``A_shard`` gathers K, so ``m`` = local rows and
  ``k`` = ``world * A_shard.shape[-1]``;
* ``mm_rs``: ``A [m, k] @ B [k, n]`` with ``k`` local, output ``[m/w, n]`` (or ``[m, n/w]``
  when the last dim is scattered);
* ``mm_ar``: ``A [m, k] @ B [k, n]``, output ``[m, n]``.

``Site.dim`` is the gather/scatter dim as called, except that the last dim is written
``-1`` (it gathers K / scatters N whatever the rank of A, which is what costs differ by).
Several Bs of one width give ``n`` = that width and ``num_b`` = their count; Bs of
different widths are priced as one matmul: ``n`` = the sum of widths, ``num_b`` = 1.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from hocket.core.site import Site

_KINDS = ("ag_mm", "mm_rs", "mm_ar")


def _rows(t: torch.Tensor) -> int:
    return math.prod(t.shape[:-1])


def site_for_call(kind: str, *, A: torch.Tensor, Bs: Sequence[torch.Tensor], dim: int = 0, world: int,
                  ranks: Sequence[int] = (), direction: str = "forward", name: str = "") -> Site:
    """The Site of one call. ``A`` is ``A_shard`` for ``ag_mm``; ``dim`` is the normalised gather/scatter dim."""
    if kind not in _KINDS:
        raise ValueError(f"kind={kind!r} is not an operator hocket.ops runs; use one of {_KINDS}")
    widths = [int(B.shape[-1]) for B in Bs]
    if not widths:
        raise ValueError("Bs is empty; a Site needs at least one B matrix")
    if len(set(widths)) == 1:
        n, num_b = widths[0], len(widths)
    else:
        n, num_b = sum(widths), 1
    last = dim == A.dim() - 1
    rows, k_local = _rows(A), int(A.shape[-1])
    if kind == "ag_mm":
        m, k = (rows, k_local * world) if last else (rows * world, k_local)
    else:
        m, k = rows, k_local
    site_dim = -1 if (last and kind != "mm_ar") else (dim if kind != "mm_ar" else 0)
    return Site(kind=kind, m=m, k=k, n=n, dtype=str(A.dtype), world=world, num_b=num_b, dim=site_dim,
                ranks=tuple(ranks), direction=direction, name=name)
