"""Per-rank shard sizes from device speed (hocket.plan.shards): the solver on toy cost tables with hand-computed
optima, the granularity rule, and the recommendation on homogeneous and mixed presets."""

from __future__ import annotations

import dataclasses

import pytest

from hocket.core.plan import Plan
from hocket.core.site import Site
from hocket.hardware import load_preset
from hocket.plan.shards import (
    compute_bound,
    minimise_slowest,
    rank_profile,
    recommend_block_shards,
    recommend_shards,
    shard_dim,
    shard_lines,
    shard_multiple,
)


def _table(values):
    return lambda units: values[units]


def test_minimax_on_a_linear_table_gives_each_rank_work_in_proportion_to_its_speed():
    # rank r takes (r + 1) ms per unit; 11 units: 6 / 3 / 2 is the only split with max 6 ms
    # (s0 <= 6, s1 <= 3, s2 <= 2 already sum to 11), every other split has a rank above 6 ms
    costs = [lambda u, r=r: (r + 1) * u for r in range(3)]
    assert minimise_slowest(costs, 11) == (6, 3, 2)
    assert minimise_slowest(costs, 11, start=(5, 2, 1)) == (6, 3, 2)


def test_minimax_with_a_fixed_cost_prefers_to_leave_a_slow_rank_idle():
    # rank 0: 1 ms per unit; rank 1: 4 ms to start, then 1 ms per unit (0 units: 0.5 ms, it only communicates).
    # 4 units: (4, 0) -> max(4, 0.5) = 4; (3, 1) -> max(3, 5) = 5; (2, 2) -> 6: the optimum is (4, 0)
    fast = _table([0.0, 1.0, 2.0, 3.0, 4.0, 5.0])
    slow = _table([0.5, 5.0, 6.0, 7.0, 8.0, 9.0])
    assert minimise_slowest([fast, slow], 4) == (4, 0)
    # a start above the optimum is repaired by the moves off the slowest rank
    assert minimise_slowest([fast, slow], 4, start=(2, 2)) == (4, 0)


def test_minimax_refuses_bad_arguments():
    with pytest.raises(ValueError, match="costs is empty"):
        minimise_slowest([], 3)
    with pytest.raises(ValueError, match="units=-1"):
        minimise_slowest([lambda u: u], -1)
    with pytest.raises(ValueError, match="start="):
        minimise_slowest([lambda u: u, lambda u: u], 2, start=(3, 0))


def test_granularity_is_64_or_16_for_small_shares_and_always_divides_the_total():
    assert shard_multiple(28672, 8) == 64
    assert shard_multiple(1024, 8) == 16  # 128 per rank: below 256
    assert shard_multiple(28672 + 32, 8) == 32  # halved until it divides
    assert shard_multiple(7, 2) == 1
    with pytest.raises(ValueError, match="total=0"):
        shard_multiple(0, 2)


def test_compute_bound_is_the_sum_of_rates_over_the_slowest_times_the_group():
    assert compute_bound([2.0, 1.0]) == pytest.approx(1.5)
    assert compute_bound([3.0, 3.0, 3.0]) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="rates="):
        compute_bound([1.0, 0.0])


def test_the_split_dimension_is_the_weight_shard():
    assert shard_dim(Site(kind="ag_mm", m=64, k=64, n=64)) == "n"
    assert shard_dim(Site(kind="mm_rs", m=64, k=64, n=64)) == "k"
    assert shard_dim(Site(kind="mm_ar", m=64, k=64, n=64)) == "k"
    with pytest.raises(ValueError, match="h2d_mm"):
        shard_dim(Site(kind="h2d_mm", m=64, k=64, n=64, world=1))


MLP_DOWN = Site(kind="mm_rs", m=4096, k=28672 // 8, n=8192, world=8, name="mlp.down")


def test_a_homogeneous_group_keeps_even_shards():
    rec = recommend_shards(MLP_DOWN, load_preset("h100x8"))
    assert not rec.uneven and rec.sizes() == (3584,) * 8
    assert rec.gain == pytest.approx(1.0) and rec.bound == pytest.approx(1.0)
    assert rec.uneven_lockstep_ms == pytest.approx(rec.uneven_ms, rel=1e-9)


def test_a_mixed_group_gives_the_faster_devices_more_and_gains_at_most_the_compute_bound():
    cluster = load_preset("mixed-a100-h100-pcie")
    rec = recommend_shards(MLP_DOWN, cluster, plan=Plan())
    a100 = [t.size for t in rec.ranks[0] if t.device == "A100 PCIe"]
    h100 = [t.size for t in rec.ranks[0] if t.device == "H100 PCIe"]
    assert len(a100) == len(h100) == 4 and max(a100) < min(h100)
    assert sum(rec.sizes()) == 28672 and all(s % rec.multiples[0] == 0 for s in rec.sizes())
    assert 1.0 < rec.gain <= rec.bound
    # the slowest rank at the recommended sizes is faster than the slowest at even ones
    assert max(t.total_ms for t in rec.ranks[0]) < max(t.total_ms for t in rec.even_ranks[0])
    assert any("H100 PCIe" in line for line in shard_lines(rec))
    # ranks in lock step (each stage at its longest rank's duration) take at least the slowest rank's own time
    assert rec.uneven_lockstep_ms >= rec.uneven_ms * (1 - 1e-9)
    assert rec.even_lockstep_ms >= rec.even_ms * (1 - 1e-9)


def test_a_block_shares_one_split_and_refuses_sites_that_cannot():
    cluster = load_preset("mixed-a100-h100-pcie")
    up = Site(kind="ag_mm", m=4096, k=8192, n=28672 // 8, world=8, num_b=2, name="mlp.up")
    rec = recommend_block_shards((up, MLP_DOWN), cluster, plans=[Plan()])
    assert rec.dims == ("n", "k") and rec.sizes(0) == rec.sizes(1)
    other = Site(kind="mm_rs", m=4096, k=1024, n=8192, world=8)
    with pytest.raises(ValueError, match="different totals"):
        recommend_block_shards((up, other), cluster)
    with pytest.raises(ValueError, match="does not divide"):
        recommend_shards(MLP_DOWN, cluster, multiple=5000)
    with pytest.raises(ValueError, match="nothing to share"):
        recommend_shards(Site(kind="mm_rs", m=64, k=64, n=64, world=1), cluster)
    with pytest.raises(ValueError, match="min_units"):
        recommend_shards(MLP_DOWN, cluster, min_units=10_000)
    with pytest.raises(TypeError, match="ClusterSpec"):
        recommend_shards(MLP_DOWN, "mixed-a100-h100-pcie")


def test_min_units_keeps_work_on_every_rank():
    cluster = load_preset("mixed-a100-h100-pcie")
    qkv = Site(kind="ag_mm", m=8192, k=8192, n=1280, world=8, name="attn.qkv")
    rec = recommend_shards(qkv, cluster, plan=Plan(), multiple=1280, min_units=1)
    assert min(rec.units) >= 1 and sum(rec.units) == 8


def test_a_profile_applies_its_gemm_points_only_to_ranks_of_its_device_model():
    from hocket.hardware.profile import CalibrationProfile, GemmPoint

    profile = CalibrationProfile(fingerprint="x", fingerprint_data={"devices": {"H100 PCIe": 4}},
                                 gemm=(GemmPoint(m=1024, k=1024, n=1024, dtype="bfloat16", tflops=2.0, ms=1.0),))
    cluster = load_preset("mixed-a100-h100-pcie")
    h100, a100 = cluster.device(4), cluster.device(0)
    assert rank_profile(profile, h100) is profile
    assert rank_profile(profile, a100).gemm == () and rank_profile(profile, a100).fingerprint == "x"
    assert rank_profile(dataclasses.replace(profile, fingerprint_data={}), a100).gemm == profile.gemm
    assert rank_profile(None, a100) is None


def test_a_site_with_uneven_shards_is_sized_from_its_even_form():
    if "shard_rows" not in Site.__dataclass_fields__:
        pytest.skip("Site has no shard_rows field in this tree")
    cluster = load_preset("mixed-a100-h100-pcie")
    even = Site(kind="mm_ar", m=4096, k=3584, n=8192, world=8)
    uneven = Site(kind="mm_ar", m=4096, k=4992, n=8192, world=8, shard_rows=(2176,) * 4 + (4992,) * 4)
    assert recommend_shards(uneven, cluster, plan=Plan()).sizes() == recommend_shards(even, cluster, plan=Plan()).sizes()
    with pytest.raises(ValueError, match="multiple of world"):
        recommend_shards(Site(kind="mm_ar", m=64, k=5, n=64, world=2, shard_rows=(2, 5)), cluster)
