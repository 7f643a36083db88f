"""Peer-read all-gather GEMM (Triton): peer rows loaded over NVLink inside the GEMM's tiles.

``out[src * R:(src + 1) * R] = shard_src @ B`` for every rank ``src``, one persistent launch.
Local tiles read this rank's shard; loader tiles wait on a peer's readiness flag (raised by
that peer, system-scope release, in this rank's symmetric signal area), read the peer's
rows (the whole row block, all K) through its own pointer argument (one per rank,
``MAX_WORLD`` of them: on a GPU the peer mappings of symmetric memory, under Triton's
interpreter plain tensors; as arguments Triton knows their 16-byte alignment, so remote
loads stay vectorised) into the staged gathered A, raise the row block's local flag, then
multiply the staged rows like every other tile; follower tiles wait on that flag. Table and resources: :mod:`hocket.kernels.peer_read_schedule`.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.runtime.interpreter import InterpretedFunction

from hocket.kernels.flags import raise_flag, wait_flag
from hocket.kernels.gemm_tile import store_tile, tile_accumulate
from hocket.kernels.peer_read_schedule import LOADER, LOCAL, PEER_READ_COLUMNS, PEER_SLOT, ROW_SLOT, PeerReadWorkspace
from hocket.kernels.tickets import finish_tickets, first_tile, next_tile
from hocket.kernels.workspace import signature

_COLS = tl.constexpr(PEER_READ_COLUMNS)
_LOCAL = tl.constexpr(LOCAL)
_LOADER = tl.constexpr(LOADER)
_PEER_SLOT = tl.constexpr(PEER_SLOT)
_ROW_SLOT = tl.constexpr(ROW_SLOT)
MAX_WORLD = 8
"""ranks one launch can read from (one pointer argument each)."""


@triton.jit
def _pick(src, r0, r1, r2, r3, r4, r5, r6, r7):
    """Rank ``src``'s shard pointer (a runtime choice among the arguments)."""
    p = r0
    if src == 1:
        p = r1
    if src == 2:
        p = r2
    if src == 3:
        p = r3
    if src == 4:
        p = r4
    if src == 5:
        p = r5
    if src == 6:
        p = r6
    if src == 7:
        p = r7
    return p


@triton.jit
def _stage_rows(remote_ptr, staged_ptr, pid_m, M, K, stride_am, stride_ak, BLOCK_M: tl.constexpr,
                STAGE_K: tl.constexpr, EVEN_M: tl.constexpr, EVEN_STAGE_K: tl.constexpr):
    """Copy row block ``pid_m`` (all K) of a peer's shard into the staged gathered A, ``STAGE_K``
    columns per step (wide steps: few remote round trips per row block)."""
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_k = tl.arange(0, STAGE_K)
    offs = offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    for kk in range(0, tl.cdiv(K, STAGE_K)):
        if EVEN_M and EVEN_STAGE_K:
            tl.store(staged_ptr + offs, tl.load(remote_ptr + offs))
        else:
            mask = (offs_m[:, None] < M) & (offs_k[None, :] < K - kk * STAGE_K)
            tl.store(staged_ptr + offs, tl.load(remote_ptr + offs, mask=mask), mask=mask)
        offs += STAGE_K * stride_ak


@triton.jit(do_not_specialize=["R", "N", "K", "num_tiles", "max_spins"])
def peer_read_gemm_kernel(local_ptr, r0, r1, r2, r3, r4, r5, r6, r7, stage_ptr, b_ptr, c_ptr, table_ptr,
                          peer_flags_ptr, row_flags_ptr, err_ptr, ticket_ptr, R, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                          num_tiles, max_spins,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                          EVEN_M: tl.constexpr, EVEN_N: tl.constexpr, EVEN_K: tl.constexpr,
                          STAGE_K: tl.constexpr, EVEN_STAGE_K: tl.constexpr,
                          INPUT_PRECISION: tl.constexpr, UPCAST: tl.constexpr, DYNAMIC: tl.constexpr):
    num_programs = tl.num_programs(0)
    t = first_tile(ticket_ptr, DYNAMIC)
    while t < num_tiles:
        src = tl.load(table_ptr + _COLS * t)
        pid_m = tl.load(table_ptr + _COLS * t + 1)
        pid_n = tl.load(table_ptr + _COLS * t + 2)
        kind = tl.load(table_ptr + _COLS * t + 3)
        row_flag = tl.load(table_ptr + _COLS * t + 4)
        staged = stage_ptr + src * R * stride_am
        a_ptr = local_ptr
        if kind == _LOADER:
            wait_flag(peer_flags_ptr + src, err_ptr + _PEER_SLOT, src + 1, max_spins)
            _stage_rows(_pick(src, r0, r1, r2, r3, r4, r5, r6, r7), staged, pid_m, R, K, stride_am, stride_ak,
                        BLOCK_M, STAGE_K, EVEN_M, EVEN_STAGE_K)
            tl.debug_barrier()  # every thread's staged stores before the release (and before this tile reads them)
            raise_flag(row_flags_ptr + row_flag)
            a_ptr = staged
        elif kind != _LOCAL:
            wait_flag(row_flags_ptr + row_flag, err_ptr + _ROW_SLOT, row_flag + 1, max_spins)
            a_ptr = staged
        acc = tile_accumulate(a_ptr, b_ptr, pid_m, pid_n, R, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                              BLOCK_M, BLOCK_N, BLOCK_K, EVEN_M, EVEN_N, EVEN_K, INPUT_PRECISION, UPCAST)
        store_tile(c_ptr + src * R * stride_cm, acc, pid_m, pid_n, R, N, stride_cm, stride_cn, BLOCK_M, BLOCK_N,
                   EVEN_M, EVEN_N)
        t = next_tile(ticket_ptr, t, num_programs, DYNAMIC)
    finish_tickets(ticket_ptr, num_programs, DYNAMIC)


_INTERPRETED = isinstance(peer_read_gemm_kernel, InterpretedFunction)


def _check(ws: PeerReadWorkspace, local, shards, stage, b, out, peer_flags) -> None:
    R, k, n, w = ws.rows_per_shard, ws.k, ws.n, ws.world
    for name, t, shape in (("local", local, (R, k)), ("stage", stage, (w * R, k)), ("B", b, (k, n)),
                           ("out", out, (w * R, n))):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if tuple(t.shape) != shape or t.dtype != ws.dtype or t.device != ws.device:
            raise ValueError(f"{name} is {tuple(t.shape)} {t.dtype} on {t.device}; this peer-read workspace "
                             f"expects {shape} {ws.dtype} on {ws.device}")
    for name, t in (("local", local), ("stage", stage), ("out", out)):
        if not t.is_contiguous():
            raise ValueError(f"{name} must be contiguous (local, peer and staged rows share one row stride); "
                             f"pass {name}.contiguous()")
    if not isinstance(shards, (list, tuple)) or len(shards) != w or w > MAX_WORLD:
        raise ValueError(f"shards must be a list of {w} tensors, one per rank (world <= {MAX_WORLD}), got "
                         f"{type(shards).__name__} of {len(shards) if isinstance(shards, (list, tuple)) else '?'}")
    for r, t in enumerate(shards):
        if tuple(t.shape) != (R, k) or t.dtype != ws.dtype or t.stride() != local.stride():
            raise ValueError(f"shards[{r}] is {tuple(t.shape)} {t.dtype} stride {t.stride()}; every rank's shard must "
                             f"be [{R}, {k}] {ws.dtype} with this rank's strides {local.stride()}")
    if peer_flags.dtype != torch.int32 or peer_flags.numel() < w:
        raise ValueError(f"peer_flags must hold >= {w} int32 readiness flags (index = source rank), got "
                         f"{peer_flags.numel()} {peer_flags.dtype}")


def peer_read_gemm(local: torch.Tensor, shards, stage: torch.Tensor, b: torch.Tensor, *,
                   workspace: PeerReadWorkspace, out: torch.Tensor, peer_flags: torch.Tensor) -> torch.Tensor:
    """``out = all_gather(shards) @ b``: ``local`` is this rank's ``[R, K]`` shard, ``shards[src]`` rank
    ``src``'s ``[R, K]`` shard as this device reaches it (same strides; this rank's entry is not read),
    ``peer_flags[src] >= 1`` once it may be read. The peers' rows are also left in ``stage`` (``[world * R, K]``; this rank's rows untouched).
    Row-block flags and errors must be zero (``workspace.reset()`` on this stream first)."""
    ws = workspace
    _check(ws, local, shards, stage, b, out, peer_flags)
    if signature(local, stage, b, out) not in ws.warmed:
        raise RuntimeError("the peer-read GEMM was not warmed up for these operands: call "
                           "warmup_peer_read(workspace, local, stage, b, out) before anything spins")
    _launch(ws, local, shards, stage, b, out, peer_flags)
    return out


def _launch(ws, local, shards, stage, b, out, peer_flags) -> None:
    padded = [*shards, *[local] * (MAX_WORLD - len(shards))]
    peer_read_gemm_kernel[(ws.num_programs,)](
        local, *padded, stage, b, out, ws.table, peer_flags, ws.row_flags, ws.errors, ws.tickets,
        ws.rows_per_shard, ws.n, ws.k, local.stride(0), local.stride(1), b.stride(0), b.stride(1),
        out.stride(0), out.stride(1), ws.num_tiles, ws.max_spins, **ws.launch_flags(interpreted=_INTERPRETED))


def warmup_peer_read(ws: PeerReadWorkspace, local: torch.Tensor, stage: torch.Tensor, b: torch.Tensor,
                     out: torch.Tensor) -> None:
    """Compile and load the kernel without spinning or touching a peer: every shard is
    ``local`` and every readiness flag is pre-set. Overwrites ``out`` and the peer rows of ``stage``."""
    shards = [local] * ws.world
    ready = torch.ones(ws.world, dtype=torch.int32, device=ws.device)
    _check(ws, local, shards, stage, b, out, ready)
    ws.reset()
    _launch(ws, local, shards, stage, b, out, ready)
    if ws.device.type == "cuda":
        torch.cuda.synchronize(ws.device)
    if int(ws.errors.abs().sum()) != 0:
        raise RuntimeError(f"peer-read warm-up recorded a wait timeout: errors={ws.errors.tolist()}")
    ws.reset()
    ws.warmed.add(signature(local, stage, b, out))
