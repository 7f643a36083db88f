"""Contention: how much a GEMM and a transfer slow each other when they overlap.

Each transfer kind has a *mechanism*; a calibration profile's measured factors replace
the defaults below (the SM share stays a mechanism, scaled from the profile's budget):

* ``sm_collective`` (NCCL/RCCL kernels): the collective holds ``comm_sms`` SMs, so the
  GEMM runs its waves on the rest (recomputed through the wave model, so a GEMM of
  exactly one wave can double); both also share memory bandwidth and the power budget.
* ``copy_engine`` (DMA through symmetric memory): no SMs, but the copy reads and writes
  HBM through L2 at link rate beside the GEMM's tile traffic, and raises power, so clocks
  drop. On 2xH200 a copy-engine transfer beside a GEMM slowed the GEMM by more than the
  transfer's own time: the defaults reproduce that order of magnitude.
* ``host_link`` (PCIe copies to/from pinned host memory): a small share of HBM, little effect.
* ``cpu_collective`` (gloo on CPU ranks): the transfer's copies run on the same cores as
  the GEMM threads; the slowdown grows as fewer cores are left per rank.

Memory share of a transfer = (bytes it moves through device memory per ms, read at the
sender plus written at the receiver) / (device memory bandwidth).
"""

from __future__ import annotations

from dataclasses import dataclass

from hocket.cost.calibration import CalibrationView

TRANSFER_KINDS = ("sm_collective", "copy_engine", "host_link", "cpu_collective")

MEMORY_SENSITIVITY = {"sm_collective": 1.0, "copy_engine": 5.0, "host_link": 1.5}
"""GEMM slowdown per unit of memory share taken by the transfer. A copy engine streams
through L2 and evicts the tiles a GEMM reuses, so the GEMM's own memory traffic grows
beyond the copy's bytes; SM-driven copies are bounded by their few SMs. Copy-engine
default set so that a full-rate NVLink copy beside a GEMM on 2xH200 costs the GEMM about
the copy's own duration, as measured there (DESIGN.md section 4)."""
POWER_PJ_PER_BYTE = 60.0
"""Energy of one byte moved (HBM read + write, link SerDes, L2); with the device's power
limit this gives the clock loss of a GEMM that runs at its power cap."""
TRANSFER_SLOWDOWN = {"sm_collective": 1.15, "copy_engine": 2.0, "host_link": 1.05}
"""A transfer beside a running GEMM: NCCL CTAs wait for SMs between GEMM waves; copy
engines queue behind the GEMM's L2/HBM traffic (2xH200: the copy stretched markedly)."""
CPU_CONTENTION_PER_THREAD = 1.0
"""CPU ranks: busy transfer threads per rank competing with the GEMM threads."""
DEFAULT_CPU_CORES_PER_RANK = 1.0


@dataclass(frozen=True, kw_only=True)
class Contention:
    """Slowdown factors (>= 1) of a GEMM beside a transfer and of the transfer beside it."""

    gemm_slowdown: float
    transfer_slowdown: float
    source: str  # "profile" or "default"


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
    return Contention(gemm_slowdown=gemm, transfer_slowdown=TRANSFER_SLOWDOWN[kind], source="default")


def contention(kind: str, device, *, transfer_gbps: float, cores_per_rank: float | None = None,
               calibration: CalibrationView | None = None) -> Contention:
    """Measured factors when the profile has them for ``kind``, else the defaults."""
    if calibration is not None:
        measured = calibration.contention(kind)
        if measured is not None:
            return Contention(gemm_slowdown=measured[0], transfer_slowdown=measured[1], source="profile")
    return default_contention(kind, device, transfer_gbps=transfer_gbps, cores_per_rank=cores_per_rank)
