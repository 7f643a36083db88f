"""CalibrationView.gemm_ratio: several points measured at the query's own shape decide together."""

from __future__ import annotations

import math
import random

import pytest

from hocket.cost.calibration import CalibrationView
from hocket.hardware.profile import CalibrationProfile, GemmPoint


def _point(m, k, n, ms):
    return GemmPoint(m=m, k=k, n=n, dtype="bfloat16", tflops=2.0 * m * k * n / (ms * 1e9), ms=ms)


def test_exact_shape_points_are_averaged_not_the_slowest_taken():
    rng = random.Random()
    m, k, n = (1024 * rng.randint(1, 16) for _ in range(3))
    times = [rng.uniform(1.0, 3.0) for _ in range(rng.randint(2, 5))]
    neighbour = _point(2 * m, k, n, rng.uniform(0.5, 9.0))  # not at the query: must not count
    view = CalibrationView(CalibrationProfile(fingerprint="f", gemm=(neighbour, *(_point(m, k, n, t) for t in times))))
    model_ms = rng.uniform(0.5, 3.0)
    ratio = view.gemm_ratio(m=m, k=k, n=n, dtype="bfloat16", model_ms=lambda *_: model_ms)
    expected = math.exp(sum(math.log(t / model_ms) for t in times) / len(times))
    assert ratio == pytest.approx(expected)
    assert min(times) / model_ms < ratio < max(times) / model_ms
