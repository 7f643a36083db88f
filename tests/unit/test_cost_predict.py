"""predict(): monotone, finite, can lose and can win, and refuses impossible requests clearly."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from _cost_helpers import sites, with_island_link
from _plans import spread_of_plans
from hypothesis import example, given, settings
from hypothesis import strategies as st

from hocket.core.plan import Plan
from hocket.core.site import Site
from hocket.cost import schedule
from hocket.cost.contention import SM_STARVED_SLOWDOWN, sms_left_to_gemm
from hocket.hardware import load_preset
from hocket.hardware.profile import CalibrationProfile, CurvePoint
from hocket.strategies import pipeline_stages, predict

H200X2 = load_preset("h200x2")
H800X8 = load_preset("h800x8")
REL = 1e-4
"""Monotone to within 0.01%: contention factors depend on a transfer's rate (a slower
transfer takes a smaller memory share per ms), which moves tiny makespans by ~1e-6
relative when the overlap pattern shifts; anything larger is a real fault."""
PRESETS = ["h200x2", "h800x8", "cpu-host", "mi300xx8", "rtx4090x8", "h100-ib-2node", "mixed-nvidia-amd"]


@settings(max_examples=25)
@given(st.sampled_from(PRESETS), sites(max_dim=1 << 20), st.sampled_from(["m", "k", "n"]), st.integers(1, 1 << 12))
# found by hypothesis: 125 output tiles beside NCCL cost the GEMM a second wave, 132 tiles did not
@example("h200x2", Site(kind="ag_mm", m=2, k=1, n=31745, dtype="float32", world=2), "n", 1792)
@example("h200x2", Site(kind="ag_mm", m=520, k=1, n=16385, dtype="float32", world=2), "n", 256)  # 130 -> 132 tiles
def test_every_candidate_is_finite_and_monotone_in_flops_and_bytes(preset, site, dim, extra):
    cluster = load_preset(preset)
    site = replace(site, world=min(site.world, cluster.world_size))
    step = site.world if dim == "m" else 1  # m stays a multiple of the world size
    bigger = replace(site, **{dim: getattr(site, dim) + extra * step})
    # uneven pieces (split_sizes) are cut for one m: the same plan at a larger m is another plan
    for plan in (p for p in spread_of_plans(site, cluster) if p.split_sizes is None):
        small, big = predict(site, plan, cluster), predict(bigger, plan, cluster)
        for p in (small, big):
            values = (p.total_ms, p.compute_ms, p.comm_ms, p.exposed_comm_ms, *p.busy_ms.values())
            assert all(math.isfinite(v) and v >= 0 for v in values), (plan, p)
            assert p.total_ms > 0
        assert big.total_ms >= small.total_ms * (1 - REL), (plan.describe(), site, dim, extra)


@settings(max_examples=15)
@given(sites(kinds=("ag_mm", "mm_rs", "mm_ar"), worlds=(2,), max_dim=1 << 14), st.floats(1.0, 400.0))
def test_a_slower_link_never_makes_transfers_faster(site, gbps):
    fast, slow = with_island_link(H200X2, 450.0), with_island_link(H200X2, gbps)
    for plan in spread_of_plans(site, H200X2):
        on_slow, on_fast = predict(site, plan, slow), predict(site, plan, fast)
        assert on_slow.comm_ms >= on_fast.comm_ms * (1 - REL)
        # A faster transfer takes a larger memory share per ms and so slows a GEMM beside it
        # harder (contention.py); when the transfer is hidden anyway, the makespan on the
        # faster link can come out a little longer. Bounded: within 10% (hypothesis found
        # 5.3% on a tiny chunked site, where the contended pieces reorder the schedule).
        assert on_slow.total_ms >= on_fast.total_ms * 0.90


def test_on_nvlink_h200_chunking_loses_to_sequential():
    site = Site(kind="ag_mm", m=8192, k=8192, n=7168, world=2)
    sequential = predict(site, Plan(), H200X2)
    chunked = predict(site, Plan(strategy="chunked", chunks=4), H200X2)
    assert chunked.total_ms > sequential.total_ms
    # NCCL kernels get no SMs beside full-grid GEMMs: the pieces' all-gathers are hardly hidden
    assert chunked.exposed_comm_ms >= 0.9 * sequential.exposed_comm_ms


def test_sm_transfers_starve_only_beside_gemms_that_fill_the_device():
    """Beside full-grid GEMMs an NCCL transfer runs on about one SM's copy rate: its slowdown
    is its solo rate over PER_SM_COPY_GBPS; a small grid, a capped persistent kernel or a copy
    engine leave it (or need) no such penalty, and a slow link barely needs an SM."""
    from hocket.cost.comm import PER_SM_COPY_GBPS

    def factors(site, plan, cluster=H200X2):
        return [s.slowdown_by.get("compute", 1.0) for s in pipeline_stages(site, plan, cluster) if s.is_transfer]

    big = Site(kind="mm_rs", m=8192, k=4096, n=8192, world=2)  # 64 x 32 tiles per piece >> 132 SMs
    small = Site(kind="mm_rs", m=512, k=4096, n=512, world=2)  # a few tiles: SMs stay free
    chunked = Plan(strategy="chunked", chunks=2)
    starved, free = factors(big, chunked), factors(small, chunked)
    assert min(starved) > max(free) and min(starved) > 2.0
    assert max(starved) <= SM_STARVED_SLOWDOWN
    for plan in (Plan(strategy="tile_fused", chunks=4), Plan(strategy="chunked", chunks=2, transport="copy_engine")):
        assert max(factors(big, plan)) < min(starved)
    slow = with_island_link(H200X2, 20.0)  # NCCL at ~15 GB/s: under one SM's copy rate
    assert max(factors(big, Plan(strategy="chunked", chunks=2), slow)) < 20.0 * 0.75 / PER_SM_COPY_GBPS + 3.0


def test_contention_alone_can_turn_a_win_into_a_loss():
    """An NCCL P2P ring beside full-grid GEMMs on NVLink: without contention it would beat sequential,
    with the SMs it cannot get (and the memory and power it shares) it loses."""
    site = Site(kind="mm_rs", m=8192, k=14336, n=4096, world=2)  # a Llama-3-8B MLP-down at TP 2
    plan = Plan(strategy="ring", chunks=1, transport="p2p")
    stages = pipeline_stages(site, plan, H200X2)
    contended = schedule(stages).total_ms
    free = schedule([replace(s, slowdown_by={}) for s in stages]).total_ms
    sequential = predict(site, Plan(transport="p2p"), H200X2).total_ms
    assert free < sequential < contended


def test_copy_engine_defaults_follow_the_dma_measurements():
    """Without a profile a copy-engine transfer beside a GEMM is not stretched, and the GEMM beside it slows only
    by the power the copy draws: what hocket calibrate measured on every 2xH200 lease since it times the
    transport's own DMA copy (x0.95-0.99 and x1.00-1.06 on 44 profiles), not the cross-process copy_ of the
    first profiles (x3.1 and x1.27)."""
    from hocket.cost.contention import default_contention

    device = H200X2.device(0)
    slow, fast = (default_contention("copy_engine", device, transfer_gbps=g) for g in (100.0, 380.0))
    assert slow.transfer_slowdown == fast.transfer_slowdown == 1.0
    assert 1.0 < slow.gemm_slowdown < fast.gemm_slowdown <= 1.07
    site = Site(kind="ag_mm", m=8192, k=8192, n=7168, world=2)
    stages = pipeline_stages(site, Plan(strategy="chunked", chunks=1, transport="copy_engine"), H200X2)
    free = schedule([replace(s, slowdown_by={}) for s in stages]).total_ms
    assert schedule(stages).total_ms <= 1.07 * free


def test_a_slow_link_makes_overlap_win():
    site = Site(kind="ag_mm", m=8192, k=8192, n=7168, world=2)
    slow = with_island_link(H200X2, 25.0)  # NCCL forced through host memory
    sequential = predict(site, Plan(), slow).total_ms
    chunked = predict(site, Plan(strategy="chunked", chunks=4), slow).total_ms
    assert chunked < 0.95 * sequential
    fast_ratio = predict(site, Plan(strategy="chunked", chunks=4), H200X2).total_ms / predict(site, Plan(), H200X2).total_ms
    assert chunked / sequential < fast_ratio


def test_tile_fused_pays_no_per_chunk_launch_or_efficiency():
    site = Site(kind="ag_mm", m=8192, k=8192, n=3584, world=8)
    chunked = predict(site, Plan(strategy="chunked", chunks=16, transport="copy_engine"), H800X8)
    fused = predict(site, Plan(strategy="tile_fused", chunks=16, transport="copy_engine"), H800X8)
    assert fused.compute_ms < chunked.compute_ms


def test_profile_curves_scale_the_transfer():
    site = Site(kind="ag_mm", m=4096, k=4096, n=4096, world=2)
    base = predict(site, Plan(), H200X2)
    slow_ag = CalibrationProfile(fingerprint="x", collectives={"all_gather": (
        CurvePoint(bytes=site.comm_bytes, ms=3 * base.comm_ms),)})
    calibrated = predict(site, Plan(), H200X2, slow_ag)
    assert calibrated.comm_ms == pytest.approx(3 * base.comm_ms, rel=1e-6)
    assert calibrated.compute_ms == pytest.approx(base.compute_ms)


def test_impossible_requests_raise_clear_errors():
    with pytest.raises(ValueError, match="larger than cluster"):
        predict(Site(kind="ag_mm", m=64, k=64, n=64, world=16), Plan(), H800X8)
    with pytest.raises(ValueError, match="offered"):
        predict(Site(kind="ag_mm", m=64, k=64, n=64, world=8), Plan(strategy="ring", transport="p2p"),
                load_preset("rtx4090x8"))
    with pytest.raises(ValueError, match="substituted.*mm_ar"):
        predict(Site(kind="mm_rs", m=64, k=64, n=64, world=8), Plan(strategy="substituted"), H800X8)
    with pytest.raises(TypeError, match="ClusterSpec"):
        predict(Site(kind="mm_rs", m=64, k=64, n=64, world=8), Plan(), "h800x8")
    mixed = load_preset("mixed-nvidia-amd")
    with pytest.raises(ValueError, match="host_staged"):
        predict(Site(kind="ag_mm", m=64, k=64, n=64, world=mixed.world_size), Plan(), mixed)
    assert predict(Site(kind="ag_mm", m=64, k=64, n=64, world=mixed.world_size),
                   Plan(transport="host_staged"), mixed).total_ms > 0


def test_single_device_offload_overlaps_the_host_copy():
    h200 = load_preset("h200x1")
    for kind in ("h2d_mm", "mm_d2h"):
        site = Site(kind=kind, m=8192, k=3584, n=8192, world=1)
        sequential = predict(site, Plan(transport="host_staged"), h200)
        stages = pipeline_stages(site, Plan(transport="host_staged"), h200)
        starts = schedule(stages).start_ms
        first_gpu_ms = min(start for stage, start in zip(stages, starts) if not stage.is_issue)
        assert first_gpu_ms > 0  # the GPU idles until the host has issued the first piece
        assert sequential.total_ms == pytest.approx(first_gpu_ms + sequential.compute_ms + sequential.comm_ms,
                                                    rel=1e-9)
        chunked = predict(site, Plan(strategy="chunked", chunks=8, transport="host_staged"), h200)
        assert chunked.total_ms < 0.9 * sequential.total_ms
        assert chunked.total_ms >= max(chunked.compute_ms, chunked.comm_ms) * (1 - REL)
    with pytest.raises(ValueError, match="host_staged"):
        predict(Site(kind="h2d_mm", m=64, k=64, n=64, world=1), Plan(), h200)


def test_uneven_split_sizes_are_priced_as_the_executor_cuts_them():
    site = Site(kind="mm_rs", m=8192, k=4096, n=4096, world=2)
    even = predict(site, Plan(strategy="chunked", chunks=4), H200X2).total_ms
    fill = predict(site, Plan(strategy="chunked", chunks=4, split_sizes=(512, 1024, 1024, 1536)), H200X2).total_ms
    drain = predict(site, Plan(strategy="chunked", chunks=4, split_sizes=(1536, 1024, 1024, 512)), H200X2).total_ms
    assert len({even, fill, drain}) == 3  # the piece sizes reach the pipeline
    stages = pipeline_stages(site, Plan(strategy="chunked", chunks=4, split_sizes=(512, 1024, 1024, 1536)), H200X2)
    assert [s.nbytes for s in stages if s.is_transfer] == pytest.approx(
        [site.comm_bytes * rows / 4096 for rows in (512, 1024, 1024, 1536)])
    with pytest.raises(ValueError, match="split_sizes"):
        predict(site, Plan(strategy="chunked", chunks=4, split_sizes=(1, 2, 3, 4)), H200X2)


@pytest.mark.parametrize("plan", [Plan(strategy="chunked", chunks=2), Plan(strategy="chunked", chunks=4),
                                  Plan(strategy="ring", chunks=1, transport="p2p"), Plan(strategy="bidir_ring")])
def test_pieces_measured_fast_in_isolation_do_not_buy_a_saving(plan):
    # a profile whose whole GEMM runs slow (sustained clocks) and whose row pieces, timed alone, run fast
    from hocket.cost.compute import gemm_time
    from hocket.hardware.profile import GemmPoint
    cluster = load_preset("h200x2")
    device = cluster.device(0)
    site = Site(kind="mm_rs", m=8192, k=14336, n=8192, dtype="bfloat16", world=2)
    gemm = []
    for rows, factor in ((8192, 1.25), (4096, 0.85), (2048, 0.85)):
        model = gemm_time(device, m=rows, k=site.k, n=site.n, dtype="bfloat16", itemsize=2)
        gemm.append(GemmPoint(m=rows, k=site.k, n=site.n, dtype="bfloat16", tflops=model.tflops / factor,
                              ms=factor * model.ms))
    profile = CalibrationProfile(fingerprint="x", gemm=tuple(gemm))
    sequential = predict(site, Plan(), cluster, profile)
    piecewise = predict(site, plan, cluster, profile)
    assert math.isfinite(piecewise.total_ms) and piecewise.total_ms > 0
    assert piecewise.compute_ms >= sequential.compute_ms  # the same GEMM work, cut: never cheaper
    # a saving can only come from hiding communication, never from the pieces' isolated level
    assert piecewise.total_ms >= sequential.total_ms - sequential.comm_ms


@settings(max_examples=20)
@given(st.sampled_from(["ag_mm", "mm_rs"]), st.integers(12, 14), st.integers(11, 14), st.integers(10, 14),
       st.integers(1, 8))
def test_tile_fused_gemm_runs_at_the_fused_kernels_share_of_the_vendor_rate(kind, log_m, log_k, log_n, chunks):
    from hocket.cost.compute import FUSED_GEMM_EFFICIENCY
    site = Site(kind=kind, m=1 << log_m, k=1 << log_k, n=1 << log_n, dtype="bfloat16", world=2)
    plan = Plan(strategy="tile_fused", chunks=chunks, transport="copy_engine")
    fused = predict(site, plan, H200X2)
    sequential = predict(site, Plan(), H200X2)
    assert math.isfinite(fused.total_ms) and fused.compute_ms > 0
    # the same GEMM work at no more than the fused kernel's share of the vendor rate
    assert fused.compute_ms >= sequential.compute_ms / FUSED_GEMM_EFFICIENCY * 0.98
    if sequential.comm_ms < (1 / FUSED_GEMM_EFFICIENCY - 1) * sequential.compute_ms * 0.5:
        assert fused.total_ms > sequential.total_ms  # hiding little comm cannot pay for a slower GEMM


@settings(max_examples=25)
@given(st.sampled_from(["h2d_mm", "mm_d2h"]), st.integers(10, 14), st.integers(10, 14), st.integers(10, 14),
       st.integers(2, 32), st.floats(1.0, 3.0), st.floats(1.0, 3.0))
def test_offload_pieces_stream_at_the_whole_copys_measured_rate(kind, log_m, log_k, log_n, chunks, small_slow,
                                                                 big_slow):
    # a host-link curve whose small copies (timed alone) run slower than its large ones
    from hocket.cost import comm as comm_model
    from hocket.cost.builder import group_facts
    from hocket.cost.calibration import CalibrationView
    h200 = load_preset("h200x1")
    site = Site(kind=kind, m=1 << log_m, k=1 << log_k, n=1 << log_n, world=1)
    topo = group_facts(h200, (0,), site.dtype)[0]
    points = tuple(CurvePoint(bytes=b, ms=f * comm_model.host_copy(b, topo).ms)
                   for b, f in ((1 << 20, small_slow * big_slow), (1 << 30, big_slow)))
    profile = CalibrationProfile(fingerprint="x", host_link=points)
    whole = comm_model.host_copy(site.comm_bytes, topo, calibration=CalibrationView(profile)).ms
    plan = Plan(strategy="chunked", chunks=chunks, transport="host_staged")
    chunked = predict(site, plan, h200, profile)
    sequential = predict(site, Plan(transport="host_staged"), h200, profile)
    assert math.isfinite(chunked.total_ms) and sequential.comm_ms == pytest.approx(whole, rel=1e-9)
    pieces = len([s for s in pipeline_stages(site, plan, h200, profile) if s.is_transfer])
    fixed = comm_model.host_copy(0.0, topo).ms
    # the copies carry the whole copy's bytes at its rate, plus at most one setup each (less when queued),
    # however slow the curve says a small copy timed alone is
    assert whole - pieces * fixed - 1e-9 <= chunked.comm_ms <= whole + (pieces - 1) * fixed + 1e-9


def test_an_sm_transfer_takes_the_idle_sms_of_a_small_grid_first():
    # 128x256 tiles: 2 rows of tiles x 60 columns = 120 tiles leave 12 SMs idle
    assert sms_left_to_gemm(256, 60 * 256, 132, 8) == 132  # the transfer fits in the idle SMs
    assert sms_left_to_gemm(256, 60 * 256, 132, 16) == 128  # 4 more than the idle ones
    assert sms_left_to_gemm(8192, 8192, 132, 16) == 116  # a full grid gives up the whole budget
    assert sms_left_to_gemm(8192, 8192, 132, 500) == 1
