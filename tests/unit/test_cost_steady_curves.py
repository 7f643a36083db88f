"""Collective curves timed back to back (a profile's ``collectives_steady``): steady-state
predictions read them, predictions from idle and profiles without them do not change."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from hocket.calibrate import CalibrateConfig, default_config
from hocket.calibrate.runner import CAPTURED_TRANSFERS, STEADY_P2P, STEADY_TRANSFERS, _steps, captured_sizes
from hocket.core.plan import Plan
from hocket.core.site import Site
from hocket.cost.calibration import CalibrationView
from hocket.hardware import load_cluster
from hocket.hardware.profile import CalibrationProfile, CurvePoint, load_profile, save_profile
from hocket.plan.search import predict_cost_fn
from hocket.strategies import predict

V3 = Path(__file__).resolve().parents[2] / "benchmarks/results/calibration/h200x2-nccl-full-v3.json"
MiB = 2 ** 20


@pytest.fixture
def rng() -> random.Random:
    return random.Random()


def _old() -> CalibrationProfile:
    return CalibrationProfile.from_dict(json.loads(V3.read_text()))


def _with_steady(profile: CalibrationProfile, speedup: float) -> CalibrationProfile:
    """The profile plus back-to-back points ``speedup`` x faster than its from-idle ones."""
    steady = {op: tuple(CurvePoint(bytes=p.bytes, ms=p.ms / speedup) for p in points if p.bytes >= 4 * MiB)
              for op, points in profile.collectives.items() if op in ("all_gather", "reduce_scatter")}
    return replace(profile, collectives_steady=steady)


def test_old_profiles_have_none_and_round_trip_without_it(tmp_path, rng):
    old = _old()
    assert old.collectives_steady == {} and "collectives_steady" not in old.to_dict()
    view = CalibrationView(old)
    assert view.for_steady_state() is view
    new = replace(_with_steady(old, rng.uniform(1.2, 1.6)), created="2026-12-01T00:00:00+00:00")  # written now
    loaded = load_profile(save_profile(new, path=tmp_path / "p.json"), expected=None)
    assert loaded is not None and loaded.collectives_steady == new.collectives_steady


@pytest.mark.parametrize("seed", range(3))
def test_steady_predictions_read_the_back_to_back_curve(seed):
    rng = random.Random(seed)
    cluster = load_cluster("h200x2")
    old = _old()
    new = _with_steady(old, rng.uniform(1.3, 1.6))
    view = CalibrationView(new)
    steady_view = view.for_steady_state()
    assert steady_view is view.for_steady_state() and steady_view.steady
    assert steady_view.curve("all_gather") != view.curve("all_gather")
    assert steady_view.curve("all_reduce") == view.curve("all_reduce")  # no back-to-back points: from idle
    kind = rng.choice(["ag_mm", "mm_rs"])
    site = Site(kind=kind, m=8192, k=rng.choice([1024, 2048, 4096]), n=rng.choice([1536, 4096]), world=2,
                dtype="bfloat16")
    plan = rng.choice([Plan(), Plan(strategy="chunked", chunks=rng.choice([2, 4]))])
    assert predict(site, plan, cluster, new).total_ms == predict(site, plan, cluster, old).total_ms
    before = predict(site, plan, cluster, old, steady_state=True)
    after = predict(site, plan, cluster, new, steady_state=True)
    assert after.comm_ms < before.comm_ms
    assert float(predict_cost_fn(cluster, new, steady_state=True)(site, plan)) == pytest.approx(after.total_ms)


def test_config_and_progress_count_the_steady_points(rng):
    config = default_config(quick=rng.choice([True, False]), device_type="cuda")
    assert config.steady_sizes_bytes and config.steady_reps >= 2
    assert default_config(quick=False, device_type="cpu").steady_sizes_bytes == ()
    off = replace(config, steady_sizes_bytes=())
    gpu = torch.device("cuda")
    steady = len(config.collectives) + len(STEADY_P2P) + len(STEADY_TRANSFERS)  # the P2P exchange and relay too
    assert _steps(config, gpu) == _steps(off, gpu) + steady * len(config.steady_sizes_bytes) + \
        len(CAPTURED_TRANSFERS) * len(captured_sizes(config))
    assert _steps(config, torch.device("cpu")) == _steps(off, torch.device("cpu")) + \
        steady * len(config.steady_sizes_bytes)  # no graphs on CPU
    good = dict(quick=True, dtype="float32", gemm_shapes=((8, 8, 8),), sizes_bytes=(1024,),
                contention_shape=(8, 8, 8), contention_bytes=1024)
    for bad in ({"steady_sizes_bytes": (0,)}, {"steady_reps": 1}, {"steady_reps": True}):
        with pytest.raises(ValueError, match="steady_"):
            CalibrateConfig(**good, **bad)


def test_steady_and_replayed_ring_steps_read_the_back_to_back_p2p_curve(rng):
    old = _old()
    speedup = rng.uniform(1.3, 1.8)
    steady = {"p2p": tuple(CurvePoint(bytes=p.bytes, ms=p.ms / speedup) for p in old.p2p if p.bytes >= 4 * MiB)}
    new = replace(old, collectives_steady=steady)
    view = CalibrationView(new)
    assert view.for_steady_state().curve("p2p") != view.curve("p2p")
    assert view.for_captured().curve("p2p") == view.for_steady_state().curve("p2p")
    cluster = load_cluster("h200x2")
    site = Site(kind="mm_rs", m=8192, k=2048, n=4096, world=2, dtype="bfloat16")
    ring = Plan(strategy="ring", chunks=1, transport="p2p")
    assert predict(site, ring, cluster, new).total_ms == predict(site, ring, cluster, old).total_ms  # from idle
    assert predict(site, ring, cluster, new, captured=True).comm_ms < predict(site, ring, cluster, old,
                                                                             captured=True).comm_ms
