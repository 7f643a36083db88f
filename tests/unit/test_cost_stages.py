"""The stage scheduler: list-schedule semantics, contention rates, bad pipelines."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hocket.cost.stages import RACE_MS, Stage, schedule


def test_without_contention_it_is_the_list_schedule():
    stages = [
        Stage(name="t0", resource="link", duration_ms=2.0, kind="sm_collective"),
        Stage(name="g0", resource="compute", duration_ms=3.0, depends_on=(0,)),
        Stage(name="t1", resource="link", duration_ms=2.0, kind="sm_collective"),
        Stage(name="g1", resource="compute", duration_ms=3.0, depends_on=(2,)),
    ]
    s = schedule(stages)
    assert s.start_ms == (0.0, 2.0, 2.0, 5.0)
    assert s.total_ms == 8.0
    assert s.busy_ms == {"link": 4.0, "compute": 6.0}


@given(st.floats(1.0, 4.0), st.floats(1.0, 4.0), st.floats(0.1, 10.0), st.floats(0.1, 10.0))
def test_overlapping_stages_slow_each_other_by_their_factors(g, t, gemm_ms, transfer_ms):
    stages = [
        Stage(name="gemm", resource="compute", duration_ms=gemm_ms, slowdown_by={"copy_engine": g}),
        Stage(name="copy", resource="copy_engine", duration_ms=transfer_ms, kind="copy_engine",
              slowdown_by={"compute": t}),
    ]
    s = schedule(stages)
    # while both run, the gemm does 1/g of work per ms and the copy 1/t
    both = min(gemm_ms * g, transfer_ms * t)
    if gemm_ms * g <= transfer_ms * t:
        expected = (gemm_ms * g, both + (transfer_ms - both / t))
    else:
        expected = (both + (gemm_ms - both / g), transfer_ms * t)
    assert s.end_ms == pytest.approx(expected, rel=1e-9)
    assert s.total_ms >= max(gemm_ms, transfer_ms)


def test_after_is_the_stage_with_one_more_dependency():
    stage = Stage(name="g", resource="compute", duration_ms=1.5, depends_on=(0,), slowdown_by={"copy_engine": 1.2},
                  fills_device=True, last_wave_at=0.9)
    later = stage.after(3)
    assert later == replace(stage, depends_on=(0, 3))
    assert stage.depends_on == (0,)  # the original is untouched
    assert Stage(name="l", resource="compute", duration_ms=1.0, depends_on=[0, 1]).depends_on == (0, 1)


def test_bad_dependencies_and_durations_are_refused():
    with pytest.raises(ValueError, match="earlier"):
        schedule([Stage(name="a", resource="compute", duration_ms=1.0, depends_on=(0,))])
    with pytest.raises(ValueError, match="duration_ms"):
        Stage(name="a", resource="compute", duration_ms=float("nan"))
    with pytest.raises(ValueError, match="resource"):
        Stage(name="a", resource="gpu", duration_ms=1.0)
    with pytest.raises(ValueError, match="slowdown_by"):
        Stage(name="a", resource="compute", duration_ms=1.0, slowdown_by={"copy_engine": 0.5})


def test_a_transfer_behind_a_full_grid_gemm_waits_for_it_and_one_launched_with_it_keeps_its_sms():
    gemm = Stage(name="gemm", resource="compute", duration_ms=1.0, fills_device=True,
                 slowdown_by={"sm_collective": 1.25})
    issue = Stage(name="issue", resource="issue", duration_ms=0.1, kind="issue")
    late = Stage(name="ag", resource="link", duration_ms=0.2, kind="sm_collective", depends_on=(1,),
                 waits_for_full_grid=True)
    t = schedule([gemm, issue, late])
    assert t.start_ms[2] == pytest.approx(0.1)
    assert t.end_ms[2] == pytest.approx(1.2)  # no progress until the GEMM ended, then its solo time
    assert t.end_ms[0] == pytest.approx(1.0)  # waiting, it held no SMs: the GEMM ran at full speed
    t = schedule([gemm, replace(late, depends_on=())])  # launched with the GEMM
    assert t.end_ms[1] == pytest.approx(0.2)
    assert t.end_ms[0] == pytest.approx(0.2 + (1.0 - 0.2 / 1.25))  # the GEMM lost SMs while it ran
    small = replace(gemm, fills_device=False)  # a grid with idle SMs makes no one wait
    t = schedule([small, issue, late])
    assert t.end_ms[2] == pytest.approx(0.3)


def test_a_waiting_transfer_starts_when_the_gemms_last_wave_begins_and_a_gemm_released_with_it_goes_first():
    # a 4-wave GEMM (last_wave_at 3/4) released by the same kernel's end as the transfer
    first = Stage(name="gemm0", resource="compute", duration_ms=1.0)
    gemm = Stage(name="gemm1", resource="compute", duration_ms=1.0, fills_device=True, last_wave_at=0.75)
    move = Stage(name="rs", resource="link", duration_ms=0.5, kind="sm_collective", depends_on=(0,),
                 waits_for_full_grid=True)
    t = schedule([first, move, gemm])  # the transfer is earlier in program order, the GEMM still goes first
    assert t.start_ms[1] == pytest.approx(1.0)
    assert t.end_ms[1] == pytest.approx(1.0 + 0.75 + 0.5)
    assert t.end_ms[2] == pytest.approx(2.0)
    root = replace(move, depends_on=())  # ready before the GEMM: it runs at once
    t = schedule([first, root, gemm])
    assert t.end_ms[1] == pytest.approx(0.5)


def test_a_gemm_launched_beside_a_transfer_that_holds_its_sms_slows_by_the_held_factor():
    move = Stage(name="ag", resource="link", duration_ms=0.5, kind="sm_collective", waits_for_full_grid=True)
    gemm = Stage(name="gemm", resource="compute", duration_ms=1.0, fills_device=True, last_wave_at=0.75,
                 slowdown_by={"sm_collective": 1.1}, held_sms_by={"sm_collective": 2.0})
    issue = Stage(name="issue", resource="issue", duration_ms=0.1, kind="issue")
    t = schedule([move, issue, replace(gemm, depends_on=(1,))])  # the transfer first: the GEMM runs at half rate
    assert t.end_ms[0] == pytest.approx(0.5)
    assert t.end_ms[2] == pytest.approx(0.5 + (1.0 - 0.4 / 2.0))
    # the GEMM first: the transfer waits for its last wave and then takes idle SMs (only slowdown_by applies)
    t = schedule([gemm, issue, replace(move, depends_on=(1,))])
    assert t.start_ms[2] == pytest.approx(0.1)
    assert t.end_ms[2] == pytest.approx(0.75 + 0.5)
    assert t.end_ms[0] == pytest.approx(0.75 + 0.25 * 1.1)


@pytest.mark.parametrize("gap_ms", [0.01, 0.05])
def test_a_transfer_released_just_before_a_full_grid_gemm_races_it(gap_ms):
    """Released by a kernel's end and followed by a full-grid GEMM within RACE_MS (behind a short
    kernel), the transfer waits for that GEMM's last wave while the GEMM runs at its held rate (the worst
    rank of the race); a later GEMM finds it holding its SMs and only slows."""
    first = Stage(name="gemm0", resource="compute", duration_ms=1.0)
    fill = Stage(name="zero", resource="compute", duration_ms=gap_ms, depends_on=(0,))
    gemm = Stage(name="gemm1", resource="compute", duration_ms=1.0, fills_device=True, last_wave_at=0.75,
                 held_sms_by={"sm_collective": 2.0}, depends_on=(1,))
    move = Stage(name="rs", resource="link", duration_ms=0.5, kind="sm_collective", depends_on=(0,),
                 waits_for_full_grid=True)
    t = schedule([first, fill, gemm, move])
    assert RACE_MS > 0.01 and RACE_MS < 0.05
    g0 = 1.0 + gap_ms
    if gap_ms < RACE_MS:
        # gap_ms of solo progress, no progress until the last wave (0.75 of the work at half rate), then the rest
        last_wave = g0 + 0.75 * 2.0
        assert t.end_ms[3] == pytest.approx(last_wave + 0.5 - gap_ms)
        assert t.end_ms[2] == pytest.approx(t.end_ms[3] + 0.25 - (0.5 - gap_ms) / 2.0)  # half rate until then
    else:
        assert t.end_ms[3] == pytest.approx(1.5)  # no race: it runs at once at its solo speed
        assert t.end_ms[2] == pytest.approx(1.5 + (1.0 - (1.5 - g0) / 2.0))
