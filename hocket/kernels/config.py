"""Tile configuration of the tile-fused GEMMs (plain Python, no Triton needed)."""

from __future__ import annotations

from dataclasses import dataclass, replace

_WARPS = (1, 2, 4, 8, 16)

FP_FUSION = {"enable_fp_fusion": True}
"""A launch option every hocket kernel passes. Triton up to 3.9 fuses ``a * b + c`` into FMA unless told
otherwise (3.9 warns that 3.10 will stop); the kernels were tuned and checked with fusion, so they ask for it
rather than inherit a default that moves between Triton versions (or ``TRITON_DEFAULT_FP_FUSION``)."""


def _power_of_two(name: str, value: object, lowest: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < lowest or value & (value - 1):
        raise ValueError(f"TileConfig.{name}={value!r} must be a power of two >= {lowest}")


@dataclass(frozen=True, kw_only=True)
class TileConfig:
    """Block sizes and launch shape of one GEMM tile (``tl.dot`` needs blocks >= 16)."""

    block_m: int = 128
    block_n: int = 256
    block_k: int = 64
    group_m: int = 8
    """row blocks that share one sweep over B's columns (L2 reuse of B)."""
    num_warps: int = 8
    num_stages: int = 3
    narrow_block_n: int | None = None
    """width of the narrow tiles a schedule may use at the pipeline's edge (fill/drain);
    None: ``block_n // 2``, at most 64 and at least 16. Equal to ``block_n``: no narrow tiles."""
    tma: bool = False
    """load operand tiles through tensor descriptors (Hopper's Tensor Memory Accelerator)
    instead of pointers; a launch whose operands a descriptor cannot address (rows not
    16-byte aligned) falls back to pointers (``hocket.kernels.descriptors``)."""

    def __post_init__(self) -> None:
        if not isinstance(self.tma, bool):
            raise ValueError(f"TileConfig.tma={self.tma!r} must be a bool (True: tensor-descriptor loads)")
        for name in ("block_m", "block_n", "block_k"):
            _power_of_two(name, getattr(self, name), 16)
        if self.narrow_block_n is not None:
            _power_of_two("narrow_block_n", self.narrow_block_n, 16)
            if self.narrow_block_n > self.block_n:
                raise ValueError(f"TileConfig.narrow_block_n={self.narrow_block_n} must be <= block_n={self.block_n}")
        if not isinstance(self.group_m, int) or isinstance(self.group_m, bool) or self.group_m < 1:
            raise ValueError(f"TileConfig.group_m={self.group_m!r} must be an int >= 1")
        if self.num_warps not in _WARPS:
            raise ValueError(f"TileConfig.num_warps={self.num_warps!r} must be one of {_WARPS}")
        if not isinstance(self.num_stages, int) or isinstance(self.num_stages, bool) or self.num_stages < 1:
            raise ValueError(f"TileConfig.num_stages={self.num_stages!r} must be an int >= 1")

    @property
    def narrow_n(self) -> int:
        """The narrow tiles' width in effect."""
        return self.narrow_block_n if self.narrow_block_n is not None else max(16, min(64, self.block_n // 2))

    def label(self) -> str:
        narrow = "" if self.narrow_block_n is None else f"/n{self.narrow_block_n}"
        tma = "/tma" if self.tma else ""
        return (f"{self.block_m}x{self.block_n}x{self.block_k}/g{self.group_m}/w{self.num_warps}/s{self.num_stages}"
                f"{narrow}{tma}")


SHARED_MEMORY_BYTES = 227 * 1024
"""Shared memory one thread block may use on an H100/H200 (sm_90)."""


def shared_memory_bytes(cfg: TileConfig, itemsize: int) -> int:
    """Shared memory of ``cfg``'s operand pipeline: ``num_stages`` buffers of an A block
    ``[block_m, block_k]`` and a B block ``[block_k, block_n]`` of ``itemsize``-byte elements
    (Triton's own estimate; the epilogue reuses these buffers)."""
    if not isinstance(itemsize, int) or isinstance(itemsize, bool) or itemsize < 1:
        raise ValueError(f"itemsize={itemsize!r} must be a positive int (bytes per element, e.g. 2 for bfloat16)")
    return cfg.num_stages * (cfg.block_m * cfg.block_k + cfg.block_k * cfg.block_n) * itemsize


# Every config below fits SHARED_MEMORY_BYTES at 2-byte elements.
BF16_CONFIGS = (
    TileConfig(block_m=128, block_n=256, block_k=64, num_warps=8, num_stages=3),
    TileConfig(block_m=128, block_n=256, block_k=64, num_warps=8, num_stages=4),
    TileConfig(block_m=256, block_n=128, block_k=64, num_warps=8, num_stages=3),
    TileConfig(block_m=128, block_n=128, block_k=64, num_warps=8, num_stages=4),
    TileConfig(block_m=128, block_n=128, block_k=64, num_warps=4, num_stages=4),
    TileConfig(block_m=64, block_n=256, block_k=64, num_warps=4, num_stages=4),
)
"""The last one has 64-row blocks: pieces and flag groups can be 64 rows, so the exposed
first group (to host) or last chunk (from host) costs half a 128-row block's latency."""
WIDE_BF16 = TileConfig(block_m=128, block_n=256, block_k=64, num_warps=8, num_stages=4, narrow_block_n=128)
"""``config_for``'s choice for 16-bit outputs at least 256 wide: 128x256 tiles, four stages
(three: 8-10% slower on an H200), half-width narrow tiles (a last wave filled with 128x128
tiles; 64-wide ones cost nearly as much as 128-wide ones there)."""
NARROW_BF16 = TileConfig(block_m=128, block_n=128, block_k=64, num_warps=4, num_stages=4)
"""``config_for``'s choice for 16-bit outputs under 256 wide."""
BF16_CONFIGS = BF16_CONFIGS + (WIDE_BF16,)
FP32_CONFIGS = (
    TileConfig(block_m=128, block_n=128, block_k=32, num_warps=8, num_stages=3),
    TileConfig(block_m=64, block_n=128, block_k=32, num_warps=4, num_stages=3),
)


def default_config(dtype: object) -> TileConfig:
    """The first candidate for ``dtype`` (a torch dtype or hocket dtype name)."""
    name = str(dtype).replace("torch.", "")
    if name in ("bfloat16", "float16"):
        return BF16_CONFIGS[0]
    if name == "float32":
        return FP32_CONFIGS[0]
    raise ValueError(f"dtype={dtype!r} has no tile config; the tile-fused GEMMs take bfloat16, float16 or float32")


def config_for(m: int, n: int, k: int, dtype: object) -> TileConfig:
    """The tile config the operators use for ``C[m, n] = A[m, k] @ B[k, n]`` in ``dtype``.

    Rule (measured on an H200, ``sweep_tile_configs.py`` in benchmarks/results/h200/2026-12-01_probes.md):
    16-bit: ``WIDE_BF16`` (128x256 tiles, 4 stages, 128-wide narrow tiles) when ``n >= 256``,
    else ``NARROW_BF16`` (a 256-wide tile would be mostly padding); float32:
    ``FP32_CONFIGS[0]``. Row blocks stay 128 rows (the cost model's flag groups assume it);
    ``m`` and ``k`` are checked but do not change the choice: an unbalanced last wave is
    filled by narrow tiles (``hocket.kernels.schedule.tail_narrow_rows``), not by another
    config. ``default_config`` is kept for callers that do not know the shape.
    """
    for name, value in (("m", m), ("n", n), ("k", k)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name}={value!r} must be a positive int (a GEMM dimension)")
    name = str(dtype).replace("torch.", "")
    if name in ("bfloat16", "float16"):
        return WIDE_BF16 if n >= WIDE_BF16.block_n else NARROW_BF16
    if name == "float32":
        return FP32_CONFIGS[0]
    raise ValueError(f"dtype={dtype!r} has no tile config; the tile-fused GEMMs take bfloat16, float16 or float32")


def fused_config(m: int, n: int, k: int, dtype: object) -> TileConfig:
    """The tile config hocket's operators give the tile-fused GEMMs: ``config_for``'s tiles, loaded
    through tensor descriptors (``tma=True``) for 16-bit dtypes. On an H200 descriptors lifted the
    fused GEMM alone from 79-93% to 91-97% of cuBLAS on the eight offload cells
    (benchmarks/results/h200/2026-11-30_offload-defaults.md, ``probe_fused_tma.py`` in
    benchmarks/results/h200/2026-12-01_probes.md); float32 keeps pointer loads (descriptors not measured there)."""
    cfg = config_for(m, n, k, dtype)
    return replace(cfg, tma=True) if str(dtype).replace("torch.", "") in ("bfloat16", "float16") else cfg


def candidate_configs(dtype: object) -> tuple[TileConfig, ...]:
    """Configs a benchmark may try (flags pre-set) before choosing one for a shape."""
    name = str(dtype).replace("torch.", "")
    return FP32_CONFIGS if name == "float32" else BF16_CONFIGS


def persistent_programs(num_sms: int, *, reserve_sms: int = 2) -> int:
    """Grid size of a persistent spinning kernel: below the SM count, leaving ``reserve_sms``
    free for the flag kernels and any SM-driven transfer (docs/transports.md)."""
    if not isinstance(num_sms, int) or num_sms < 2:
        raise ValueError(f"num_sms={num_sms!r} must be an int >= 2 (a spinning kernel must leave one SM free)")
    if not isinstance(reserve_sms, int) or not 1 <= reserve_sms < num_sms:
        raise ValueError(f"reserve_sms={reserve_sms!r} must be an int in [1, num_sms={num_sms})")
    return num_sms - reserve_sms
