"""Host issue items timed in sittings spread over a calibration: the profile keeps each item's median."""

from __future__ import annotations

import io
import random
import statistics

import pytest

from hocket.calibrate import build_profile, default_config
from hocket.calibrate.config import ISSUE_CHECKPOINTS, SITTING_CHECKPOINTS
from hocket.calibrate.issue import combine_sittings
from hocket.calibrate.runner import Measurements, _steps
from hocket.hardware.profile import CalibrationProfile, ProfileWarning, load_profile, save_profile


def _sittings(rng: random.Random, n: int) -> list[dict[str, float]]:
    base = {"launch": rng.uniform(10, 15), "host_copy": rng.uniform(25, 35), "entry": rng.uniform(40, 70)}
    out = [{k: v * rng.uniform(0.95, 1.05) for k, v in base.items()} for _ in range(n)]
    out[rng.randrange(n)] = {k: v * rng.uniform(1.5, 2.0) for k, v in base.items()}  # one slow spell
    return out


@pytest.mark.parametrize("seed", range(4))
def test_each_item_keeps_its_median_so_one_slow_sitting_is_outvoted(seed):
    rng = random.Random(seed)
    sittings = _sittings(rng, 3)
    kept = combine_sittings(sittings)
    assert set(kept) == {"launch", "host_copy", "entry"}
    for item, us in kept.items():
        readings = sorted(s[item] for s in sittings)
        assert us == readings[1] and us < max(readings) / 1.3


def test_an_item_some_sittings_lack_keeps_the_median_of_the_rest():
    kept = combine_sittings([{"launch": 10.0, "p2p": 50.0}, {"launch": 14.0}, {"launch": 12.0, "p2p": 70.0}])
    assert kept == {"launch": 12.0, "p2p": statistics.median([50.0, 70.0])}
    assert combine_sittings([]) == {}


def test_sittings_are_spread_over_the_run_and_always_end_it():
    for n, points in SITTING_CHECKPOINTS.items():
        assert len(points) == len(set(points)) == n and points[-1] == "end"
        assert list(points) == sorted(points, key=ISSUE_CHECKPOINTS.index)
    assert SITTING_CHECKPOINTS[3][0] == "start"


@pytest.mark.parametrize("bad", [0, 5, True, 2.0, "3"])
def test_a_bad_sitting_count_names_the_field(bad):
    config = default_config(quick=True, device_type="cuda")
    with pytest.raises(ValueError, match=r"issue_sittings=.*must be an int in \[1, 4\]"):
        type(config)(**{**config.__dict__, "issue_sittings": bad})


def test_the_full_gpu_grid_sits_three_times_and_quick_grids_once():
    import torch

    assert default_config(quick=False, device_type="cuda").issue_sittings == 3
    assert default_config(quick=True, device_type="cuda").issue_sittings == 1
    full = default_config(quick=False, device_type="cuda")
    one = type(full)(**{**full.__dict__, "issue_sittings": 1})
    assert _steps(full, torch.device("cuda")) - _steps(one, torch.device("cuda")) == 2  # one progress step each
    assert _steps(full, torch.device("cpu")) == _steps(one, torch.device("cpu"))  # CPU ranks time no issue items


def test_the_profile_keeps_the_sittings_and_reads_them_back(tmp_path):
    rng = random.Random(5)
    sittings = _sittings(rng, 3)
    measured = Measurements(issue_us=combine_sittings(sittings), issue_sittings=sittings, world_size=1,
                            backend="nccl", device_type="cuda")
    config = default_config(quick=False, device_type="cuda")
    profile = build_profile(measured, config=config, fingerprint={"hash": "f" * 16})
    assert [dict(s) for s in profile.issue_sittings] == sittings
    loaded = load_profile(save_profile(profile, path=tmp_path / "p.json"), expected=None)
    assert loaded == profile
    one = build_profile(Measurements(issue_us=sittings[0], issue_sittings=sittings[:1]), config=config,
                        fingerprint={"hash": "f" * 16})
    assert one.issue_sittings == () and "issue_sittings" not in one.to_dict()


@pytest.mark.parametrize("bad", [{"launch": 1.0}, [[1.0]], [{"launch": -1.0}], [{"launch": "fast"}]])
def test_a_bad_sittings_field_makes_the_profile_corrupt(tmp_path, bad):
    data = CalibrationProfile(fingerprint="f" * 16, created="2026-12-01T00:00:00+00:00").to_dict()
    data["issue_sittings"] = bad
    path = tmp_path / "p.json"
    import json

    path.write_text(json.dumps(data))
    with pytest.warns(ProfileWarning, match="issue_sittings"):
        assert load_profile(path, expected=None) is None


def test_hocket_calibrate_prints_every_sitting_and_the_kept_value(monkeypatch):
    from rich.console import Console

    from hocket.cli import calibrate as cli

    rng = random.Random(9)
    sittings = _sittings(rng, 3)
    profile = CalibrationProfile(fingerprint="f" * 16, device_type="cuda", issue_us=combine_sittings(sittings),
                                 issue_sittings=tuple(sittings))
    buffer = io.StringIO()
    monkeypatch.setattr("rich.console.Console", lambda *a, **k: Console(file=buffer, width=200))
    cli._print_tables(profile)
    text = buffer.getvalue()
    assert "median of 3 sittings" in text and "sitting 3" in text
    assert f"{profile.issue_us['host_copy']:.1f}" in text and f"{sittings[0]['host_copy']:.1f}" in text
