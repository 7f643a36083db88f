"""Eager calls replayed from hocket's own CUDA graphs (HOCKET_EAGER_GRAPHS) on 2 GPUs with NCCL: every
capturable plan under ``on`` (collectives, the host-staged relay's device signals, copy-engine barrier
protocols), a plan a graph cannot capture, ``plan=None`` under ``auto``, the process limit, and autograd.

Run on a machine with >= 2 GPUs: ``python -m pytest tests/gpu/test_eager_graphs_nccl.py -q``."""

from __future__ import annotations

import pytest
from _two_gpus import SEED, require_two_gpus

require_two_gpus()

from _captured_cases import CAPTURABLE_PLANS, RELAY  # noqa: E402
from _eager_graph_cases import run_capture_fails_on_one_rank, run_eager_graph_grads, run_eager_graphs  # noqa: E402

pytestmark = pytest.mark.timeout(600)
SHAPES = [("ag_mm", 200, 96, 136), ("mm_rs", 130, 64, 96), ("mm_ar", 70, 48, 40)]  # rows: per rank, uneven


@pytest.mark.parametrize("plan", CAPTURABLE_PLANS, ids=lambda p: "-".join(str(v) for v in p.values()))
@pytest.mark.parametrize("kind,rows,k,n", SHAPES)
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_every_capturable_plan_replays_and_matches_the_reference(pool2, kind, rows, k, n, plan, dtype):
    case = dict(kind=kind, rows=rows, k=k, n=n, dtype=dtype, plan=plan, seed=SEED, calls=5, mode="on",
                sizes={"piece_bytes": 10485})  # 0.01 MiB: several relay messages per call
    assert pool2.run(run_eager_graphs, case) == [(True, 5), (True, 5)]


@pytest.mark.parametrize("kind,rows,k,n,chunks", [("ag_mm", 200, 96, 136, 1), ("ag_mm", 200, 96, 136, 3),
                                                  ("mm_rs", 130, 64, 96, 1)])
def test_copy_engine_barrier_protocols_replay(pool2, kind, rows, k, n, chunks):
    case = dict(kind=kind, rows=rows, k=k, n=n, dtype="bfloat16", seed=SEED, calls=5, mode="on",
                plan={"strategy": "chunked", "chunks": chunks, "transport": "copy_engine"})
    assert pool2.run(run_eager_graphs, case) == [(True, 5), (True, 5)]


def test_a_plan_no_graph_captures_is_issued_as_before(pool2):
    # copy-engine reduce-scatter in two pieces runs the push protocol, whose waits the host checks
    case = dict(kind="mm_rs", rows=130, k=64, n=96, dtype="bfloat16", seed=SEED, calls=4, mode="on",
                plan={"strategy": "chunked", "chunks": 2, "transport": "copy_engine"})
    assert pool2.run(run_eager_graphs, case) == [(False, 4), (False, 4)]


@pytest.mark.parametrize("kind,rows,k,n", SHAPES)
def test_plan_none_under_auto_matches_the_reference(pool2, kind, rows, k, n):
    case = dict(kind=kind, rows=rows, k=k, n=n, dtype="bfloat16", plan=None, seed=SEED, calls=4, mode="auto")
    results = pool2.run(run_eager_graphs, case)
    assert results[0] == results[1] and results[0][1] == 4  # both ranks replay, or neither


def test_past_the_process_limit_calls_are_issued(pool2):
    case = dict(kind="ag_mm", rows=200, k=96, n=136, dtype="bfloat16", seed=SEED, calls=4, mode="on",
                plan={**RELAY, "chunks": 2, "order": "local_first"}, max_graphs=0)
    assert pool2.run(run_eager_graphs, case) == [(False, 4), (False, 4)]


@pytest.mark.parametrize("plan", [{"strategy": "chunked", "chunks": 2}, {**RELAY, "chunks": 2, "order": "local_first"}],
                         ids=["nccl", "relay"])
def test_gradients_equal_those_of_issued_calls(pool2, plan):
    case = dict(rows=128, k=64, n=96, dtype="float32", seed=SEED, plan=plan, mode="on")
    worst = pool2.run(run_eager_graph_grads, case)
    assert max(worst) < 1e-4


def test_a_capture_that_fails_on_one_rank_leaves_every_rank_eager(pool2):
    case = dict(kind="ag_mm", rows=200, k=96, n=136, dtype="bfloat16", seed=SEED, calls=4, mode="on",
                plan={**RELAY, "chunks": 2, "order": "local_first"})
    (r0, n0, w0), (r1, n1, w1) = pool2.run(run_capture_fails_on_one_rank, case)
    assert (r0, n0, r1, n1) == (False, 4, False, 4)
    assert "another rank" in w0 and "capture refused for the test" in w1
