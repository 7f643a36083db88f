"""plan=None for calls replayed from CUDA graphs: priced as replays, cached apart from eager calls."""

from __future__ import annotations

import pytest
from _slow_host import slow_host_planner

from hocket.core.site import Site
from hocket.hardware import load_preset
from hocket.ops import live, planning
from hocket.ops.live import LiveConfig, LivePlanner, captured_planner, set_process_planner

SITE = Site(kind="ag_mm", m=8192, k=4096, n=1536, dtype="bfloat16", world=2)


@pytest.fixture
def slow_host():
    yield from slow_host_planner()


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
