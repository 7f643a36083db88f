"""The host-staged relay priced for CUDA graph replays and for many small messages: a replayed call
queued behind another in a pipeline overlaps its first message with the previous call's drain, as an eager
one does (the relay's curves time each call after the previous one drained), and a message moves no faster
than RELAY_MESSAGE_FLOOR_US however few its bytes."""

from __future__ import annotations

import random

import pytest

from hocket.core.site import Site
from hocket.cost import comm as C
from hocket.cost.calibration import calibration_view
from hocket.hardware import load_preset
from hocket.hardware.profile import CalibrationProfile, CurvePoint
from hocket.plan import Plan
from hocket.strategies import pipeline_stages

CURVE = ((1 << 20, 0.055), (4 << 20, 0.111), (16 << 20, 0.346), (64 << 20, 0.953), (256 << 20, 3.589))


def _profile(captured: bool) -> CalibrationProfile:
    points = tuple(CurvePoint(bytes=b, ms=ms) for b, ms in CURVE)
    return CalibrationProfile(fingerprint="toy", world_size=2, host_relay=points, host_relay_steady=points,
                              host_relay_captured=points if captured else ())


@pytest.mark.parametrize("nbytes", [1 << 20, 4 << 20, 48 << 20])
def test_a_replayed_relay_call_saves_its_fill_when_queued_like_an_eager_one(nbytes):
    topo = C.group_topology(load_preset("h200-host-staged"), (0, 1))
    steady = calibration_view(_profile(True)).for_steady_state()
    eager = C.collective("all_gather", nbytes, topo, transport="host_staged", calibration=steady)
    replay = C.collective("all_gather", nbytes, topo, transport="host_staged", calibration=steady.for_captured())
    assert eager.queued_saving_ms > 0 and replay.queued_saving_ms > 0
    assert replay.queued_saving_ms < replay.ms
    # the same curve for both views: the same call, the same fill saved
    assert replay.queued_saving_ms == pytest.approx(eager.queued_saving_ms)


def test_a_replayed_natural_relay_pipeline_overlaps_its_calls():
    """chunked(4) over the relay in natural order issues the next piece's call before it waits on the last
    (hocket.ops._pipeline, depth 2): each later call's device-to-host fill runs beside the previous drain."""
    cluster, profile = load_preset("h200-host-staged"), _profile(True)
    site = Site(kind="ag_mm", m=8192, k=4096, n=1536, dtype="bfloat16", world=2)
    plan = Plan(strategy="chunked", chunks=4, transport="host_staged")
    stages = pipeline_stages(site, plan, cluster, profile, steady_state=True, captured=True)
    moves = [s for s in stages if s.op == "all_gather"]
    assert len(moves) == 4
    assert all(later.duration_ms < 0.9 * moves[0].duration_ms for later in moves[1:])


def test_many_small_messages_are_held_to_the_floor():
    cluster, profile = load_preset("h200-host-staged"), _profile(True)
    site = Site(kind="ag_mm", m=8192, k=4096, n=1536, dtype="bfloat16", world=2)
    for chunks in (64, random.choice((48, 96, 128))):
        plan = Plan(strategy="chunked", chunks=chunks, transport="host_staged", order="local_first")
        stages = pipeline_stages(site, plan, cluster, profile, steady_state=True, captured=True)
        moves = [s for s in stages if s.name.startswith("all_gather[")]
        assert len(moves) == chunks
        for s in moves[1:]:  # each later piece is one small message, held to the floor
            assert s.duration_ms == pytest.approx(C.RELAY_MESSAGE_FLOOR_US / 1e3)
    # a few large pieces move at their bytes' pace, above the floor
    plan = Plan(strategy="chunked", chunks=4, transport="host_staged", order="local_first")
    stages = pipeline_stages(site, plan, cluster, profile, steady_state=True, captured=True)
    moves = [s for s in stages if s.name.startswith("all_gather[")]
    assert all(s.duration_ms > 2 * C.RELAY_MESSAGE_FLOOR_US / 1e3 for s in moves)
