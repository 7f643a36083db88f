"""The ``triggered`` transport: a HYPOTHETICAL device that issues a GEMM's communication itself, priced for
what-ifs only.

Hardware of this kind (T3: "Transparent Tracking & Triggering for Fine-grained Overlap of Compute &
Collectives", Pati, Aga, Islam, Jayasena, Sinclair, ASPLOS 2024, arXiv:2401.16677) tracks the writes of a
producer kernel to a registered output region and, as each region is complete, issues its transfer to the
peer (a DMA, no SM) and reduces it at the destination in near-memory compute (no reduction kernel, no host
work). Its published figures: on the communication-heavy tensor-parallel sublayers of T-NLG, 30% geomean
speed-up (47% at most) and 22% geomean less DRAM data movement (36% at most); 29% geomean for sublayers of
~500-billion-parameter models (PaLM, MT-NLG). No shipping GPU has it: ``ClusterSpec.what_if_offered`` offers it
only on a cluster that declares it (YAML ``what_if: [triggered]``, e.g. the ``h200x8-triggered`` preset), no
operator runs it, and everything that shows it marks it hypothetical (:data:`LABEL`).

How one site is priced (:func:`price_triggered`), on the group's slowest device and bottleneck links as
``hocket.strategies.predict`` prices the real plans:

* it serves the sites whose collective consumes a producer GEMM's output: ``mm_rs`` (the reduce-scatter) and
  ``mm_ar`` (its reduce-scatter half; the all-gather half follows the GEMM, exposed). ``ag_mm``'s all-gather
  has no producer inside the site and is not served;
* the GEMM runs as one kernel on every SM (no SM lent to communication, no chunking penalty), slowed only by
  the memory and power share of the DMA traffic beside it (``hocket.cost.contention``'s ``copy_engine``
  factor);
* the reduce-scatter moves the bytes of a one-shot copy-engine reduce-scatter of the whole buffer
  (``hocket.cost.comm.collective(..., transport="copy_engine")``), with no reduction kernel;
* tracking is per wave of output tiles (``hocket.cost.compute.gpu_grid`` over the SM count): a pipeline of
  ``waves`` equal pieces, ``total = max(G, C) + min(G, C) / waves`` for GEMM ``G`` and transfer ``C``; no host
  issue cost beyond the GEMM's launch, no per-piece call overhead.

Every assumption favours the hardware, so the price is a lower bound of what such a device would take and the
saving an upper bound of what it would save.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hocket.core.site import Site
from hocket.cost import comm as comm_model
from hocket.cost.calibration import calibration_view
from hocket.cost.compute import gemm_ms, gpu_grid
from hocket.cost.contention import default_contention
from hocket.cost.stages import Stage

TRIGGERED = "triggered"
LABEL = "triggered (hypothetical, T3-style)"
"""How every table, report and JSON object names the transport."""
SERVED_KINDS = ("mm_rs", "mm_ar")
T3_SUBLAYER_SPEEDUP_GEOMEAN = 0.30
"""T3 (ASPLOS 2024): geomean speed-up of T-NLG's communication-heavy sublayers (47% at most)."""
T3_SUBLAYER_SPEEDUP_MAX = 0.47
T3_DATA_MOVEMENT_REDUCTION_GEOMEAN = 0.22
"""T3 (ASPLOS 2024): geomean reduction of DRAM data movement on the same sublayers (36% at most)."""
T3_DATA_MOVEMENT_REDUCTION_MAX = 0.36


class HypotheticalTransportError(ValueError):
    """A hypothetical transport was asked of a cluster or site that cannot have it."""


@dataclass(frozen=True, kw_only=True)
class TriggeredPrice:
    """One site's what-if price under ``triggered`` (ms, one occurrence): always hypothetical."""

    site: Site
    total_ms: float
    compute_ms: float
    comm_ms: float
    exposed_comm_ms: float
    waves: int
    gemm_slowed_ms: float
    """the GEMM beside the DMA traffic (its memory and power share)."""
    scatter_ms: float
    gather_ms: float
    """the all-gather half of an ``mm_ar`` (0 for ``mm_rs``), after the GEMM."""
    hypothetical: bool = True
    label: str = LABEL

    def to_dict(self) -> dict:
        return {"transport": TRIGGERED, "label": self.label, "hypothetical": True, "total_ms": self.total_ms,
                "compute_ms": self.compute_ms, "comm_ms": self.comm_ms, "exposed_comm_ms": self.exposed_comm_ms,
                "waves": self.waves}


def triggered_reason(site: Site, cluster) -> str | None:
    """Why ``site`` on ``cluster`` cannot be priced with ``triggered``, or None when it can."""
    if site.kind not in SERVED_KINDS:
        return (f"{site.kind} is not served: a triggered transfer follows a producer GEMM's writes, and only "
                f"{SERVED_KINDS} hand a GEMM's output to a collective")
    if site.world < 2:
        return "a group of one rank has nothing to transfer"
    ranks = site.group_ranks
    if TRIGGERED not in cluster.what_if_transports:
        return (f"cluster {cluster.name!r} does not declare triggered-transfer hardware (it is hypothetical: add "
                f"what_if: [triggered] to a cluster file, or use a preset that declares it, e.g. h200x8-triggered)")
    if TRIGGERED not in cluster.what_if_offered(ranks):
        return (f"ranks {list(ranks[:8])}{'...' if len(ranks) > 8 else ''} of {cluster.name!r} share no peer path; "
                f"a triggered transfer is issued by the device over its link to the peer's memory")
    return None


def price_triggered(site: Site, cluster, profile=None, *, steady_state: bool = False) -> TriggeredPrice:
    """The what-if price of ``site`` under the hypothetical ``triggered`` transport (module docstring);
    raises :class:`HypotheticalTransportError` naming the reason where the cluster does not offer it."""
    from hocket.cost.builder import group_facts

    if not isinstance(site, Site):
        raise TypeError(f"site={site!r} must be a hocket.Site")
    if not hasattr(cluster, "what_if_offered"):
        raise TypeError(f"cluster={cluster!r} must be a ClusterSpec (hocket.hardware.load_cluster(name))")
    cluster.check_world(site.world, arg="site.world")
    reason = triggered_reason(site, cluster)
    if reason is not None:
        raise HypotheticalTransportError(f"transport {TRIGGERED!r} (hypothetical) cannot price this site: {reason}")
    topo, device, _, _ = group_facts(cluster, site.group_ranks, site.dtype)
    view = calibration_view(profile)
    if steady_state and view is not None:
        view = view.for_steady_state()
    gemm = gemm_ms(device, m=site.m, k=site.k, n=site.n, dtype=site.dtype, itemsize=site.itemsize,
                   calibration=view, sustained=steady_state) * site.num_b
    nbytes = float(site.comm_bytes)
    scatter = comm_model.collective("reduce_scatter", nbytes, topo, transport="copy_engine", calibration=view)
    gather_ms = 0.0
    if site.kind == "mm_ar":
        gather_ms = comm_model.collective("all_gather", nbytes, topo, transport="copy_engine",
                                          calibration=view).ms
    rate_gbps = scatter.egress_bytes / (scatter.ms * 1e6) if scatter.ms > 0 else 0.0
    slowed = gemm * max(1.0, default_contention("copy_engine", device, transfer_gbps=rate_gbps).gemm_slowdown)
    grid = gpu_grid(device, m=site.m, k=site.k, n=site.n, dtype=site.dtype)
    waves = max(1, math.ceil(grid / device.sm_count)) if device.sm_count else 1
    total = max(slowed, scatter.ms) + min(slowed, scatter.ms) / waves + gather_ms
    return TriggeredPrice(site=site, total_ms=total, compute_ms=gemm, comm_ms=scatter.ms + gather_ms,
                          exposed_comm_ms=max(0.0, total - gemm), waves=waves, gemm_slowed_ms=slowed,
                          scatter_ms=scatter.ms, gather_ms=gather_ms)


def triggered_stages(price: TriggeredPrice) -> list[Stage]:
    """The what-if as a stage pipeline (what ``hocket.sim`` executes): ``waves`` GEMM pieces on ``compute``,
    each releasing its reduce-scatter piece on ``copy_engine`` (the triggered DMA), then an ``mm_ar``'s
    all-gather; contention is already in the pieces' durations, so ``schedule`` of these stages takes
    ``price.total_ms``. Stage names start with ``triggered:`` (hypothetical)."""
    stages: list[Stage] = []
    waves = price.waves
    flops = 2.0 * price.site.m * price.site.k * price.site.n * price.site.num_b / waves
    last_transfer = None
    for i in range(waves):
        deps = (len(stages) - 2,) if i else ()
        stages.append(Stage(name=f"triggered:gemm{i}", resource="compute", duration_ms=price.gemm_slowed_ms / waves,
                            depends_on=deps, piece=i, flops=flops, op="gemm"))
        stages.append(Stage(name=f"triggered:reduce_scatter{i}", resource="copy_engine", kind="copy_engine",
                            duration_ms=price.scatter_ms / waves, depends_on=(len(stages) - 1,), piece=i,
                            nbytes=price.site.comm_bytes / waves, op="reduce_scatter"))
        last_transfer = len(stages) - 1
    if price.gather_ms > 0:
        stages.append(Stage(name="triggered:all_gather", resource="copy_engine", kind="copy_engine",
                            duration_ms=price.gather_ms, depends_on=(last_transfer,), nbytes=price.site.comm_bytes,
                            op="all_gather"))
    return stages
