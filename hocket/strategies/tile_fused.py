"""``tile_fused``: one persistent kernel over ``plan.chunks`` flag groups (:mod:`hocket.ops.lowering.tile_fused`,
GPU only; the offload kernels of :mod:`hocket.ops.offload` cut :func:`hocket.core.pieces.fused_offload_sizes`):
one launch, the whole GEMM's wave efficiency at our Triton kernel's share of the vendor rate
(``compute.FUSED_GEMM_EFFICIENCY``), a flag wait per group; with an SM-driven transport the kernel's grid
is capped below the SM count (the SMs the transfer needs)."""

from __future__ import annotations

from hocket.core.pieces import fused_offload_sizes
from hocket.cost.builder import FLAG_WAIT_US, split_even
from hocket.cost.compute import FUSED_BLOCK_M, FUSED_GEMM_EFFICIENCY, launch_ms
from hocket.cost.offload import host_link
from hocket.cost.stages import Stage
from hocket.strategies.memory import signalled_bytes
from hocket.strategies.spec import StrategySpec


def fused_groups(b, *, consumer_of=None, producer_for=None, local_rows: int = 0,
                 sizes: tuple[int, ...] | None = None) -> None:
    """The compute side of a persistent kernel: launched once before any data arrives,
    then one stage per flag group (``sizes`` rows each; default ``plan.chunks`` even groups).
    ``consumer_of(i, rows)`` adds the transfer group i waits for; ``producer_for(i, rows, deps)``
    adds the transfer group i feeds; ``local_rows`` are computed first without waiting. Each
    group is charged its marginal kernel time counted from the kernel's end (the last group
    carries the wave tail)."""
    site, plan = b.site, b.plan
    m = site.m
    sms = None
    if b.device.sm_count is not None and plan.transport in ("collective", "p2p"):
        sms = b.device.sm_count - b.comm_sms  # never occupy every SM beside an SM-driven transport
        b.sm_capped = True

    # our Triton kernel runs at a fraction of the vendor GEMM's rate (GPU ranks)
    efficiency = FUSED_GEMM_EFFICIENCY if b.device.sm_count is not None else 1.0

    def marginal(rows_done: int, rows: int) -> float:
        after = m - rows_done - rows
        kernel = b.gemm(m - rows_done, launches=0, sms=sms) - (b.gemm(after, launches=0, sms=sms) if after else 0.0)
        return kernel / efficiency

    def flops(rows: int) -> float:
        return 2.0 * rows * site.k * site.n * site.num_b

    groups = sizes or split_even(m - local_rows, plan.chunks)
    b.add(Stage(name="kernel.launch", resource="compute", duration_ms=launch_ms(b.device), op="launch"),
          issue=(("launch", 1),))
    if local_rows:
        b.add(Stage(name="gemm[local]", resource="compute", duration_ms=max(0.0, marginal(0, local_rows)),
                    op="gemm", flops=flops(local_rows)), rows=m)
    done = local_rows
    wait_ms = FLAG_WAIT_US / 1e3
    for i, rows in enumerate(groups):
        deps = (consumer_of(i, rows),) if consumer_of is not None else ()
        g = b.add(Stage(name=f"gemm[{i}]", resource="compute", duration_ms=max(0.0, marginal(done, rows)) + wait_ms,
                        depends_on=deps, op="gemm", piece=i, flops=flops(rows)), rows=m)
        done += rows
        if producer_for is not None:  # released by the group's flag, not set up ahead
            producer_for(i, rows, deps=(g,), queued=False)


def _collective_fused(b, *, producer: bool) -> None:
    """ag_mm (consumer): this rank's shard is copied in and its flags raised before the kernel starts, so
    its tiles go first whatever the order; then each group of peer rows as it lands. mm_rs (producer):
    the peers' blocks in ring order, ``plan.chunks`` groups each, every group pushed to its owner as its
    flag rises; this rank's own block last (it stays), and the owner adds the pushed groups to it."""
    site, plan = b.site, b.plan
    p, m, total = site.world, site.m, site.comm_bytes
    op = "reduce_scatter" if producer else "all_gather"
    scale = p / (p - 1)  # the groups hold remote rows only: (p - 1) / p of a collective's buffer moves

    def transfer(i: int, rows: int, deps=(), queued: bool = True) -> int:
        nbytes = total * rows / m * scale
        # a producer's push waits on its group's flag: a spin-wait launch besides the copies
        issue = ((("copy_engine", 1), ("fused_push", 1)), ()) if producer else None
        return b.add_transfer(f"{op}[{i}]", b.collective(op, nbytes), deps=deps, piece=i, op=op, nbytes=nbytes,
                              queued=queued, issue=issue)

    # the call's own host work before the kernel: the pipe's barrier and flag resets, the workspace and
    # the Triton launch, the flag raises and waits, the error watch
    b.add_host("tile_fused", (("fused_call", 1),))
    if not producer:
        fused_groups(b, consumer_of=transfer, local_rows=m // p)
        return
    block = split_even(m, p)
    per_block = [split_even(rows, plan.chunks) for rows in block]
    sizes = tuple(g for blk in per_block[:-1] for g in blk) + tuple(per_block[-1])  # own block last
    pushed = sum(len(blk) for blk in per_block[:-1])

    def push(i: int, rows: int, deps=(), queued: bool = True) -> int | None:
        return transfer(i, rows, deps, queued) if i < pushed else None  # the own block's groups stay

    fused_groups(b, producer_for=push, sizes=sizes)
    # partial blocks land in symmetric memory; the owner sums the p of them once its own block is done
    # and the peers' groups are in (pushes are symmetric: this rank's last one ends as the peers' do)
    moves = tuple(i for i, stage in enumerate(b.stages) if stage.op == op)
    b.add_memory("reduce[final]", (p + 1) * total / p, deps=(len(b.stages) - 1, *moves))


def cost(b) -> None:
    site, plan = b.site, b.plan
    if site.kind in ("h2d_mm", "mm_d2h"):
        # the executor's flag groups: split_sizes, else a ramp from one row block at the exposed edge
        link = host_link(b)
        sizes = fused_offload_sizes(site.m, plan, align=FUSED_BLOCK_M,
                                    direction="to_host" if link.to_host else "from_host")
        fused_groups(b, consumer_of=None if link.to_host else link.copy,
                     producer_for=link.copy if link.to_host else None, sizes=sizes)
    else:
        _collective_fused(b, producer=site.kind == "mm_rs")


def workspace(site, plan) -> int:
    """The kernel reads and writes symmetric memory directly: no staging."""
    return 0


def symmetric(site, plan) -> int:
    """The collective's buffer and a flag per (rank, group), whatever the transport."""
    return signalled_bytes(site, plan)


def gemm_rows(site, chunks: int) -> int:
    """One persistent kernel over the whole ``m``."""
    return site.m


SPEC = StrategySpec(
    error_class="tile_fused",
    name="tile_fused", summary="one persistent Triton GEMM whose tiles wait on (or raise) per-group flags",
    kinds=("ag_mm", "mm_rs", "mm_ar", "h2d_mm", "mm_d2h"), priced_kinds=("ag_mm", "mm_rs", "h2d_mm", "mm_d2h"),
    cost=cost, workspace=workspace, runs_on_cpu=False,
    planned_kinds=("ag_mm", "mm_rs"), kind_reason="tile_fused kernels exist for ag_mm and mm_rs",
    transports=("copy_engine",),
    transport_reason="its kernels read peers' symmetric memory, which needs the copy_engine transport",
    one_node=True, ordered=True, checks_gemm_rows=False, gemm_rows=gemm_rows, symmetric=symmetric,
)
