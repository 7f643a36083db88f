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

Uneven shards (``shard_rows``, every rank's size along the gather / scatter dim as the operator takes it;
``mm_ar``: every rank's local K) become ``Site.shard_rows`` in canonical rows: times the other leading dims
for a row gather or scatter, as they are along the last dim; ``m`` (or ``k`` / ``n`` along the last dim)
is then their sum and ``mm_ar``'s ``k`` their largest.
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
                  ranks: Sequence[int] = (), direction: str = "forward", name: str = "",
                  shard_rows: Sequence[int] = ()) -> Site:
    """The Site of one call. ``A`` is ``A_shard`` for ``ag_mm``; ``dim`` is the normalised gather/scatter dim;
    ``shard_rows`` every rank's size along it (uneven shards, module docstring; empty: even)."""
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
    canonical: tuple[int, ...] = ()
    if shard_rows and len(set(shard_rows)) > 1:
        if kind == "mm_ar":
            canonical, k = tuple(shard_rows), max(shard_rows)
        else:
            shape = list(A.shape) if kind == "ag_mm" else [*A.shape[:-1], widths[0] if len(widths) == 1 else n]
            factor = 1 if last else math.prod(s for i, s in enumerate(shape[:-1]) if i != dim)
            canonical = tuple(int(r) * factor for r in shard_rows)
            if kind == "ag_mm":
                m, k = (rows, sum(canonical)) if last else (sum(canonical), k_local)
    return Site(kind=kind, m=m, k=k, n=n, dtype=str(A.dtype), world=world, num_b=num_b, dim=site_dim,
                ranks=tuple(ranks), direction=direction, name=name, shard_rows=canonical)
