"""The profile's ``issue_us`` (host issue cost per item): written by ``hocket calibrate``,
validated on load, used by the cost model."""

from __future__ import annotations

import json
import random

import pytest
import torch

from hocket.calibrate import build_profile, default_config
from hocket.calibrate.issue import measure_issue_us
from hocket.calibrate.runner import Measurements
from hocket.core.plan import Plan
from hocket.core.site import Site
from hocket.hardware import load_preset
from hocket.hardware.profile import CalibrationProfile, ProfileFormatError, load_profile, save_profile
from hocket.strategies import predict


def test_issue_us_round_trips_through_disk(tmp_path):
    rng = random.Random()
    issue = {"launch": rng.uniform(1, 30), "collective": rng.uniform(10, 80), "p2p": rng.uniform(10, 120)}
    profile = CalibrationProfile(fingerprint="abc123", issue_us=issue)
    path = save_profile(profile, path=tmp_path / "p.json")
    loaded = load_profile(path, expected=None)
    assert dict(loaded.issue_us) == pytest.approx(issue)


@pytest.mark.parametrize("bad", [{"launch": -1.0}, {"launch": "fast"}, ["launch", 3]])
def test_bad_issue_us_is_a_format_error_naming_the_field(bad):
    data = json.loads(CalibrationProfile(fingerprint="abc123").to_json())
    data["issue_us"] = bad
    with pytest.raises(ProfileFormatError, match="issue_us"):
        CalibrationProfile.from_dict(data)


def test_profiles_without_issue_us_still_load():
    data = json.loads(CalibrationProfile(fingerprint="abc123").to_json())
    del data["issue_us"]
    assert CalibrationProfile.from_dict(data).issue_us == {}


def test_measure_issue_us_is_empty_on_cpu_ranks():
    assert measure_issue_us(group=None, device=torch.device("cpu"), dtype=torch.float32) == {}


def test_build_profile_carries_the_measured_issue_costs():
    measured = Measurements(issue_us={"launch": 7.5, "collective": 33.0}, device_type="cuda", world_size=2)
    config = default_config(quick=True, device_type="cuda")
    profile = build_profile(measured, config=config, fingerprint={"hash": "abc123"})
    assert dict(profile.issue_us) == {"launch": 7.5, "collective": 33.0}


def test_measured_issue_costs_change_the_prediction():
    site = Site(kind="mm_ar", m=1024, k=512, n=1024, world=2)
    plan = Plan(strategy="chunked", chunks=8)
    h200 = load_preset("h200x2")
    fast = CalibrationProfile(fingerprint="t", issue_us={"launch": 1.0, "collective": 2.0, "entry": 0.0})
    slow = CalibrationProfile(fingerprint="t", issue_us={"launch": 50.0, "collective": 200.0, "entry": 100.0})
    assert predict(site, plan, h200, slow).total_ms > predict(site, plan, h200, fast).total_ms


def test_interleaved_host_us_keeps_each_items_median_round(monkeypatch):
    """A slow spell of the host lands on one round of every item, not on all of one item."""
    import random

    from hocket.calibrate import issue

    rng = random.Random(41)
    clock = [0.0]
    monkeypatch.setattr(issue.time, "perf_counter", lambda: clock[0])
    cost_us = {"a": rng.uniform(5, 50), "b": rng.uniform(50, 200), "c": rng.uniform(1, 5)}
    calls = []
    spell = {"round": 2}

    def item(name):
        def fn():
            calls.append(name)
            slow = 3.0 if spell["round"] == len(calls) // 60 else 1.0  # one round's worth of calls runs slow
            clock[0] += cost_us[name] * slow / 1e6
        return fn

    got = issue.interleaved_host_us({name: item(name) for name in cost_us}, iters=100, rounds=5)
    assert set(got) == set(cost_us)
    for name, us in cost_us.items():
        assert got[name] == pytest.approx(us, rel=1e-6)
    assert calls[:3] == ["a", "b", "c"]  # warm-up once each, in name order, then the rounds
    assert len(calls) == 3 + 3 * 100
    with pytest.raises(ValueError, match="rounds"):
        issue.interleaved_host_us({"a": item("a")}, iters=10, rounds=0)
