"""The relay's back-to-back curve (``host_relay_steady``) in the steady-state price."""

from __future__ import annotations

from dataclasses import replace

import pytest

from hocket.calibrate.config import default_config
from hocket.calibrate.runner import Measurements, build_profile
from hocket.core.plan import Plan
from hocket.core.site import Site
from hocket.cost.calibration import calibration_view
from hocket.hardware import load_preset
from hocket.hardware.profile import CalibrationProfile, CurvePoint
from hocket.strategies import predict

CLUSTER = load_preset("h200-host-staged")
SITE = Site(kind="ag_mm", m=8192, k=4096, n=1536, dtype="bfloat16", world=2)
MiB = 1 << 20
IDLE = tuple(CurvePoint(bytes=b * MiB, ms=ms) for b, ms in ((4, 0.45), (16, 0.60), (64, 1.30), (256, 4.0)))
STEADY = tuple(CurvePoint(bytes=b * MiB, ms=ms) for b, ms in ((4, 0.10), (16, 0.30), (64, 0.95), (256, 3.5)))


def _profile(**extra) -> CalibrationProfile:
    return CalibrationProfile(fingerprint="toy", world_size=2, host_relay=IDLE, **extra)


def test_steady_prices_read_the_back_to_back_relay_curve():
    with_steady = _profile(host_relay_steady=STEADY)
    assert calibration_view(with_steady).curve("host_relay") == [(p.bytes, p.ms) for p in IDLE]
    assert calibration_view(with_steady).for_steady_state().curve("host_relay") == [(p.bytes, p.ms) for p in STEADY]
    assert calibration_view(_profile()).for_steady_state().curve("host_relay") == [(p.bytes, p.ms) for p in IDLE]
    bulk = Plan(transport="host_staged")
    # the relay moves 64 MiB gathered here: the steady curve is ~27% faster there, so is the price
    idle, steady = (predict(SITE, bulk, CLUSTER, p, steady_state=True).total_ms for p in (_profile(), with_steady))
    assert steady < idle
    assert predict(SITE, bulk, CLUSTER, with_steady).total_ms == pytest.approx(
        predict(SITE, bulk, CLUSTER, _profile()).total_ms)  # a call from idle keeps the from-idle curve
    again = CalibrationProfile.from_dict(with_steady.to_dict())
    assert again.host_relay_steady == STEADY and "host_relay_steady" not in _profile().to_dict()


def test_calibration_keeps_the_relay_apart_from_the_steady_collectives():
    measured = Measurements(steady_curves={"all_gather": [CurvePoint(bytes=MiB, ms=0.1)], "host_relay": list(STEADY)},
                            world_size=2, backend="nccl", device_type="cuda")
    profile = build_profile(measured, config=default_config(quick=True, device_type="cuda"),
                            fingerprint={"hash": "toy"})
    assert set(profile.collectives_steady) == {"all_gather"} and profile.host_relay_steady == STEADY


REPLAYED = tuple(CurvePoint(bytes=b * MiB, ms=ms) for b, ms in ((1, 0.07), (4, 0.12), (16, 0.33), (64, 0.97)))


def test_replayed_prices_read_the_captured_relay_curve():
    both = _profile(host_relay_steady=STEADY, host_relay_captured=REPLAYED)
    view = calibration_view(both)
    assert view.for_captured().curve("host_relay") == [(p.bytes, p.ms) for p in REPLAYED]
    assert view.for_steady_state().curve("host_relay") == [(p.bytes, p.ms) for p in STEADY]
    assert calibration_view(_profile(host_relay_steady=STEADY)).for_captured().curve("host_relay") == \
        [(p.bytes, p.ms) for p in STEADY]  # without a captured curve replays read the back-to-back one
    # a natural-order pipeline makes a relay call per piece: the replayed curve's small-size cost is paid 16 times
    natural = Plan(strategy="chunked", chunks=16, transport="host_staged")
    steady_only = predict(SITE, natural, CLUSTER, _profile(host_relay_steady=STEADY), captured=True).total_ms
    assert predict(SITE, natural, CLUSTER, both, captured=True).total_ms > steady_only
    again = CalibrationProfile.from_dict(both.to_dict())
    assert again.host_relay_captured == REPLAYED and "host_relay_captured" not in _profile().to_dict()


def test_calibration_keeps_the_replayed_relay_curve():
    measured = Measurements(captured_curves={"host_relay": list(REPLAYED)}, world_size=2, backend="nccl",
                            device_type="cuda")
    profile = build_profile(measured, config=default_config(quick=True, device_type="cuda"),
                            fingerprint={"hash": "toy"})
    assert profile.host_relay_captured == REPLAYED and profile.host_relay_steady == ()


def test_the_captured_curve_starts_at_a_mebibyte():
    from hocket.calibrate.runner import captured_sizes

    config = default_config(quick=False, device_type="cuda")
    assert captured_sizes(config) == (MiB, *sorted(config.steady_sizes_bytes))
    assert captured_sizes(replace(config, steady_sizes_bytes=())) == ()
