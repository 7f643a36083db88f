"""Contention: how much a GEMM and a transfer slow each other when they overlap.

Each transfer kind has a *mechanism*; a calibration profile's measured factors replace
the defaults below (the SM share stays a mechanism, scaled from the profile's budget):

* ``sm_collective``/``sm_p2p`` (NCCL/RCCL kernels): the transfer holds ``comm_sms`` SMs, first
  the ones a GEMM with fewer tiles than SMs leaves idle (:func:`sms_left_to_gemm`), so the
  GEMM runs its waves on the rest (recomputed through the wave model, so a GEMM of
  exactly one wave can double); both also share memory bandwidth and the power budget.
* ``copy_engine`` (DMA through symmetric memory): no SMs and a small share of HBM; it raises
  power, so clocks drop a little. Measured on 2xH200 (44 lease profiles, DMA into the peer's
  symmetric memory beside a GEMM): the copy x0.95-0.99, the GEMM x1.00-1.06.
* ``host_link`` (PCIe copies to/from pinned host memory): a small share of HBM, little effect.
* ``cpu_collective`` (gloo on CPU ranks): the transfer's copies run on the same cores as
  the GEMM threads; the slowdown grows as fewer cores are left per rank.

Memory share of a transfer = (bytes it moves through device memory per ms, read at the
sender plus written at the receiver) / (device memory bandwidth).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hocket.cost.calibration import CalibrationView
from hocket.cost.compute import GPU_TILES

TRANSFER_KINDS = ("sm_collective", "sm_p2p", "copy_engine", "host_link", "cpu_collective")
SM_KINDS = ("sm_collective", "sm_p2p")
"""Transfers driven by SMs (NCCL/RCCL collectives and P2P kernels)."""

MEMORY_SENSITIVITY = {"sm_collective": 0.3, "sm_p2p": 0.3, "copy_engine": 0.0, "host_link": 0.5}
"""GEMM slowdown per unit of memory share taken by the transfer, on top of the power term below
(SM-driven copies' SM share is counted separately, through the wave model). Set so the defaults
match the 2xH200 calibrations: GEMM x1.07-1.08 beside NCCL, ~1.0 beside PCIe, and beside a
copy-engine DMA copy into a peer's symmetric memory x1.00-1.06 (median 1.03 over 44 lease
profiles), which the power term alone gives at NVLink rate (x1.05-1.065 at 300-380 GB/s), so 0
here. The first profiles (benchmarks/results/calibration/h200x2-nccl-full.json)
timed a cross-process ``copy_`` instead and read x1.27; ``hocket.hardware.profile`` ignores
that part of them (benchmarks/results/validation/2026-12-01_measured-rules.md)."""
POWER_PJ_PER_BYTE = 60.0
"""Energy of one byte moved (HBM read + write, link SerDes, L2); with the device's power
limit this gives the clock loss of a GEMM that runs at its power cap."""
TRANSFER_SENSITIVITY = {"sm_collective": 14.0, "sm_p2p": 4.5, "copy_engine": 0.0, "host_link": 0.0}
"""An SM-driven transfer beside a running GEMM slows by ``1 + sensitivity * memory share``: NCCL's
CTAs get SM time only between the GEMM's tiles, in proportion to how much of the memory system
the transfer needs (a link-bound transfer at 25 GB/s barely notices the GEMM). Set so that at
full NVLink rate on 2xH200 the factors match that calibration: 2.6x for NCCL collectives (memory
share ~0.11), 1.6x for NCCL P2P (~0.14). A copy engine's DMA copy is not stretched (x0.95-0.99
on every 2xH200 lease profile; the x3.1 of the first profiles timed a cross-process ``copy_``
that synchronised both devices' streams), nor a host copy. A concurrent transfer can still
cost more than it hides: an NCCL pipeline beside full-grid GEMMs does (see below)."""
MAX_TRANSFER_SLOWDOWN = 4.0
SM_STARVED_SLOWDOWN = 20.0
"""Cap of the starvation factor below (keeps every rate finite).

An SM-driven transfer (NCCL kernel) beside GEMMs whose grids fill every SM gets SMs only as
single CTA slots free up between the GEMM's tiles (the block scheduler keeps dispatching the
running GEMM's CTAs, and the next GEMM on the same stream follows without a gap): it runs at
about one SM's copy throughput (``comm.PER_SM_COPY_GBPS``), so its slowdown is its solo rate
over that, and the GEMMs lose no SMs to it. A fast link starves (2xH200 NVLink: an NCCL
all-gather beside a 1.33 ms GEMM x3.7-4.0, ending with the GEMM, GEMM x1.02-1.09,
benchmarks/results/validation/2026-12-01_measured-rules.md; chunked and ring pipelines over NCCL ran as long as
sequential or longer), a slow one does not (NCCL through host memory at ~25 GB/s needs about
one SM: chunked(4) beat sequential by 12-15% in the same runs). Capped persistent kernels
(tile_fused beside an SM transport) and GEMMs with fewer tiles than SMs leave SMs free, and
the usual factors apply."""
REPLAY_NCCL_CTAS = {"sm_collective": 24, "sm_p2p": 16}
"""CTAs (one SM each) of an NCCL kernel over a fast intra-node link (``FAST_LINK_GBPS``) when the plan
sets no SM budget: the grids of 2xH200 NVLink's all-gather/reduce-scatter (24x544 threads) and
send/recv (16x640) kernels in the kernel timelines of benchmarks/results/validation/2026-12-01_measured-rules.md.
Replayed pricing only
(``held_gemm_sms``); eager prices keep ``comm.DEFAULT_COMM_SMS`` inside the calibrated factor."""
FAST_LINK_GBPS = 100.0
"""Per-direction link rate from which NCCL runs ``REPLAY_NCCL_CTAS`` (slower links: fewer channels)."""
HOPPER_MODELS = ("H100", "H200", "H800", "H20", "GH200")


def gemm_cluster_sms(device) -> int:
    """SMs of one CTA cluster of the device's library GEMMs: cuBLAS's Hopper kernels (nvjet) launch
    2-CTA clusters on the two SMs of a TPC (2xH200 timelines: grid [2, 66, 1], 213 KB shared memory per CTA, so
    no other CTA fits beside one); older GPUs and other vendors run single CTAs."""
    if device.vendor == "nvidia" and any(device.model.startswith(m) for m in HOPPER_MODELS):
        return 2
    return 1


def persistent_ctas(rows: int, n: int, sm_count: int) -> int:
    """CTAs of a library GEMM of ``rows`` x ``n`` outputs on a device of ``sm_count`` SMs: a persistent
    grid of at most one CTA per SM, which takes smaller tiles (``compute.GPU_TILES[-1]``) rather than
    leave SMs idle (2xH200 timelines: 1024x1536 outputs, 48 tiles of 128x256, ran 128 CTAs of 96x128)."""
    tile_rows, tile_cols, _ = GPU_TILES[-1]
    return min(sm_count, math.ceil(max(rows, 1) / tile_rows) * math.ceil(max(n, 1) / tile_cols))


def held_gemm_sms(rows: int, n: int, device, transfer_ctas: int) -> int:
    """SMs a GEMM of ``rows`` x ``n`` outputs runs on when it launches beside an SM-driven transfer of
    ``transfer_ctas`` CTAs that already holds them: each such CTA idles its whole cluster slot
    (``gemm_cluster_sms``), and the GEMM's persistent grid (``persistent_ctas``) takes the rest, after
    the SMs it leaves idle anyway."""
    blocked = min(device.sm_count - 1, transfer_ctas * gemm_cluster_sms(device))
    idle = device.sm_count - persistent_ctas(rows, n, device.sm_count)
    return max(1, device.sm_count - max(0, blocked - idle))


CPU_CONTENTION_PER_THREAD = 1.0
"""CPU ranks: busy transfer threads per rank competing with the GEMM threads."""
DEFAULT_CPU_CORES_PER_RANK = 1.0


@dataclass(frozen=True, kw_only=True)
class Contention:
    """Slowdown factors (>= 1) of a GEMM beside a transfer and of the transfer beside it."""

    gemm_slowdown: float
    transfer_slowdown: float
    source: str  # "profile" or "default"


def fills_device(rows: int, n: int, sm_count: int | None) -> bool:
    """Whether a GEMM of ``rows`` x ``n`` outputs has at least one tile (of the largest tile
    shape a GEMM library picks, ``compute.GPU_TILES[0]``) per SM."""
    if sm_count is None or rows < 1 or n < 1:
        return False
    tile_rows, tile_cols, _ = GPU_TILES[0]
    return math.ceil(rows / tile_rows) * math.ceil(n / tile_cols) >= sm_count


def sms_left_to_gemm(rows: int, n: int, sm_count: int, comm_sms: int) -> int:
    """SMs a GEMM of ``rows`` x ``n`` outputs keeps beside an SM-driven transfer of ``comm_sms``
    SMs: the transfer's CTAs take the SMs the GEMM's tiles leave idle first (a grid with fewer
    tiles than SMs, ``compute.GPU_TILES[0]``), and only the rest from the GEMM."""
    tile_rows, tile_cols, _ = GPU_TILES[0]
    tiles = math.ceil(max(rows, 1) / tile_rows) * math.ceil(max(n, 1) / tile_cols)
    idle = max(0, sm_count - tiles)
    return max(1, sm_count - max(0, comm_sms - idle))


def memory_share(device, transfer_gbps: float) -> float:
    """Fraction of the device's memory bandwidth a transfer at ``transfer_gbps`` uses."""
    mem = device.memory_gbps
    if not mem or transfer_gbps <= 0:
        return 0.0
    return min(1.0, 2.0 * transfer_gbps / mem)


def default_contention(kind: str, device, *, transfer_gbps: float, cores_per_rank: float | None = None) -> Contention:
    """The mechanism-based factors (without the SM share, which depends on the GEMM shape)."""
    if kind not in TRANSFER_KINDS:
        raise ValueError(f"transfer kind={kind!r} is unknown; use one of {TRANSFER_KINDS}")
    if kind == "cpu_collective":
        cores = cores_per_rank if cores_per_rank and cores_per_rank > 0 else DEFAULT_CPU_CORES_PER_RANK
        factor = 1.0 + CPU_CONTENTION_PER_THREAD / (cores + CPU_CONTENTION_PER_THREAD)
        return Contention(gemm_slowdown=factor, transfer_slowdown=factor, source="default")
    share = memory_share(device, transfer_gbps)
    gemm = 1.0 + MEMORY_SENSITIVITY[kind] * share
    if device.power_limit_w:
        gemm *= 1.0 + 2.0 * transfer_gbps * POWER_PJ_PER_BYTE * 1e-3 / device.power_limit_w  # GB/s*pJ/B = mW
    transfer = min(MAX_TRANSFER_SLOWDOWN, 1.0 + TRANSFER_SENSITIVITY[kind] * share)
    return Contention(gemm_slowdown=gemm, transfer_slowdown=transfer, source="default")


def contention(kind: str, device, *, transfer_gbps: float, cores_per_rank: float | None = None,
               calibration: CalibrationView | None = None) -> Contention:
    """Measured factors when the profile has them for ``kind``, else the defaults."""
    if calibration is not None:
        measured = calibration.contention(kind)
        if measured is not None:
            return Contention(gemm_slowdown=measured[0], transfer_slowdown=measured[1], source="profile")
    return default_contention(kind, device, transfer_gbps=transfer_gbps, cores_per_rank=cores_per_rank)
