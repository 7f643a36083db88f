"""Tile table and resources of the peer-read all-gather GEMM (plain Python, no Triton needed).

The peer-read GEMM computes ``all_gather(A_shard) @ B`` without a separate transfer: the
rows of the peers' shards are loaded by the GEMM's own tiles straight out of the peers'
symmetric memory over NVLink (``hocket.kernels.peer_read_gemm``). Reading a peer's rows
once per output column tile would pull ``n / block_n`` times the shard over the link, so
each peer row block is read remotely exactly once:

* ``LOCAL`` tiles: this rank's own shard, read from local memory; no wait;
* ``LOADER`` tiles: column tile 0 of one peer row block. The tile waits (bounded) on the
  peer's readiness flag, copies the row block (all K) remotely into the local gathered
  buffer (the staged A), raises that row block's local flag, then multiplies the staged rows;
* ``FOLLOWER`` tiles: the other column tiles of a peer row block; they wait on the row
  block's local flag and read the staged rows from local memory.

Order: the first ``loaders_after`` local tiles (one wave of the persistent grid), then every
loader, then the remaining local tiles, then the followers. The loaders' remote reads run
while the local tiles compute; followers come last, long after their loader finished. Every
dependency points to an earlier tile, so a persistent grid whose programs are all resident
cannot deadlock. Shards are tiled separately (row blocks never straddle two ranks), so any
row count per rank works.

Table: ``PEER_READ_COLUMNS`` ints per tile ``(src, pid_m, pid_n, kind, row_flag)``;
``row_flag = src * row_blocks + pid_m`` indexes the local row-block flags.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from hocket import env
from hocket.kernels.config import FP_FUSION, TileConfig, default_config, persistent_programs
from hocket.kernels.errors import FlagTimeoutError, spins_for_timeout
from hocket.kernels.peer_schedule import receive_order
from hocket.kernels.schedule import TICKET_WORDS, cdiv, consumer_schedule

PEER_READ_COLUMNS = 5
LOCAL, LOADER, FOLLOWER = 0, 1, 2
PEER_SLOT = 0
"""error slot: ``src + 1`` of a peer whose readiness flag never rose."""
ROW_SLOT = 1
"""error slot: ``row_flag + 1`` of a staged row block whose loader never finished."""
STAGE_K_BLOCKS = 4
"""a loader copies ``STAGE_K_BLOCKS * block_k`` columns of its row block per step."""
CPU_PROGRAMS = 1
"""Triton's interpreter runs programs one after another: one program keeps table order."""


@dataclass(frozen=True, kw_only=True)
class PeerReadSchedule:
    rows_per_shard: int
    n: int
    world: int
    rank: int
    block_m: int
    block_n: int
    tiles: tuple[tuple[int, int, int, int, int], ...]

    @property
    def row_blocks(self) -> int:
        """Row blocks per shard (the last one partial when ``rows_per_shard % block_m``)."""
        return cdiv(self.rows_per_shard, self.block_m)

    def table(self) -> list[int]:
        return [value for tile in self.tiles for value in tile]


def peer_read_schedule(*, rows_per_shard: int, n: int, world: int, rank: int, block_m: int, block_n: int,
                       group_m: int = 8, loaders_after: int = 0) -> PeerReadSchedule:
    """The tile table described in the module docstring."""
    for name, value in (("rows_per_shard", rows_per_shard), ("n", n), ("world", world)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name}={value!r} must be a positive int")
    if not isinstance(rank, int) or not 0 <= rank < world:
        raise ValueError(f"rank={rank!r} must be an int in [0, world={world})")
    if not isinstance(loaders_after, int) or loaders_after < 0:
        raise ValueError(f"loaders_after={loaders_after!r} must be an int >= 0 (local tiles before the loaders)")
    peers = receive_order(rank, world)
    shard = consumer_schedule(m=rows_per_shard, n=n, block_m=block_m, block_n=block_n,
                              chunk_offsets=(0, rows_per_shard), group_m=group_m)
    row_blocks = cdiv(rows_per_shard, block_m)
    local = [(rank, pid_m, pid_n, LOCAL, 0) for pid_m, pid_n, *_ in shard.tiles]
    loaders = [(src, pid_m, 0, LOADER, src * row_blocks + pid_m) for src in peers for pid_m in range(row_blocks)]
    followers = [(src, pid_m, pid_n, FOLLOWER, src * row_blocks + pid_m)
                 for src in peers for pid_m, pid_n, *_ in shard.tiles if pid_n != 0]
    cut = min(loaders_after, len(local))
    tiles = (*local[:cut], *loaders, *local[cut:], *followers)
    return PeerReadSchedule(rows_per_shard=rows_per_shard, n=n, world=world, rank=rank, block_m=block_m,
                            block_n=block_n, tiles=tiles)


class PeerReadWorkspace:
    """Resources of one peer-read GEMM shape class: tile table, row-block flags, error slots, tile
    tickets (``dynamic``: a free program takes the next tile in table order, so the programs that
    staged a peer row block take fewer tiles instead of ending last; see ``hocket.kernels.tickets``).

    ``num_programs``: the persistent grid (default: the GPU's SMs minus a reserve, one program
    on the CPU interpreter). Allocated once; :meth:`reset` zeroes flags and errors per call.
    """

    def __init__(self, *, rows_per_shard: int, n: int, k: int, world: int, rank: int, dtype: torch.dtype,
                 device: torch.device | str, config: TileConfig | None = None, num_programs: int | None = None,
                 max_spins: int | None = None, dynamic: bool = True) -> None:
        self.device = torch.device(device)
        if self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        if not isinstance(k, int) or k < 1:
            raise ValueError(f"k={k!r} must be a positive int")
        if world * rows_per_shard * max(n, k) > 2**31 - 1:
            raise ValueError(f"[{world}x{rows_per_shard}, {max(n, k)}] is above 2**31 elements: the kernel uses "
                             f"32-bit offsets; split the problem along m")
        self.config = config or default_config(dtype)
        cfg = self.config
        if num_programs is None:
            num_programs = (persistent_programs(torch.cuda.get_device_properties(self.device).multi_processor_count)
                            if self.device.type == "cuda" else CPU_PROGRAMS)
        if not isinstance(num_programs, int) or isinstance(num_programs, bool) or num_programs < 1:
            raise ValueError(f"num_programs={num_programs!r} must be an int >= 1 (the persistent grid size)")
        self.schedule = peer_read_schedule(rows_per_shard=rows_per_shard, n=n, world=world, rank=rank,
                                           block_m=cfg.block_m, block_n=cfg.block_n, group_m=cfg.group_m,
                                           loaders_after=num_programs)
        self.rows_per_shard, self.n, self.k, self.world, self.rank, self.dtype = (
            rows_per_shard, n, k, world, rank, dtype)
        self.num_tiles = len(self.schedule.tiles)
        self.num_programs = min(num_programs, self.num_tiles)
        self.max_spins = spins_for_timeout(env.wait_timeout_s()) if max_spins is None else int(max_spins)
        if self.max_spins < 1:
            raise ValueError(f"max_spins={max_spins!r} must be >= 1 (polls before a wait gives up)")
        self.table = torch.tensor(self.schedule.table(), dtype=torch.int32, device=self.device)
        self.row_flags = torch.zeros(world * self.schedule.row_blocks, dtype=torch.int32, device=self.device)
        self.errors = torch.zeros(2, dtype=torch.int32, device=self.device)
        if not isinstance(dynamic, bool):
            raise TypeError(f"dynamic={dynamic!r} must be a bool (True: programs take tiles from a ticket counter)")
        self.dynamic = dynamic
        self.tickets = torch.zeros(TICKET_WORDS, dtype=torch.int32, device=self.device)
        self.warmed: set[tuple] = set()

    def reset(self) -> None:
        """Zero the row-block flags, the error slots and the tile tickets on the current stream."""
        self.row_flags.zero_()
        self.errors.zero_()
        self.tickets.zero_()

    def launch_flags(self, *, interpreted: bool) -> dict:
        cfg = self.config
        stage_k = STAGE_K_BLOCKS * cfg.block_k
        return dict(BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k,
                    EVEN_M=self.rows_per_shard % cfg.block_m == 0, EVEN_N=self.n % cfg.block_n == 0,
                    EVEN_K=self.k % cfg.block_k == 0, STAGE_K=stage_k, EVEN_STAGE_K=self.k % stage_k == 0,
                    DYNAMIC=self.dynamic,
                    INPUT_PRECISION="tf32" if self.dtype == torch.float32 and torch.backends.cuda.matmul.allow_tf32
                    else "ieee",
                    UPCAST=interpreted and self.dtype == torch.bfloat16,
                    num_warps=cfg.num_warps, num_stages=cfg.num_stages, **FP_FUSION)


def raise_peer_read_timeout(errors: torch.Tensor, *, max_spins: int, rank: int, row_blocks: int,
                            context: str = "") -> None:
    """Raise if a wait of the peer-read GEMM gave up (reads the error slots; synchronises)."""
    peer, row = (int(v) for v in errors.detach().to("cpu").tolist()[:2])
    where = f" in {context}" if context else ""
    if peer:
        raise FlagTimeoutError(
            f"rank {peer - 1}'s shard never became readable for rank {rank}{where}: the peer-read GEMM waited "
            f"{max_spins} polls on its readiness flag, so the output is invalid. Rank {peer - 1} stopped, called a "
            f"different operator, or is slower than HOCKET_TIMEOUT_S.")
    if row:
        src, pid_m = divmod(row - 1, row_blocks)
        raise FlagTimeoutError(
            f"row block {pid_m} of rank {src}'s shard was never staged on rank {rank}{where}: its loader tile did "
            f"not finish within {max_spins} polls (the persistent grid was not resident, or a peer wait failed first).")
