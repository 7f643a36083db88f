"""plan=None for calls replayed from CUDA graphs: priced as replays, cached apart from eager calls."""

from __future__ import annotations

import pytest

from hocket.hardware import load_preset
from hocket.hardware.profile import CalibrationProfile, ContentionPoint, CurvePoint
from hocket.ops import planning
from hocket.plan import live
from hocket.plan.live import LiveConfig, LivePlanner, captured_planner, set_process_planner
from hocket.site import Site

SITE = Site(kind="ag_mm", m=8192, k=4096, n=1536, dtype="bfloat16", world=2)


@pytest.fixture
def slow_host(monkeypatch):
    """A host-staged 2-GPU cluster whose host issues slowly: pieces pay on the host when eager."""
    curve = lambda points: tuple(CurvePoint(bytes=b, ms=ms) for b, ms in points)  # noqa: E731
    # the relay and host-link curves of a 2xH200 lease (run38), so the relay counts as measured
    slow = CalibrationProfile(
        fingerprint="toy", world_size=2,
        host_link=curve([(1 << 20, 0.031), (16 << 20, 0.317), (64 << 20, 1.247), (256 << 20, 4.890)]),
        host_relay=curve([(1 << 20, 0.313), (16 << 20, 0.403), (64 << 20, 1.089), (256 << 20, 3.339)]),
        contention={"host_link": ContentionPoint(gemm_slowdown=1.0, transfer_slowdown=1.0)},
        issue_us={"relay_call": 400.0, "relay_message": 150.0, "relay_split": 150.0, "launch": 60.0, "entry": 200.0})
    # supported given: every transport of the space is priced (this CPU build registers no host_staged)
    set_process_planner(LivePlanner(cluster=load_preset("h200-host-staged"), profile=slow,
                                    config=LiveConfig(use_disk_cache=False, autotune=False,
                                                      supported=planning.SUPPORTED)))
    planning.clear_plan_cache()
    yield
    set_process_planner(None)
    planning.clear_plan_cache()


def test_captured_planning_prices_replays_and_caches_apart(slow_host):
    eager = planning.choose_plan(SITE)
    assert not planning.planning_captured()
    with planning.captured_planning():
        assert planning.planning_captured()
        replayed = planning.choose_plan(SITE)
    assert not planning.planning_captured()
    # the captured planner shares the cluster and profile, prices replays and never autotunes
    planner = captured_planner()
    assert planner.config.search.captured and planner.config.autotune is False and not planner.config.use_disk_cache
    assert planner.cluster.name == "h200-host-staged"
    assert planner.config.space.captured  # only what a graph captures (hocket.plan.capture)
    # with a slow host the eager choice holds fewer pieces than the replayed one
    assert replayed.chunks > eager.chunks or (eager.strategy == "sequential" and replayed.strategy != "sequential")
    assert planning._CHOSEN[SITE.key] == eager and planning._CHOSEN_CAPTURED[SITE.key] == replayed
    assert planning.choose_plan(SITE) == eager  # still the eager plan outside the block


def test_replacing_the_process_planner_rebuilds_the_captured_one(slow_host):
    first = captured_planner()
    set_process_planner(LivePlanner(cluster=load_preset("h200x2"), config=LiveConfig(use_disk_cache=False)))
    assert captured_planner() is not first and captured_planner().cluster.name == "h200x2"
    assert live._PLANNERS["captured"] is captured_planner()


def test_replay_runners_need_a_cuda_device():
    with pytest.raises(ValueError, match="device='cpu'.*CUDA graphs"):
        live.operator_runners(SITE, group=object(), device="cpu", captured=True)


def test_autotune_switch_without_a_device_to_capture_on_keeps_the_prediction(slow_host, monkeypatch):
    # HOCKET_AUTOTUNE=1, but no CUDA device (and no process group): the replayed plan is predicted
    monkeypatch.setenv("HOCKET_AUTOTUNE", "1")
    with planning.captured_planning():
        replayed = planning.choose_plan(SITE)
    decision = captured_planner().known()
    assert [d.source for d in decision.values()] == ["predicted"]
    assert replayed == live.fit_plan(next(iter(decision.values())).plan, SITE)
