"""Host-staged collectives: the relay's bytes per direction, its message pipeline, the shared
PCIe uplink, and the host's issue cost per call and message."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hocket.core.plan import Plan
from hocket.core.site import Site
from hocket.cost.comm import (
    DEFAULT_HOST_STAGE_MESSAGE_BYTES,
    DEVICES_PER_HOST_UPLINK,
    collective,
    group_topology,
    host_copy,
    host_stage_directions,
    relay_messages,
)
from hocket.hardware import load_preset
from hocket.strategies import predict

STAGED = load_preset("h200-host-staged")
MIB = 2**20


@given(st.floats(0, 1 << 40), st.floats(1, 1 << 27))
def test_relay_messages_cover_the_bytes_with_a_ramp(nbytes, message):
    runs = relay_messages(nbytes, message)
    assert sum(size * count for size, count in runs) == pytest.approx(nbytes, rel=1e-9, abs=1e-6)
    assert all(0 <= size <= message * (1 + 1e-12) and count >= 1 for size, count in runs)
    if nbytes > message:  # the first two are a quarter and a half of a message
        assert runs[0] == (pytest.approx(message / 4), 1) and runs[1] == (pytest.approx(message / 2), 1)


@pytest.mark.parametrize("op", ["all_gather", "reduce_scatter", "all_reduce", "all_to_all"])
@pytest.mark.parametrize("world", [2, 4, 8])
def test_directions_follow_the_relay(op, world):
    nbytes = 96 * MIB
    down, up = host_stage_directions(op, nbytes, world)
    shard = nbytes / world
    assert down > 0 and up > 0
    if op == "all_gather":  # send my shard once, read every other shard
        assert (down, up) == pytest.approx((shard, (world - 1) * shard))
    if op == "reduce_scatter":  # send the blocks the others own, read their partials of mine
        assert (down, up) == pytest.approx(((world - 1) * shard, (world - 1) * shard))


@settings(max_examples=40)
@given(st.sampled_from(["all_gather", "reduce_scatter", "all_reduce"]), st.integers(1, 1 << 32),
       st.integers(1, 1 << 28), st.sampled_from([2, 4, 8]))
def test_host_staged_time_is_finite_and_grows_with_bytes(op, nbytes, extra, world):
    topo = group_topology(STAGED, range(world))
    small, big = collective(op, nbytes, topo, transport="host_staged"), \
        collective(op, nbytes + extra, topo, transport="host_staged")
    assert math.isfinite(small.ms) and small.ms > 0 and small.messages >= 1
    assert big.ms >= small.ms * (1 - 1e-9)
    assert 0 <= small.queued_saving_ms < small.ms


def test_ranks_behind_one_uplink_share_it():
    """Two ranks staging at once: each direction of the shared x16 uplink carries both ranks'
    copies, so a 2-rank all-gather of 2B bytes takes at least the uplink time of 2B, more than
    one rank's copy of its B bytes alone."""
    topo = group_topology(STAGED, range(2))
    nbytes = 128 * MIB
    shard = nbytes / 2
    gather = collective("all_gather", nbytes, topo, transport="host_staged").ms
    assert DEVICES_PER_HOST_UPLINK == 2
    assert gather >= host_copy(shard * DEVICES_PER_HOST_UPLINK, topo).ms
    assert gather > 1.5 * host_copy(shard, topo).ms


def test_larger_messages_mean_fewer_handshakes_but_a_longer_drain():
    topo = group_topology(STAGED, range(2))
    many = collective("reduce_scatter", 256 * MIB, topo, transport="host_staged", message_bytes=2 * MIB)
    few = collective("reduce_scatter", 256 * MIB, topo, transport="host_staged", message_bytes=64 * MIB)
    assert many.messages > few.messages
    default = collective("reduce_scatter", 256 * MIB, topo, transport="host_staged")
    assert default.messages == sum(count for _, count in relay_messages(128 * MIB, DEFAULT_HOST_STAGE_MESSAGE_BYTES))


def test_small_host_staged_pieces_are_issue_bound():
    """Each relay call costs host time (call + messages): cutting a small site into many
    host-staged pieces loses, even though every piece overlaps with compute."""
    site = Site(kind="ag_mm", m=8192, k=4096, n=1536, world=2)
    times = {c: predict(site, Plan(strategy="chunked", chunks=c, transport="host_staged"), STAGED).total_ms
             for c in (2, 4, 16)}
    assert times[16] > times[4]
    assert times[16] > predict(site, Plan(transport="host_staged"), STAGED).total_ms
    # on a compute-heavy site the same pieces hide the relay's PCIe time
    heavy = Site(kind="mm_rs", m=8192, k=14336, n=8192, world=2)
    assert predict(heavy, Plan(strategy="chunked", chunks=4, transport="host_staged"), STAGED).total_ms < \
        predict(heavy, Plan(transport="host_staged"), STAGED).total_ms


def test_a_calibrated_host_copy_scales_only_its_size_dependent_part():
    """A curve point timed from an idle GPU holds one launch latency: calibration scales the
    bytes' time, not the model's fixed part, so a copy's fixed cost is never multiplied."""
    from hocket.cost.calibration import CalibrationView
    from hocket.hardware.profile import CalibrationProfile, CurvePoint

    h200 = load_preset("h200x1")
    topo = group_topology(h200, range(1))
    model = host_copy(64 * MIB, topo).ms
    fixed = host_copy(0, topo).ms
    slower = CalibrationView(CalibrationProfile(fingerprint="t", host_link=(
        CurvePoint(bytes=64 * MIB, ms=fixed + 2.0 * (model - fixed)),)))
    calibrated = host_copy(64 * MIB, topo, calibration=slower).ms
    assert calibrated == pytest.approx(fixed + 2.0 * (model - fixed))
    # a measured point below the fixed part cannot make a copy cheaper than its fixed part
    faster = CalibrationView(CalibrationProfile(fingerprint="t", host_link=(CurvePoint(bytes=4096, ms=fixed / 10),)))
    assert fixed <= host_copy(1 * MIB, topo, calibration=faster).ms <= host_copy(1 * MIB, topo).ms
