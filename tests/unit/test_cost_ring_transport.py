"""A ring plan is priced as the P2P ring it runs, whichever SM-driven transport it names."""

from __future__ import annotations

import random

import pytest

from hocket.core.plan import Plan
from hocket.core.site import Site
from hocket.cost.calibration import CalibrationView
from hocket.hardware import load_cluster
from hocket.hardware.profile import CalibrationProfile, CurvePoint
from hocket.strategies import predict


def _curve(floor_ms: float, gbps: float) -> tuple[CurvePoint, ...]:
    return tuple(CurvePoint(bytes=2 ** e, ms=floor_ms + 2 ** e / (gbps * 1e6)) for e in range(16, 28, 3))


def test_a_ring_over_the_collective_transport_is_priced_as_the_p2p_ring_it_runs():
    """Rings run torch.distributed send/recv whether a plan names transport 'collective' or 'p2p': one price,
    calibrated by the p2p curve, never by the copy-engine curve."""
    rng = random.Random(11)
    profile = CalibrationProfile(fingerprint="f" * 16, world_size=2, backend="nccl", device_type="cuda",
                                 created="2026-12-01T00:00:00+00:00", p2p=_curve(0.02, rng.uniform(250, 350)),
                                 copy_engine=_curve(0.5, 100.0))  # far slower than p2p: it must not be read
    cluster = load_cluster("h200x2")
    for kind in ("ag_mm", "mm_rs"):
        site = Site(kind=kind, m=8192, k=rng.choice([2048, 4096]), n=rng.choice([1536, 4096]), world=2)
        named = predict(site, Plan(strategy="ring", chunks=2), cluster, CalibrationView(profile))
        p2p = predict(site, Plan(strategy="ring", chunks=2, transport="p2p"), cluster, CalibrationView(profile))
        assert named.total_ms == pytest.approx(p2p.total_ms, rel=1e-9)
