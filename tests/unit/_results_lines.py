"""Synthetic results lines in the ``hocket.bench.record`` schema, for the tests of ``hocket.validate`` and of the
benchmarks that write such lines."""

from __future__ import annotations

from pathlib import Path

from hocket.bench.record import Baselines, BenchRecord, write_records
from hocket.core.plan import Plan
from hocket.core.site import Site
from hocket.hardware import load_preset
from hocket.timing.stats import Summary


def baselines(rng, *, sequential_ms: float | None = None, comm_transport: str = "collective") -> Baselines:
    """Random, consistent baselines: compute and comm alone each below sequential, their sum above it."""
    seq = sequential_ms if sequential_ms is not None else rng.uniform(2.0, 9.0)
    compute = seq * rng.uniform(0.55, 0.7)
    comm = seq * rng.uniform(0.35, 0.5)
    return Baselines(sequential_ms=seq, compute_alone_ms=compute, comm_alone_ms=comm,
                     comm_alone_transport=comm_transport)


def record(*, site: Site, plan: Plan, median_ms: float, base: Baselines, cluster: str = "h200x2",
           spread: float = 0.01, hardware_hash: str = "synthetic-hw", git_hash: str | None = None,
           run: dict | None = None) -> BenchRecord:
    """One results line of ``plan`` on ``site``, measured on the preset ``cluster`` (named in
    ``run.cluster``, as bench_multigpu.py writes it), with p10/p90 ``spread`` apart."""
    timing = Summary(median_ms=median_ms, p10_ms=median_ms * (1 - spread / 2),
                     p90_ms=median_ms * (1 + spread / 2), n=20)
    hardware = {"hash": hardware_hash, "devices": load_preset(cluster).device_counts(), "nodes": 1,
                "world_size": site.world}
    return BenchRecord(site=site, plan=plan, timing=timing, baselines=base, hardware=hardware, environment={},
                       versions={}, git_hash=git_hash, command="synthetic test line",
                       run={"cluster": cluster, **(run or {})})


def write(path: Path, records) -> Path:
    """Write ``records`` as a fresh results file at ``path`` (parents made)."""
    return write_records(path, records, append=False)
