"""Every operator x strategy x gather/scatter dim against the reference, world 2 and 4, fp32 and bf16,
plus hypothesis-drawn (uneven) shapes; cases are drawn in the driver and sent to every rank."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hocket.ops.executors import supported_table
from _ops_cases import run_case, sweep

SUPPORTED = supported_table()


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("kind", ["ag_mm", "mm_rs", "mm_ar"])
def test_every_strategy_and_dim(pool, kind, dtype):
    counts = pool.run(sweep, kind, dtype, 11)
    assert len(set(counts)) == 1 and counts[0] > 0


@st.composite
def cases(draw, world: int):
    kind = draw(st.sampled_from(["ag_mm", "mm_rs", "mm_ar"]))
    ndim = draw(st.integers(2, 3))
    shape = [draw(st.integers(1, 7)) for _ in range(ndim)]
    dim = draw(st.integers(0, ndim - 1))
    ns = [draw(st.integers(1, 6))]
    extra = {}
    if kind == "ag_mm":
        ns += draw(st.lists(st.integers(1, 5), max_size=1))
        extra["return_A"] = draw(st.booleans())
    else:
        extra["reduce_op"] = draw(st.sampled_from(["sum", "avg"]))
    if kind == "mm_rs":
        if dim == ndim - 1:
            ns = [ns[0] * world]
        else:
            shape[dim] *= world
    return dict(kind=kind, strategy=draw(st.sampled_from(SUPPORTED[kind])), chunks=draw(st.integers(1, 9)),
                shape=shape, dim=dim, ns=ns, dtype=draw(st.sampled_from(["float32", "bfloat16"])),
                seed=draw(st.integers(0, 2**30)), **extra)


def _drawn(pool, data):
    case = data.draw(cases(pool.world_size))
    results = pool.run(run_case, case)
    assert all(len(r) == len(results[0]) > 0 for r in results)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_drawn_cases_world2(pool2, data):
    _drawn(pool2, data)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_drawn_cases_world4(pool4, data):
    _drawn(pool4, data)


@pytest.mark.parametrize("strategy", ["ring", "bidir_ring"])
@pytest.mark.parametrize("chunks", [1, 2])
def test_all_reduce_rings_with_uneven_blocks_world4(pool4, strategy, chunks):
    # 9 rows in 4 blocks (3, 2, 2, 2): in bidir_ring the two lanes hold blocks of different
    # sizes at once, whose row halves overlap (found by hypothesis: shape [3, 3, 1]).
    for shape in ([3, 3, 1], [9, 5], [3, 4]):
        case = dict(kind="mm_ar", strategy=strategy, chunks=chunks, shape=shape, dim=0, ns=[3],
                    dtype="float32", seed=11, reduce_op="sum")
        results = pool4.run(run_case, case)
        assert all(len(r) == len(results[0]) > 0 for r in results)
