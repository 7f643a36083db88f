"""Operator calls captured in CUDA graphs (hocket.ops.CapturedCall) on 2 GPUs with NCCL: the
host-staged relay's device signals and NCCL collectives replayed with fresh operands, interleaved
with eager calls, against the reference; and the refusals of plans a graph cannot capture.

Run on a machine with >= 2 GPUs: ``python -m pytest tests/gpu/test_captured_nccl.py -q``."""

from __future__ import annotations

import pytest
from _two_gpus import SEED, require_two_gpus

require_two_gpus()

from _captured_cases import (  # noqa: E402
    CAPTURABLE_PLANS,
    RELAY,
    run_bare_graph,
    run_captured,
    run_captured_after_context_churn,
    run_captured_autotuned,
    run_captured_copy_engine,
)

pytestmark = pytest.mark.timeout(600)
TINY_PIECE_BYTES = 10485
"""relay messages of 0.01 MiB: several per call, slots reused within one"""
PLANS = [
    *CAPTURABLE_PLANS,
    {"strategy": "sequential", "transport": "host_staged"},
    None,  # plan=None: planned for replays (hocket.ops.planning.captured_planning)
]


@pytest.mark.parametrize("plan", PLANS, ids=lambda p: "-".join(str(v) for v in p.values()) if p else "planned")
@pytest.mark.parametrize("kind,rows,k,n", [("ag_mm", 200, 96, 136), ("mm_rs", 130, 64, 96), ("mm_ar", 70, 48, 40)])
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_captured_call_matches_the_reference(pool2, kind, rows, k, n, plan, dtype):
    case = dict(kind=kind, rows=rows, k=k, n=n, dtype=dtype, plan=plan, seed=SEED, calls=5,
                sizes={"piece_bytes": TINY_PIECE_BYTES})  # several relay messages, slots reused within a call
    counts = pool2.run(run_captured, case)
    assert counts[0] == counts[1] == 7


def test_a_copy_engine_push_plan_is_refused_with_the_reason(pool2):
    case = dict(kind="mm_rs", rows=64, k=32, n=32, dtype="bfloat16", seed=SEED,
                plan={"strategy": "chunked", "chunks": 2, "transport": "copy_engine"})
    pool2.run_expect_error(run_captured_copy_engine, case, exc_type=ValueError, match="push protocol")


COPY_ENGINE = [("ag_mm", 200, 96, 136, 1), ("ag_mm", 200, 96, 136, 3), ("mm_rs", 130, 64, 96, 1)]


@pytest.mark.parametrize("kind,rows,k,n,chunks", COPY_ENGINE)
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_copy_engine_barrier_protocols_replay(pool2, kind, rows, k, n, chunks, dtype):
    # put (ag_mm, one piece) and pull (ag_mm in pieces, mm_rs): replays interleaved with eager calls of the
    # same plan, which use the eager pipe's two slots while the replays use their own slot and closing barrier
    case = dict(kind=kind, rows=rows, k=k, n=n, dtype=dtype, seed=SEED, calls=5,
                plan={"strategy": "chunked", "chunks": chunks, "transport": "copy_engine"})
    counts = pool2.run(run_captured, case)
    assert counts[0] == counts[1] == 7


def test_a_bare_torch_graph_of_a_copy_engine_call_is_refused(pool2):
    case = dict(kind="ag_mm", rows=64, k=32, n=32, dtype="bfloat16", seed=SEED,
                plan={"strategy": "chunked", "chunks": 1, "transport": "copy_engine"})
    pool2.run_expect_error(run_bare_graph, case, exc_type=ValueError, match="only through hocket.ops.CapturedCall")


@pytest.mark.parametrize("kind,rows,k,n", [("ag_mm", 256, 128, 192), ("mm_rs", 97, 64, 80)])
def test_plan_none_autotunes_over_replays(pool2, kind, rows, k, n):
    case = dict(kind=kind, rows=rows, k=k, n=n, dtype="bfloat16", seed=SEED, calls=3,
                sizes={"piece_bytes": TINY_PIECE_BYTES})
    results = pool2.run(run_captured_autotuned, case)
    assert results[0] == results[1] == ("autotune", 3)


@pytest.mark.parametrize("plan", [{"strategy": "chunked", "chunks": 2, "order": "local_first"},
                                  {**RELAY, "chunks": 2, "order": "local_first"}], ids=["nccl", "relay"])
@pytest.mark.parametrize("kind,rows,k,n", [("ag_mm", 256, 128, 192), ("mm_rs", 128, 96, 160)])
def test_a_replay_outlives_its_context_dropping_the_buffers(pool2, kind, rows, k, n, plan):
    case = dict(kind=kind, rows=rows, k=k, n=n, dtype="bfloat16", plan=plan, seed=SEED, calls=3)
    counts = pool2.run(run_captured_after_context_churn, case)
    assert counts[0] == counts[1] == 3
