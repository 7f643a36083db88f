"""The stages of an expert-parallel MoE site (:class:`hocket.core.moe.MoeSite`), as its executors run them
(:mod:`hocket.ops.moe_exec`, :func:`hocket.ops.moe_experts`).

One rank's view: the rank whose experts compute the most rows (:attr:`MoeSite.busiest_rank`) sets the pace
of the grouped GEMMs; every all-to-all is a collective, so it ends with its slowest pair and is priced at the
bottleneck of all ranks (:func:`pace_rows`).

**Flow.** A site either dispatches then computes (``a2a_mm`` forward: the counts' all-gather, the pack of this
rank's routed rows into the send buffer, the all-to-all, the first grouped GEMM, the SwiGLU between the halves)
or computes then combines (``mm_a2a`` forward: the second grouped GEMM, the all-to-all back, the weighted
unpermute). The backward of a site runs the other flow (the gradient of a dispatch is a combine and vice versa)
with the data gradient's grouped GEMM per piece and the weight gradient's: in the dispatch flow each piece's
weight gradient follows its data gradient, both after the piece lands; in the combine flow one weight-gradient
GEMM over every row runs right after the first piece's data GEMM, in that piece's all-to-all gap (Lancet's
reordering; ``sequential`` too). Pieces and orders are the executors' (:func:`dispatch_stages`,
:func:`combine_stages`).

**All-to-all.** Priced with :func:`hocket.cost.comm.collective` op ``all_to_all`` (the calibration profile's
``all_to_all`` curve, whose bytes are one rank's whole buffer): a pairwise exchange moves ``(p - 1) / p`` of
the buffer, so an uneven exchange whose busiest rank sends or receives ``B`` bytes to or from its peers is
priced as the even buffer ``B * p / (p - 1)``. A ``per_source`` round is one ``all_to_all_single`` whose only
non-empty block goes to one peer, priced the same way at the round's bytes. Rows are ``hidden`` wide both ways
(:attr:`MoeSite.row_bytes`).

**Split sizes** (``Plan.splits``). Every call all-gathers the ``world x experts`` int64 counts once, priced on
the layer's ``a2a_mm`` forward site (the combine and the backward reuse them). ``exchanged`` (None reads as it)
then moves them to the host (``HOST_SYNC_US``: the host waits for the device to drain and issues the rest from
idle), and every block is its rows. ``padded``: no host sync; every rank pair's block has the fixed capacity
``L = tokens x min(topk, e_local)`` rows (:attr:`MoeSite.padded_rows` ``= world x L`` per rank; a piece's
capacity as ``hocket.ops.moe_layout`` bounds it), so the all-to-all moves the capacities, the pack zeroes the
padded send buffer, and the GEMM's reorder (source-major to expert-major or back) passes over the padded rows;
the grouped GEMM itself computes the real rows (its group offsets stop before the padding).

**Grouped GEMM** (:func:`grouped_gemm_ms`): the larger of its compute and its weight reads.
Compute: ``dense_ms(rows) * (rows + busy * t_half) / (rows * e_max)`` plus ``group_us`` per busy group but the
first, where ``dense_ms`` is the dense GEMM of all the rows (:func:`hocket.cost.compute.gemm_ms`, calibrated
where the profile has GEMM points) and ``busy`` the groups with rows: each busy expert costs ``t_half`` rows of
extra work, i.e. the efficiency against the dense GEMM is ``e_max * t / (t + t_half)`` at ``t`` rows per busy
expert. Weight reads: every busy expert's ``k x n`` weight and the rows in and out pass through memory once
(:func:`hocket.cost.compute.memory_ms`); a dense GEMM of the same rows reads one weight, so small groups are
bound by their weights (8 experts of ``1024 x 2048`` fp32 at 2 rows each: 5.3 ms grouped against 0.94 ms dense
on one CPU thread). The numbers (:data:`GPU_GROUPED`, :data:`CPU_GROUPED`) are replaced by a measurement with
:func:`with_grouped_rule`: ``benchmarks/grouped_gemm_gpu.py`` fits ``e_max`` and ``t_half`` of this same form
on ``torch._grouped_mm`` against a dense GEMM.

**Shared expert** (``MoeSite.shared_ffn > 0`` on an ``a2a_mm`` site: the layer's shared expert on this rank's
``tokens``, two dense GEMMs ``[tokens, hidden] @ [hidden, 2 * shared_ffn]`` and ``[tokens, shared_ffn] @
[shared_ffn, hidden]`` and its activation): every strategy but ``sequential`` runs it in the first dispatch's gap
(``sequential`` after the routed experts); in the backward its gradient is two such passes beside no transfer,
plus one recomputed forward where the forward ran it in the gap without autograd (:func:`shared_passes`).

On CPU ranks the host thread runs every GEMM, so a piece's all-to-all issued after a GEMM waits for it; on
GPUs the builder's issue chain orders the host.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from hocket.core.moe import MoeSite
from hocket.cost.compute import gemm_ms, launch_ms, memory_ms
from hocket.cost.stages import Stage

COUNT_BYTES = 8
"""bytes of one split count (int64, as ``torch.bincount`` returns them)."""
HOST_SYNC_US = {"gpu": 20.0, "cpu": 0.0}
"""Host microseconds of the split sizes' trip to the host (``.tolist()`` of the exchanged counts): on a GPU a
device-to-host copy and a stream synchronize (~10 us) and the issue of the next kernels from an idle queue
(~10 us); on CPU ranks the counts are already host memory (the all-gather's own cost is priced apart)."""
SITE_OPS = 60
"""torch ops one MoE half's call runs besides its GEMMs and transfers (its layout's piece maps, gathers and
scatters): 119 top-level aten ops per layer of two sites under ``sequential`` (``torch.profiler`` of one
``hocket.ops.moe_experts`` forward call with fresh routing, so the maps are rebuilt; gloo, world 2, 256 tokens,
4 local experts, k 2; 2026-12-02)."""
PIECE_OPS = 80
"""torch ops each piece beyond the first adds to a site's call (its piece map, gathers, scatters): 314 and 516
top-level aten ops per layer for ``token_blocks(2)`` and ``(4)`` against 119 for ``sequential`` (the same
profile as :data:`SITE_OPS`: 98 and 66 per extra piece and site). Each is one op dispatch of host time
(``hocket.cost.compute.launch_ms``: CPU ranks 15 us); on GPUs a launch each on the issue chain. The executor
computes every piece's map before it issues the first all-to-all."""
RULE_KEY = ("moe_grouped_rule",)
"""where a builder's :class:`GroupedGemmRule` override is kept (``StageBuilder.memo``)."""


@dataclass(frozen=True, kw_only=True)
class GroupedGemmRule:
    """The compute part of a grouped GEMM, ``dense_ms * (rows + busy * t_half) / (rows * e_max) + (busy - 1) *
    group_us`` (the larger of it and the weight reads is the price: module docstring); the efficiency against the
    dense GEMM of the same rows is ``e_max * t / (t + t_half)`` at ``t`` rows per busy group."""

    e_max: float
    """the efficiency a grouped GEMM of very large groups reaches against one dense GEMM of the same rows."""
    t_half_rows: float
    """rows per busy group at which the efficiency is half of ``e_max`` (each busy group costs this many extra
    rows of dense work: its padding to whole tiles, its prologue and epilogue, its scheduling)."""
    group_us: float = 0.0
    """host microseconds per busy group beyond the first (a loop of ``torch.mm`` dispatches one op per group)."""
    source: str = "estimate"

    def __post_init__(self) -> None:
        for name in ("e_max", "t_half_rows", "group_us"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise ValueError(f"GroupedGemmRule.{name}={value!r} must be a finite number >= 0")
        if not 0 < self.e_max <= 1.5:
            raise ValueError(f"GroupedGemmRule.e_max={self.e_max!r} must be in (0, 1.5] (a fraction of the dense "
                             f"GEMM's rate)")

    def efficiency(self, rows_per_group: float) -> float:
        """The grouped GEMM's rate over a dense GEMM's at ``rows_per_group`` rows per busy group (0 at 0 rows)."""
        if rows_per_group <= 0:
            return 0.0
        return self.e_max * rows_per_group / (rows_per_group + self.t_half_rows)


GPU_GROUPED = GroupedGemmRule(e_max=0.98, t_half_rows=140.0, group_us=0.0, source="measured")
"""GPUs (``torch._grouped_mm``, one kernel for all groups), fitted on one H200 (torch 2.11, bf16,
``benchmarks/grouped_gemm_gpu.py``, 2026-12-01): 112 cases of both expert GEMMs of Mixtral-8x7B, Qwen3-30B-A3B and
DeepSeek-V3 at EP 2 and 8, 128 to 16384 tokens per rank, uniform and Zipf-1.2 routing, against a dense cuBLAS
GEMM of the same FLOPs: ``e_max = 0.98``, ``t_half = 140`` rows (half the dense rate at 140 rows per expert, 0.86
of it at 1024), median error 8.6% (fit on all models but one: 7-14% on the one left out). A group of ``t`` rows
runs ``ceil(t / 128)`` row tiles of 128 plus its own prologue and epilogue: about one tile's rows in all."""
CPU_GROUPED = GroupedGemmRule(e_max=0.9, t_half_rows=8.0, group_us=0.0, source="measured")
"""CPU ranks (``torch._grouped_mm`` on CPU, torch 2.13, fp32, one thread, 8 experts): against one dense GEMM of
the same rows it ran at 0.34 / 0.56 / 0.76 / 0.88 of the dense rate at 2 / 8 / 32 / 128 rows per expert for
``k = n = 128`` and 0.15 / 0.40 / 0.78 / 0.93 for ``k = n = 512`` (whose weights, 1 MiB each, are read per
expert: the weight-read bound); the compute part fits ``e_max = 0.9``, ``t_half = 8`` rows (4 to 10 over those
shapes). A ``torch.mm`` loop over the groups ran within 10% of it."""


def default_rule(device) -> GroupedGemmRule:
    """:data:`CPU_GROUPED` for CPU ranks, :data:`GPU_GROUPED` for GPUs."""
    return CPU_GROUPED if device.sm_count is None else GPU_GROUPED


def grouped_gemm_ms(device, groups: Sequence[int], *, k: int, n: int, dtype: str, itemsize: int,
                    calibration=None, rule: GroupedGemmRule | None = None, level_m: int | None = None,
                    sustained: bool = False) -> float:
    """One grouped GEMM: group ``g`` is ``[groups[g], k] @ [k, n]`` (module docstring's rule). No rows at all:
    one kernel launch (the op still runs, on zero rows)."""
    rule = rule or default_rule(device)
    rows = int(sum(groups))
    busy = sum(1 for g in groups if g > 0)
    if rows <= 0:
        return launch_ms(device)
    dense = gemm_ms(device, m=rows, k=k, n=n, dtype=dtype, itemsize=itemsize, calibration=calibration,
                    level_m=max(rows, level_m or 0), sustained=sustained)
    compute = dense * (rows + busy * rule.t_half_rows) / (rows * rule.e_max)
    weights = memory_ms(device, (busy * k * n + rows * (k + n)) * itemsize)
    return max(compute, weights) + max(0, busy - 1) * rule.group_us / 1e3


def with_grouped_rule(b, rule: GroupedGemmRule | None):
    """``b`` pricing its grouped GEMMs by ``rule`` (None: the device's default)."""
    if rule is not None:
        b.memo[RULE_KEY] = rule
    return b


def rule_of(b) -> GroupedGemmRule:
    found = b.memo.get(RULE_KEY)
    return found if found is not None else default_rule(b.device)


# -- the site's traffic and work --------------------------------------------------------------------------------
def split_mode(plan) -> str:
    """``plan.splits`` with None read as ``exchanged``."""
    return plan.splits or "exchanged"


def rank_rows(site: MoeSite) -> list[list[list[int]]]:
    """``rows[s][d][j]``: rows rank ``s`` sends to local expert ``j`` of rank ``d`` in the dispatch."""
    e, w = site.e_local, site.world
    routing = site.routing
    return [[list(routing[s][d * e:(d + 1) * e]) for d in range(w)] for s in range(w)]


def pace_rows(matrix: Sequence[Sequence[float]]) -> float:
    """The rows the busiest rank sends to or receives from its peers (``matrix[s][d]``: rows ``s`` sends ``d``;
    the diagonal stays local)."""
    w = len(matrix)
    best = 0.0
    for r in range(w):
        out = sum(matrix[r][d] for d in range(w) if d != r)
        into = sum(matrix[s][r] for s in range(w) if s != r)
        best = max(best, out, into)
    return best


def a2a_buffer_bytes(site: MoeSite, rows: float) -> float:
    """The even all-to-all buffer whose pairwise exchange moves ``rows`` rows to (and from) the peers."""
    if site.world <= 1:
        return 0.0
    return rows * site.row_bytes * site.world / (site.world - 1)


@dataclass(frozen=True, kw_only=True)
class Piece:
    """One all-to-all of a plan (``hocket.ops.moe_exec.pieces``) and the pace-setting rank's GEMM of it."""

    name: str
    traffic: tuple[tuple[float, ...], ...]
    """``traffic[s][d]``: rows rank ``s`` sends rank ``d`` in this piece (exchanged split sizes)."""
    padded_traffic: tuple[tuple[float, ...], ...]
    """the same with the padded layout's fixed block capacities."""
    groups: tuple[int, ...]
    """rows per local expert of the pace-setting rank in this piece (the GEMM's groups: padding is skipped)."""
    padded_rows: int
    """rows of the pace-setting rank's receive buffer of this piece in the padded layout."""
    local: bool = False
    """the rank's own rows (``per_source``'s round 0): no all-to-all."""

    def rows_moved(self, padded: bool) -> float:
        return pace_rows(self.padded_traffic if padded else self.traffic)

    def buffer_rows(self, padded: bool) -> int:
        """Rows of the pace-setting rank's receive buffer of this piece (what the GEMM's reorders pass over)."""
        return self.padded_rows if padded else sum(self.groups)


def pace_rank(site: MoeSite) -> int:
    """The rank whose GEMMs are priced: the busiest (:attr:`MoeSite.busiest_rank`)."""
    return site.busiest_rank


def block_rows(site: MoeSite) -> int:
    """``L``: the padded layout's rows per rank pair (``tokens x min(topk, e_local)``)."""
    return site.tokens * min(site.topk, site.e_local)


def _piece(site: MoeSite, name: str, select, cap: int, pairs, *, local: bool = False) -> Piece:
    """A piece of the rows ``select(s, d, j)`` (of expert ``j`` of rank ``d`` from source ``s``); ``cap``: its
    padded capacity per rank pair; ``pairs(s, d)``: whether the piece moves the pair's block."""
    w, e, rank = site.world, site.e_local, pace_rank(site)
    traffic = tuple(tuple(float(sum(select(s, d, j) for j in range(e))) for d in range(w)) for s in range(w))
    padded = tuple(tuple(float(cap) if pairs(s, d) else 0.0 for d in range(w)) for s in range(w))
    groups = tuple(int(sum(select(s, rank, j) for s in range(w))) for j in range(e))
    buffer = sum(cap for s in range(w) if pairs(s, rank))
    return Piece(name=name, traffic=traffic, padded_traffic=padded, groups=groups, padded_rows=buffer, local=local)


def whole_pieces(site: MoeSite) -> list[Piece]:
    rows = rank_rows(site)
    return [_piece(site, "all", lambda s, d, j: rows[s][d][j], block_rows(site), lambda s, d: True)]


def token_block_pieces(site: MoeSite, blocks: int) -> list[Piece]:
    """Block ``b`` of ``n``: rows ``b * c // n .. (b + 1) * c // n`` of every (source, expert) run of ``c`` rows;
    padded capacity ``min(L, (L + e_local * (n - 1)) // n)`` per rank pair (``hocket.ops.moe_layout``)."""
    rows = rank_rows(site)
    n, e, length = blocks, site.e_local, block_rows(site)
    cap = min(length, (length + e * (n - 1)) // n)

    def part(c: int, b: int) -> int:
        return (b + 1) * c // n - b * c // n

    return [_piece(site, f"block{b}", lambda s, d, j, b=b: part(rows[s][d][j], b), cap, lambda s, d: True)
            for b in range(n)]


def expert_group_pieces(site: MoeSite, groups: int) -> list[Piece]:
    """``min(groups, e_local)`` contiguous groups of local experts (bounds ``e_local * g // n``); padded capacity
    ``min(L, tokens x min(topk, group size))``."""
    rows = rank_rows(site)
    e = site.e_local
    n = max(1, min(groups, e))
    bounds = [e * g // n for g in range(n + 1)]
    pieces = []
    for g in range(n):
        lo, hi = bounds[g], bounds[g + 1]
        cap = min(block_rows(site), site.tokens * min(site.topk, hi - lo))
        pieces.append(_piece(site, f"group{g}", lambda s, d, j, lo=lo, hi=hi: rows[s][d][j] if lo <= j < hi else 0,
                             cap, lambda s, d: True))
    return pieces


def source_pieces(site: MoeSite) -> list[Piece]:
    """Round ``j`` of ``world``: every rank ``r`` sends its block for rank ``r + j`` and receives rank ``r - j``'s
    (the pace-setting rank's rows from rank ``(rank - j) mod world``); round 0 is the rank's own rows."""
    rows = rank_rows(site)
    w, rank, length = site.world, pace_rank(site), block_rows(site)
    pieces = []
    for j in range(w):
        def select(s, d, e, j=j):
            return rows[s][d][e] if (d - s) % w == j else 0
        pieces.append(_piece(site, "own" if j == 0 else f"source{(rank - j) % w}", select, length,
                             lambda s, d, j=j: (d - s) % w == j, local=j == 0))
    return pieces


# -- stages ------------------------------------------------------------------------------------------------------
def flow(site: MoeSite) -> str:
    """``dispatch`` (all-to-all, then GEMM) or ``combine`` (GEMM, then all-to-all), backward mirrored."""
    forward = "dispatch" if site.kind == "a2a_mm" else "combine"
    if site.direction == "forward":
        return forward
    return "combine" if forward == "dispatch" else "dispatch"


def _deps(*items: int) -> tuple[int, ...]:
    return tuple(i for i in items if i >= 0)


def add_compute(b, name: str, ms: float, *, deps=(), piece: int = 0, op: str, flops: float = 0.0,
                nbytes: float = 0.0, launches: int = 1) -> int:
    return b.add(Stage(name=name, resource="compute", duration_ms=ms, depends_on=_deps(*deps), piece=piece,
                       flops=flops, nbytes=nbytes, op=op), issue=(("launch", launches),))


def add_memory(b, name: str, nbytes: float, *, deps=(), piece: int = 0, op: str) -> int:
    return add_compute(b, name, memory_ms(b.device, nbytes), deps=deps, piece=piece, op=op, nbytes=nbytes)


def add_grouped(b, piece_of: Piece, *, deps=(), piece: int = 0, op: str = "grouped_gemm") -> int:
    """The site's grouped GEMM of a piece over its real rows (the GEMM's group offsets skip padding), with the one
    reorder between the all-to-all's source-major rows and the GEMM's expert-major ones (``hocket.ops.moe_layout``):
    in the dispatch flow a gather of the piece's input rows (``k`` wide), in the combine flow a scatter of its
    output rows (``n`` wide). A weight-gradient GEMM reads the expert-major rows as they are (no reorder)."""
    site = b.site
    k, n = site.gemm_k_n
    padded = split_mode(b.plan) == "padded"
    level = sum(site.local_expert_rows(pace_rank(site)))
    groups = piece_of.groups
    gemm = b.remembered(("grouped", groups), lambda: grouped_gemm_ms(
        b.device, groups, k=k, n=n, dtype=site.dtype, itemsize=site.itemsize, calibration=b.calibration,
        rule=rule_of(b), level_m=level, sustained=b.sustained))
    width = k if flow(site) == "dispatch" else n
    moves = site.world > 1 and op == "grouped_gemm"
    reorder_bytes = 2.0 * piece_of.buffer_rows(padded) * width * site.itemsize if moves else 0.0  # read + write
    ms = gemm + (memory_ms(b.device, reorder_bytes, launches=0) if reorder_bytes else 0.0)
    name = f"{'gemm' if op == 'grouped_gemm' else 'wgrad'}[{piece_of.name}]"
    return add_compute(b, name, ms, deps=deps, piece=piece, op=op, flops=2.0 * sum(groups) * k * n,
                       nbytes=reorder_bytes, launches=3 if reorder_bytes else 1)


def add_a2a(b, piece_of: Piece, *, deps=(), piece: int = 0) -> int:
    """``piece_of``'s all-to-all, its busiest rank moving its rows to and from its peers (-1: none, on one rank
    or for the rank's own rows)."""
    site = b.site
    if site.world <= 1 or piece_of.local:
        return -1
    nbytes = a2a_buffer_bytes(site, piece_of.rows_moved(split_mode(b.plan) == "padded"))
    transfer = b.collective("all_to_all", nbytes)
    return b.add_transfer(f"a2a[{piece_of.name}]", transfer, deps=_deps(*deps), piece=piece, op="all_to_all",
                          nbytes=nbytes)


def add_layout(b, pieces: int, *, deps=()) -> int:
    """The call's host-side layout work (``SITE_OPS`` plus ``PIECE_OPS`` per piece beyond the first): a compute
    stage of that many op dispatches on CPU ranks (the host thread runs them), issue-chain items on GPUs."""
    ops = SITE_OPS + PIECE_OPS * max(0, pieces - 1)
    if b.issue is not None:
        b.add_host("layout", (("launch", ops),))
        return -1
    return b.add(Stage(name="layout", resource="compute", duration_ms=ops * launch_ms(b.device),
                       depends_on=_deps(*deps), op="layout"))


def add_exchange(b) -> int:
    """The counts all-gather of the call and, for ``exchanged`` split sizes, their host sync (module
    docstring): -1 where none is priced."""
    site = b.site
    if site.kind != "a2a_mm" or site.direction != "forward" or site.world <= 1:
        return -1
    nbytes = float(site.world * site.experts * COUNT_BYTES)
    gathered = b.add_transfer("counts", b.collective("all_gather", nbytes), op="all_gather", nbytes=nbytes)
    if split_mode(b.plan) != "exchanged":
        return gathered
    sync_us = HOST_SYNC_US["cpu" if b.device.sm_count is None else "gpu"]
    sync = b.add(Stage(name="host_sync", resource="compute", duration_ms=sync_us / 1e3, depends_on=(gathered,),
                       op="host_sync"))
    if b.issue is not None:  # the host issues nothing more until the counts are on it
        b.append(Stage(name="issue:after_sync", resource="issue", kind="issue", op="issue", duration_ms=0.0,
                       depends_on=(sync,)))
    return sync


def add_pack(b, *, deps=()) -> int:
    """This rank's routed rows gathered into the canonical send buffer (padded: into a zeroed buffer of the
    padded layout's rows)."""
    site = b.site
    nbytes = 2.0 * site.tokens * site.topk * site.row_bytes
    if split_mode(b.plan) == "padded":
        nbytes += site.padded_rows * site.row_bytes
    return add_memory(b, "pack", nbytes, deps=deps, op="permute")


def add_activation(b, *, deps=()) -> int:
    """The SwiGLU between the two halves (``silu(h[:, :ffn]) * h[:, ffn:]``), priced on the ``a2a_mm`` forward
    site: the busiest rank's rows read ``2 * ffn`` wide and written ``ffn`` wide."""
    site = b.site
    rows = sum(site.local_expert_rows(pace_rank(site)))
    return add_memory(b, "swiglu", 3.0 * rows * site.ffn * site.itemsize, deps=deps, op="activation")


def add_unpermute(b, *, deps=()) -> int:
    """The combined rows gathered back to their tokens and summed with the routing weights."""
    site = b.site
    nbytes = (2.0 * site.topk + 1.0) * site.tokens * site.row_bytes
    return add_memory(b, "unpermute", nbytes, deps=deps, op="unpermute")


def shared_ms(b, passes: int) -> tuple[float, float]:
    """(ms, flops) of ``passes`` forward-sized passes of the shared expert on this rank's tokens (a forward is
    1; a backward 2, the data and the weight gradients; a recomputed forward 1 more)."""
    site = b.site
    f = site.shared_ffn
    if f <= 0 or passes <= 0:
        return 0.0, 0.0

    def dense(k: int, n: int) -> float:
        return gemm_ms(b.device, m=site.tokens, k=k, n=n, dtype=site.dtype, itemsize=site.itemsize,
                       calibration=b.calibration, sustained=b.sustained) if site.tokens else launch_ms(b.device)

    act = memory_ms(b.device, 3.0 * site.tokens * f * site.itemsize)
    return passes * (dense(site.hidden, 2 * f) + dense(f, site.hidden) + act), \
        2.0 * passes * site.tokens * 3 * site.hidden * f


def add_shared(b, passes: int, *, deps=()) -> int:
    ms, flops = b.remembered(("shared", passes), lambda: shared_ms(b, passes))
    if ms <= 0:
        return -1
    return add_compute(b, "shared", ms, deps=deps, op="shared_expert", flops=flops, launches=3 * passes)


def shared_passes(site: MoeSite, strategy: str) -> tuple[int, int]:
    """(passes in the dispatch gap, passes on the compute stream beside no transfer) of the shared expert on
    this site (module docstring): an ``a2a_mm`` forward site computes it in the first dispatch's gap under every
    strategy but ``sequential`` (after the routed experts there); its backward site computes its gradient (two
    passes) and, where the forward ran it in the gap without autograd, recomputes its forward first."""
    if site.kind != "a2a_mm" or site.shared_ffn <= 0:
        return 0, 0
    if site.direction == "forward":
        return (0, 1) if strategy == "sequential" else (1, 0)
    return 0, 2 if strategy == "sequential" else 3


def dispatch_stages(b, pieces: Sequence[Piece]) -> None:
    """``hocket.ops.moe_exec.run_a2a_mm``'s order: ``token_blocks`` issues block 0, runs the side work (the
    shared expert), then issues block ``i + 1`` before block ``i``'s GEMM; ``per_source`` issues the peers'
    rounds, then its own, the side work, the GEMMs own rows first; every other strategy issues every piece, the
    side work, then the GEMMs in order. On CPU ranks the host thread runs the side work and the GEMMs, so a
    piece issued after one waits for it."""
    site, strategy = b.site, b.plan.strategy
    cpu = b.issue is None
    gap, serial = shared_passes(site, strategy)
    start = add_exchange(b)
    pack = add_pack(b, deps=(start,))
    pack = max(pack, add_layout(b, len(pieces), deps=(pack,)))
    transfers: dict[int, int] = {}
    last = [-1]  # the host's last compute stage (CPU ranks: what a later issue waits for)

    def issue(i: int) -> None:
        if 0 <= i < len(pieces) and i not in transfers:
            transfers[i] = add_a2a(b, pieces[i], deps=(pack, last[0] if cpu else -1), piece=i)

    def side() -> None:
        if gap:
            last[0] = add_shared(b, gap, deps=(pack,))

    def compute(i: int) -> None:
        data = add_grouped(b, pieces[i], deps=(transfers.get(i, -1), pack), piece=i)
        last[0] = data
        if site.direction == "backward":  # the piece's weight gradient after its data gradient
            last[0] = add_grouped(b, pieces[i], deps=(data,), piece=i, op="grouped_wgrad")

    if strategy == "token_blocks":
        issue(0)
        side()
        for i in range(len(pieces)):
            issue(i + 1)
            compute(i)
    else:
        order = list(range(1, len(pieces))) + [0] if strategy == "per_source" else list(range(len(pieces)))
        for i in order:
            issue(i)
        side()
        for i in range(len(pieces)):
            compute(i)
    if site.kind == "a2a_mm" and site.direction == "forward":
        last[0] = add_activation(b, deps=(last[0],))
    if serial:
        add_shared(b, serial, deps=(last[0],))


def combine_stages(b, pieces: Sequence[Piece]) -> None:
    """``hocket.ops.moe_exec.run_mm_a2a``'s order: a piece's GEMM, then its all-to-all; the weight gradient (the
    backward of ``a2a_mm``: one grouped GEMM over every row) after the first piece's; ``token_blocks`` and
    ``expert_groups`` wait for piece ``i - 1``'s all-to-all once piece ``i``'s is issued (so piece ``i + 1``'s
    GEMM starts after it); ``per_source`` computes and sends the peers' rows first, its own last, and waits for
    them all at the end. Then the unpermute."""
    site, strategy = b.site, b.plan.strategy
    _, serial = shared_passes(site, strategy)
    first = add_shared(b, serial) if serial else -1
    first = max(first, add_layout(b, len(pieces), deps=(first,)))
    transfers: list[int] = []
    waited = [first]
    wgrad_done = [site.direction == "forward"]

    def produce(i: int) -> None:
        gemm = add_grouped(b, pieces[i], deps=(waited[0],), piece=i)
        transfers.append(add_a2a(b, pieces[i], deps=(gemm,), piece=i))

    def weight_grad() -> None:
        if not wgrad_done[0]:
            wgrad_done[0] = True
            whole = Piece(name="all", traffic=(), padded_traffic=(), groups=site.local_expert_rows(pace_rank(site)),
                          padded_rows=site.padded_rows)
            add_grouped(b, whole, op="grouped_wgrad")

    if strategy in ("token_blocks", "expert_groups"):
        produce(0)
        weight_grad()
        for i in range(1, len(pieces)):
            produce(i)
            waited[0] = transfers[i - 1]
    else:
        order = list(range(1, len(pieces))) + [0] if strategy == "per_source" else list(range(len(pieces)))
        for i in order:
            produce(i)
            weight_grad()
    add_unpermute(b, deps=tuple(transfers))


def pieces_of(site: MoeSite, plan) -> list[Piece]:
    """The pieces of ``plan`` on ``site`` (``hocket.ops.moe_exec.pieces``)."""
    if plan.strategy == "token_blocks":
        return token_block_pieces(site, plan.chunks)
    if plan.strategy == "expert_groups":
        return expert_group_pieces(site, plan.chunks)
    if plan.strategy == "per_source":
        return source_pieces(site)
    return whole_pieces(site)


def moe_stages(b) -> None:
    """The stages of ``b.site`` under ``b.plan`` (every MoE strategy; module docstring)."""
    if not isinstance(b.site, MoeSite):
        raise TypeError(f"site={b.site!r} must be a hocket.core.moe.MoeSite")
    pieces = pieces_of(b.site, b.plan)
    if flow(b.site) == "dispatch":
        dispatch_stages(b, pieces)
    else:
        combine_stages(b, pieces)


def sequential_stages(b) -> None:
    """The whole all-to-all, then the grouped GEMM (``a2a_mm``), or the reverse (``mm_a2a``)."""
    moe_stages(b)


def workspace_bytes(site: MoeSite, plan) -> int:
    """Per-rank buffers beyond the call's input and output: the send rows, the received rows and the GEMM's
    output rows (padded: :attr:`MoeSite.padded_rows` each; exchanged: the busiest rank's rows), and the counts."""
    padded = split_mode(plan) == "padded"
    k, n = site.gemm_k_n
    if padded:
        sent = received = site.padded_rows
    else:
        sent = max(sum(site.sent_rows(r)) for r in range(site.world))
        received = max(sum(site.received_rows(r)) for r in range(site.world))
    rows = sent * site.hidden + received * k + received * n
    counts = site.world * site.experts * COUNT_BYTES
    return int(rows * site.itemsize + counts)
