"""Rank-side helpers of tests/gpu/test_ops_nccl.py: every rank builds every rank's operands from the
case's seed on its GPU, runs its own part with one plan after another, and checks each result
against the one-process reference (twice per plan: the second call reuses the plan's resources)."""

from __future__ import annotations

import torch
import torch.distributed as dist

import hocket.ops as H
from hocket.core.peer_protocol import available
from hocket.core.sizes import TransportSizes, using_sizes
from hocket.env import overridden
from hocket.launch.same_case import rank_generator
from hocket.ops.executors import supported_table
from hocket.ops.reference import all_gather_matmul_global, matmul_all_reduce_global, matmul_reduce_scatter_global
from hocket.transport.registry import available_transports

STRATEGY_TRANSPORTS = {
    "sequential": ("collective",),
    "bulk": ("collective", "copy_engine", "host_staged"),
    "chunked": ("collective", "copy_engine", "host_staged"),
    "ring": ("p2p",),
    "bidir_ring": ("p2p",),
    "substituted": ("collective", "copy_engine", "host_staged"),
    "tile_fused": ("copy_engine", "peer_read"),
}
SUPPORTED = supported_table()
KIND_ONLY_TRANSPORTS = {"peer_read": ("ag_mm",)}
"""transports a strategy offers for some operators only."""
CHUNKS = (1, 3)


def plans_for(kind: str) -> list[dict]:
    """Every strategy the operator supports x every transport it can use here x a few chunk counts."""
    plans = []
    for strategy in SUPPORTED[kind]:
        for transport in STRATEGY_TRANSPORTS[strategy]:
            if transport not in available_transports() or kind not in KIND_ONLY_TRANSPORTS.get(transport, (kind,)):
                continue
            for chunks in (1,) if strategy in ("sequential", "bulk") else CHUNKS:
                plans.append({"strategy": strategy, "transport": transport, "chunks": chunks})
                if strategy == "chunked" and kind != "mm_ar" and transport != "copy_engine":
                    plans.append({"strategy": strategy, "transport": transport, "chunks": chunks,
                                  "order": "local_first"})
    return plans


def _operand(seed: int, rank: int, shape, dtype: str, device, *, salt: int = 0) -> torch.Tensor:
    gen = rank_generator(seed * 7 + salt, rank=rank)
    return torch.randn(tuple(shape), generator=gen, dtype=torch.float32).to(getattr(torch, dtype)).to(device)


def run_plans(case: dict) -> list[tuple[str, float]]:
    """``case``: kind, shape, dim, ns, dtype, seed (+ reduce_op / return_A); every plan of ``plans_for``
    (or only ``case["plans"]`` when given); ``case["protocol"]`` is the ``Plan.protocol`` of every chunked
    copy-engine plan that has that protocol (the others run the automatic one),
    ``case["env"]`` any other variables, ``case["sizes"]`` the transports' sizes (TransportSizes fields)."""
    with overridden(_case_env(case)), using_sizes(_case_sizes(case)):
        return _run_plans(case)


def _case_sizes(case: dict) -> TransportSizes | None:
    return TransportSizes(**case["sizes"]) if case.get("sizes") else None


def _case_env(case: dict) -> dict:
    return dict(case.get("env") or {})


def with_protocol(plan: dict, kind: str, protocol: str | None) -> dict:
    """``plan`` with ``protocol`` as its ``Plan.protocol`` where it is a chunked copy-engine plan whose call
    has that protocol; else ``plan`` as it is (it runs the automatic protocol)."""
    if (protocol and plan.get("strategy") == "chunked" and plan.get("transport") == "copy_engine"
            and available(protocol, kind, plan.get("chunks", 1))):
        return {**plan, "protocol": protocol}
    return plan


def _run_plans(case: dict) -> list[tuple[str, float]]:
    w, rank = dist.get_world_size(), dist.get_rank()
    device = torch.device("cuda", torch.cuda.current_device())
    kind, seed, dtype = case["kind"], case["seed"], case["dtype"]
    shape, dim = list(case["shape"]), case["dim"]
    checked = []
    if kind == "ag_mm":
        shards = [_operand(seed, r, shape, dtype, device) for r in range(w)]
        K = shape[-1] * (w if dim % len(shape) == len(shape) - 1 else 1)
        Bs = [_operand(seed, rank, (K, n), dtype, device, salt=1 + i) for i, n in enumerate(case["ns"])]
        eA, eouts = all_gather_matmul_global(shards, Bs, dim)
    else:
        As = [_operand(seed, r, shape, dtype, device) for r in range(w)]
        Bs = [_operand(seed, r, (shape[-1], case["ns"][0]), dtype, device, salt=1) for r in range(w)]
    for plan in case.get("plans") or plans_for(kind):
        plan = with_protocol(plan, kind, case.get("protocol"))
        label = f"{plan} {case}"
        for call in range(2):
            if kind == "ag_mm":
                A, outs = H.all_gather_matmul(shards[rank], Bs, dim, dist.group.WORLD, return_A=case["return_A"],
                                              plan=plan)
                results = [(o, e, f"out{i}") for i, (o, e) in enumerate(zip(outs, eouts))]
                if case["return_A"]:
                    results.append((A, eA, "A"))
            elif kind == "mm_rs":
                out = H.matmul_reduce_scatter(As[rank], Bs[rank], case["reduce_op"], dim, dist.group.WORLD, plan=plan)
                results = [(out, matmul_reduce_scatter_global(As, Bs, case["reduce_op"], dim)[rank], "out")]
            else:
                out = H.matmul_all_reduce(As[rank], Bs[rank], case["reduce_op"], dist.group.WORLD, plan=plan)
                results = [(out, matmul_all_reduce_global(As, Bs, case["reduce_op"]), "out")]
                everyone = [torch.empty_like(out) for _ in range(w)]
                dist.all_gather(everyone, out)
                assert all(torch.equal(everyone[0], o) for o in everyone), f"all-reduce results differ: {label}"
            torch.cuda.synchronize()
            for got, expected, what in results:
                assert got.device == device, f"{what} is on {got.device}: {label}"
                assert got.is_contiguous(), f"{what} is not contiguous: {label}"
                H.assert_close(got, expected, world=w, what=f"{what} (call {call}) {label}")
                checked.append((f"{plan['strategy']}/{plan['transport']}/{plan['chunks']}/{plan.get('order')} {what}",
                                H.max_error(got, expected)))
    return checked


def run_unsupported_transport(kind: str) -> None:
    """tile_fused with the default transport: a clear ValueError on every rank."""
    device = torch.device("cuda", torch.cuda.current_device())
    a = torch.randn(256, 64, device=device)
    b = torch.randn(64, 32, device=device)
    H.matmul_all_reduce(a, b, "sum", dist.group.WORLD, plan={"strategy": "tile_fused", "chunks": 2})


def run_back_to_back(case: dict) -> int:
    """``case["calls"]`` calls of one plan with fresh operands each, two shape classes interleaved and
    no synchronisation between calls (the copy-engine protocols reuse their buffers across calls:
    a missing ordering shows up as a wrong result here); every result is checked at the end.
    ``case["protocol"]``: the plan's ``Plan.protocol`` where it has it (default: the automatic one),
    ``case["env"]``: environment variables, ``case["sizes"]``: the transports' sizes."""
    with overridden(_case_env(case)), using_sizes(_case_sizes(case)):
        return _run_back_to_back(case)


def _run_back_to_back(case: dict) -> int:
    w, rank = dist.get_world_size(), dist.get_rank()
    device = torch.device("cuda", torch.cuda.current_device())
    kind, dtype = case["kind"], case["dtype"]
    plan = with_protocol(case["plan"], kind, case.get("protocol"))
    results = []
    for call in range(case["calls"]):
        rows = case["rows"][call % len(case["rows"])]
        seed = case["seed"] + 101 * call
        if kind == "ag_mm":
            shards = [_operand(seed, r, (rows, case["k"]), dtype, device) for r in range(w)]
            B = _operand(seed, rank, (case["k"], case["n"]), dtype, device, salt=1)
            A, (out,) = H.all_gather_matmul(shards[rank], [B], 0, dist.group.WORLD, return_A=True, plan=plan)
            eA, (eout,) = all_gather_matmul_global(shards, [B], 0)
            results += [(out, eout, f"out call {call}"), (A, eA, f"A call {call}")]
        elif kind == "mm_ar":  # the relay's sum overwrites what it sent: checks finish waits for the sends
            As = [_operand(seed, r, (rows, case["k"]), dtype, device) for r in range(w)]
            Bs = [_operand(seed, r, (case["k"], case["n"]), dtype, device, salt=1) for r in range(w)]
            out = H.matmul_all_reduce(As[rank], Bs[rank], "sum", dist.group.WORLD, plan=plan)
            results.append((out, matmul_all_reduce_global(As, Bs, "sum"), f"out call {call}"))
        else:
            As = [_operand(seed, r, (rows * w, case["k"]), dtype, device) for r in range(w)]
            Bs = [_operand(seed, r, (case["k"], case["n"]), dtype, device, salt=1) for r in range(w)]
            out = H.matmul_reduce_scatter(As[rank], Bs[rank], "sum", 0, dist.group.WORLD, plan=plan)
            results.append((out, matmul_reduce_scatter_global(As, Bs, "sum", 0)[rank], f"out call {call}"))
    torch.cuda.synchronize()
    for got, expected, what in results:
        H.assert_close(got, expected, world=w, what=f"{what} {plan} {kind} back to back")
    return len(results)
