"""Rank-side helpers of tests/gpu/test_captured_nccl.py: an operator call captured in a CUDA graph
(hocket.ops.CapturedCall) is replayed with fresh operands, interleaved with eager calls of the same
plan, and every result is checked against the one-process reference."""

from __future__ import annotations

import torch
import torch.distributed as dist
from _nccl_cases import _case_sizes, _operand  # every rank draws every rank's operands from one seed

import hocket.ops as H
from hocket.core.sizes import using_sizes
from hocket.env import overridden
from hocket.ops.reference import all_gather_matmul_global, matmul_all_reduce_global, matmul_reduce_scatter_global

RELAY = {"strategy": "chunked", "transport": "host_staged"}
CAPTURABLE_PLANS = [
    {"strategy": "sequential"},
    {"strategy": "chunked", "chunks": 3},
    {**RELAY, "chunks": 1, "order": "local_first"},
    {**RELAY, "chunks": 4, "order": "local_first"},
    {**RELAY, "chunks": 3},
]
"""plans every capture test replays: NCCL, and the relay in one, four (own rows first) and three pieces"""


def _operands(case: dict, seed: int, device):
    """(this rank's inputs, the reference output) of one call of ``case``."""
    w, rank = dist.get_world_size(), dist.get_rank()
    kind, dtype, rows, k, n = case["kind"], case["dtype"], case["rows"], case["k"], case["n"]
    if kind == "ag_mm":
        shards = [_operand(seed, r, (rows, k), dtype, device) for r in range(w)]
        B = _operand(seed, 0, (k, n), dtype, device, salt=1)
        return (shards[rank], B), all_gather_matmul_global(shards, [B], 0)[1][0]
    As = [_operand(seed, r, (rows * (w if kind == "mm_rs" else 1), k), dtype, device) for r in range(w)]
    Bs = [_operand(seed, r, (k, n), dtype, device, salt=1) for r in range(w)]
    if kind == "mm_rs":
        return (As[rank], Bs[rank]), matmul_reduce_scatter_global(As, Bs, "sum", 0)[rank]
    return (As[rank], Bs[rank]), matmul_all_reduce_global(As, Bs, "sum")


def _call(kind: str, plan: dict):
    group = dist.group.WORLD
    if kind == "ag_mm":
        return lambda a, b: H.all_gather_matmul(a, [b], 0, group, return_A=False, plan=plan)[1][0]
    if kind == "mm_rs":
        return lambda a, b: H.matmul_reduce_scatter(a, b, "sum", 0, group, plan=plan)
    return lambda a, b: H.matmul_all_reduce(a, b, "sum", group, plan=plan)


def run_captured(case: dict) -> int:
    """Capture one call of ``case["plan"]``, then ``case["calls"]`` times: replay it with fresh operands,
    and (every other time) run an eager call too, no sync between calls; checks every result at the end."""
    with overridden(case.get("env") or {}), using_sizes(_case_sizes(case)):
        device = torch.device("cuda", torch.cuda.current_device())
        fn = _call(case["kind"], case["plan"])
        inputs, _ = _operands(case, case["seed"], device)
        step = H.CapturedCall(fn, *inputs, what=f"{case['kind']} test")
        results = []
        for call in range(case["calls"]):
            inputs, expected = _operands(case, case["seed"] + 101 * (call + 1), device)
            results.append((step(*inputs).clone(), expected, f"replay {call}"))
            if call % 2:
                results.append((fn(*inputs), expected, f"eager call {call}"))
        torch.cuda.synchronize()
        w = dist.get_world_size()
        for got, expected, what in results:
            H.assert_close(got, expected, world=w, what=f"{what} {case['plan']} {case['kind']}")
        return len(results)


def run_bare_graph(case: dict) -> None:
    """A copy-engine call captured by a bare torch.cuda.graph (not a CapturedCall) is refused."""
    device = torch.device("cuda", torch.cuda.current_device())
    inputs, _ = _operands(case, case["seed"], device)
    fn = _call(case["kind"], case["plan"])
    fn(*inputs)  # an eager call first: the pipe exists, only the capture is refused
    torch.cuda.synchronize()
    with torch.cuda.graph(torch.cuda.CUDAGraph()):
        fn(*inputs)


def run_captured_copy_engine(case: dict) -> None:
    """A copy-engine push plan cannot be captured: the error says why."""
    device = torch.device("cuda", torch.cuda.current_device())
    inputs, _ = _operands(case, case["seed"], device)
    H.CapturedCall(_call(case["kind"], case["plan"]), *inputs)


def run_captured_autotuned(case: dict) -> tuple[str, int]:
    """``plan=None`` in a CapturedCall with ``HOCKET_AUTOTUNE=1``: the warm-up's first call times the captured
    planner's shortlist as graph replays; returns (the decision's source, results checked)."""
    from hocket.ops.live import captured_planner, set_process_planner
    from hocket.ops.planning import clear_plan_cache

    set_process_planner(None)
    clear_plan_cache()
    try:
        with overridden({"HOCKET_AUTOTUNE": "1", **(case.get("env") or {})}), using_sizes(_case_sizes(case)):
            device = torch.device("cuda", torch.cuda.current_device())
            fn = _call(case["kind"], None)
            inputs, _ = _operands(case, case["seed"], device)
            step = H.CapturedCall(fn, *inputs, what=f"{case['kind']} autotuned test")
            sources = [d.source for d in captured_planner().known().values()]
            checked = 0
            for call in range(case["calls"]):
                inputs, expected = _operands(case, case["seed"] + 7 * (call + 1), device)
                H.assert_close(step(*inputs), expected, world=dist.get_world_size(),
                               what=f"autotuned replay {call} {case['kind']}")
                checked += 1
            return ",".join(sources), checked
    finally:
        set_process_planner(None)
        clear_plan_cache()


def run_captured_after_context_churn(case: dict) -> int:
    """Capture a call, then make every operator context drop all its buffers (more new keys than it
    keeps) and fill the freed memory with tensors of a sentinel value; replays must still match the
    reference and leave those tensors alone (CapturedCall keeps its buffers alive)."""
    from hocket.ops.context import REGISTRY

    device = torch.device("cuda", torch.cuda.current_device())
    fn = _call(case["kind"], case["plan"])
    inputs, _ = _operands(case, case["seed"], device)
    fn(*inputs)  # an eager call first, as a program that captures later has made: its buffers come from the
    torch.cuda.synchronize()  # current stream's pool, where the sentinels below are allocated too
    step = H.CapturedCall(fn, *inputs, what=f"{case['kind']} churn test")
    contexts = list(REGISTRY._contexts.values())
    used = [(b.shape, b.dtype) for ctx in contexts for b in ctx._buffers.values()]
    assert used, "the captured call used no context buffer: the test would prove nothing"
    if case.get("pinned", True):
        assert step.buffers
    for ctx in contexts:
        for i in range(ctx.max_buffers + 1):
            ctx.buffer(f"churn{i}", (i + 1,))
    sentinels = [torch.full(shape, 7, dtype=dtype, device=device) for shape, dtype in used for _ in range(2)]
    torch.cuda.synchronize()
    results = []
    for call in range(case["calls"]):
        inputs, expected = _operands(case, case["seed"] + 31 * (call + 1), device)
        results.append((step(*inputs).clone(), expected))
    torch.cuda.synchronize()
    for got, expected in results:
        H.assert_close(got, expected, world=dist.get_world_size(), what=f"replay after churn {case['plan']}")
    assert all(bool((s == 7).all()) for s in sentinels), "a replay wrote into memory the context had freed"
    return len(results)
