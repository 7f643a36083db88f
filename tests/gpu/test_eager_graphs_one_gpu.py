"""Eager graphs (HOCKET_EAGER_GRAPHS) on one GPU, in this process, over a one-rank NCCL group: every operator
replayed with fresh operands against torch.mm, and a capture that fails leaving the signature eager with a
warning. The two-rank cases are in test_eager_graphs_nccl.py."""

from __future__ import annotations

import os
import warnings

import pytest
import torch
import torch.distributed as dist

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)
if os.environ.get("TRITON_INTERPRET", "") not in ("", "0"):
    pytest.skip("TRITON_INTERPRET is set: run GPU tests in their own process", allow_module_level=True)

import hocket.ops as H  # noqa: E402
from hocket.env import overridden  # noqa: E402
from hocket.ops import captured, dispatch  # noqa: E402
from hocket.ops.eager_graph import EagerGraphWarning  # noqa: E402
from hocket.ops.planning import clear_plan_cache  # noqa: E402

pytestmark = pytest.mark.timeout(300)
DEV = torch.device("cuda", torch.cuda.current_device())


@pytest.fixture(scope="module")
def group():
    if dist.is_initialized():
        pytest.skip("a default process group already exists in this process")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
    dist.init_process_group("nccl", rank=0, world_size=1, device_id=DEV)
    try:
        yield dist.group.WORLD
    finally:
        H.close_contexts()
        dist.destroy_process_group()


def _fresh():
    dispatch.clear_prepared_cache()
    clear_plan_cache()


def _call(kind, group, plan):
    if kind == "ag_mm":
        return lambda a, b: H.all_gather_matmul(a, [b], 0, group, return_A=False, plan=plan)[1][0]
    if kind == "mm_rs":
        return lambda a, b: H.matmul_reduce_scatter(a, b, "sum", 0, group, plan=plan)
    return lambda a, b: H.matmul_all_reduce(a, b, "sum", group, plan=plan)


@pytest.mark.parametrize("kind", ["ag_mm", "mm_rs", "mm_ar"])
@pytest.mark.parametrize("plan", [{"strategy": "sequential"}, {"strategy": "chunked", "chunks": 3}])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_replayed_calls_match_torch_mm(group, kind, plan, dtype):
    _fresh()
    rows, k, n = 333, 96, 136  # rows not divisible by the chunks
    with overridden({"HOCKET_EAGER_GRAPHS": "on"}):
        fn = _call(kind, group, plan)
        results = []
        for _ in range(4):
            a = torch.randn(rows, k, device=DEV, dtype=dtype)
            b = torch.randn(k, n, device=DEV, dtype=dtype)
            results.append((fn(a, b), (a.float() @ b.float())))
        torch.cuda.synchronize()
    graphs = [p.graph for p in dispatch._PREPARED.values() if p.graph is not None]
    assert graphs and all(g.step is not None for g in graphs)
    for got, expected in results:
        H.assert_close(got, expected.to(got.dtype), world=1, what=f"{kind} {plan} replayed")
    _fresh()


def test_a_capture_that_fails_leaves_the_calls_eager(group, monkeypatch):
    _fresh()

    def broken(*args, **kwargs):
        raise RuntimeError("capture refused for the test")

    monkeypatch.setattr(captured, "CapturedCall", broken)
    with overridden({"HOCKET_EAGER_GRAPHS": "on"}), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn = _call("ag_mm", group, {"strategy": "chunked", "chunks": 2})
        for _ in range(3):
            a = torch.randn(100, 64, device=DEV)
            b = torch.randn(64, 32, device=DEV)
            H.assert_close(fn(a, b), a @ b, world=1, what="ag_mm issued after a failed capture")
    assert [w for w in caught if issubclass(w.category, EagerGraphWarning)]
    assert all(p.graph.eager_only for p in dispatch._PREPARED.values() if p.graph is not None)
    _fresh()
