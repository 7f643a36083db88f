"""hocket.cost.compute's vendor gap: a device's GEMMs priced relative to its published matmul efficiency."""

from __future__ import annotations

import dataclasses

import pytest

from hocket.cost.builder import slowest_device
from hocket.cost.compute import REFERENCE_MATMUL_EFFICIENCY, achievable_scale, achievable_tflops, gemm_time
from hocket.hardware import load_cluster


def _gemm_ms(device, m=8192, k=8192, n=8192):
    return gemm_time(device, m=m, k=k, n=n, dtype="bfloat16", itemsize=2).ms


def test_a_lower_published_efficiency_makes_compute_bound_gemms_slower_by_that_ratio():
    mi300x = load_cluster("mi300xx8").device(0)
    unknown = dataclasses.replace(mi300x, matmul_efficiency=None)
    ratio = _gemm_ms(mi300x) / _gemm_ms(unknown)
    assert ratio == pytest.approx(REFERENCE_MATMUL_EFFICIENCY / mi300x.matmul_efficiency, rel=0.02)
    assert ratio > 1.4


def test_the_reference_device_and_unknown_devices_are_unscaled():
    h100 = load_cluster("h100x8").device(0)
    assert achievable_scale(h100) == pytest.approx(1.0)
    assert achievable_scale(dataclasses.replace(h100, matmul_efficiency=None)) == 1.0
    assert achievable_scale(load_cluster("cpu-host").device(0)) == 1.0


def test_memory_bound_gemms_keep_their_memory_time():
    mi300x = load_cluster("mi300xx8").device(0)
    unknown = dataclasses.replace(mi300x, matmul_efficiency=None)
    thin = dict(m=16, k=8192, n=8192)  # a decode-sized GEMM: bound by reading B
    assert _gemm_ms(mi300x, **thin) == pytest.approx(_gemm_ms(unknown, **thin), rel=0.05)


def test_the_slowest_device_of_a_mixed_cluster_is_the_one_with_the_lower_achievable_rate():
    cluster = load_cluster("mixed-nvidia-amd")
    slowest = slowest_device(cluster, list(range(cluster.world_size)), "bfloat16")
    others = {cluster.device(r) for r in range(cluster.world_size)} - {slowest}
    assert others and all(achievable_tflops(slowest, "bfloat16") < achievable_tflops(d, "bfloat16") for d in others)


def test_mi300x_ranks_below_h100_although_its_datasheet_peak_is_higher():
    h100, mi300x = load_cluster("h100x8").device(0), load_cluster("mi300xx8").device(0)
    assert mi300x.peak("bfloat16") > h100.peak("bfloat16")
    assert achievable_tflops(mi300x, "bfloat16") < achievable_tflops(h100, "bfloat16")


def test_the_reference_is_the_h100_and_h200_presets_published_figure():
    for name in ("h100x8", "h200x8"):
        assert load_cluster(name).device(0).matmul_efficiency == REFERENCE_MATMUL_EFFICIENCY
