"""`hocket calibrate --quick` on real gloo ranks writes a profile that loads back."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from hocket.hardware import fingerprint
from hocket.calibrate import CalibrateConfig, build_profile, measure
from hocket.calibrate.config import COLLECTIVES
from hocket.hardware.profile import CalibrationProfile, load_profile

TINY = CalibrateConfig(quick=True, dtype="float32", gemm_shapes=((64, 48, 32),), gemm_chunks=(1, 4),
                       sizes_bytes=(4096, 65536), contention_shape=(64, 64, 64), contention_bytes=65536,
                       warmup=1, iters=2)


def _measure_tiny(config: CalibrateConfig):
    return measure(config, device="cpu", show_progress=False)


def test_measure_on_ranks_gives_one_consistent_result(pool):
    results = pool.run(_measure_tiny, TINY)
    first = results[0]
    assert first.world_size == pool.world_size and first.backend == "gloo"
    # every time is a maximum over ranks, so all ranks return the same numbers
    assert all(r.curves == first.curves and r.gemm == first.gemm for r in results)
    assert [(p.m, p.k, p.n) for p in first.gemm] == [(64, 48, 32), (16, 48, 32)]
    assert set(first.curves) == set(COLLECTIVES) | {"p2p"}
    for op, points in first.curves.items():
        assert [p.bytes for p in points] == [4096, 65536], op
        assert all(p.ms > 0 for p in points)
    assert set(first.contention) == {"cpu_collective", "cpu_p2p"}
    profile = build_profile(first, config=TINY, fingerprint={"hash": "0123456789abcdef"})
    again = CalibrationProfile.from_dict(json.loads(profile.to_json()))
    assert again.to_dict() == profile.to_dict()


@pytest.mark.timeout(240)
def test_cli_quick_calibration_writes_a_loadable_profile(tmp_path):
    env = dict(os.environ, HOCKET_CACHE_DIR=str(tmp_path / "cache"))
    env.pop("HOCKET_PROFILE", None)
    done = subprocess.run([sys.executable, "-m", "hocket.cli.main", "calibrate", "--quick", "--world", "2",
                           "--backend", "gloo", "--no-progress", "--json", "--timeout-s", "200",
                           "--profile-dir", str(tmp_path / "profiles")],
                          capture_output=True, text=True, env=env, timeout=230)
    assert done.returncode == 0, done.stderr[-3000:]
    printed = CalibrationProfile.from_dict(json.loads(done.stdout))
    files = list((tmp_path / "profiles").glob("*.json"))
    assert [f.name for f in files] == [f"{printed.fingerprint}.json"]
    assert printed.fingerprint == fingerprint()["hash"]  # found by load_profile() on this machine
    loaded = load_profile(files[0], expected=printed.fingerprint)
    assert loaded is not None and loaded.world_size == 2 and loaded.quick
    assert loaded.gemm and all(p.tflops > 0 for p in loaded.gemm)
    assert set(loaded.collectives) == set(COLLECTIVES) and loaded.p2p
    assert "cpu_collective" in loaded.contention


def test_back_to_back_collective_points_on_ranks(pool):
    config = CalibrateConfig(quick=True, dtype="float32", gemm_shapes=((32, 32, 32),), gemm_chunks=(1,),
                             sizes_bytes=(4096,), collectives=("all_gather", "reduce_scatter"),
                             steady_sizes_bytes=(8192, 65536), steady_reps=3, contention_shape=(32, 32, 32),
                             contention_bytes=4096, warmup=1, iters=2)
    results = pool.run(_measure_tiny, config)
    first = results[0]
    assert all(r.steady_curves == first.steady_curves for r in results)  # maxima over ranks
    assert set(first.steady_curves) == {"all_gather", "reduce_scatter", "p2p"}  # the P2P exchange too
    for op, points in first.steady_curves.items():
        assert [p.bytes for p in points] == [8192, 65536] and all(p.ms > 0 for p in points), op
    profile = build_profile(first, config=config, fingerprint={"hash": "0123456789abcdef"})
    assert set(profile.collectives_steady) == {"all_gather", "reduce_scatter", "p2p"}
    assert CalibrationProfile.from_dict(json.loads(profile.to_json())).collectives_steady == profile.collectives_steady
