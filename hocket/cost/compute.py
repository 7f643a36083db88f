"""Compute time of matmuls and memory-bound kernels on one device.

Default model (no calibration profile), built from the datasheet and two mechanisms
every tiled GEMM library has:

* **Tiles and waves** (GPUs: ``DeviceSpec.sm_count`` known). The output is cut into
  tiles; each SM computes one tile at a time at ``peak / sm_count * GPU_BASE_EFFICIENCY``
  and a kernel runs ``ceil(tiles / sms)`` waves plus a ramp-up/ramp-down tail of
  ``TAIL_WAVES`` of one wave. A tile also pays ``K_OVERHEAD_STEPS`` of k-depth for its
  prologue and epilogue. The library picks the best of a few tile shapes (smaller tiles
  run less efficiently) and may split K when the output has too few tiles. This is what
  makes row-chunked GEMMs lose: each piece pays its own tail and launch, and a piece
  with few output tiles leaves SMs idle. Constants checked against the 36 bf16 GEMM
  points of the 2xH200 calibration profile (benchmarks/results/calibration/h200x2-nccl-full.json)
  and the 7 calibration sites' compute-alone GEMMs, without using them to scale: level median
  error 6%, bias 0%; and against the profile's five row-chunk series (the same k, n at m from
  64-256 rows up to the whole): the chunking penalty (pieces' summed time over the whole's) is
  within 5% (median) of the measured one. A per-kernel tail of a quarter wave (the earlier
  default) overstated that penalty by 13% (256-row pieces of k=7168, n=8192: model 1.38x,
  measured 1.15x): a persistent tile scheduler starts the next tile as an SM frees up, so a
  kernel loses its partial last wave (counted by ``ceil``) but little ramp beyond it.
* **Vendor gap**: a device's GEMMs run at ``GPU_BASE_EFFICIENCY`` scaled by its published
  maximum achievable matmul FLOPS (``DeviceSpec.matmul_efficiency``) relative to H100's
  (``achievable_scale``): MI300X's library reached 51% of its peak where H100's reached 80%.
* **Roofline**: never faster than moving A, B and C through memory once at
  ``memory_gbps * MEMORY_EFFICIENCY``, plus a launch overhead per kernel.

CPU ranks (``sm_count`` unknown) use a saturating curve ``F / (F + CPU_HALF_GFLOP)`` of
``CPU_BASE_EFFICIENCY * peak`` instead of waves.

With a calibration profile, the ratio measured/model at the profile's GEMM points is
interpolated (inverse distance in log m, log k, log n, same dtype) and applied to the
model, so the shape structure of the model survives and the level is measured.

**Sustained ceiling** (``sustained=True``: steady-state predictions, ``predict(..., steady_state=True)``).
A profile's GEMM grid is timed in short bursts of a few calls; a training loop keeps the GPU busy
for seconds, it reaches its power cap and lowers its clocks until its power is at the cap. Power
grows with the rate of tensor-core work, so the cap is a *throughput ceiling*: a GEMM that runs
faster than it in a burst is held to it, a slower one (small, memory- or tail-bound) keeps its burst
time. 2xH200 (steady compute-alone, benchmarks/results/validation/2026-12-01_measured-rules.md):
four large GEMMs whose bursts run at 740-790 TFLOP/s all ran at 677-694 back to back, while
8192x2048x4096 (650 in either state) and 8192^3 (671 in a burst, 660 back to back) barely moved: one ratio for all
shapes could not say both. The
profile's ``gemm_sustained`` (``hocket calibrate``: the grid's fastest whole GEMM run back to back for
~2 s) gives the ceiling; a GPU GEMM's compute time is at least its flops over it. Memory and launch
parts are unchanged. Without a profile nothing changes: the datasheet level ``GPU_BASE_EFFICIENCY``
was set from sustained figures already (the first 2xH200 profile's large GEMMs). CPU ranks: no change (no
power-capped boost clock is modelled there).

**Pieces run at the whole problem's level** (``level_m``). A pipeline cuts one per-rank GEMM
into row pieces that run back to back; they run under the same sustained clock and power
state as the whole GEMM, and a GEMM library keeps the same tile configuration for them. So a
piece is priced as the wave model's piece (its tail, launch and idle SMs: the chunking
penalty, a mechanism) times the measured/model ratio *of the whole GEMM*, not the ratio
interpolated at the piece's own shape. Ratios read at each piece's shape mix in points
measured in isolation (short kernels hold boost clocks longer: the 2xH200 profile has
1024-row pieces of k=8192, n=8192 at 0.197 ms each and the whole 8192-row GEMM at 1.723 ms,
8.7x not 8x) and neighbouring shapes, which made a GEMM cut in halves look up to 20% cheaper
than the whole (8192x14336x8192 on the 2xH200 calibration: ratio 1.19 whole, 0.95 halves)
and priced savings that no executor can get.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from hocket.cost.calibration import CalibrationView

GPU_BASE_EFFICIENCY = 0.78
"""Sustained tensor-core GEMM throughput over dense peak, at the power cap (cuBLAS bf16 on H200:
737 TFLOP/s on 8192x7168x8192 in the 2xH200 profile benchmarks/results/calibration/h200x2-nccl-full.json,
of 989;
short kernels from idle reach more, which the calibration level absorbs)."""
REFERENCE_MATMUL_EFFICIENCY = 0.803
"""``DeviceSpec.matmul_efficiency`` of the device class ``GPU_BASE_EFFICIENCY`` was set on: H100/H200
SXM (public maximum achievable matmul FLOPS, 794.5 of 989 TFLOP/s). Another device's GEMMs run at
``GPU_BASE_EFFICIENCY`` times its own published figure over this one (``achievable_scale``): the same
library-and-hardware gap a shape search measured there (MI300X 0.511, A100 0.869), not a fit to our runs."""
GPU_TILES = ((128, 256, 1.00), (128, 128, 0.95), (64, 128, 0.88), (64, 64, 0.75))
"""(rows, cols, relative efficiency) of the tile shapes a GEMM library chooses from."""
K_OVERHEAD_STEPS = 256
"""Per-tile prologue/epilogue cost, in k-depth equivalents (filling a 4-stage pipeline of
64-deep k-blocks before the first MMA, plus the epilogue's store of the tile)."""
TAIL_WAVES = 0.05
"""Ramp-up/ramp-down of one kernel beyond its partial last wave, in fractions of one wave."""
SPLIT_K = (1, 2, 4, 8)
GPU_LAUNCH_US = 5.0
"""Host launch + kernel start of one GPU kernel."""
FUSED_GEMM_EFFICIENCY = 0.95
"""Throughput of hocket's persistent tile-fused GEMM (a Triton kernel: one tile configuration,
no split-K, flag checks in its loop) over the vendor library's GEMM of the same shape, which is
what the wave model and the profile's GEMM points describe. Measured on H200 with tensor-descriptor
loads and a balanced last wave (``hocket.kernels.config.fused_config``; the "fused GEMM / cuBLAS" column
of the 8 offload cells in benchmarks/results/h200/2026-11-30_offload-defaults.md): 92-97%, median 95.5%.
With pointer loads it was 0.9 (83-96%); at 0.95 the 2xH200 tile_fused lines of the four large cases are
priced within -3.0% to +1.4% (at 0.9: +2.3% to +6.9%; benchmarks/results/validation/2026-12-01_measured-rules.md)
and the planner-regret tables do not move. The cost model charges every
tile_fused kernel's GEMM work at this fraction of the vendor rate."""
FUSED_BLOCK_M = 128
"""Rows of one output tile of hocket's tile-fused kernels (``hocket.kernels.config.default_config``:
128 for bf16, fp16 and fp32): flag groups and chunks are whole row blocks of it."""
CPU_BASE_EFFICIENCY = 0.6
CPU_HALF_GFLOP = 0.02
"""CPU GEMM size (GFLOP) at which half the base efficiency is reached (threads, packing)."""
CPU_LAUNCH_US = 15.0
"""torch op dispatch + thread-pool wake-up on a CPU rank."""
MEMORY_EFFICIENCY = 0.85
"""Achievable fraction of datasheet memory bandwidth."""
DEFAULT_CPU_MEMORY_GBPS = 20.0
"""Used when a CPU rank's memory bandwidth is unknown."""

_FALLBACK_DTYPES = {
    "float16": ("bfloat16",),
    "bfloat16": ("float16",),
    "float8_e4m3fn": ("float8_e5m2", "bfloat16", "float16"),
    "float8_e5m2": ("float8_e4m3fn", "bfloat16", "float16"),
}


DEFAULT_CPU_PEAK_TFLOPS = {"float32": 0.1, "bfloat16": 0.05, "float16": 0.02, "float64": 0.05}
"""A CPU rank whose preset leaves the peak unknown: one to a few cores of AVX2/AVX-512 FMA
(fp32 ~100 GFLOP/s; bf16/fp16 matmuls on CPUs without AMX convert and run slower).
A calibration profile replaces the level; these only keep the model finite."""


def peak_tflops(device, dtype: str) -> float:
    """Dense peak TFLOP/s of ``device`` for ``dtype``; fp16/bf16 stand in for each other,
    fp8 falls back to bf16 (a conservative lower bound); a CPU rank with no figure uses
    ``DEFAULT_CPU_PEAK_TFLOPS``. Otherwise unknown -> ValueError."""
    value = device.peak(dtype)
    if value:
        return float(value)
    for alt in _FALLBACK_DTYPES.get(dtype, ()):
        value = device.peak(alt)
        if value:
            return float(value)
    if device.is_cpu and dtype in DEFAULT_CPU_PEAK_TFLOPS:
        return DEFAULT_CPU_PEAK_TFLOPS[dtype]
    known = sorted(k for k, v in device.peak_tflops.items() if v)
    raise ValueError(f"device {device.model!r} has no peak TFLOP/s for dtype={dtype!r} (known: {known}); "
                     f"add peak_tflops.{dtype} to the cluster preset or use another dtype")


def achievable_scale(device) -> float:
    """How much of ``GPU_BASE_EFFICIENCY`` this GPU's library GEMMs reach: its published
    ``matmul_efficiency`` over ``REFERENCE_MATMUL_EFFICIENCY`` (1.0 when unknown, or a CPU rank)."""
    efficiency = getattr(device, "matmul_efficiency", None)
    if device.sm_count is None or not efficiency:
        return 1.0
    return float(efficiency) / REFERENCE_MATMUL_EFFICIENCY


def achievable_tflops(device, dtype: str) -> float:
    """The TFLOP/s the wave model builds on: the dense peak times ``achievable_scale`` (before
    ``GPU_BASE_EFFICIENCY``, tiles and waves). What ranks devices of a mixed cluster by speed."""
    return peak_tflops(device, dtype) * achievable_scale(device)


def launch_ms(device) -> float:
    return (CPU_LAUNCH_US if device.sm_count is None else GPU_LAUNCH_US) / 1e3


def memory_gbps(device) -> float:
    raw = device.memory_gbps or DEFAULT_CPU_MEMORY_GBPS
    return raw * MEMORY_EFFICIENCY


def memory_ms(device, nbytes: float, *, launches: int = 1) -> float:
    """A memory-bound kernel (elementwise, norm, reduction) moving ``nbytes``."""
    if nbytes < 0 or not math.isfinite(nbytes):
        raise ValueError(f"nbytes={nbytes!r} must be finite and >= 0")
    return nbytes / (memory_gbps(device) * 1e6) + launches * launch_ms(device)


@dataclass(frozen=True, kw_only=True)
class GemmTime:
    """Time of one GEMM kernel and what bounds it."""

    ms: float
    compute_ms: float
    memory_ms: float
    launch_ms: float
    tflops: float
    bound: str  # "compute" | "memory"


def _gpu_model_ms(device, m: int, k: int, n: int, dtype: str, sms: int) -> float:
    return _waves_ms(achievable_tflops(device, dtype), device.sm_count, memory_gbps(device), m, k, n, sms)


def gpu_grid(device, *, m: int, k: int, n: int, dtype: str) -> int:
    """Thread blocks of the grid the wave model picks for ``[m, k] @ [k, n]`` on all of ``device``'s
    SMs (tiles times split-K parts): how many waves it runs and whether its last one leaves SMs idle."""
    if device.sm_count is None:
        return 0
    return _waves(achievable_tflops(device, dtype), device.sm_count, memory_gbps(device), m, k, n,
                  device.sm_count)[1]


def _waves_ms(peak: float, sm_count: int, mem_gbps: float, m: int, k: int, n: int, sms: int) -> float:
    return _waves(peak, sm_count, mem_gbps, m, k, n, sms)[0]


@functools.lru_cache(maxsize=1 << 16)
def _waves(peak: float, sm_count: int, mem_gbps: float, m: int, k: int, n: int, sms: int) -> tuple[float, int]:
    """The wave model: (ms, blocks of the fastest grid); a pure function of numbers, memoised:
    planners price the same pieces often."""
    per_sm_flops_per_ms = peak * 1e9 * GPU_BASE_EFFICIENCY / sm_count
    best, grid = math.inf, 0
    for rows, cols, tile_eff in GPU_TILES:
        tiles = math.ceil(m / rows) * math.ceil(n / cols)
        for split in SPLIT_K:
            if split > 1 and tiles * split > sms:
                break
            k_part = math.ceil(k / split)
            tile_ms = 2.0 * rows * cols * (k_part + K_OVERHEAD_STEPS) / (per_sm_flops_per_ms * tile_eff)
            waves = math.ceil(tiles * split / sms)
            t = (waves + TAIL_WAVES) * tile_ms
            if split > 1:  # partial results written and reduced through memory
                t += 3.0 * split * m * n * 4 / (mem_gbps * 1e6)
            if t < best:
                best, grid = t, tiles * split
    return best, grid


def _cpu_model_ms(device, m: int, k: int, n: int, dtype: str) -> float:
    gflop = 2.0 * m * k * n / 1e9
    efficiency = CPU_BASE_EFFICIENCY * gflop / (gflop + CPU_HALF_GFLOP)
    return gflop / (peak_tflops(device, dtype) * efficiency)  # GFLOP / TFLOP/s = ms


def gemm_time(device, *, m: int, k: int, n: int, dtype: str, itemsize: int,
              calibration: CalibrationView | None = None, sms: int | None = None,
              launches: int = 1, level_m: int | None = None, sustained: bool = False) -> GemmTime:
    """One ``[m, k] @ [k, n]`` kernel on ``device``.

    ``sms``: SMs the kernel may use (fewer when an SM-driven transfer holds some);
    ``launches``: kernel launches paid (0 inside a persistent kernel);
    ``level_m``: rows of the whole GEMM this kernel is a row piece of: the calibration ratio
    is read at ``(level_m, k, n)`` (see the module doc); None reads it at ``m``;
    ``sustained``: the kernel runs in a loop that keeps the GPU busy (steady state): a GPU's
    calibrated compute time is at least its flops at the profile's sustained ceiling (module doc).
    """
    for name, value in (("m", m), ("k", k), ("n", n)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"gemm {name}={value!r} must be a positive int")
    if level_m is not None and (isinstance(level_m, bool) or not isinstance(level_m, int) or level_m < 1):
        raise ValueError(f"gemm level_m={level_m!r} must be a positive int (the whole GEMM's rows) or None")
    if device.sm_count is None:
        compute = _cpu_model_ms(device, m, k, n, dtype)
    else:
        usable = device.sm_count if sms is None else max(1, min(int(sms), device.sm_count))
        compute = _gpu_model_ms(device, m, k, n, dtype, usable)
    memory = (m * k + k * n + m * n) * itemsize / (memory_gbps(device) * 1e6)
    launch = launches * launch_ms(device)
    total = max(compute, memory) + launch
    if calibration is not None:
        ratio = calibration.gemm_ratio(m=level_m or m, k=k, n=n, dtype=dtype, model_ms=lambda mm, kk, nn: _model_total_ms(
            device, mm, kk, nn, dtype, itemsize))
        compute, memory, launch, total = compute * ratio, memory * ratio, launch * ratio, total * ratio
        ceiling = calibration.gemm_sustained_tflops() if sustained and device.sm_count is not None else None
        if ceiling is not None:
            compute = max(compute, 2.0 * m * k * n / (ceiling * 1e9))
            total = max(compute, memory) + launch
    return GemmTime(ms=total, compute_ms=compute, memory_ms=memory, launch_ms=launch,
                    tflops=2.0 * m * k * n / (total * 1e9), bound="compute" if compute >= memory else "memory")


def _model_total_ms(device, m: int, k: int, n: int, dtype: str, itemsize: int) -> float:
    """The uncalibrated model of one whole-device kernel (what calibration ratios compare to)."""
    return gemm_time(device, m=m, k=k, n=n, dtype=dtype, itemsize=itemsize).ms


def gemm_ms(device, *, m: int, k: int, n: int, dtype: str, itemsize: int,
            calibration: CalibrationView | None = None, sms: int | None = None, launches: int = 1,
            level_m: int | None = None, sustained: bool = False) -> float:
    return gemm_time(device, m=m, k=k, n=n, dtype=dtype, itemsize=itemsize, calibration=calibration,
                     sms=sms, launches=launches, level_m=level_m, sustained=sustained).ms
