"""Issue 38 on real gloo ranks (world 2 and 3): a failure on the deciding rank reaches every rank as the same
error within seconds; cache and profile faults degrade to a warning; unclear inputs get clear errors.

Each case runs on ranks that stay alive after the error (the rank functions return their outcome) and
asserts the same outcome on every rank. The seconds each fault took to surface on every rank are printed
(``pytest -s`` shows them: ``FAULT <case> world=<w>: rank r <s> s``); only generous bounds are asserted.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from _decision_faults import (
    autotune_cache_path,
    autotune_rank0_fails,
    autotune_runner_fails_on,
    cached_plan_cannot_run,
    diverge_after_first_call_default_mode,
    not_a_member,
    peer_fails_at_once,
    plan_json_not_an_object,
    plan_none_with_cache_dir,
    planner_raises_on,
    profile_fault,
    reduce_op_enum,
    timeout_env,
)
from conftest import POOL_TASK_TIMEOUT_S, RANK_PRELOAD

from hocket.launch import RankPool
from hocket.launch.errors import RankError

SURFACE_BOUND_S = 20.0
"""generous: a fault that took this long waited for something (the faults here surface in well under 1 s)."""


@pytest.fixture(scope="module")
def pool3() -> Iterator[RankPool]:
    with RankPool(3, backend="gloo", threads_per_rank=1, timeout_s=POOL_TASK_TIMEOUT_S, preload=RANK_PRELOAD) as pool:
        yield pool


@pytest.fixture(params=[2, 3], ids=["world2", "world3"])
def ranks(request, pool2) -> RankPool:
    return pool2 if request.param == 2 else request.getfixturevalue("pool3")


def _report(case: str, outcomes) -> None:
    times = ", ".join(f"rank {r} {o.s:.3f} s" for r, o in enumerate(outcomes))
    print(f"\nFAULT {case} world={len(outcomes)}: {times}")
    assert all(o.s < SURFACE_BOUND_S for o in outcomes), times


def _same_error(outcomes, type_name: str, *needles: str) -> str:
    messages = {o.message for o in outcomes}
    assert all(not o.ok and o.type == type_name for o in outcomes), outcomes
    assert len(messages) == 1, messages
    message = messages.pop()
    for needle in needles:
        assert needle in message, message
    return message


# -- 1. decisions travel with their failures -----------------------------------------------------------

@pytest.mark.timeout(120)
@pytest.mark.parametrize("failing", ["get", "put"])
def test_a_cache_failure_on_the_deciding_rank_raises_the_same_error_everywhere(ranks, tmp_path, failing):
    outcomes = ranks.run(autotune_rank0_fails, str(tmp_path), failing)
    _report(f"autotune cache {failing} raises on rank 0", outcomes)
    _same_error(outcomes, "DecisionError", "failed on group rank 0", f"simulated failure {'reading' if failing == 'get' else 'writing'}",
                "every rank of the group raises this error")


@pytest.mark.timeout(120)
def test_a_runner_failing_on_one_rank_stops_every_rank_before_timing(ranks):
    bad = ranks.world_size - 1
    outcomes = ranks.run(autotune_runner_fails_on, bad)
    _report("autotune runner fails on the last rank", outcomes)
    _same_error(outcomes, "DecisionError", f"failed on group rank(s) [{bad}]", "cannot build a runner")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("exc_name", ["OSError", "RuntimeError"])
def test_a_planner_error_of_any_type_on_rank0_reaches_every_rank(ranks, exc_name):
    outcomes = ranks.run(planner_raises_on, 0, exc_name)
    _report(f"plan=None planner raises {exc_name} on rank 0", outcomes)
    assert outcomes[0].type == exc_name and "planner broke on rank 0" in outcomes[0].message
    for o in outcomes[1:]:
        assert o.type == "RankInputError" and "choosing the plan failed on rank(s) [0]" in o.message
        assert "planner broke on rank 0" in o.message


# -- 2. cache and profile faults degrade ---------------------------------------------------------------------

@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["below_a_file", "is_a_directory"])
def test_autotune_with_an_unusable_cache_warns_and_decides_on_every_rank(ranks, tmp_path, kind):
    outcomes = ranks.run(autotune_cache_path, kind, str(tmp_path))
    _report(f"autotune, cache path {kind}", outcomes)
    assert all(o.ok and o.result == "autotune" for o in outcomes), outcomes
    for o in outcomes:  # rank 0's warning, raised on every rank
        assert any("cannot be used" in w and "plans.json" in w for w in o.warnings), o.warnings


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["below_a_file", "is_a_directory", "corrupt", "truncated", "foreign_schema",
                                  "binary"])
def test_plan_none_with_a_broken_cache_warns_and_runs_on_every_rank(ranks, tmp_path, kind):
    outcomes = ranks.run(plan_none_with_cache_dir, kind, str(tmp_path))
    _report(f"plan=None, cache {kind}", outcomes)
    assert all(o.ok and o.result is True for o in outcomes), outcomes
    unusable = kind in ("below_a_file", "is_a_directory")
    word = "cannot be used" if unusable else "is corrupt"
    warned = [any(word in w and "plans.json" in w for w in o.warnings) for o in outcomes]
    # an unusable path warns on every rank; a corrupt file the ranks share is moved aside by the first rank to
    # read it, and its warning reaches the others with the plan it settled (hocket.ops.agreement.settle)
    assert all(warned), [o.warnings for o in outcomes]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("autotuned", [False, True], ids=["predicted", "autotuned"])
def test_a_cached_plan_the_operator_cannot_run_is_skipped_naming_the_cache(ranks, tmp_path, autotuned):
    outcomes = ranks.run(cached_plan_cannot_run, str(tmp_path), autotuned)
    _report(f"cached tile_fused for all_gather_matmul on CPU ({'autotune' if autotuned else 'prediction'})",
            outcomes)
    assert all(o.ok and o.result == (True, True) for o in outcomes), outcomes
    for o in outcomes if not autotuned else outcomes[:1]:  # prediction: each rank reads; autotune: rank 0
        hits = [w for w in o.warnings if "tile_fused" in w and "cannot run here" in w]
        assert hits and str(tmp_path / "plans.json") in hits[0], o.warnings
        assert len(hits) == 1  # warned once, not on every later call


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["corrupt", "truncated", "foreign_schema", "binary", "missing"])
def test_a_broken_profile_warns_and_plans_without_it_on_every_rank(ranks, tmp_path, kind):
    outcomes = ranks.run(profile_fault, kind, str(tmp_path))
    _report(f"HOCKET_PROFILE {kind}", outcomes)
    assert all(o.ok and o.result is True for o in outcomes), outcomes
    for o in outcomes:
        assert any("calibration profile" in w and f"profile-{kind}.json" in w for w in o.warnings), o.warnings


# -- 4. clear errors before any collective ---------------------------------------------------------------------

@pytest.mark.timeout(120)
@pytest.mark.parametrize("where", ["everywhere", "one_rank"])
def test_reduce_op_enum_is_a_clear_error_on_every_rank(ranks, where):
    bad = None if where == "everywhere" else ranks.world_size - 1
    outcomes = ranks.run(reduce_op_enum, bad)
    _report(f"reduce_op=dist.ReduceOp.SUM ({where})", outcomes)
    for r, o in enumerate(outcomes):
        assert not o.ok, outcomes
        if bad is None or r == bad:
            assert o.type == "TypeError" and "reduce_op='sum'" in o.message and "ReduceOp" in o.message, o
        else:
            assert o.type == "RankInputError" and f"[{bad}]" in o.message and "reduce_op='sum'" in o.message, o


@pytest.mark.timeout(120)
@pytest.mark.parametrize("value", ["inf", "abc", "nan"])
def test_a_bad_timeout_setting_is_reported_to_every_rank(ranks, value):
    bad = ranks.world_size - 1
    outcomes = ranks.run(timeout_env, value, bad)
    _report(f"HOCKET_TIMEOUT_S={value} on the last rank", outcomes)
    assert outcomes[bad].type == "ValueError" and f"HOCKET_TIMEOUT_S='{value}'" in outcomes[bad].message
    for o in outcomes[:bad]:
        assert o.type == "RankInputError" and f"HOCKET_TIMEOUT_S='{value}'" in o.message, o


@pytest.mark.timeout(120)
def test_a_rank_outside_the_group_gets_a_clear_error(pool3):
    outcomes = pool3.run(not_a_member)
    _report("group the rank is not a member of", outcomes)
    assert outcomes[0].ok and outcomes[1].ok and outcomes[0].result == (4, 4)
    assert outcomes[2].type == "ValueError" and "NON_GROUP_MEMBER" in outcomes[2].message
    assert "not a member" in outcomes[2].message and "global rank 2" in outcomes[2].message


@pytest.mark.timeout(120)
def test_plan_json_that_is_not_an_object_is_refused_on_every_rank(ranks):
    outcomes = ranks.run(plan_json_not_an_object)
    _report("plan='[1,2,3]'", outcomes)
    _same_error(outcomes, "ValueError", "is JSON of a list, not an object")


# -- 5. the timeout error helps -------------------------------------------------------------------------------------

@pytest.mark.timeout(150)
def test_divergence_after_the_first_call_times_out_naming_the_call_and_the_fix(pool2):
    outcomes = pool2.run(diverge_after_first_call_default_mode, 1, timeout_s=60)
    _report("divergence after the first call (default HOCKET_AGREEMENT)", outcomes)
    assert all(not o.ok for o in outcomes), outcomes
    for r, o in enumerate(outcomes):
        if o.type == "TransportError":
            assert "hocket.matmul_all_reduce" in o.message and "m=4" in o.message and "float32" in o.message
            assert f"as rank {r} of 2" in o.message and "HOCKET_AGREEMENT=always" in o.message
            assert "different operators or shapes" in o.message
        else:  # the rank whose wait saw the other's failure first may see it as a broken peer
            assert o.type in ("AgreementError", "RankInputError", "RuntimeError"), o


@pytest.mark.timeout(150)
def test_a_peer_that_dies_at_once_is_reported_as_failed_not_as_a_timeout(ranks, tmp_path):
    bad = ranks.world_size - 1
    with pytest.raises(RankError) as info:
        ranks.run(peer_fails_at_once, bad, str(tmp_path), timeout_s=60)
    assert bad in info.value.failures or bad in info.value.unfinished
    survivors = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(bad)]
    print(f"\nFAULT a peer dies at once world={ranks.world_size}: "
          + ", ".join(f"rank {r} {o['s']:.3f} s" for r, o in enumerate(survivors)) + f", rank {bad} exited")
    for o in survivors:
        assert not o["ok"] and o["type"] == "TransportError", o
        assert "did not finish within" not in o["message"] and "closed its connection" in o["message"], o
        assert "hocket.matmul_all_reduce" in o["message"] and o["s"] < SURFACE_BOUND_S
