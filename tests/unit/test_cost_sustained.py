"""The sustained GEMM ceiling: a profile's ``gemm_sustained`` (its fastest GEMM back to back) holds
steady-state GPU GEMMs under its rate and changes nothing else; profiles without it load and price as before."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from hocket.calibrate import CalibrateConfig, default_config
from hocket.calibrate.sustained import back_to_back_ms, measure_sustained
from hocket.core.plan import Plan
from hocket.core.site import Site
from hocket.cost.calibration import CalibrationView
from hocket.cost.compute import gemm_time
from hocket.hardware import load_cluster
from hocket.hardware.profile import CalibrationProfile, SustainedGemm, load_profile, save_profile
from hocket.plan.search import predict_cost_fn
from hocket.strategies import pipeline_stages, predict
from hocket.timing.timer import TimingConfig

V3 = Path(__file__).resolve().parents[2] / "benchmarks/results/calibration/h200x2-nccl-full-v3.json"


@pytest.fixture
def rng() -> random.Random:
    return random.Random()


def _old_profile() -> CalibrationProfile:
    return CalibrationProfile.from_dict(json.loads(V3.read_text()))


def _sustained(rng: random.Random, tflops: float) -> SustainedGemm:
    """A measured ceiling of ``tflops`` (8192^3 back to back)."""
    sustained = 2.0 * 8192 ** 3 / (tflops * 1e9)
    return SustainedGemm(m=8192, k=8192, n=8192, dtype="bfloat16", burst_ms=sustained / rng.uniform(1.0, 1.1),
                         sustained_ms=sustained, duration_s=rng.uniform(1.0, 2.0))


def _compute_bound_site(rng: random.Random) -> Site:
    kind = rng.choice(["ag_mm", "mm_rs"])
    return Site(kind=kind, m=rng.choice([4096, 8192]), k=rng.choice([8192, 12288, 14336]),
                n=rng.choice([8192, 12288]), world=2, dtype="bfloat16")


def test_old_profile_has_no_field_and_round_trips_without_it():
    profile = _old_profile()
    assert profile.gemm_sustained is None
    assert "gemm_sustained" not in profile.to_dict()
    assert CalibrationView(profile).gemm_sustained_tflops() is None


def test_field_round_trips_through_disk(tmp_path, rng):
    profile = replace(_old_profile(), gemm_sustained=_sustained(rng, rng.uniform(600, 700)),
                      created="2026-12-01T00:00:00+00:00")  # written now: no superseded parts to drop
    path = save_profile(profile, path=tmp_path / "p.json")
    loaded = load_profile(path, expected=None)
    assert loaded is not None and loaded.gemm_sustained == profile.gemm_sustained
    assert CalibrationView(loaded).gemm_sustained_tflops() == pytest.approx(loaded.gemm_sustained.tflops)


@pytest.mark.parametrize("seed", range(4))
def test_steady_gemms_are_held_under_the_ceiling_and_cold_ones_are_not(seed):
    rng = random.Random(seed)
    cluster = load_cluster("h200x2")
    old = _old_profile()
    site = _compute_bound_site(rng)
    plan = rng.choice([Plan(), Plan(strategy="chunked", chunks=rng.choice([2, 4]))])
    before = predict(site, plan, cluster, old, steady_state=True)
    burst_tflops = site.flops / (before.compute_ms * 1e9)  # the profile's rate for this site's GEMMs
    ceiling = burst_tflops * rng.uniform(0.85, 0.95)
    new = replace(old, gemm_sustained=_sustained(rng, ceiling))
    assert predict(site, plan, cluster, new).total_ms == predict(site, plan, cluster, old).total_ms
    after = predict(site, plan, cluster, new, steady_state=True)
    assert after.compute_ms > before.compute_ms and after.total_ms > before.total_ms
    # stage by stage: no GEMM beats the ceiling, none is slowed beyond it (launches apart)
    cold_stages = pipeline_stages(site, plan, cluster, old, steady_state=True)
    hot_stages = pipeline_stages(site, plan, cluster, new, steady_state=True)
    gemms = [(c, h) for c, h in zip(cold_stages, hot_stages) if h.op == "gemm"]
    assert gemms and all(c.name == h.name for c, h in gemms)
    for c, h in gemms:
        at_ceiling_ms = h.flops / (ceiling * 1e9)
        assert at_ceiling_ms * (1 - 1e-9) <= h.duration_ms <= max(c.duration_ms, at_ceiling_ms + 0.02)
    # a ceiling above every GEMM's burst rate holds nothing back
    loose = replace(old, gemm_sustained=_sustained(rng, burst_tflops * 2))
    assert predict(site, plan, cluster, loose, steady_state=True).total_ms == pytest.approx(before.total_ms)
    # the planner's cost function prices what predict prices
    cost = predict_cost_fn(cluster, new, steady_state=True)
    assert float(cost(site, plan)) == pytest.approx(after.total_ms)


def test_no_profile_and_cpu_ranks_are_unchanged(rng):
    gpu = load_cluster("h200x2").device(0)
    m, k, n = (rng.choice([1024, 4096, 8192]) for _ in range(3))
    plain = gemm_time(gpu, m=m, k=k, n=n, dtype="bfloat16", itemsize=2)
    assert gemm_time(gpu, m=m, k=k, n=n, dtype="bfloat16", itemsize=2, sustained=True) == plain
    flops_tflop = 2.0 * m * k * n / 1e12
    ceiling = rng.uniform(300, 700)
    view = CalibrationView(replace(_old_profile(), gemm_sustained=_sustained(rng, ceiling)))
    cold = gemm_time(gpu, m=m, k=k, n=n, dtype="bfloat16", itemsize=2, calibration=view)
    hot = gemm_time(gpu, m=m, k=k, n=n, dtype="bfloat16", itemsize=2, calibration=view, sustained=True)
    assert hot.compute_ms == pytest.approx(max(cold.compute_ms, flops_tflop / ceiling * 1e3))
    assert hot.memory_ms == cold.memory_ms and hot.launch_ms == cold.launch_ms
    cpu = replace(gpu, sm_count=None)
    assert gemm_time(cpu, m=m, k=k, n=n, dtype="bfloat16", itemsize=2, calibration=view, sustained=True) == \
        gemm_time(cpu, m=m, k=k, n=n, dtype="bfloat16", itemsize=2, calibration=view)


def test_the_sustained_phase_runs_the_grids_fastest_whole_gemm(rng):
    from hocket.calibrate.runner import fastest_whole_gemm
    from hocket.hardware.profile import GemmPoint

    config = default_config(quick=False, device_type="cuda")
    rates = {shape: rng.uniform(400, 800) for shape in config.gemm_shapes}
    points = [GemmPoint(m=m, k=k, n=n, dtype="bfloat16", tflops=t, ms=2.0 * m * k * n / (t * 1e9))
              for (m, k, n), t in rates.items()]
    points.append(GemmPoint(m=1, k=8192, n=8192, dtype="bfloat16", tflops=5000.0, ms=1e-3))  # a row chunk: not whole
    assert fastest_whole_gemm(config, points) == max(rates, key=rates.get)
    assert fastest_whole_gemm(config, []) == config.contention_shape


def test_measurement_is_gpu_only_and_validates_its_arguments():
    timing = TimingConfig(warmup=0, iters=1)
    a, b = torch.randn(8, 8), torch.randn(8, 8)
    call = lambda: torch.mm(a, b)  # noqa: E731
    assert measure_sustained(call, (8, 8, 8), dtype="float32", duration_s=1.0, timing=timing, group=None,
                             device=torch.device("cpu")) is None
    with pytest.raises(ValueError, match="duration_s"):
        measure_sustained(call, (8, 8, 8), dtype="float32", duration_s=-1.0, timing=timing, group=None,
                          device=torch.device("cpu"))
    with pytest.raises(ValueError, match="CUDA"):
        back_to_back_ms(call, calls=20, device=torch.device("cpu"))


def test_config_sustained_seconds(rng):
    assert default_config(quick=False, device_type="cuda").sustained_s > 0
    assert default_config(quick=False, device_type="cpu").sustained_s == 0
    good = dict(quick=True, dtype="float32", gemm_shapes=((8, 8, 8),), sizes_bytes=(1024,),
                contention_shape=(8, 8, 8), contention_bytes=1024)
    assert CalibrateConfig(**good, sustained_s=rng.uniform(0.1, 2.0)).sustained_s > 0
    for bad in (-1.0, 61.0, True, "2"):
        with pytest.raises(ValueError, match="sustained_s"):
            CalibrateConfig(**good, sustained_s=bad)


def test_progress_counts_the_sustained_phase_on_gpus_only(rng):
    from hocket.calibrate.runner import _steps

    config = default_config(quick=rng.choice([True, False]), device_type="cuda")
    off = replace(config, sustained_s=0.0)
    assert _steps(config, torch.device("cuda")) == _steps(off, torch.device("cuda")) + 1
    cpu = default_config(quick=True, device_type="cpu")
    assert _steps(replace(cpu, sustained_s=1.0), torch.device("cpu")) == _steps(cpu, torch.device("cpu"))
