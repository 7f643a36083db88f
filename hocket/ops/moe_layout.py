"""Row layouts of an expert-parallel MoE call: the canonical send and receive buffers and their pieces.

Counts: ``counts[s, e]`` (int64, ``world x E``) is how many of rank ``s``'s (token, choice) pairs chose expert
``e``; experts ``d * e_local ... (d + 1) * e_local - 1`` live on rank ``d``.

Canonical layouts (what ``torch.ops.hocket.all_to_all_grouped_mm`` / ``grouped_mm_all_to_all`` take and return)
are ``world`` blocks, each a run of segments, one per local expert in expert order, then padding:

* send buffer of rank ``r``: block ``d`` holds ``r``'s rows for rank ``d``'s experts; segment ``(d, e)`` has
  ``counts[r, d * e_local + e]`` rows, each in (token, choice) order;
* receive buffer of rank ``r``: block ``s`` holds source ``s``'s rows for ``r``'s experts; segment ``(s, e)``
  has ``counts[s, r * e_local + e]`` rows.

``splits="exchanged"``: a block is exactly its rows (no padding); the buffers have ``sum(counts[r])`` and
``sum(counts[:, r's experts])`` rows. ``splits="padded"``: every block has ``L = tokens_max * min(k, e_local)``
rows (no source sends more to one rank: a token picks distinct experts), so a buffer has ``world * L`` rows,
padding rows are zeros, and every index here is computed on the counts' device with no host sync.

A **piece** (one all-to-all of a strategy) selects rows ``lo .. hi`` of every segment and packs them into its
own buffer with the same block/segment structure and block capacities ``caps`` (padded: fixed bounds, below):

* ``whole``: every row (``sequential``, ``shared_overlap``);
* ``token_block(b, n)``: rows ``b * c // n .. (b + 1) * c // n`` of every segment of ``c`` rows, i.e. block
  ``b``'s share of every (source, expert) run of tokens (``token_blocks``); padded capacity
  ``min(L, (L + e_local * (n - 1)) // n)``;
* ``expert_group(g0, g1)``: the segments of local experts ``g0 .. g1 - 1`` (``expert_groups``); padded capacity
  ``min(L, tokens_max * min(k, g1 - g0))``;
* ``source(j)``: block ``(r + j) % world`` of the send buffer, block ``(r - j) % world`` of the receive
  buffer (``per_source``: round ``j`` sends to one rank and receives from one).

Sender and receiver derive a piece from the same counts with the same rule, so their block sizes agree.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

EXCHANGED = "exchanged"
PADDED = "padded"


@dataclass(frozen=True)
class Blocks:
    """One canonical buffer: ``c[b, e]`` rows per (block, local expert), ``caps[b]`` rows per block."""

    c: torch.Tensor
    caps: tuple[int, ...]

    @property
    def rows(self) -> int:
        return sum(self.caps)

    @property
    def starts(self) -> torch.Tensor:
        caps = torch.tensor(self.caps, dtype=torch.int64, device=self.c.device)
        return torch.cumsum(caps, 0) - caps


@dataclass(frozen=True)
class PieceMap:
    """Where a piece's buffer rows live in the canonical buffer, and its grouped-GEMM layout.

    ``src[i]``: canonical row of piece row ``i`` (``canonical_rows`` for a padding row); ``perm``: piece rows in
    expert-major order (None when already in it); ``offs``: int32 cumulative rows per local expert along
    ``perm``; ``caps``: rows per block (the all-to-all's split sizes); ``whole``: the piece is the canonical
    buffer itself (``src`` is the identity)."""

    src: torch.Tensor
    perm: torch.Tensor | None
    offs: torch.Tensor
    caps: tuple[int, ...]
    canonical_rows: int
    whole: bool
    padding: bool = True
    """whether some piece row may be padding (False: ``src`` is a plain gather index)."""

    @property
    def rows(self) -> int:
        return sum(self.caps)


@dataclass(frozen=True)
class Selection:
    """Rows ``lo[b, e] .. hi[b, e]`` of every segment, packed into blocks of ``caps[b]`` rows."""

    lo: torch.Tensor
    hi: torch.Tensor
    caps: tuple[int, ...]
    whole: bool = False
    single_block: bool = False


class MoeLayout:
    """The canonical buffers of rank ``rank`` for one call (module docstring)."""

    def __init__(self, counts: torch.Tensor, *, rank: int, world: int, mode: str, block_rows: int = 0,
                 topk: int = 1) -> None:
        if counts.dim() != 2 or counts.shape[0] != world or counts.shape[1] % world:
            raise ValueError(f"counts must be world x E ({world} x a multiple of {world}), got {tuple(counts.shape)}")
        if mode not in (EXCHANGED, PADDED):
            raise ValueError(f"splits={mode!r} must be {EXCHANGED!r} or {PADDED!r}")
        self.counts = counts.to(torch.int64)
        self.rank, self.world, self.mode = rank, world, mode
        self.e_local = counts.shape[1] // world
        self.topk = topk
        self.block_rows = block_rows
        """``L``, the padded block's rows (padded mode only)."""
        el = self.e_local
        send_c = self.counts[rank].view(world, el)
        recv_c = self.counts[:, rank * el:(rank + 1) * el]
        self.send = Blocks(send_c, self._caps(send_c))
        self.recv = Blocks(recv_c, self._caps(recv_c))

    @property
    def padded(self) -> bool:
        return self.mode == PADDED

    @property
    def tokens_max(self) -> int:
        return self.block_rows // max(1, min(self.topk, self.e_local))

    def _caps(self, c: torch.Tensor) -> tuple[int, ...]:
        if self.padded:
            return (self.block_rows,) * self.world
        return tuple(int(v) for v in c.sum(1).tolist())

    # -- pieces -----------------------------------------------------------------------------------
    def whole(self, side: Blocks) -> Selection:
        return Selection(torch.zeros_like(side.c), side.c, side.caps, whole=True, single_block=self.world == 1)

    def token_block(self, side: Blocks, b: int, n: int) -> Selection:
        lo, hi = (side.c * b) // n, (side.c * (b + 1)) // n
        if self.padded:
            el, L = self.e_local, self.block_rows
            caps = (min(L, (L + el * (n - 1)) // n),) * self.world
        else:
            caps = tuple(int(v) for v in (hi - lo).sum(1).tolist())
        return Selection(lo, hi, caps, single_block=self.world == 1)

    def expert_group(self, side: Blocks, g0: int, g1: int) -> Selection:
        mask = torch.zeros(self.e_local, dtype=torch.int64, device=side.c.device)
        mask[g0:g1] = 1
        hi = side.c * mask
        if self.padded:
            caps = (min(self.block_rows, self.tokens_max * min(self.topk, g1 - g0)),) * self.world
        else:
            caps = tuple(int(v) for v in hi.sum(1).tolist())
        return Selection(torch.zeros_like(hi), hi, caps, single_block=self.world == 1)

    def source(self, side: Blocks, block: int) -> Selection:
        mask = torch.zeros((self.world, 1), dtype=torch.int64, device=side.c.device)
        mask[block] = 1
        hi = side.c * mask
        caps = tuple(side.caps[block] if b == block else 0 for b in range(self.world))
        return Selection(torch.zeros_like(hi), hi, caps, single_block=True)

    def piece_map(self, side: Blocks, sel: Selection) -> PieceMap:
        """The :class:`PieceMap` of selection ``sel`` of canonical buffer ``side``."""
        dev = side.c.device
        el = self.e_local
        cp = sel.hi - sel.lo
        offs = torch.cumsum(cp.sum(0), 0).to(torch.int32)
        rows = sum(sel.caps)
        if sel.whole:
            ident = torch.arange(side.rows, device=dev)
            return PieceMap(ident, None if sel.single_block else self._perm(side.caps, cp, side.rows, dev),
                            offs, side.caps, side.rows, True)
        i = torch.arange(rows, device=dev)
        caps = torch.tensor(sel.caps, dtype=torch.int64, device=dev)
        ends = torch.cumsum(caps, 0)
        q = torch.searchsorted(ends, i, right=True).clamp(max=self.world - 1)
        p = i - (ends - caps)[q]
        seg_cum = torch.cumsum(cp, 1)
        e = (p.unsqueeze(1) >= seg_cum[q]).sum(1)
        valid = e < el
        ec = e.clamp(max=el - 1)
        canon_excl = torch.cumsum(side.c, 1) - side.c
        idx = side.starts[q] + canon_excl[q, ec] + sel.lo[q, ec] + p - (seg_cum - cp)[q, ec]
        src = torch.where(valid, idx, torch.full_like(idx, side.rows))
        perm = None if sel.single_block else torch.argsort(e * self.world + q, stable=True)
        return PieceMap(src, perm, offs, sel.caps, side.rows, False, padding=self.padded)

    def _perm(self, caps: tuple[int, ...], cp: torch.Tensor, rows: int, dev: torch.device) -> torch.Tensor:
        i = torch.arange(rows, device=dev)
        capt = torch.tensor(caps, dtype=torch.int64, device=dev)
        ends = torch.cumsum(capt, 0)
        q = torch.searchsorted(ends, i, right=True).clamp(max=self.world - 1)
        p = i - (ends - capt)[q]
        e = (p.unsqueeze(1) >= torch.cumsum(cp, 1)[q]).sum(1)
        return torch.argsort(e * self.world + q, stable=True)


def gather_rows(t: torch.Tensor, pm: PieceMap) -> torch.Tensor:
    """The piece buffer of canonical ``t`` (padding rows zero)."""
    if pm.whole:
        return t
    if pm.canonical_rows == 0:
        return t.new_zeros((pm.rows, *t.shape[1:]))
    if not pm.padding:
        return t.index_select(0, pm.src)
    valid = (pm.src < pm.canonical_rows).unsqueeze(1)
    rows = t.index_select(0, pm.src.clamp(max=pm.canonical_rows - 1))
    return torch.where(valid, rows, torch.zeros((), dtype=t.dtype, device=t.device))


def scatter_rows(dst_ext: torch.Tensor, pm: PieceMap, rows: torch.Tensor) -> None:
    """Write piece rows ``rows`` into canonical ``dst_ext`` (``canonical_rows + 1`` rows: the last one takes the
    padding rows and is dropped by the caller)."""
    if rows.shape[0]:
        dst_ext.index_copy_(0, pm.src, rows)


def expert_major(buf: torch.Tensor, pm: PieceMap) -> torch.Tensor:
    return buf if pm.perm is None else buf.index_select(0, pm.perm)


def from_expert_major(rows: torch.Tensor, pm: PieceMap) -> torch.Tensor:
    if pm.perm is None:
        return rows
    out = torch.empty_like(rows)
    out.index_copy_(0, pm.perm, rows)
    return out
