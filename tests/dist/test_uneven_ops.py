"""Uneven per-rank shards (``Site.shard_rows``): every operator x strategy x transport (collective, p2p) that
serves them on CPU (gloo), both ways (exact, padded), fp32 and bf16, a rank with no rows, forward and gradients
against a float64 reference; bad sizes raise on every rank; strategies without an uneven executor are refused,
naming those with one; the uneven transport helpers; torch.compile."""

from __future__ import annotations

import pytest
from _uneven_cases import bad_shard_rows, refused_strategy, uneven_case, uneven_without_sizes
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

ROW_STRATEGIES = ("sequential", "bulk", "chunked", "ring", "bidir_ring")
WAYS = (None, "padded")
FAST = settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _sizes(world: int):
    """Uneven sizes, one rank with none."""
    return st.lists(st.integers(1, 4), min_size=world - 1, max_size=world - 1).flatmap(
        lambda rest: st.integers(0, world - 1).map(lambda zero_at: [*rest[:zero_at], 0, *rest[zero_at:]]))


def _plan(strategy: str, way, chunks: int, transport: str = "collective") -> dict:
    plan = {"strategy": strategy, "chunks": chunks, "transport": transport}
    if way is not None:
        plan["splits"] = way
    return plan


@pytest.mark.parametrize("kind", ["ag_mm", "mm_rs"])
@pytest.mark.parametrize("strategy", ROW_STRATEGIES)
@FAST
@given(data=st.data())
def test_uneven_rows_match_the_reference(pool, kind, strategy, data):
    w = pool.world_size
    sizes = data.draw(_sizes(w))
    way = None if strategy in ("ring", "bidir_ring") else data.draw(st.sampled_from(WAYS))
    dim = data.draw(st.sampled_from([0, 1]))  # a leading dim or the middle one of [.., .., K]
    plan = _plan(strategy, way, data.draw(st.integers(1, 3)), data.draw(st.sampled_from(["collective", "p2p"])))
    case = dict(kind=kind, sizes=sizes, shape=[data.draw(st.integers(1, 3)), data.draw(st.integers(1, 3)), 4],
                dim=dim, n=data.draw(st.integers(1, 5)), dtype=data.draw(st.sampled_from(["float32", "bfloat16"])),
                seed=data.draw(st.integers(0, 999)), plan=plan, grads=True,
                explicit=kind == "mm_rs" or data.draw(st.booleans()),
                reduce_op=data.draw(st.sampled_from(["sum", "avg"])))
    assert all(c > 0 for c in pool.run(uneven_case, case))


@pytest.mark.parametrize("kind", ["ag_mm", "mm_rs"])
@pytest.mark.parametrize("strategy", ["sequential", "bulk", "chunked"])
@FAST
@given(data=st.data())
def test_uneven_last_dim_matches_the_reference(pool2, kind, strategy, data):
    sizes = data.draw(_sizes(2))
    case = dict(kind=kind, sizes=sizes, shape=[data.draw(st.integers(1, 4)), 0], dim=1, n=3,
                dtype=data.draw(st.sampled_from(["float32", "bfloat16"])), seed=data.draw(st.integers(0, 999)),
                plan=_plan(strategy, data.draw(st.sampled_from(WAYS)), 2), grads=True, explicit=True)
    assert all(c > 0 for c in pool2.run(uneven_case, case))


@pytest.mark.parametrize("strategy", ["sequential", "bulk", "chunked", "substituted"])
@FAST
@given(data=st.data())
def test_uneven_local_k_all_reduce_matches_the_reference(pool, strategy, data):
    w = pool.world_size
    case = dict(kind="mm_ar", sizes=data.draw(_sizes(w)), shape=[data.draw(st.integers(2, 6))], dim=0, n=4,
                dtype=data.draw(st.sampled_from(["float32", "bfloat16"])), seed=data.draw(st.integers(0, 999)),
                plan={"strategy": strategy, "chunks": 2}, grads=True, explicit=data.draw(st.booleans()),
                reduce_op=data.draw(st.sampled_from(["sum", "avg"])))
    assert all(c > 0 for c in pool.run(uneven_case, case))


def test_uneven_save_gathered_false_regathers(pool2):
    case = dict(kind="ag_mm", sizes=[3, 1], shape=[0, 4], dim=0, n=2, dtype="float32", seed=3,
                plan={"strategy": "chunked", "chunks": 2}, grads=True, explicit=False, save_gathered=False)
    assert all(c > 0 for c in pool2.run(uneven_case, case))


def test_uneven_plan_left_to_hocket_runs(pool2):
    """plan=None on an uneven site whose m the call planner keeps (8 rows: a bucket of its own)."""
    case = dict(kind="ag_mm", sizes=[6, 2], shape=[0, 8], dim=0, n=4, dtype="float32", seed=4, plan=None,
                grads=False, explicit=False)
    assert all(c > 0 for c in pool2.run(uneven_case, case))


@pytest.mark.parametrize(("kind", "per_rank", "rows", "match"), [
    ("mm_rs", [[4, 1], [4, 1]], None, "add up to 5 but dim 0"),
    ("mm_rs", [[7, -1], [7, -1]], None, "negative size"),
    ("mm_rs", [[4, 2], [3, 3]], None, "shard_rows"),
    ("ag_mm", [[2, 3], [2, 2]], [2, 3], "shard_rows"),
    ("ag_mm", [[2, 2, 1], [2, 2, 1]], [2, 2], "has 3 entries but the group has 2"),
    ("ag_mm", [[3, 1], [3, 1]], [2, 1], "gives rank 0 3 rows"),
])
def test_bad_shard_rows_raise_on_every_rank(pool2, kind, per_rank, rows, match):
    failures = pool2.run_expect_error(bad_shard_rows, dict(kind=kind, per_rank=per_rank, rows=rows,
                                                           plan="sequential"), exc_type=ValueError, match=match)
    assert len(failures) == 2


@pytest.mark.parametrize(("plan", "dim", "match"), [
    ({"strategy": "chunked", "chunks": 2, "order": "local_first"}, 0, "order='local_first'"),
    ({"strategy": "ring", "chunks": 1}, 1, "along the last dim"),
    ({"strategy": "chunked", "chunks": 2, "hierarchy": "intra_first"}, 0, "hierarchy"),
])
def test_strategies_without_uneven_executors_are_refused(pool2, plan, dim, match):
    failures = pool2.run_expect_error(refused_strategy, dict(rows=[3, 1], plan=plan, dim=dim), exc_type=ValueError,
                                      match=match)
    assert len(failures) == 2
    if "hierarchy" not in plan:  # the refusal names the strategies that serve uneven shards
        assert all("sequential" in f.message and "chunked" in f.message for f in failures)


def test_uneven_tensors_without_shard_rows_point_at_the_argument(pool2):
    failures = pool2.run_expect_error(uneven_without_sizes, dict(rows=[3, 1]), exc_type="AgreementError",
                                      match="shard_rows")
    assert len(failures) == 2


def test_uneven_transport_both_ways(pool4):
    """The gloo facts of the issue: sizes 1, 3, 0, 2 at world 4, gathered and reduce-scattered exact and padded."""
    from _uneven_cases import transport_rows

    assert pool4.run(transport_rows, dict(sizes=[1, 3, 0, 2], seed=7)) == [6, 6, 6, 6]


def test_uneven_calls_compile(pool2):
    """torch.compile(fullgraph) traces uneven calls given as lists, forward and backward."""
    from _uneven_cases import compiled_uneven

    assert pool2.run(compiled_uneven, dict(sizes=[3, 1], backward=True)) == [4, 4]


def test_auto_on_one_rank_only_raises_on_every_rank(pool2):
    from _uneven_cases import mixed_auto

    failures = pool2.run_expect_error(mixed_auto, dict(sizes=[3, 1]), exc_type=ValueError,
                                      match="shard_rows the same way on every rank")
    assert len(failures) == 2
