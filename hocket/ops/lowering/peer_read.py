"""``tile_fused`` over ``transport="peer_read"``: all-gather + matmul whose GEMM reads the peers'
rows straight out of their symmetric memory over NVLink (no copy-engine transfer).

One call (``cur`` = the caller's stream, ``S`` = the pipe's side stream, see
:mod:`hocket.ops.lowering.peer_pipe`):

1. ``pipe.begin(1)``: ``S`` waits for ``cur``, zeroes this rank's readiness flags and joins the
   group's device barrier (after it, no peer still reads this rank's shard region from the
   previous call, and every rank's flags are zero);
2. on ``S``: this rank's shard is copied into its symmetric ``shard`` region (a local copy)
   and every peer's readiness flag for this rank is raised (system-scope release);
3. on ``cur``: the peer-read GEMM (:mod:`hocket.kernels.peer_read_gemm`): local tiles first;
   one loader tile per peer row block waits on the peer's flag, reads the rows remotely and
   stages them (in the returned gathered A when the caller wants it); the other column tiles
   read the staged rows;
4. ``pipe.end``: ``cur`` waits for ``S``; flag timeouts are checked asynchronously and name the rank.

With several Bs every GEMM reads the peers again (each launch is self-contained). Gathering the
last dim, float64 and groups of one rank run the copy-engine ``tile_fused`` path instead.
"""

from __future__ import annotations

import torch

from hocket.kernels.workspace import signature
from hocket.ops.lowering.peer_pipe import PIPES, PeerPipe
from hocket.ops.lowering.problems import GatherMatmul
from hocket.transport.stream_switch import on_stream

KERNEL_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def shard_pipe(rt, g: GatherMatmul) -> PeerPipe:
    """Pipe whose symmetric region ``shard`` holds this rank's ``[R, K]`` rows for the peers to read."""
    dtype, device = g.local.dtype, g.local.device
    return PIPES.get(rt.group, device, ("ag_peer_read", g.R, g.Kc, dtype), regions=[("shard", (g.R, g.Kc), dtype)],
                     label=f"all_gather_matmul peer_read [{rt.world}x{g.R}, {g.Kc}] {dtype}")


def _shards(pipe: PeerPipe) -> list[torch.Tensor]:
    """Every rank's ``shard`` region as this GPU reaches it (peer mappings of symmetric memory)."""
    return [pipe.peer(r, "shard") for r in range(pipe.world)]


def gather_matmul(A_shard, Bs, dim, need_A, rt, plan, *, fallback):
    """The peer-read all-gather + matmul; ``fallback(A_shard, Bs, dim, need_A, rt, plan)`` (the copy-engine
    ``tile_fused`` executor, which calls this one) runs what the peer-read kernel does not cover."""
    from hocket.kernels.flags import set_flag_on_stream
    from hocket.kernels.peer_read_gemm import peer_read_gemm, warmup_peer_read
    from hocket.kernels.peer_read_schedule import PeerReadWorkspace, raise_peer_read_timeout
    from hocket.kernels.peer_schedule import send_order

    w, rank = rt.world, rt.rank
    if w < 2:
        raise ValueError("transport 'peer_read' reads peers' memory: it needs a group of at least two GPUs; "
                         "use strategy='sequential'")
    g = GatherMatmul(A_shard, Bs, dim, w, rank, need_A=need_A)
    if g.k_gather or g.local.dtype not in KERNEL_DTYPES:
        return fallback(A_shard, Bs, dim, need_A, rt, plan.with_(transport="copy_engine"))
    pipe = shard_pipe(rt, g)
    local = g.local.contiguous()
    stage = g.A_c if g.A_c is not None else rt.ctx.buffer("peer_read.stage", (w * g.R, g.Kc), local.dtype)
    work = []
    for B, out in zip(g.Bs, g.outs_c):
        key = ("peer_read", B.shape[1])
        if key not in pipe.workspaces:
            pipe.workspaces[key] = PeerReadWorkspace(rows_per_shard=g.R, n=B.shape[1], k=g.Kc, world=w, rank=rank,
                                                     dtype=local.dtype, device=pipe.device)
        ws = pipe.workspaces[key]
        if ws.k != g.Kc or B.dtype != local.dtype:
            raise ValueError(f"B is {tuple(B.shape)} {B.dtype}; A_shard is [{g.R}, {g.Kc}] {local.dtype}: B must be "
                             f"[{g.Kc}, n] of the same dtype")
        if signature(local, stage, B, out) not in ws.warmed:
            warmup_peer_read(ws, local, stage, B, out)
        work.append((ws, B, out))
    shards = _shards(pipe)
    pipe.begin(1)
    with on_stream(pipe.stream):
        pipe.local("shard").copy_(local)
        for peer in send_order(rank, w):
            set_flag_on_stream(pipe.flags(peer), pipe.flag_index(rank, 0), method=pipe.flag_method)
    ready = pipe.source_flags()
    checks = []
    for ws, B, out in work:
        ws.reset()
        peer_read_gemm(local, shards, stage, B, workspace=ws, out=out, peer_flags=ready)
        checks.append((ws.errors, lambda mirror, ws=ws: raise_peer_read_timeout(
            mirror, max_spins=ws.max_spins, rank=rank, row_blocks=ws.schedule.row_blocks, context=pipe.label)))
    if g.A_c is not None:
        g.gathered_rows(rank).copy_(local)
    pipe.end(checks)
    return g.finish()
