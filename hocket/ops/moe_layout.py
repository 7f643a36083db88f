"""Row layouts of an expert-parallel MoE call: the canonical send and receive buffers and their pieces.

Counts: ``counts[s, e]`` (int64, ``world x E``) is how many of rank ``s``'s (token, choice) pairs chose expert
``e``; experts ``d * e_local ... (d + 1) * e_local - 1`` live on rank ``d``.

Canonical layouts (what ``torch.ops.hocket.all_to_all_grouped_mm`` / ``grouped_mm_all_to_all`` take and return):

* send buffer of rank ``r`` (block-major): ``world`` blocks, block ``d`` holds ``r``'s rows for rank ``d``'s
  experts as one segment per local expert in expert order, segment ``(d, e)`` of ``counts[r, d * e_local + e]``
  rows in (token, choice) order, then the block's padding;
* receive buffer of rank ``r`` (expert-major): one segment per (local expert ``e``, source ``s``), ``e`` outer,
  segment ``(e, s)`` of ``counts[s, r * e_local + e]`` rows in the source's order, then the buffer's padding. It
  is the grouped GEMM's operand as it is: group ``e`` is rows ``offs[e-1] .. offs[e]``, ``offs`` the cumulative
  ``sum_s counts[s, r * e_local + e]``.

``splits="exchanged"``: no padding; the buffers have ``sum(counts[r])`` and ``sum(counts[:, r's experts])``
rows. ``splits="padded"``: every send block has ``L = tokens_max * min(k, e_local)`` rows (no source sends more
to one rank: a token picks distinct experts) and the receive buffer ``world * L`` rows, its padding after the
last segment; padding rows are zeros, and every index here is computed on the counts' device with no host sync
and no host-to-device copy (a CUDA graph can capture the maps' build).

A **piece** (one all-to-all of a strategy) selects rows ``lo .. hi`` of every (block, expert) segment and
packs them into its own buffer of ``world`` blocks, block capacities ``caps`` (the split sizes; padded: fixed
bounds, below), each block its segments in expert order, then padding. That is the order rows travel in: a
piece's receive buffer as it lands is block-major (per source), and its grouped GEMM runs on those rows in
expert-major order (``PieceMap.perm``).

* ``whole``: every row (``sequential``, ``shared_overlap``);
* ``token_block(b, n)``: rows ``b * c // n .. (b + 1) * c // n`` of every segment of ``c`` rows, i.e. block
  ``b``'s share of every (source, expert) run of tokens (``token_blocks``); padded capacity
  ``min(L, (L + e_local * (n - 1)) // n)``;
* ``expert_group(g0, g1)``: the segments of local experts ``g0 .. g1 - 1`` (``expert_groups``); padded capacity
  ``min(L, tokens_max * min(k, g1 - g0))``;
* ``source(j)``: block ``(r + j) % world`` of the send buffer, block ``(r - j) % world`` of the receive
  buffer (``per_source``: round ``j`` sends to one rank and receives from one).

Sender and receiver derive a piece from the same counts with the same rule, so their block sizes agree.

Maps are built once per routing (:mod:`hocket.ops.moe_exec` caches them for the four op calls of a step) and
make the hot path one pass per row move: a whole piece is the canonical buffer itself (no gather or scatter;
on the receive side one permutation into expert-major order, none for one block); a piece whose
rows are one run of canonical rows known on the host (a ``source`` piece's send block; an ``expert_group``
piece's receive rows under ``exchanged``) is a slice; any other a gather index (``exchanged``: every index
valid; ``padded``: padding rows marked and zero-filled in place).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

EXCHANGED = "exchanged"
PADDED = "padded"


@dataclass(frozen=True)
class Blocks:
    """One canonical buffer: ``c[b, e]`` rows per (block, local expert), ``caps[b]`` rows per block of the
    pieces' block-major order; ``expert_major``: the canonical order is (expert, block), the receive side."""

    c: torch.Tensor
    caps: tuple[int, ...]
    expert_major: bool = False

    @property
    def rows(self) -> int:
        return sum(self.caps)

    @property
    def starts(self) -> torch.Tensor:
        caps = host_ints(self.caps, self.c.device)
        return torch.cumsum(caps, 0) - caps

    def host_starts(self) -> tuple[int, ...]:
        out, at = [], 0
        for cap in self.caps:
            out.append(at)
            at += cap
        return tuple(out)


@dataclass(frozen=True)
class PieceMap:
    """Where a piece's buffer rows live in the canonical buffer, and its grouped-GEMM layout.

    ``src[i]``: the canonical row of piece row ``i``, in the piece's block-major order on the send side and in
    its expert-major order (after ``perm``) on the receive side; ``canonical_rows`` marks a padding row.
    ``perm``: the piece's block-major rows in expert-major order (None when already in it); ``offs``: int32
    cumulative rows per local expert of the expert-major rows; ``caps``: rows per block (the all-to-all's split
    sizes); ``whole``: the piece is the canonical buffer itself (``src`` the identity, no padding marks);
    ``exact``: every piece row is some expert's (``offs[-1]`` is the row count: no tail to zero); ``span``:
    ``src`` is canonical rows ``span[0] .. span[1] - 1`` (known on the host: gather a slice, scatter a slice
    copy); ``holes``: some ``src`` entry may be a padding mark (gather zero-fills it, scatter needs a
    ``canonical_rows + 1`` row buffer); ``safe_src``/``hole``: ``src`` clamped to a valid row and the
    ``[rows, 1]`` padding mask (``holes`` only); ``experts``: the local experts ``(g0, g1)`` this piece holds
    rows of (None: possibly every one); ``ends``: ``offs`` on the host (``exchanged`` only: the counts are there)."""

    src: torch.Tensor
    perm: torch.Tensor | None
    offs: torch.Tensor
    caps: tuple[int, ...]
    canonical_rows: int
    whole: bool
    exact: bool = True
    span: tuple[int, int] | None = None
    holes: bool = False
    safe_src: torch.Tensor | None = None
    hole: torch.Tensor | None = None
    experts: tuple[int, int] | None = None
    ends: tuple[int, ...] | None = None

    @property
    def rows(self) -> int:
        return sum(self.caps)

    @property
    def padding(self) -> bool:
        """whether some piece row may be padding (False: ``src`` is a plain gather index)."""
        return self.holes

    def to(self, device: torch.device) -> PieceMap:
        if self.src.device == device:
            return self

        def move(t):
            return None if t is None else t.to(device)
        return replace(self, src=move(self.src), perm=move(self.perm), offs=move(self.offs),
                       safe_src=move(self.safe_src), hole=move(self.hole))


@dataclass(frozen=True)
class Selection:
    """Rows ``lo[b, e] .. hi[b, e]`` of every segment, packed into blocks of ``caps[b]`` rows; ``experts``: the
    local experts ``(g0, g1)`` with rows in it (None: any); ``block``: the one block it holds rows of (None:
    any)."""

    lo: torch.Tensor
    hi: torch.Tensor
    caps: tuple[int, ...]
    whole: bool = False
    single_block: bool = False
    experts: tuple[int, int] | None = None
    block: int | None = None


def host_ints(values: tuple[int, ...], device: torch.device) -> torch.Tensor:
    """int64 ``values`` on ``device``, made there by fills: no host-to-device copy, which a CUDA graph cannot
    capture."""
    if len(set(values)) <= 1:
        return torch.full((len(values),), values[0] if values else 0, dtype=torch.int64, device=device)
    return torch.cat([torch.full((1,), v, dtype=torch.int64, device=device) for v in values])


def _row_segments(cp: torch.Tensor, caps: tuple[int, ...], rows: int) -> tuple[torch.Tensor, torch.Tensor,
                                                                                   torch.Tensor]:
    """``(q, e, t)`` per row of a block-major piece buffer (``caps[q]`` rows per block, segments of ``cp[q, e]``
    rows then padding): its block, its local expert (``e_local`` for padding) and its offset in the segment."""
    world, el = cp.shape
    dev = cp.device
    capt = host_ints(caps, dev)
    sizes = torch.cat([cp, (capt - cp.sum(1)).unsqueeze(1)], 1).reshape(-1)
    seg = torch.repeat_interleave(torch.arange(sizes.shape[0], device=dev), sizes, output_size=rows)
    t = torch.arange(rows, device=dev) - (torch.cumsum(sizes, 0) - sizes).index_select(0, seg)
    return seg // (el + 1), seg % (el + 1), t


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
        self.recv = Blocks(recv_c, self._caps(recv_c), expert_major=True)

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
        mask[g0:g1].fill_(1)
        hi = side.c * mask
        if self.padded:
            caps = (min(self.block_rows, self.tokens_max * min(self.topk, g1 - g0)),) * self.world
        else:
            caps = tuple(int(v) for v in hi.sum(1).tolist())
        return Selection(torch.zeros_like(hi), hi, caps, single_block=self.world == 1, experts=(g0, g1))

    def source(self, side: Blocks, block: int) -> Selection:
        mask = torch.zeros((self.world, 1), dtype=torch.int64, device=side.c.device)
        mask[block].fill_(1)
        hi = side.c * mask
        caps = tuple(side.caps[block] if b == block else 0 for b in range(self.world))
        return Selection(torch.zeros_like(hi), hi, caps, single_block=True, block=block)

    def piece_map(self, side: Blocks, sel: Selection) -> PieceMap:
        """The :class:`PieceMap` of selection ``sel`` of canonical buffer ``side``."""
        dev = side.c.device
        el = self.e_local
        cp = sel.hi - sel.lo
        offs = torch.cumsum(cp.sum(0), 0).to(torch.int32)
        rows = sum(sel.caps)
        exact = not self.padded
        if sel.whole:
            ident = torch.arange(side.rows, device=dev)
            perm = None
            if side.expert_major and not sel.single_block:
                q, e, _ = _row_segments(cp, side.caps, side.rows)
                perm = torch.argsort(e * self.world + q, stable=True)
            return PieceMap(ident, perm, offs, side.caps, side.rows, True, exact=exact, span=(0, side.rows))
        if not side.expert_major and sel.block is not None:  # a send block: a run of canonical rows
            start = side.host_starts()[sel.block]
            return PieceMap(torch.arange(start, start + rows, device=dev), None, offs, sel.caps, side.rows, False,
                            exact=exact, span=(start, start + rows), experts=sel.experts)
        q, e, t = _row_segments(cp, sel.caps, rows)
        ec = e.clamp(max=el - 1)
        if side.expert_major:  # segment (e, s) starts after every (e', s') before it
            flat = side.c.t().reshape(-1)
            start = (torch.cumsum(flat, 0) - flat).view(el, self.world).t()
        else:
            start = side.starts.unsqueeze(1) + torch.cumsum(side.c, 1) - side.c
        idx = (start + sel.lo)[q, ec] + t
        src = torch.where(e < el, idx, torch.full_like(idx, side.rows)) if self.padded else idx
        perm = None
        if side.expert_major and not sel.single_block:
            perm = torch.argsort(e * self.world + q, stable=True)
            src = src.index_select(0, perm)
        span = None
        if side.expert_major and not self.padded and sel.experts is not None:  # rows of experts g0 .. g1 - 1
            per_expert = [int(v) for v in torch.cumsum(side.c.sum(0), 0).tolist()]
            g0, g1 = sel.experts
            span = (per_expert[g0 - 1] if g0 else 0, per_expert[g1 - 1] if g1 else 0)
        if not self.padded:
            return PieceMap(src, perm, offs, sel.caps, side.rows, False, exact=True, span=span, experts=sel.experts,
                            ends=tuple(int(v) for v in offs.tolist()))
        safe = src.clamp(max=max(side.rows - 1, 0))
        return PieceMap(src, perm, offs, sel.caps, side.rows, False, exact=False, holes=True, safe_src=safe,
                        hole=(src >= side.rows).unsqueeze(1), experts=sel.experts)


def gather_rows(t: torch.Tensor, pm: PieceMap) -> torch.Tensor:
    """The piece buffer of canonical ``t`` (padding rows zero): ``t`` itself for a whole piece, a view for a
    span, else a new tensor."""
    if pm.whole:
        return t
    if pm.span is not None:
        return t[pm.span[0]:pm.span[1]]
    if not pm.holes:
        return t.index_select(0, pm.src)
    if pm.canonical_rows == 0:
        return t.new_zeros((pm.rows, *t.shape[1:]))
    return t.index_select(0, pm.safe_src).masked_fill_(pm.hole, 0)


def canvas(like: torch.Tensor, rows: int, width: int, pm: PieceMap) -> torch.Tensor:
    """The canonical buffer that :func:`scatter_rows` fills from pieces like ``pm``: uninitialised when the
    pieces cover every row (``exchanged``), else zeros with one more row that takes the pieces' padding rows
    (slice it to ``rows``)."""
    if pm.holes or not pm.exact:
        return like.new_zeros((rows + 1, width))
    return like.new_empty((rows, width))


def scatter_rows(dst: torch.Tensor, pm: PieceMap, rows: torch.Tensor) -> None:
    """Write piece rows ``rows`` into canonical ``dst`` (from :func:`canvas`)."""
    if not rows.shape[0]:
        return
    if pm.span is not None:
        dst[pm.span[0]:pm.span[1]].copy_(rows)
    else:
        dst.index_copy_(0, pm.src, rows)


def expert_major(buf: torch.Tensor, pm: PieceMap) -> torch.Tensor:
    """A received piece's rows in expert-major order (``buf`` itself when already in it)."""
    return buf if pm.perm is None else buf.index_select(0, pm.perm)


def from_expert_major(rows: torch.Tensor, pm: PieceMap) -> torch.Tensor:
    """Expert-major piece rows back in the piece's block-major order (the order they travel in)."""
    if pm.perm is None:
        return rows
    out = torch.empty_like(rows)
    out.index_copy_(0, pm.perm, rows)
    return out


def pack_send(x: torch.Tensor, ids: torch.Tensor, per_dest: torch.Tensor | None, *, block: int | None, k: int,
              e_local: int, world: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(send, pos)``: this rank's canonical send buffer (``x``'s routed rows, sorted by expert, so by destination
    rank) and, per (token, choice) pair of the flat ``ids``, its row in that buffer. ``block``: the padded block's
    rows (``splits="padded"``: destination ``d``'s rows start at ``d * block``, the rest stay zero), None for the
    exact layout; ``per_dest [world]``: this rank's rows per destination rank (padded only, else None). Device ops
    only (no host read), traceable by ``torch.compile``."""
    pairs = ids.shape[0]
    order = torch.argsort(ids, stable=True)
    rows = x.index_select(0, order // k)
    if block is not None:
        excl = torch.cumsum(per_dest, 0) - per_dest
        dest = ids.index_select(0, order) // e_local
        at = dest * block + torch.arange(pairs, device=x.device) - excl.index_select(0, dest)
        send = x.new_zeros((world * block, x.shape[1])).index_copy(0, at, rows)
    else:
        at = torch.arange(pairs, device=x.device)
        send = rows
    return send, torch.empty_like(at).index_copy(0, order, at)


def combine_pairs(y_send: torch.Tensor, pos: torch.Tensor, topk_weights: torch.Tensor, k: int) -> torch.Tensor:
    """``y_t = sum_j topk_weights[t, j] * y_send[pos[t * k + j]]``: the combined rows back per token."""
    tokens = topk_weights.shape[0]
    y_pairs = y_send.index_select(0, pos).view(tokens, k, y_send.shape[1])
    return (y_pairs * topk_weights.to(y_send.dtype).unsqueeze(-1)).sum(1)
