"""The cost model against published figures for hardware we cannot run (presets alone, no profile):
``hocket validate --published``.

The model is judged on 8-GPU A100/H100/H800-class machines from datasheets, topology and mechanisms, not from fits
to the machines we measured. Each point prices one quantity with ``hocket.cost`` on a cluster preset, with no
calibration profile, and sets it beside a public measurement of the same quantity (its source with it):

* GEMM throughput (``hocket.cost.compute.gemm_time``) at the shape a published measurement used;
* NCCL bus bandwidth (``hocket.cost.comm.collective`` on a 1 GiB buffer, 8 GiB across nodes; nccl-tests' busbw
  definition) on 8 GPUs and on two InfiniBand nodes.

A published range is met when the prediction falls inside it; a single figure gives a signed error. What the
published figure measured is not always what the model prices (burst clocks against the model's sustained level;
NVLink SHARP against the model's ring): the ``note`` column says so. Where it stands:
benchmarks/results/validation/2026-12-01_cost-model.md.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

MAMF = "stas00/ml-engineering compute/accelerator/README.md (MAMF table, BF16)"
H100_TORCH = "github.com/zzc0721/torch-performance-test-data/issues/79 (H100 80GB HBM3, torch 2.7.0+cu128)"
NCCL_H100 = "github.com/NVIDIA/nccl-tests/issues/212 (NCCL maintainer: ~370 GB/s busbw without NVLS on 8xH100)"
NCCL_A100 = "docs.alayanew.com/en/docs/tech-blog/2026-05-06-nccl-tests (8xA100 SXM4 230-250); nccl-tests#149 (~200)"
NCCL_H800 = "github.com/NVIDIA/nccl/issues/1374 (8xH800 all_reduce busbw 215 GB/s, NCCL default algorithm)"
NCCL_IB = "saturncloud.io/blog/crusoe-nccl-cluster-validation (H100 SXM, NVLink + IB NDR, 8 GB+: 400-450 GB/s)"


@dataclass(frozen=True)
class Point:
    """One published figure and how to price it."""

    name: str
    preset: str
    kind: str  # "gemm" (m, k, n) or a collective op
    low: float
    high: float  # == low for a single figure
    unit: str
    source: str
    note: str = ""
    shape: tuple[int, int, int] | None = None
    nbytes: float = 2**30


POINTS = (
    Point("H100 SXM bf16 GEMM 2048x13312x2048 (MAMF best shape)", "h100x8", "gemm", 794.5, 794.5, "TFLOP/s", MAMF,
          "burst of 100 calls; the model is set at the sustained (power-capped) level", (2048, 13312, 2048)),
    Point("H100 bf16 GEMM 8192^3", "h100x8", "gemm", 797.5, 797.5, "TFLOP/s", H100_TORCH, "burst",
          (8192, 8192, 8192)),
    Point("H100 bf16 GEMM 4096^3", "h100x8", "gemm", 788.7, 788.7, "TFLOP/s", H100_TORCH, "burst",
          (4096, 4096, 4096)),
    Point("H100 bf16 GEMM 2048^3", "h100x8", "gemm", 676.6, 676.6, "TFLOP/s", H100_TORCH, "burst",
          (2048, 2048, 2048)),
    Point("H100 bf16 GEMM 1024^3", "h100x8", "gemm", 176.6, 176.6, "TFLOP/s", H100_TORCH,
          "12 us per call: host launch rate, not the GPU", (1024, 1024, 1024)),
    Point("A100 SXM bf16 GEMM 1024x5120x10240 (MAMF best shape)", "a100x8", "gemm", 271.2, 271.2, "TFLOP/s", MAMF,
          "burst", (1024, 5120, 10240)),
    Point("MI300X bf16 GEMM 10240x8192x15360 (MAMF best shape)", "mi300xx8", "gemm", 668.4, 668.4, "TFLOP/s", MAMF,
          "burst, TunableOp on", (10240, 8192, 15360)),
    Point("8xH100 NVSwitch all_gather busbw, 1 GiB", "h100x8", "all_gather", 370.0, 370.0, "GB/s", NCCL_H100,
          "ring / non-all-reduce ops, NVLS off (as hocket runs)"),
    Point("8xH100 NVSwitch all_reduce busbw (ring), 1 GiB", "h100x8", "all_reduce", 370.0, 370.0, "GB/s", NCCL_H100,
          "NCCL_ALGO=RING"),
    Point("8xA100 SXM NVSwitch all_reduce busbw, 1 GiB", "a100x8", "all_reduce", 200.0, 250.0, "GB/s", NCCL_A100,
          "range over two public reports"),
    Point("8xH800 NVSwitch all_reduce busbw, 1 GiB", "h800x8", "all_reduce", 215.0, 215.0, "GB/s", NCCL_H800,
          "NCCL's default may be NVLink SHARP there; the model prices a ring"),
    Point("2x8 H100, 8x400 Gb/s IB per node: all_reduce busbw, 8 GiB", "h100-ib-2node", "all_reduce", 400.0, 450.0,
          "GB/s", NCCL_IB,
          "an expected range for NCCL's default algorithms (NVLS, trees); the model's best of ring/tree",
          nbytes=8 * 2**30),
)

BUSBW_FACTOR = {"all_gather": lambda p: (p - 1) / p, "reduce_scatter": lambda p: (p - 1) / p,
                "all_reduce": lambda p: 2 * (p - 1) / p}
"""nccl-tests' bus bandwidth: algbw (buffer bytes / time) times this factor of the rank count."""


def predict(point: Point) -> float:
    """The model's value of ``point``'s quantity on its preset, without a profile."""
    from hocket.cost.comm import collective, group_topology
    from hocket.cost.compute import gemm_time
    from hocket.hardware import load_cluster

    cluster = load_cluster(point.preset)
    if point.kind == "gemm":
        m, k, n = point.shape
        ms = gemm_time(cluster.device(0), m=m, k=k, n=n, dtype="bfloat16", itemsize=2).ms
        return 2.0 * m * k * n / (ms * 1e9)
    ranks = list(range(cluster.world_size))
    nbytes = float(point.nbytes)
    ms = collective(point.kind, nbytes, group_topology(cluster, ranks)).ms
    return nbytes / (ms * 1e6) * BUSBW_FACTOR[point.kind](len(ranks))


def error(point: Point, value: float) -> float:
    """Signed relative error against the figure, 0 inside a published range."""
    if point.low <= value <= point.high:
        return 0.0
    ref = point.low if value < point.low else point.high
    return value / ref - 1.0


def rows() -> list[dict]:
    out = []
    for point in POINTS:
        value = predict(point)
        published = f"{point.low:g}" if point.low == point.high else f"{point.low:g}-{point.high:g}"
        out.append({"name": point.name, "preset": point.preset, "unit": point.unit, "predicted": value,
                    "published": published, "error": error(point, value), "source": point.source,
                    "note": point.note})
    return out


def print_published(table: list[dict]) -> None:
    """Print :func:`rows`: each point's predicted and published value and error, the summary, the sources."""
    width = max(len(r["name"]) for r in table)
    print(f"{'quantity':{width}s} {'predicted':>10s} {'published':>10s} {'error':>7s}  unit     note")
    for r in table:
        print(f"{r['name']:{width}s} {r['predicted']:10.1f} {r['published']:>10s} {r['error']:+7.1%}  "
              f"{r['unit']:8s} {r['note']}")
    errors = sorted(abs(r["error"]) for r in table)
    print(f"\n{len(table)} points | median |error| {errors[len(errors) // 2]:.1%}, max {errors[-1]:.1%}")
    print("sources:")
    for source in dict.fromkeys(r["source"] for r in table):
        print(f"  {source}")


def write_json(table: list[dict], path: Path | str) -> None:
    """Write :func:`rows` to ``path`` as JSON."""
    Path(path).write_text(json.dumps(table, indent=1) + "\n")
