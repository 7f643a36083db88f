"""Summary statistics of timing samples: median, p10, p90 and the sample count."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, kw_only=True)
class Summary:
    """Robust summary of one measurement, in milliseconds."""

    median_ms: float
    p10_ms: float
    p90_ms: float
    n: int

    def to_dict(self) -> dict:
        return {"median_ms": self.median_ms, "p10_ms": self.p10_ms, "p90_ms": self.p90_ms, "n": self.n}


def summarize(samples_ms) -> Summary:
    """Median, 10th and 90th percentile (linear interpolation) of ``samples_ms``."""
    values = np.asarray(list(samples_ms), dtype=np.float64)
    if values.ndim != 1 or values.size == 0:
        raise ValueError(f"samples_ms must be a non-empty 1-D sequence of times, got shape {values.shape}")
    if not np.all(np.isfinite(values)) or np.any(values < 0):
        raise ValueError(f"samples_ms must be finite and >= 0, got {values.tolist()}")
    p10, median, p90 = np.percentile(values, [10.0, 50.0, 90.0])
    return Summary(median_ms=float(median), p10_ms=float(p10), p90_ms=float(p90), n=int(values.size))
