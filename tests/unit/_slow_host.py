"""A host-staged 2-GPU cluster whose host issues slowly (pieces pay on the host when eager), set as the
process planner: what the tests of planning for replays (CapturedCall, HOCKET_EAGER_GRAPHS) price on."""

from __future__ import annotations

from hocket.hardware import load_preset
from hocket.hardware.profile import CalibrationProfile, ContentionPoint, CurvePoint
from hocket.ops import planning
from hocket.ops.executors import supported_table
from hocket.ops.live import LiveConfig, LivePlanner, set_process_planner


def slow_host_profile() -> CalibrationProfile:
    """The relay and host-link curves of a 2xH200 lease (run38), so the relay counts as measured, with
    host issue costs 2-4x that lease's."""
    curve = lambda points: tuple(CurvePoint(bytes=b, ms=ms) for b, ms in points)  # noqa: E731
    return CalibrationProfile(
        fingerprint="toy", world_size=2,
        host_link=curve([(1 << 20, 0.031), (16 << 20, 0.317), (64 << 20, 1.247), (256 << 20, 4.890)]),
        host_relay=curve([(1 << 20, 0.313), (16 << 20, 0.403), (64 << 20, 1.089), (256 << 20, 3.339)]),
        contention={"host_link": ContentionPoint(gemm_slowdown=1.0, transfer_slowdown=1.0)},
        issue_us={"relay_call": 400.0, "relay_message": 150.0, "relay_split": 150.0, "launch": 60.0,
                  "entry": 200.0})


def slow_host_planner():
    """Generator behind a ``slow_host`` fixture: that planner as the process planner, then the reset.
    ``supported`` is given so every transport of the space is priced (a CPU build registers no
    host_staged)."""
    set_process_planner(LivePlanner(cluster=load_preset("h200-host-staged"), profile=slow_host_profile(),
                                    config=LiveConfig(use_disk_cache=False, autotune=False,
                                                      supported=supported_table())))
    planning.clear_plan_cache()
    yield
    set_process_planner(None)
    planning.clear_plan_cache()
