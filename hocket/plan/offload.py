"""Plans of the single-device offload operators, and the one ``plan=None`` runs.

``hocket.ops.matmul_from_host`` (site kind ``h2d_mm``: A streams in from pinned host memory)
and ``hocket.ops.matmul_to_host`` (``mm_d2h``: C streams out to it) run one GPU and its host
link, so the collective candidate space (:mod:`hocket.plan.space`) does not list them. Their
candidates (:func:`offload_candidates`), all ``transport="host_staged"``:

* ``sequential``;
* ``chunked`` with even pieces (``EVEN_CHUNKS``);
* ``chunked`` with a geometric ramp of pieces from one ``ALIGN``-row block at the exposed
  edge (``RAMP_CHUNKS``; ``hocket.kernels.schedule.ramp_row_offsets``): first to host, where
  the first copy waits for the first piece's GEMM; last from host, where the last piece's
  GEMM runs after every copy. A library GEMM of a 128-256-row piece uses the whole GPU, so
  the copy starts ~0.05 ms in; the pieces then grow as fast as the copy lets the GEMM stay
  ahead. On an H200 over PCIe (benchmarks/results/h200/2026-12-01_probes.md) this was the fastest layout on
  the copy-bound shapes: to host 8192x8192x7168 2.197 ms (eff 0.94) against 2.270 for
  tile_fused(8) and 2.253 for even chunked(16);
* ``tile_fused`` (``FUSED_CHUNKS`` flag groups).

:func:`choose_offload_plan` prices them with :func:`hocket.strategies.predict` and chooses as the collective
planner does (``hocket.plan.search.select`` with the per-class and per-piece model error of
``hocket.plan.uncertainty``): sequential unless a plan still wins by the margin once its error is counted.
"""

from __future__ import annotations

from hocket.core.pieces import ramp_row_offsets
from hocket.core.plan import Plan
from hocket.core.site import Site
from hocket.plan.search import DEFAULT_MARGIN, select
from hocket.plan.uncertainty import Uncertainty, uncertainty_from_profile

OFFLOAD_KINDS = ("h2d_mm", "mm_d2h")
ALIGN = 128
"""rows of one piece boundary step (a GEMM row block; the tile-fused kernels' ``block_m``)."""
EVEN_CHUNKS = (2, 4, 8, 16, 32)
RAMP_CHUNKS = (6, 8, 10, 12, 16)
FUSED_CHUNKS = (6, 8, 12)
SEQUENTIAL = Plan(strategy="sequential", transport="host_staged")


def _check_site(site: Site) -> None:
    if not isinstance(site, Site):
        raise TypeError(f"site={site!r} must be a hocket.Site")
    if site.kind not in OFFLOAD_KINDS:
        raise ValueError(f"site.kind={site.kind!r} is not an offload site; offload plans are for {OFFLOAD_KINDS}")
    if site.world != 1:
        raise ValueError(f"site.world={site.world}: an offload site runs on one device (world=1)")


def ramp_sizes(site: Site, chunks: int) -> tuple[int, ...]:
    """Piece rows of a ``chunks``-piece ramp over ``site.m`` in processing order: one ``ALIGN``-row
    block first for ``mm_d2h``, last for ``h2d_mm``."""
    _check_site(site)
    offsets = ramp_row_offsets(site.m, chunks, align=ALIGN, reverse=site.kind == "h2d_mm")
    return tuple(b - a for a, b in zip(offsets, offsets[1:]))


def offload_candidates(site: Site, *, fused: bool = True) -> tuple[Plan, ...]:
    """Every plan of the module docstring that fits ``site.m`` (pieces of at least one ``ALIGN``-row
    block); sequential first. ``fused=False`` leaves ``tile_fused`` out (no Triton on this device)."""
    _check_site(site)
    blocks = -(-site.m // ALIGN)
    plans = [SEQUENTIAL]
    plans += [Plan(strategy="chunked", chunks=c, transport="host_staged") for c in EVEN_CHUNKS if c <= blocks]
    for c in RAMP_CHUNKS:
        if c <= blocks:
            sizes = ramp_sizes(site, c)
            if len(set(sizes)) > 1:  # an even ramp is an even plan already listed
                plans.append(Plan(strategy="chunked", chunks=len(sizes), split_sizes=sizes, transport="host_staged"))
    if fused:
        plans += [Plan(strategy="tile_fused", chunks=c, transport="host_staged") for c in FUSED_CHUNKS if c <= blocks]
    return tuple(dict.fromkeys(plans))


def fit_offload_plan(plan: Plan, site: Site) -> Plan:
    """A plan chosen for a bucket of ``site`` (``hocket.plan.bucket.bucket_m``: a larger ``m``) cut for
    ``site.m`` itself: at most one piece per ``ALIGN``-row block; a ramp is the same ramp over the real
    rows (uneven sizes are not rescaled: the edge piece stays one block)."""
    _check_site(site)
    if plan.strategy == "sequential":
        return plan
    chunks = min(plan.chunks, -(-site.m // ALIGN))
    if plan.split_sizes is not None and plan.strategy == "chunked":
        sizes = ramp_sizes(site, chunks) if chunks > 1 else (site.m,)
        if len(set(sizes)) > 1:
            return plan.with_(chunks=len(sizes), split_sizes=sizes)
        return plan.with_(chunks=chunks, split_sizes=None)
    return plan.with_(chunks=chunks, split_sizes=None)


def choose_offload_plan(site: Site, cluster=None, profile=None, *, cost=None, margin: float = DEFAULT_MARGIN,
                        fused: bool = True, uncertainty: Uncertainty | None = None) -> tuple[Plan, float, float]:
    """``(plan, predicted_ms, sequential_ms)``: the candidates priced by ``cost(site, plan)`` (ms; default
    :func:`hocket.strategies.predict` on ``cluster`` with ``profile``) and chosen by the planner's rule
    (:func:`hocket.plan.search.select`): a plan must beat sequential by more than ``margin`` after its
    prediction is inflated by its class's model error and its pieces' (``uncertainty``; default the
    documented constants, with the classes ``profile`` measured where there is one), and the lowest inflated
    price wins. Without that rule the cheapest raw price won: on 1xH200 an even chunked(32) to host,
    priced 1% under the next plan, ran host-bound at 2.63 ms where tile_fused(8) and the 8-piece ramp ran
    2.20-2.26 (benchmarks/results/h200/2026-12-01_offload-plan-none.md)."""
    if cost is None:
        if cluster is None:
            raise ValueError("choose_offload_plan needs a cluster (hocket.hardware.load_cluster or probe()) "
                             "or a cost function")
        from hocket.strategies import predict

        def cost(s, p):
            return predict(s, p, cluster, profile).total_ms

    if uncertainty is None:
        uncertainty = uncertainty_from_profile(profile, world=1) if profile is not None else Uncertainty()
    priced = [(plan, cost(site, plan)) for plan in offload_candidates(site, fused=fused)]
    chosen, chosen_ms, _ = select(priced, baseline=SEQUENTIAL, margin=margin, uncertainty=uncertainty)
    return chosen, chosen_ms, priced[0][1]
