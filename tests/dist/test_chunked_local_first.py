"""chunked with order='local_first' (own shard first for all-gather + matmul, own block last for
matmul + reduce-scatter; every piece's collective in flight at once) on gloo, world 2 and 4,
drawn shapes, pieces and dims, against the reference."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from _local_first_cases import run_local_first


@st.composite
def cases(draw, world: int):
    kind = draw(st.sampled_from(["ag_mm", "mm_rs"]))
    ndim = draw(st.integers(2, 3))
    shape = [draw(st.integers(1, 6)) for _ in range(ndim)]
    dim = draw(st.integers(0, ndim - 1))
    ns = [draw(st.integers(1, 5))]
    extra = {}
    if kind == "ag_mm":
        ns += draw(st.lists(st.integers(1, 4), max_size=1))
    else:
        extra["reduce_op"] = draw(st.sampled_from(["sum", "avg"]))
        if dim == ndim - 1:
            ns = [ns[0] * world]
        else:
            shape[dim] *= world
    return dict(kind=kind, shape=shape, dim=dim, ns=ns, chunks=draw(st.integers(1, 7)),
                dtype=draw(st.sampled_from(["float32", "bfloat16"])), seed=draw(st.integers(0, 2**30)), **extra)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_local_first_matches_the_reference(pool, data):
    case = data.draw(cases(pool.world_size))
    errors = pool.run(run_local_first, case)
    assert len(errors) == pool.world_size and all(e >= 0.0 for e in errors)
