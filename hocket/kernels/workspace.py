"""Device resources of the tile-fused GEMMs, allocated once per shape class (no Triton needed).

A workspace owns the schedule table, the flags (chunk flags for the consumer, group
flags and counters for the producer), the error buffer, the K-split partials where edge
tiles are split, and the set of argument signatures whose kernels were compiled and loaded
by ``hocket.kernels.warmup``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from hocket import env
from hocket.kernels.config import FP_FUSION, TileConfig, default_config, persistent_programs
from hocket.kernels.errors import error_buffer, spins_for_timeout
from hocket.kernels.schedule import ConsumerSchedule, ProducerSchedule, consumer_schedule, producer_schedule

CPU_PROGRAMS = 4
"""Persistent grid on the CPU (Triton's interpreter): several programs, so the
persistent loop's striding is exercised."""

MAX_ELEMENTS = 2**31 - 1
"""The kernels index with 32-bit offsets."""


def _grid(device: torch.device, num_tiles: int, num_programs: int | None) -> int:
    if num_programs is None:
        if device.type == "cuda":
            num_programs = persistent_programs(torch.cuda.get_device_properties(device).multi_processor_count)
        else:
            num_programs = CPU_PROGRAMS
    if not isinstance(num_programs, int) or isinstance(num_programs, bool) or num_programs < 1:
        raise ValueError(f"num_programs={num_programs!r} must be an int >= 1 (the persistent grid size)")
    return min(num_tiles, num_programs)


def _max_spins(max_spins: int | None) -> int:
    if max_spins is None:
        return spins_for_timeout(env.wait_timeout_s())
    if not isinstance(max_spins, int) or isinstance(max_spins, bool) or max_spins < 1:
        raise ValueError(f"max_spins={max_spins!r} must be an int >= 1 (polls before a wait gives up)")
    return max_spins


def _narrow(cfg: TileConfig) -> int | None:
    """Narrow tiles only when they are narrower than the full tiles."""
    return cfg.narrow_n if cfg.narrow_n < cfg.block_n else None


def _slices(splits: int, k: int, cfg: TileConfig) -> int:
    """``splits`` K slices, at most one per ``block_k`` step of ``k``."""
    if not isinstance(splits, int) or isinstance(splits, bool) or splits < 1:
        raise ValueError(f"splits={splits!r} must be an int >= 1 (K slices of each edge tile; 1: none)")
    return max(1, min(splits, -(-k // cfg.block_k)))


def signature(*tensors: torch.Tensor) -> tuple:
    """What Triton specialises a launch on: shapes, strides, dtypes, 16-byte alignment."""
    return tuple((tuple(t.shape), tuple(t.stride()), t.dtype, t.data_ptr() % 16 == 0, str(t.device)) for t in tensors)


class _Workspace:
    kind = ""

    def __init__(self, *, m: int, n: int, k: int, dtype: torch.dtype, device: torch.device | str,
                 config: TileConfig | None, table: list[int], num_tiles: int, num_programs: int | None,
                 max_spins: int | None) -> None:
        self.device = torch.device(device)
        if self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        for name, value in (("m*k", m * k), ("k*n", k * n), ("m*n", m * n)):
            if value > MAX_ELEMENTS:
                raise ValueError(f"{name}={value} elements is above {MAX_ELEMENTS}: the tile-fused GEMMs use "
                                 f"32-bit offsets; split the problem along m")
        self.m, self.n, self.k, self.dtype = m, n, k, dtype
        self.config = config or default_config(dtype)
        self.table = torch.tensor(table, dtype=torch.int32, device=self.device)
        self.num_tiles = num_tiles
        self.num_programs = _grid(self.device, num_tiles, num_programs)
        self.max_spins = _max_spins(max_spins)
        self.errors = error_buffer(self.device)
        self.warmed: set[tuple] = set()
        split_table = self.schedule.split_table()
        if split_table is None:
            self.split_table = self.partials = self.split_counters = None
        else:  # K slices of edge tiles: fp32 partials (one row per slice) and one arrival counter per tile
            cfg = self.config
            floats = self.schedule.split_partials * cfg.block_m * cfg.block_n
            if floats > MAX_ELEMENTS:
                raise ValueError(f"split_rows cut {self.schedule.split_tiles} tiles into {self.schedule.split_partials} "
                                 f"slices: {floats} fp32 partials, above the kernels' 32-bit offsets ({MAX_ELEMENTS}); "
                                 f"split fewer rows (the exposed edge only) or use fewer splits")
            self.split_table = torch.tensor(split_table, dtype=torch.int32, device=self.device)
            self.partials = torch.empty(self.schedule.split_partials, cfg.block_m * cfg.block_n,
                                        dtype=torch.float32, device=self.device)
            self.split_counters = torch.zeros(self.schedule.split_tiles, dtype=torch.int32, device=self.device)

    def split_args(self) -> tuple:
        """The launch's split-table, partials and counters arguments (Nones when no tile is split)."""
        return self.split_table, self.partials, self.split_counters

    def reset_splits(self) -> None:
        """Zero the split tiles' arrival counters (each launch leaves them at zero; this covers an
        interrupted one)."""
        if self.split_counters is not None:
            self.split_counters.zero_()

    def check_operands(self, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> None:
        """Clear errors for operands that do not match this workspace's shape class."""
        for name, t in (("A", a), ("B", b), ("out", out)):
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
            if t.device != self.device:
                raise ValueError(f"{name} is on {t.device} but the {self.kind} workspace is on {self.device}; "
                                 f"move it with .to({str(self.device)!r})")
            if t.dtype != self.dtype:
                raise ValueError(f"{name}.dtype={t.dtype} but the {self.kind} workspace was built for {self.dtype}")
        for name, t, shape in (("A", a, (self.m, self.k)), ("B", b, (self.k, self.n)), ("out", out, (self.m, self.n))):
            if tuple(t.shape) != shape:
                raise ValueError(f"{name}.shape={tuple(t.shape)} but the {self.kind} workspace expects {shape} "
                                 f"(m={self.m}, k={self.k}, n={self.n}); build a workspace for this shape")
        if out.stride(1) != 1 or out.stride(0) != self.n:
            raise ValueError(f"out must be a contiguous row-major [{self.m}, {self.n}] tensor (stride {out.stride()}); "
                             f"groups and chunks are contiguous row ranges of it")

    def launch_flags(self, *, interpreted: bool) -> dict:
        """Constexprs and launch options of this shape class (``interpreted``: Triton's CPU
        interpreter runs the kernel; see ``tile_accumulate``'s UPCAST)."""
        cfg = self.config
        narrow_n = self.schedule.narrow_block_n or 0
        return dict(BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k, NARROW_N=narrow_n,
                    EVEN_M=self.m % cfg.block_m == 0, EVEN_N=self.n % cfg.block_n == 0,
                    EVEN_NARROW_N=narrow_n > 0 and self.n % narrow_n == 0,
                    EVEN_K=self.k % cfg.block_k == 0,
                    INPUT_PRECISION="tf32" if self.dtype == torch.float32 and torch.backends.cuda.matmul.allow_tf32
                    else "ieee",
                    UPCAST=interpreted and self.dtype == torch.bfloat16,
                    SPLIT=self.split_table is not None, PART_STRIDE=cfg.block_m * cfg.block_n,
                    num_warps=cfg.num_warps, num_stages=cfg.num_stages, **FP_FUSION)


class ConsumerWorkspace(_Workspace):
    """Resources of one consumer GEMM shape class: chunk flags (int32, 1 = landed).

    ``narrow_rows``: the last rows of A to arrive whose tiles are ``config.narrow_block_n``
    wide (0: none), so the GEMM ends soon after the last chunk lands. ``split_rows`` and
    ``splits``: the last rows to arrive whose tiles are cut along K into ``splits`` slices
    (at most one per ``block_k`` step), so the drain takes a fraction of one K loop.
    """

    kind = "consumer"

    def __init__(self, *, m: int, n: int, k: int, dtype: torch.dtype, device: torch.device | str,
                 chunk_offsets: Sequence[int], arrival: Sequence[int] | None = None,
                 config: TileConfig | None = None, num_programs: int | None = None,
                 max_spins: int | None = None, narrow_rows: int = 0, split_rows: int = 0, splits: int = 1) -> None:
        cfg = config or default_config(dtype)
        self.schedule: ConsumerSchedule = consumer_schedule(
            m=m, n=n, block_m=cfg.block_m, block_n=cfg.block_n, chunk_offsets=chunk_offsets,
            arrival=arrival, group_m=cfg.group_m, narrow_block_n=_narrow(cfg), narrow_rows=narrow_rows,
            split_rows=split_rows, splits=_slices(splits, k, cfg))
        super().__init__(m=m, n=n, k=k, dtype=dtype, device=device, config=cfg, table=self.schedule.table(),
                         num_tiles=len(self.schedule.tiles), num_programs=num_programs, max_spins=max_spins)
        self.flags = torch.zeros(self.schedule.num_chunks, dtype=torch.int32, device=self.device)


class ProducerWorkspace(_Workspace):
    """Resources of one producer GEMM shape class: group counters and group flags.

    Groups: ``groups`` even ones, or ``group_offsets`` (e.g. ``ramp_row_offsets``).
    ``narrow_rows``: the first output rows whose tiles are ``config.narrow_block_n`` wide
    (0: none), so the first group is ready sooner. ``split_rows`` and ``splits``: the first
    output rows whose tiles are cut along K into ``splits`` slices (at most one per
    ``block_k`` step), so the first group is ready after a fraction of one K loop.
    """

    kind = "producer"

    def __init__(self, *, m: int, n: int, k: int, dtype: torch.dtype, device: torch.device | str,
                 groups: int | None = None, group_offsets: Sequence[int] | None = None,
                 config: TileConfig | None = None, num_programs: int | None = None,
                 max_spins: int | None = None, narrow_rows: int = 0, split_rows: int = 0, splits: int = 1) -> None:
        cfg = config or default_config(dtype)
        self.schedule: ProducerSchedule = producer_schedule(
            m=m, n=n, block_m=cfg.block_m, block_n=cfg.block_n, groups=groups, group_offsets=group_offsets,
            group_m=cfg.group_m, narrow_block_n=_narrow(cfg), narrow_rows=narrow_rows, split_rows=split_rows,
            splits=_slices(splits, k, cfg))
        super().__init__(m=m, n=n, k=k, dtype=dtype, device=device, config=cfg, table=self.schedule.table(),
                         num_tiles=len(self.schedule.tiles), num_programs=num_programs, max_spins=max_spins)
        self.flags = torch.zeros(self.schedule.num_groups, dtype=torch.int32, device=self.device)
        self.counters = torch.zeros(self.schedule.num_groups, dtype=torch.int32, device=self.device)
