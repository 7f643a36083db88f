"""Overlap efficiency (docs/validation.md) and the speedup rule for small possible savings.

    efficiency = (T_sequential - T) / (T_sequential - T_ideal),  T_ideal = max(T_compute_alone, T_comm_alone)

1.0 is the physical limit, 0 no gain, negative a loss. When the possible saving
``T_sequential - T_ideal`` is under ``MIN_SAVING_FRACTION`` of ``T_sequential``, the
efficiency's denominator is mostly noise, so the headline metric is the speedup over
sequential instead.

``hidden_fraction`` compares with running compute-alone and comm-alone back to back
instead: ``(T_compute_alone + T_comm_alone - T) / min(T_compute_alone, T_comm_alone)``,
the share of the shorter part that the plan hid. It differs from the efficiency when the
sequential plan's collective is slower than the fastest transport (gloo's all_gather
versus a P2P exchange, say): a plan can then beat sequential by switching transport
without hiding anything.
"""

from __future__ import annotations

from dataclasses import dataclass

MIN_SAVING_FRACTION = 0.15


@dataclass(frozen=True, kw_only=True)
class OverlapScore:
    """How well one measured operator overlapped, with the metric to report."""

    metric: str
    """``"overlap_efficiency"`` or ``"speedup"`` (when the possible saving is under 15%)."""
    overlap_efficiency: float
    """always computed, but only meaningful when ``metric == "overlap_efficiency"``."""
    speedup: float
    """``T_sequential / T``."""
    ideal_ms: float
    saving_fraction: float
    """``(T_sequential - T_ideal) / T_sequential``: the most overlap could ever save."""
    hidden_fraction: float
    """``(T_compute_alone + T_comm_alone - T) / min(T_compute_alone, T_comm_alone)`` (see module doc)."""

    @property
    def value(self) -> float:
        return self.overlap_efficiency if self.metric == "overlap_efficiency" else self.speedup

    def label(self) -> str:
        """Short text for tables: ``0.72`` or ``1.03x`` (speedup)."""
        return f"{self.overlap_efficiency:.2f}" if self.metric == "overlap_efficiency" else f"{self.speedup:.2f}x"


def _positive(name: str, value: float) -> float:
    value = float(value)
    if not value > 0.0:
        raise ValueError(f"{name}={value!r} must be a positive time in milliseconds")
    return value


def overlap_score(*, measured_ms: float, sequential_ms: float, compute_alone_ms: float,
                  comm_alone_ms: float) -> OverlapScore:
    """Score one measurement against its baselines (all from the same run)."""
    measured = _positive("measured_ms", measured_ms)
    sequential = _positive("sequential_ms", sequential_ms)
    compute, comm = _positive("compute_alone_ms", compute_alone_ms), _positive("comm_alone_ms", comm_alone_ms)
    ideal = max(compute, comm)
    saving = sequential - ideal
    saving_fraction = saving / sequential
    efficiency = (sequential - measured) / saving if saving > 0.0 else float("nan")
    metric = "overlap_efficiency" if saving_fraction >= MIN_SAVING_FRACTION else "speedup"
    return OverlapScore(metric=metric, overlap_efficiency=efficiency, speedup=sequential / measured,
                        ideal_ms=ideal, saving_fraction=saving_fraction,
                        hidden_fraction=(compute + comm - measured) / min(compute, comm))
