"""``tile_fused`` on several GPUs: one persistent Triton GEMM per call, data moved by copy engines
into the peers' symmetric memory, one flag per chunk or group (:mod:`hocket.ops.lowering.peer_pipe`).

* all-gather + matmul: every rank pushes its shard (``plan.chunks`` pieces) into every peer's
  gathered A and copies it into its own; the consumer GEMM (``hocket.kernels.consumer_gemm``)
  walks its tiles in arrival order (own shard first, then ``rank - 1``, ``rank - 2``, ...),
  each tile waiting on the flags of the chunks it reads.
* matmul + reduce-scatter: the producer GEMM (``producer_gemm``) computes the destination
  blocks in ring order starting after this rank, ``plan.chunks`` groups per block; the copy
  stream waits on each group's flag and pushes the group to its owner; this rank's own block
  comes last and the owners add the pushed groups to it.
* matmul + all-reduce: the producer's groups over the whole output go to every peer; every
  rank sums all ranks' partials in rank order.

Shapes the kernels do not take (a gathered last dim, a scattered last dim, destination blocks
that are not whole row tiles, float64) run the copy-engine pipeline of
:mod:`hocket.ops.lowering.peer_chunked` with vendor GEMMs instead. The plan's transport must
be ``copy_engine``: the kernels read symmetric memory on NCCL groups of one node.
"""

from __future__ import annotations

import torch

from hocket.kernels.config import fused_config
from hocket.kernels.workspace import ConsumerWorkspace, ProducerWorkspace, signature
from hocket.ops.executors import register_executors
from hocket.ops.lowering import peer_chunked
from hocket.ops.lowering.peer_pipe import FLAGS_PER_SOURCE
from hocket.ops.lowering.problems import AllReduceMatmul, GatherMatmul, ScatterMatmul
from hocket.ops.lowering.runtime import bind_executors

KERNEL_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def _check_transport(rt, plan) -> None:
    if plan.transport != "copy_engine":
        raise ValueError(f"plan strategy 'tile_fused' moves data with copy engines through symmetric memory: pass "
                         f"transport='copy_engine' (got transport={plan.transport!r}; 'peer_read' exists for "
                         f"all_gather_matmul only)")
    if rt.world < 2:
        raise ValueError("plan strategy 'tile_fused' needs a group of at least two GPUs; use 'sequential'")


class PeerConsumerWorkspace(ConsumerWorkspace):
    """A consumer workspace whose chunk flags live in symmetric memory (peers raise them)."""

    def __init__(self, *, flags: torch.Tensor, **kwargs) -> None:
        super().__init__(**kwargs)
        if flags.numel() != self.schedule.num_chunks or flags.dtype != torch.int32:
            raise ValueError(f"flags must be {self.schedule.num_chunks} int32 values, got {flags.numel()} {flags.dtype}")
        self.flags = flags


class PeerProducerWorkspace(ProducerWorkspace):
    """A producer workspace walking a given tile table (blocks in ring order, groups per block)."""

    def __init__(self, *, table: tuple[int, ...], **kwargs) -> None:
        super().__init__(**kwargs)
        if len(table) != self.table.numel():
            raise ValueError(f"table has {len(table)} entries but this output's schedule has {self.table.numel()}")
        self.table = torch.tensor(table, dtype=torch.int32, device=self.device)


def _warm_producer(ws, a, b, out) -> None:
    from hocket.kernels.launch import warmup_producer

    if signature(a, b, out) not in ws.warmed:
        warmup_producer(ws, a, b, out)


def gather_matmul(A_shard, Bs, dim, need_A, rt, plan):
    if plan.transport == "peer_read":  # the GEMM reads the peers' rows itself
        from hocket.ops.lowering import peer_read

        return peer_read.gather_matmul(A_shard, Bs, dim, need_A, rt, plan, fallback=gather_matmul)
    _check_transport(rt, plan)
    from hocket.kernels.launch import consumer_gemm, warmup_consumer
    from hocket.kernels.peer_schedule import local_first_arrival, send_order, shard_chunk_offsets

    w, rank = rt.world, rt.rank
    g = GatherMatmul(A_shard, Bs, dim, w, rank, need_A=need_A)
    if g.k_gather or g.local.dtype not in KERNEL_DTYPES:
        return peer_chunked.gather_matmul(A_shard, Bs, dim, need_A, rt, plan)
    pipe = peer_chunked.gather_pipe(rt, g)
    offsets, per = shard_chunk_offsets(g.R, w, min(plan.chunks, FLAGS_PER_SOURCE))
    gathered = pipe.local("A")
    flags = pipe.flags()[:w * per]
    workspaces = []
    for B, out in zip(g.Bs, g.outs_c):
        key = ("consumer", B.shape[1], per)
        if key not in pipe.workspaces:
            pipe.workspaces[key] = PeerConsumerWorkspace(
                flags=flags, m=w * g.R, n=B.shape[1], k=g.Kc, dtype=g.local.dtype, device=pipe.device,
                chunk_offsets=offsets, arrival=local_first_arrival(rank, w, per),
                config=fused_config(w * g.R, B.shape[1], g.Kc, g.local.dtype))
        ws = pipe.workspaces[key]
        if signature(gathered, B, out) not in ws.warmed:
            warmup_consumer(ws, gathered, B, out, flag_method=pipe.flag_method)
        workspaces.append(ws)
    pipe.begin(per)
    pieces = [(offsets[c], offsets[c + 1]) for c in range(per)]
    peer_chunked.push_shard(pipe, g.local, pieces, send_order(rank, w))
    gathered[rank * g.R:(rank + 1) * g.R].copy_(g.local)
    flags[rank * per:(rank + 1) * per].fill_(1)
    for ws, B, out in zip(workspaces, g.Bs, g.outs_c):
        consumer_gemm(gathered, B, workspace=ws, out=out)
    if g.A_c is not None:
        g.A_c.copy_(gathered)
    pipe.end([pipe.kernel_check(ws.errors, ws.max_spins, "consumer GEMM") for ws in workspaces])
    return g.finish()


def matmul_scatter(A, B, reduce_op, dim, rt, plan):
    _check_transport(rt, plan)
    from hocket.kernels.launch import producer_gemm, reset_producer
    from hocket.kernels.peer_schedule import block_groups, fits_block_groups, receive_order, send_order

    w, rank = rt.world, rt.rank
    s = ScatterMatmul(A, B, dim, w)
    dtype = s.out_c.dtype
    fits_kernel = dtype in KERNEL_DTYPES and not s.n_scatter and min(s.rows, s.cols, s.A_c.shape[1]) > 0
    cfg = fused_config(w * s.rows, s.cols, s.A_c.shape[1], dtype) if fits_kernel else None
    if s.n_scatter or cfg is None or not fits_block_groups(s.rows, cfg.block_m):
        return peer_chunked.matmul_scatter(A, B, reduce_op, dim, rt, plan)
    pipe = peer_chunked.partials_pipe(rt, s.rows, s.cols, dtype, s.out_c.device, what="matmul_reduce_scatter")
    order = (*send_order(rank, w), rank)
    key = ("producer", s.A_c.shape[1], min(plan.chunks, FLAGS_PER_SOURCE))
    if key not in pipe.workspaces:
        groups = block_groups(rows_per_block=s.rows, n=s.cols, world=w, groups=key[2], block_order=order,
                              block_m=cfg.block_m, block_n=cfg.block_n, group_m=cfg.group_m)
        ws = PeerProducerWorkspace(table=groups.table, m=w * s.rows, n=s.cols, k=s.A_c.shape[1], dtype=dtype,
                                   device=pipe.device, groups=groups.num_groups, config=cfg)
        pipe.workspaces[key] = (ws, groups)
    ws, groups = pipe.workspaces[key]
    full = rt.ctx.buffer("tile_fused.rs.full", (w * s.rows, s.cols))
    _warm_producer(ws, s.A_c, s.B, full)
    per = groups.groups_per_block
    reset_producer(ws)  # before begin(): the copy stream's flag waits must follow the reset
    pipe.begin(per)
    producer_gemm(s.A_c, s.B, workspace=ws, out=full)
    for peer in order[:-1]:
        dst = pipe.peer(peer, "partials")[rank]
        for i, group in enumerate(groups.groups_of(peer)):
            lo, hi = groups.rows(group)
            base = peer * s.rows
            pipe.push(full[lo:hi], dst[lo - base:hi - base], peer=peer, piece=i,
                      after_flag=(ws.flags, group, ws.errors, ws.max_spins))
    received = pipe.local("partials")
    own = full[rank * s.rows:(rank + 1) * s.rows]
    sources = receive_order(rank, w)
    for i, src in enumerate(sources):
        pipe.wait_flags(src, per)
        torch.add(own if i == 0 else s.out_c, received[src], out=s.out_c)
    pipe.end([pipe.kernel_check(ws.errors, ws.max_spins, "producer GEMM")])
    return s.finish(reduce_op)


def matmul_all_reduce(A, B, reduce_op, rt, plan):
    _check_transport(rt, plan)
    from hocket.kernels.launch import producer_gemm, reset_producer
    from hocket.kernels.peer_schedule import receive_order, send_order
    from hocket.kernels.schedule import cdiv

    w, rank = rt.world, rt.rank
    r = AllReduceMatmul(A, B, w)
    dtype = r.out_c.dtype
    if dtype not in KERNEL_DTYPES:
        return peer_chunked.matmul_all_reduce(A, B, reduce_op, rt, plan)
    pipe = peer_chunked.partials_pipe(rt, r.rows, r.cols, dtype, r.out_c.device, what="matmul_all_reduce")
    cfg = fused_config(r.rows, r.cols, r.A_c.shape[1], dtype)
    groups = min(plan.chunks, FLAGS_PER_SOURCE, cdiv(r.rows, cfg.block_m))
    key = ("producer", r.A_c.shape[1], groups)
    if key not in pipe.workspaces:
        pipe.workspaces[key] = ProducerWorkspace(m=r.rows, n=r.cols, k=r.A_c.shape[1], dtype=dtype,
                                                 device=pipe.device, groups=groups, config=cfg)
    ws = pipe.workspaces[key]
    _warm_producer(ws, r.A_c, r.B, r.out_c)
    reset_producer(ws)  # before begin(): the copy stream's flag waits must follow the reset
    pipe.begin(groups)
    producer_gemm(r.A_c, r.B, workspace=ws, out=r.out_c)
    for group in range(groups):
        lo, hi = ws.schedule.group_rows(group)
        for j, peer in enumerate(send_order(rank, w)):
            pipe.push(r.out_c[lo:hi], pipe.peer(peer, "partials")[rank, lo:hi], peer=peer, piece=group,
                      after_flag=(ws.flags, group, ws.errors, ws.max_spins) if j == 0 else None)
    for src in receive_order(rank, w):
        pipe.wait_flags(src, groups)
    pipe.end([pipe.kernel_check(ws.errors, ws.max_spins, "producer GEMM")])  # pushes read out_c: done first
    peer_chunked.sum_in_rank_order(r.out_c, r.out_c, pipe.local("partials"), rank,
                                   lambda dt: rt.ctx.buffer("tile_fused.ar.acc", (r.rows, r.cols), dt))
    return r.finish(reduce_op)


EXECUTORS = bind_executors(ag_mm=gather_matmul, mm_rs=matmul_scatter, mm_ar=matmul_all_reduce)


def register() -> None:
    """Register the executors (GPU only: :func:`hocket.ops.lowering.register_gpu_peers` calls it where CUDA
    symmetric memory exists)."""
    register_executors("tile_fused", EXECUTORS)
