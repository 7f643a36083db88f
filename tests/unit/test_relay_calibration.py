"""The host relay's measured curve (profile ``host_relay``): stored and read back, priced from, and
measured by ``hocket calibrate`` only where the relay exists."""

from __future__ import annotations

import pytest

from hocket.calibrate.issue import relay_issue_us
from hocket.calibrate.runner import CURVE_TRANSFERS
from hocket.calibrate.transfers import make_transfer
from hocket.cost.calibration import CalibrationView
from hocket.cost.comm import DEFAULT_HOST_STAGE_MESSAGE_BYTES, collective, group_topology, relay_ratio
from hocket.hardware import load_preset
from hocket.hardware.profile import CalibrationProfile, CurvePoint

MIB = 2**20
TOPO = group_topology(load_preset("h200-host-staged"), [0, 1])
SIZES = (4 * MIB, 16 * MIB, 64 * MIB, 256 * MIB)


def relay_ms(op: str, nbytes: float, view=None) -> float:
    return collective(op, nbytes, TOPO, transport="host_staged", calibration=view,
                      message_bytes=DEFAULT_HOST_STAGE_MESSAGE_BYTES).ms


def profile_at(factor: float) -> CalibrationProfile:
    """A profile whose relay all-gathers took ``factor`` times the link model's price."""
    points = tuple(CurvePoint(bytes=b, ms=factor * relay_ms("all_gather", b)) for b in SIZES)
    return CalibrationProfile(fingerprint="test", host_relay=points)


def test_the_curve_round_trips_and_old_profiles_read_without_it():
    profile = profile_at(0.6)
    again = CalibrationProfile.from_dict(profile.to_dict())
    assert again.host_relay == tuple(sorted(profile.host_relay, key=lambda p: p.bytes))
    bare = CalibrationProfile(fingerprint="test").to_dict()
    assert "host_relay" not in bare  # old files read and write the same
    assert CalibrationProfile.from_dict(bare).host_relay == ()


@pytest.mark.parametrize("factor", [0.6, 1.5])
@pytest.mark.parametrize("nbytes", [16 * MIB, 40 * MIB, 64 * MIB])
def test_a_measured_relay_scales_the_price_of_its_all_gathers(factor, nbytes):
    view = CalibrationView(profile_at(factor))
    assert relay_ms("all_gather", nbytes, view) == pytest.approx(factor * relay_ms("all_gather", nbytes), rel=0.03)


def test_other_collectives_take_the_ratio_at_their_busier_direction():
    view = CalibrationView(profile_at(0.6))
    for op in ("reduce_scatter", "all_reduce"):
        ratio = relay_ratio(op, 64 * MIB, TOPO, view, DEFAULT_HOST_STAGE_MESSAGE_BYTES)
        assert ratio == pytest.approx(0.6, rel=0.03)
        assert relay_ms(op, 64 * MIB, view) < relay_ms(op, 64 * MIB)


def test_without_the_curve_the_link_model_prices_alone():
    view = CalibrationView(CalibrationProfile(fingerprint="test"))
    assert relay_ratio("all_gather", 64 * MIB, TOPO, view, DEFAULT_HOST_STAGE_MESSAGE_BYTES) == 1.0
    assert relay_ms("all_gather", 64 * MIB, view) == relay_ms("all_gather", 64 * MIB)


def test_price_stays_monotone_in_bytes_with_the_curve():
    view = CalibrationView(profile_at(0.6))
    prices = [relay_ms("all_gather", b, view) for b in (MIB, 8 * MIB, 32 * MIB, 128 * MIB, 512 * MIB)]
    assert prices == sorted(prices) and all(p > 0 for p in prices)


def test_calibrate_measures_the_relay_only_where_it_exists():
    assert "host_relay" in CURVE_TRANSFERS
    import torch
    assert make_transfer("host_relay", MIB, dtype="float32", group=None, device=torch.device("cpu")) is None
    assert relay_issue_us(group=None, device=torch.device("cpu"), dtype=torch.float32, iters=3) == {}
