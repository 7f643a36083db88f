"""Calibration profiles: JSON round trip; corrupt, newer or foreign files are reported and ignored."""

from __future__ import annotations

import json
import random
import warnings

import pytest

from hocket.hardware.profile import (
    CalibrationProfile,
    ContentionPoint,
    CurvePoint,
    GemmPoint,
    ProfileWarning,
    load_profile,
    profile_dir,
    profile_file,
    save_profile,
)


def _random_profile(fingerprint: str, rng: random.Random) -> CalibrationProfile:
    curve = lambda: tuple(CurvePoint(bytes=2 ** rng.randint(10, 28), ms=rng.uniform(0.01, 50)) for _ in range(4))  # noqa: E731
    return CalibrationProfile(
        fingerprint=fingerprint, fingerprint_data={"devices": {"CPU rank": 2}}, world_size=rng.randint(2, 8),
        backend="gloo", device_type="cpu", quick=True, created="2026-01-01T00:00:00Z",
        gemm=tuple(GemmPoint(m=rng.randint(1, 8192), k=rng.randint(1, 8192), n=rng.randint(1, 8192),
                             dtype="float32", tflops=rng.uniform(0.01, 5), ms=rng.uniform(0.01, 100))
                   for _ in range(5)),
        collectives={op: curve() for op in ("all_gather", "reduce_scatter", "all_reduce", "all_to_all")},
        p2p=curve(),
        contention={"cpu_collective": ContentionPoint(gemm_slowdown=rng.uniform(1, 3),
                                                      transfer_slowdown=rng.uniform(1, 3))})


@pytest.fixture
def rng() -> random.Random:
    return random.Random()


def test_round_trip_through_disk(tmp_path, rng):
    profile = _random_profile("abc123def4567890", rng)
    path = save_profile(profile, directory=tmp_path)
    assert path == tmp_path / "abc123def4567890.json"
    loaded = load_profile(expected="abc123def4567890", directory=tmp_path)
    assert loaded is not None
    assert loaded.to_dict() == profile.to_dict() == json.loads(profile.to_json())
    assert loaded.collectives["all_gather"] == tuple(sorted(profile.collectives["all_gather"], key=lambda p: (p.bytes, p.ms)))
    assert loaded.gemm == profile.gemm and loaded.contention == profile.contention


def test_missing_default_profile_is_quietly_none(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert load_profile(expected="0011223344556677", directory=tmp_path) is None


def test_default_location_follows_cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("HOCKET_CACHE_DIR", str(tmp_path / "cache"))
    assert profile_dir() == tmp_path / "cache" / "profiles"
    assert profile_file("abcd") == tmp_path / "cache" / "profiles" / "abcd.json"
    with pytest.raises(ValueError, match="fingerprint_hash"):
        profile_file("../escape")


@pytest.mark.parametrize("content,reason", [
    ("{not json", "corrupt"),
    ("[1, 2]", "corrupt"),
    (json.dumps({"version": 1}), "fingerprint"),
    (json.dumps({"version": 99, "fingerprint": "x"}), "newer"),
    (json.dumps({"version": 1, "fingerprint": "x", "gemm": [{"m": -4}]}), "gemm"),
    (json.dumps({"version": 1, "fingerprint": "x", "p2p": [[1024, -1.0]]}), "p2p"),
    (json.dumps({"version": 1, "fingerprint": "x", "contention": {"k": {"gemm_slowdown": 1}}}), "contention"),
    (json.dumps({"version": 1, "fingerprint": "x", "pickle": "gASVAAAA"}), "unknown fields"),
    (json.dumps({"version": 1, "fingerprint": "x", "collectives_steady": {"all_gather": [[1024]]}}),
     "collectives_steady"),
    (json.dumps({"version": 1, "fingerprint": "x", "gemm_sustained": {"m": 8192}}), "gemm_sustained"),
    (json.dumps({"version": 1, "fingerprint": "x", "gemm_sustained": {"m": 1, "k": 1, "n": 1, "dtype": "bfloat16",
                                                                       "burst_ms": -1.0, "sustained_ms": 1.0,
                                                                       "duration_s": 1.0}}), "gemm_sustained"),
])
def test_corrupt_profile_warns_with_file_and_reason(tmp_path, content, reason):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.warns(ProfileWarning, match=f"bad.json.*corrupt.*{reason}" if reason != "corrupt" else "bad.json.*corrupt"):
        assert load_profile(path, expected=None) is None


def test_foreign_profile_warns_and_is_ignored(tmp_path, rng):
    path = save_profile(_random_profile("ffff0000ffff0000", rng), path=tmp_path / "other.json")
    with pytest.warns(ProfileWarning, match="other.json.*foreign.*ffff0000ffff0000"):
        assert load_profile(path, expected="1234567812345678") is None
    assert load_profile(path, expected="ffff0000ffff0000") is not None


def test_env_var_names_the_profile(tmp_path, monkeypatch, rng):
    path = save_profile(_random_profile("aaaa1111bbbb2222", rng), path=tmp_path / "chosen.json")
    monkeypatch.setenv("HOCKET_PROFILE", str(path))
    assert load_profile(expected="aaaa1111bbbb2222").fingerprint == "aaaa1111bbbb2222"
    monkeypatch.setenv("HOCKET_PROFILE", str(tmp_path / "absent.json"))
    with pytest.warns(ProfileWarning, match="absent.json.*does not exist"):
        assert load_profile(expected=None) is None


def test_auto_expectation_uses_this_machines_fingerprint(tmp_path, rng):
    from hocket.hardware import fingerprint

    mine = fingerprint()["hash"]
    save_profile(_random_profile(mine, rng), directory=tmp_path)
    assert load_profile(directory=tmp_path).fingerprint == mine
