"""Rank-side helpers of tests/gpu/test_eager_graphs_nccl.py: plain eager operator calls under
``HOCKET_EAGER_GRAPHS`` (hocket replays them from its own CUDA graphs), with fresh operands every call,
every result kept as returned and checked against the one-process reference at the end."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.distributed as dist
from _captured_cases import _call, _operands
from _nccl_cases import _case_sizes

import hocket.ops as H
from hocket.core.sizes import using_sizes
from hocket.env import overridden
from hocket.ops import dispatch
from hocket.ops.eager_graph import graphs_in_use, set_max_graphs
from hocket.ops.planning import clear_plan_cache


def _fresh() -> None:
    dispatch.clear_prepared_cache()
    clear_plan_cache()


@contextmanager
def _graph_limit(count: int | None) -> Iterator[None]:
    """``set_max_graphs(count)`` for the block (None: the limit as it is)."""
    previous = set_max_graphs(count) if count is not None else None
    try:
        yield
    finally:
        if previous is not None:
            set_max_graphs(previous)


def run_eager_graphs(case: dict) -> tuple[bool, int]:
    """``case["calls"]`` eager calls of ``case["plan"]`` under ``case["mode"]``, no sync between them and no
    clone of any output (a later replay must leave an earlier result alone). Returns (whether the call's
    signature was replayed from a graph, results checked). ``case["env"]``: variables set meanwhile,
    ``case["sizes"]``: the transports' sizes, ``case["max_graphs"]``: the process's graph limit."""
    _fresh()
    try:
        with overridden({"HOCKET_EAGER_GRAPHS": case["mode"], **(case.get("env") or {})}), \
                using_sizes(_case_sizes(case)), _graph_limit(case.get("max_graphs")):
            device = torch.device("cuda", torch.cuda.current_device())
            fn = _call(case["kind"], case["plan"])
            results = []
            for call in range(case["calls"]):
                inputs, expected = _operands(case, case["seed"] + 13 * (call + 1), device)
                results.append((fn(*inputs), expected, f"call {call}"))
            torch.cuda.synchronize()
            replayed = [p for p in dispatch._PREPARED.values() if p.graph is not None and p.graph.step is not None]
            for got, expected, what in results:
                H.assert_close(got, expected, world=dist.get_world_size(),
                               what=f"{what} {case['plan']} {case['kind']} eager graphs {case['mode']}")
            return bool(replayed) and graphs_in_use() >= 1, len(results)
    finally:
        _fresh()


def run_eager_graph_grads(case: dict) -> float:
    """``all_gather_matmul`` with B requiring grad, forward and backward three times under ``case["mode"]``
    (the custom op's implementation and its backward's reduce-scatter replay), against the same calls with
    eager graphs off; returns the largest difference of dB and of the input gradient."""
    device = torch.device("cuda", torch.cuda.current_device())
    rows, k, n = case["rows"], case["k"], case["n"]
    worst = 0.0
    for call in range(3):
        (a, b), _ = _operands({**case, "kind": "ag_mm"}, case["seed"] + call, device)
        g = torch.randn(rows * dist.get_world_size(), n, device=device, dtype=a.dtype,
                        generator=torch.Generator(device).manual_seed(case["seed"] + call))
        grads = {}
        for mode in ("off", case["mode"]):
            with overridden({"HOCKET_EAGER_GRAPHS": mode}):
                a_, b_ = a.clone().requires_grad_(), b.clone().requires_grad_()
                _, (out,) = H.all_gather_matmul(a_, [b_], 0, dist.group.WORLD, return_A=False, plan=case["plan"])
                (out.float() * g.float()).sum().backward()
                grads[mode] = (a_.grad, b_.grad)
        torch.cuda.synchronize()
        for off, on in zip(grads["off"], grads[case["mode"]]):
            worst = max(worst, float((off.float() - on.float()).abs().max()))
    assert k and rows
    _fresh()
    return worst


def run_capture_fails_on_one_rank(case: dict) -> tuple[bool, int, str]:
    """Rank 1 cannot capture (its CapturedCall raises): every rank must go on issuing the calls eagerly (no
    rank left waiting in a replay's collectives), warn, and get the reference results. Returns (replayed,
    results checked, the warning's text)."""
    import warnings

    from hocket.ops import captured

    real = captured.CapturedCall

    def broken(*args, **kwargs):
        raise RuntimeError("capture refused for the test")

    if dist.get_rank() == 1:
        captured.CapturedCall = broken
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            replayed, checked = run_eager_graphs(case)
        texts = [str(w.message) for w in caught if "could not be captured" in str(w.message)]
        return replayed, checked, texts[0] if texts else ""
    finally:
        captured.CapturedCall = real
