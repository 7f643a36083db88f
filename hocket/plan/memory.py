"""Extra memory a plan needs on each rank, and the budget it must fit in.

"Extra" means memory beyond the operator's own inputs and outputs (the gathered ``A``
that ``all_gather_matmul`` returns is an output, not extra): staging buffers for
pipeline pieces, the full-size partial product that a reduce-scatter consumes,
symmetric-memory buffers and signal pads (device memory that stays allocated), and
pinned host buffers for the host-staged path (host memory, reported but not charged
against the device budget). Estimates are per rank and deliberately simple: they
decide feasibility, not speed.
"""

from __future__ import annotations

from dataclasses import dataclass

from hocket.core.plan import Plan
from hocket.core.site import Site
from hocket.core.relay_layout import SCRATCH_RING
from hocket.core.peer_protocol import peer_protocol_for

GIB = 1 << 30
DEFAULT_BUDGET_FRACTION = 0.25
"""Share of a device's free (or, for a described cluster, total) memory a plan may add."""

SIGNAL_BYTES = 4
"""One flag per (peer, piece) in a signal pad."""


@dataclass(frozen=True, kw_only=True)
class MemoryEstimate:
    """Extra bytes one rank needs to run a plan (see module docstring)."""

    workspace_bytes: int
    symmetric_bytes: int
    host_pinned_bytes: int

    @property
    def device_bytes(self) -> int:
        """What counts against the device budget: workspace plus symmetric memory."""
        return self.workspace_bytes + self.symmetric_bytes

    def describe(self) -> str:
        parts = [f"workspace {_fmt(self.workspace_bytes)}"]
        if self.symmetric_bytes:
            parts.append(f"symmetric {_fmt(self.symmetric_bytes)}")
        if self.host_pinned_bytes:
            parts.append(f"pinned host {_fmt(self.host_pinned_bytes)}")
        return ", ".join(parts)


def _fmt(nbytes: int) -> str:
    if nbytes >= GIB:
        return f"{nbytes / GIB:.2f} GiB"
    return f"{nbytes / (1 << 20):.1f} MiB"


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def estimate_extra_memory(site: Site, plan: Plan) -> MemoryEstimate:
    """Extra per-rank bytes ``plan`` needs for ``site`` (buffers, symmetric memory, pinned host)."""
    s, w, c = site.itemsize, site.world, plan.chunks
    gathered = site.m * site.k * s  # ag_mm: the gathered A
    product = site.m * site.n * site.num_b * s  # mm_rs/mm_ar: the full partial product
    full = gathered if site.kind == "ag_mm" else product
    if site.kind == "ag_mm":
        # Sequential gathers straight into the returned A: nothing extra. Pipelines
        # stage two pieces (one in flight, one being multiplied).
        piece = _ceil_div(site.m, c) * site.k * s
        workspace = {
            "sequential": 0, "bulk": 0, "chunked": 2 * piece,
            "ring": 2 * _ceil_div(site.m, w * c) * site.k * s,
            "bidir_ring": 4 * _ceil_div(site.m, w * c) * site.k * s,
            "tile_fused": 0, "substituted": 2 * piece,
        }[plan.strategy]
    elif site.kind == "mm_rs":
        # The reduce-scatter consumes a partial product the caller never sees.
        piece = _ceil_div(site.m, c) * site.n * site.num_b * s
        shard_piece = _ceil_div(site.m, w * c) * site.n * site.num_b * s
        workspace = {
            "sequential": product, "bulk": product, "chunked": 2 * piece,
            "ring": 2 * shard_piece, "bidir_ring": 4 * shard_piece,
            "tile_fused": 0, "substituted": 2 * piece,
        }[plan.strategy]
    else:
        # mm_ar (and the all-to-all kinds): reductions run in place on the output;
        # substituted (reduce-scatter + all-gather) stages one reduced shard per piece.
        piece = _ceil_div(site.m, c) * site.n * site.num_b * s
        workspace = {
            "sequential": 0, "bulk": 0, "chunked": 0, "ring": 0, "bidir_ring": 0,
            "tile_fused": 0, "substituted": 2 * _ceil_div(piece, w),
        }[plan.strategy]
    if plan.split_sizes is not None and plan.strategy == "chunked" and site.kind in ("ag_mm", "mm_rs"):
        # uneven pieces: the staging slots hold pieces of each distinct size (largest and smallest)
        total = max(1, sum(plan.split_sizes))
        largest, smallest = max(plan.split_sizes), min(plan.split_sizes)
        staged = full if site.kind == "ag_mm" else product
        workspace = 2 * _ceil_div(staged * largest, total) + 2 * _ceil_div(staged * smallest, total)
    if plan.hierarchy == "intra_first":
        workspace += _ceil_div(full, 2)  # the node-reduced (or node-gathered) intermediate
    symmetric = 0
    if plan.transport == "copy_engine" or plan.strategy == "tile_fused":
        symmetric = full + w * max(c, 1) * SIGNAL_BYTES
        if plan.strategy == "chunked" and w > 1 and site.kind in ("ag_mm", "mm_rs", "mm_ar"):
            # the barrier protocols keep two slots (call parity): pull stages this rank's shard (all-gather)
            # or its partials for every rank (reduce-scatter); put receives every peer's shard
            protocol = peer_protocol_for(site.kind, max(c, 1))
            if protocol == "pull":
                symmetric = 2 * (_ceil_div(full, w) if site.kind == "ag_mm" else full)
            elif protocol == "put":
                symmetric = 2 * full
    host = 2 * full if plan.transport == "host_staged" else 0
    if plan.transport == "host_staged" and plan.strategy != "sequential":
        workspace += 2 * _ceil_div(full, max(c, 1))  # device side of the staging copies
    if plan.transport == "host_staged" and w > 1 and site.kind in ("mm_rs", "mm_ar"):
        # the relay's reduction scratch (hocket.transport.host_relay): every rank's part of each
        # collective, summed once after its copies; a ring of SCRATCH_RING buffers per size that the
        # calls in flight take turns on (a pipeline of one call per piece: pieces of the product each)
        workspace += SCRATCH_RING * product * (w if site.kind == "mm_ar" else 1)
    return MemoryEstimate(workspace_bytes=int(workspace), symmetric_bytes=int(symmetric),
                          host_pinned_bytes=int(host))


def budget_from_memory(memory_bytes: float | None, fraction: float = DEFAULT_BUDGET_FRACTION) -> int | None:
    """A plan's device budget: ``fraction`` of free (or total) device memory; None = unknown."""
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"fraction={fraction!r} must be in (0, 1], e.g. {DEFAULT_BUDGET_FRACTION}")
    if memory_bytes is None:
        return None
    if memory_bytes < 0:
        raise ValueError(f"memory_bytes={memory_bytes!r} must be >= 0")
    return int(memory_bytes * fraction)


def live_free_memory_bytes() -> int | None:
    """Free memory of this process's current CUDA device, or None without CUDA."""
    import torch

    if not torch.cuda.is_available():
        return None
    free_bytes, _total = torch.cuda.mem_get_info()
    return int(free_bytes)


def over_budget_reason(estimate: MemoryEstimate, budget_bytes: int | None) -> str | None:
    """None when the plan fits; otherwise the reason it was pruned."""
    if budget_bytes is None or estimate.device_bytes <= budget_bytes:
        return None
    return (f"needs {_fmt(estimate.device_bytes)} extra device memory ({estimate.describe()}), "
            f"over the budget of {_fmt(budget_bytes)}; raise memory_budget_bytes or use fewer/smaller buffers")
