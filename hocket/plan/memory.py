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
from hocket.core.relay_layout import SCRATCH_RING
from hocket.core.site import Site
from hocket.strategies import spec
from hocket.strategies.memory import SIGNAL_BYTES, ceil_div, full_bytes, product_bytes, symmetric_bytes

GIB = 1 << 30
DEFAULT_BUDGET_FRACTION = 0.25
"""Share of a device's free (or, for a described cluster, total) memory a plan may add."""

__all__ = ["DEFAULT_BUDGET_FRACTION", "GIB", "SIGNAL_BYTES", "MemoryEstimate", "budget_from_memory",
           "estimate_extra_memory", "live_free_memory_bytes", "over_budget_reason"]


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


def estimate_extra_memory(site: Site, plan: Plan) -> MemoryEstimate:
    """Extra per-rank bytes ``plan`` needs for ``site`` (buffers, symmetric memory, pinned host): the
    strategy's own buffers and symmetric memory (its spec's ``workspace`` / ``symmetric``), plus what
    the hierarchy and the host-staged transport add."""
    strategy = spec(plan.strategy)
    w, c = site.world, plan.chunks
    full = full_bytes(site)
    workspace = strategy.workspace(site, plan)
    if plan.hierarchy == "intra_first":
        # hocket.transport.hierarchical's scratch per collective in flight: the gathered (or reordered) buffer plus
        # its 1/r node part, at most 1.5x the buffer (r >= 2); a piece's collectives in flight cover at most the
        # whole buffer
        workspace += ceil_div(3 * full, 2)
    symmetric = strategy.symmetric(site, plan) if strategy.symmetric is not None else symmetric_bytes(site, plan)
    host = 2 * full if plan.transport == "host_staged" else 0
    if plan.transport == "host_staged" and strategy.host_staging:
        workspace += 2 * ceil_div(full, max(c, 1))  # device side of the staging copies
    if plan.transport == "host_staged" and w > 1 and site.kind in ("mm_rs", "mm_ar"):
        # the relay's reduction scratch (hocket.transport.host_relay): every rank's part of each
        # collective, summed once after its copies; a ring of SCRATCH_RING buffers per size that the
        # calls in flight take turns on (a pipeline of one call per piece: pieces of the product each)
        workspace += SCRATCH_RING * product_bytes(site) * (w if site.kind == "mm_ar" else 1)
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
