"""GEMM model: roofline + waves, chunking penalty, SM share, calibration scaling."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hocket.cost.calibration import CalibrationView
from hocket.cost.compute import gemm_ms, gemm_time, memory_ms, peak_tflops
from hocket.hardware import load_preset
from hocket.hardware.profile import CalibrationProfile, GemmPoint

H200 = load_preset("h200x1").device(0)
CPU = load_preset("cpu-host").device(0)


def _ms(device, m, k, n, **kw):
    return gemm_ms(device, m=m, k=k, n=n, dtype="bfloat16", itemsize=2, **kw)


@given(st.sampled_from([H200, CPU]), st.integers(1, 1 << 15), st.integers(1, 1 << 15), st.integers(1, 1 << 15),
       st.sampled_from(["m", "k", "n"]), st.integers(1, 4096))
def test_gemm_time_is_monotone_in_every_dimension(device, m, k, n, dim, extra):
    base = {"m": m, "k": k, "n": n}
    bigger = dict(base, **{dim: base[dim] + extra})
    assert _ms(device, **bigger) >= _ms(device, **base) > 0


def test_whole_gemm_is_near_the_datasheet_and_row_chunks_lose():
    whole = gemm_time(H200, m=8192, k=7168, n=8192, dtype="bfloat16", itemsize=2)
    assert 0.6 * 989 < whole.tflops < 0.9 * 989
    chunked_ms = 16 * _ms(H200, 512, 7168, 8192)
    assert chunked_ms > 1.05 * whole.ms  # every row chunk pays a wave tail and a launch
    narrow = gemm_time(H200, m=256, k=7168, n=1024, dtype="bfloat16", itemsize=2)
    assert narrow.tflops < 0.4 * whole.tflops  # a few tiles leave most SMs idle


def test_fewer_sms_never_speed_a_gemm_up_and_one_wave_gemms_suffer_most():
    one_wave = (128 * 11, 4096, 256 * 12)  # 132 tiles of 128x256 on 132 SMs
    full = _ms(H200, *one_wave)
    fewer = _ms(H200, *one_wave, sms=132 - 16)
    assert fewer > 1.15 * full  # the library re-tiles, yet a lost wave slot still shows
    big = (8192, 8192, 8192)
    assert 1.0 <= _ms(H200, *big, sms=116) / _ms(H200, *big) < fewer / full


def test_memory_bound_gemm_follows_bandwidth():
    t = gemm_time(H200, m=16, k=16384, n=16384, dtype="bfloat16", itemsize=2)
    assert t.bound == "memory"
    assert t.memory_ms == pytest.approx(16384 * 16384 * 2 / (4800 * 0.85 * 1e6), rel=0.01)


def test_calibration_ratio_scales_the_model_at_and_near_measured_points():
    m, k, n = 4096, 4096, 4096
    model = gemm_time(H200, m=m, k=k, n=n, dtype="bfloat16", itemsize=2)
    measured_tflops = model.tflops / 2  # the machine is twice as slow as the model says
    profile = CalibrationProfile(fingerprint="x", gemm=(GemmPoint(m=m, k=k, n=n, dtype="bfloat16",
                                                                  tflops=measured_tflops, ms=2 * model.ms),))
    view = CalibrationView(profile)
    assert _ms(H200, m, k, n, calibration=view) == pytest.approx(2 * model.ms, rel=1e-6)
    near = _ms(H200, m, k, 2 * n, calibration=view) / _ms(H200, m, k, 2 * n)
    assert near == pytest.approx(2.0, rel=1e-6)  # one point: the ratio carries everywhere


def test_unknown_peak_is_a_clear_error_and_cpu_has_a_default():
    with pytest.raises(ValueError, match="float64"):
        peak_tflops(H200, "float64")
    assert peak_tflops(CPU, "float32") > 0
    assert math.isfinite(memory_ms(CPU, 1e6))
    with pytest.raises(ValueError, match="m=0"):
        gemm_ms(H200, m=0, k=1, n=1, dtype="bfloat16", itemsize=2)


def _profile_of(points):
    """A profile whose GEMM points run ``factor`` times the model's time at ``(m, k, n)``."""
    gemm = []
    for (m, k, n), factor in points:
        model = gemm_time(H200, m=m, k=k, n=n, dtype="bfloat16", itemsize=2)
        gemm.append(GemmPoint(m=m, k=k, n=n, dtype="bfloat16", tflops=model.tflops / factor, ms=factor * model.ms))
    return CalibrationView(CalibrationProfile(fingerprint="x", gemm=tuple(gemm)))


@given(st.floats(0.6, 1.6), st.floats(0.6, 1.6), st.sampled_from([2, 4, 8, 16]), st.integers(0, 1 << 12))
def test_row_pieces_run_at_the_whole_gemms_measured_level(whole_factor, piece_factor, pieces, k_extra):
    # the whole GEMM measured slow or fast, its pieces measured in isolation at another level
    m, k, n = 8192, 2048 + k_extra, 8192
    view = _profile_of([((m, k, n), whole_factor), ((m // pieces, k, n), piece_factor)])
    whole = _ms(H200, m, k, n, calibration=view)
    piece = _ms(H200, m // pieces, k, n, calibration=view, level_m=m)
    model_penalty = pieces * _ms(H200, m // pieces, k, n) / _ms(H200, m, k, n)
    assert math.isfinite(piece) and piece > 0
    # the chunking penalty is the wave model's, whatever the isolated pieces measured
    assert pieces * piece / whole == pytest.approx(model_penalty, rel=1e-9)
    assert pieces * piece >= whole  # cutting never makes the same work cheaper
    alone = _ms(H200, m // pieces, k, n, calibration=view)  # read at its own shape: the isolated point
    assert alone == pytest.approx(piece_factor * _ms(H200, m // pieces, k, n), rel=1e-9)


def test_level_m_is_checked():
    with pytest.raises(ValueError, match="level_m=0"):
        _ms(H200, 64, 64, 64, level_m=0)
    assert _ms(H200, 64, 64, 64, level_m=None) == _ms(H200, 64, 64, 64)


@given(st.integers(9, 14), st.integers(9, 14), st.integers(10, 14), st.integers(1, 5))
def test_chunking_penalty_grows_with_the_number_of_pieces_and_never_pays(log_m, log_k, log_n, log_pieces):
    m, k, n = 1 << log_m, 1 << log_k, 1 << log_n
    pieces = min(1 << log_pieces, m)
    whole = _ms(H200, m, k, n, launches=0)
    cut = pieces * _ms(H200, m // pieces, k, n, launches=0)
    finer = 2 * pieces * _ms(H200, max(1, m // (2 * pieces)), k, n, launches=0)
    assert math.isfinite(cut) and cut >= whole * (1 - 1e-9)  # cutting the same work never helps
    if m >= 2 * pieces:
        assert finer >= cut * (1 - 1e-9)


def test_row_chunk_penalty_is_near_the_measured_h200_one():
    # 2xH200 profile (benchmarks/results/calibration/h200x2-nccl-full.json): 32 pieces of 256 rows of
    # k=7168, n=8192 take 1.15x the whole 8192-row GEMM, 8 pieces of 1024 rows 1.01x
    whole = _ms(H200, 8192, 7168, 8192)
    assert 1.05 < 32 * _ms(H200, 256, 7168, 8192) / whole < 1.25
    assert 1.0 <= 8 * _ms(H200, 1024, 7168, 8192) / whole < 1.1
