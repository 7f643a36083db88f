"""``hocket.ops.stencil_steps`` on gloo ranks: every strategy on 1-D and 2-D process grids, fixed and periodic,
fp64 equal to the whole-grid reference to rounding and fp32 close; ``overlap`` posts its receives before the
interior compute and waits after it; bad inputs raise on every rank, and the group stays usable."""

from __future__ import annotations

import pytest
from _stencil_cases import bad_call, healthy, overlap_events, run_cases

PLANS = ("sequential", "overlap", {"strategy": "deep_halo", "chunks": 2, "transport": "p2p"})
FP64_ATOL = 1e-12
FP32_ATOL = 1e-4


def _cases(procs, grid, *, dtype="float64", wave=False, radius=1, steps=3, device_mesh=False):
    return [dict(procs=procs, grid=grid, radius=radius, boundary=boundary, plan=plan, dtype=dtype, wave=wave,
                 steps=steps, seed=i, device_mesh=device_mesh)
            for i, (boundary, plan) in enumerate((b, p) for b in ("fixed", "periodic") for p in PLANS)]


def _check(results, atol):
    for err, moved in results:
        assert moved > 1e-3, "the reference did not move: the case tests nothing"
        assert err <= atol, f"error {err} above {atol}"


@pytest.mark.timeout(120)
def test_world2_1d_and_2d_grids_every_strategy_and_boundary(pool2):
    cases = (_cases((2,), (12, 6), radius=2) + _cases((1, 2), (6, 10), radius=1)
             + _cases((2,), (10, 4, 3), wave=True, radius=2, dtype="float32"))
    results = pool2.run(run_cases, cases)
    for rank_results in results:
        _check(rank_results[:12], FP64_ATOL)
        _check(rank_results[12:], FP32_ATOL)


@pytest.mark.timeout(150)
def test_world4_1d_2d_and_3d_grids_and_a_device_mesh(pool4):
    cases = (_cases((2, 2), (8, 8), radius=2) + _cases((4,), (12, 5), radius=1, dtype="float32")
             + _cases((2, 2), (8, 8, 3), wave=True, radius=1, steps=4)[:3]
             + [dict(procs=(2, 2), grid=(8, 6), radius=1, boundary="periodic", plan="overlap", dtype="float64",
                     steps=2, seed=9, device_mesh=True)]
             + _cases((2, 2, 1), (6, 6, 5), radius=1, steps=2))  # a 3-D process grid: faces, edges, corners
    results = pool4.run(run_cases, cases)
    for rank_results in results:
        _check(rank_results[:6], FP64_ATOL)
        _check(rank_results[6:12], FP32_ATOL)
        _check(rank_results[12:], FP64_ATOL)


@pytest.mark.timeout(90)
def test_per_face_messages_match_the_reference_on_1d_2d_and_3d_process_grids(pool4):
    """``Plan.packing="per_face"``: one message per neighbour and field, in place where contiguous (1-D grids)."""
    per_face = ({"strategy": "sequential", "packing": "per_face"}, {"strategy": "overlap", "packing": "per_face"},
                {"strategy": "deep_halo", "chunks": 2, "transport": "p2p", "packing": "per_face"})
    cases = [dict(procs=procs, grid=grid, radius=radius, boundary=boundary, plan=plan, dtype="float64", wave=wave,
                  steps=3, seed=20 + i)
             for i, (procs, grid, radius, wave, boundary, plan) in enumerate(
                 (procs, grid, radius, wave, boundary, plan)
                 for procs, grid, radius, wave in (((4,), (16, 6), 2, False), ((2, 2), (8, 8, 3), 1, True),
                                                  ((2, 2, 1), (6, 6, 5), 1, False))
                 for boundary in ("fixed", "periodic") for plan in per_face)]
    for rank_results in pool4.run(run_cases, cases):
        _check(rank_results, FP64_ATOL)


@pytest.mark.timeout(60)
def test_plan_none_is_chosen_once_and_matches_the_reference(pool2):
    cases = [dict(procs=(2,), grid=(16, 8), radius=2, boundary=b, plan=None, dtype="float64", steps=4, seed=3)
             for b in ("fixed", "periodic")]
    for rank_results in pool2.run(run_cases, cases):
        _check(rank_results, FP64_ATOL)


@pytest.mark.timeout(60)
def test_overlap_posts_the_receives_before_the_interior_and_waits_after_it(pool2):
    for events in pool2.run(overlap_events, "overlap"):
        kinds = [e[0] for e in events]
        assert kinds == ["post", "compute", "wait", "compute", "compute"], events
        assert events[0][1] >= 1  # the receives are in the posted batch
        assert events[1][1] == (8, 4)  # the interior: 8 - 2r rows of the block, padded by r
    for events in pool2.run(overlap_events, "sequential"):
        assert [e[0] for e in events] == ["post", "wait", "compute"], events


BAD = {
    "procs_not_world": r"holds \d+ ranks but the world has",
    "radius_zero": r"radius=0 must be an int >= 1",
    "steps_zero": r"steps=0 must be an int >= 1",
    "halo_wider_than_block": r"the halo 7 is wider than a rank's block",
    "deep_halo_wider": r"a deep halo 4 x 2 = 8 is wider",
    "fields_differ": r"fields\[1\] has shape \(6, 5\)",
    "wrong_shape": r"step_fn returned \(3, 4\)",
    "bad_boundary": r"boundary='open'",
}
ON_ONE_RANK = {
    "fields_differ": BAD["fields_differ"],
    "wrong_shape": BAD["wrong_shape"],
    "uneven": r"different sites or plans|failed on rank",
}


@pytest.mark.timeout(90)
@pytest.mark.parametrize("which", sorted(BAD))
def test_bad_input_raises_on_every_rank(pool2, which):
    pool2.run_expect_error(bad_call, which, exc_type=ValueError, match=BAD[which])


@pytest.mark.timeout(90)
@pytest.mark.parametrize("which", sorted(ON_ONE_RANK))
def test_bad_input_on_one_rank_raises_everywhere_without_a_wait(pool2, which):
    pool2.run_expect_error(bad_call, which, 1, exc_type=ValueError, match=ON_ONE_RANK[which] + "|failed on rank")
    assert all(pool2.run(healthy, 2))
