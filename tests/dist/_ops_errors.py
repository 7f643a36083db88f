"""Rank-side bad-input calls: the same bad input everywhere, a bad input on one rank, and ranks that
disagree; afterwards ``healthy`` proves the group still works (no rank left mid-collective)."""

from __future__ import annotations

import os

import torch
import torch.distributed as dist

import hocket.ops as H


def _r(*shape, dtype=torch.float32):
    return torch.randn(*shape, dtype=dtype)


def _bad_call(which: str):
    g = dist.group.WORLD
    w = dist.get_world_size()
    calls = {
        "k_mismatch": lambda: H.all_gather_matmul(_r(4, 8), [_r(7, 3)], 0, g),
        "k_gather_mismatch": lambda: H.all_gather_matmul(_r(4, 8), [_r(8, 3)], 1, g),
        "scatter_not_divisible": lambda: H.matmul_reduce_scatter(_r(w * 2 + 1, 8), _r(8, 4), "sum", 0, g),
        "dtype_mismatch": lambda: H.matmul_all_reduce(_r(4, 8), _r(8, 4, dtype=torch.bfloat16), "sum", g),
        "empty_bs": lambda: H.all_gather_matmul(_r(4, 8), [], 0, g),
        "unknown_strategy": lambda: H.matmul_all_reduce(_r(4, 8), _r(8, 4), "sum", g, plan="warp"),
        "chunks_zero": lambda: H.matmul_all_reduce(_r(4, 8), _r(8, 4), "sum", g,
                                                   plan={"strategy": "chunked", "chunks": 0}),
        "unsupported_pair": lambda: H.all_gather_matmul(_r(4, 8), [_r(8, 3)], 0, g, plan="substituted"),
        "bad_reduce_op": lambda: H.matmul_reduce_scatter(_r(4, 8), _r(8, 4), "max", 1, g),
        "bad_dim": lambda: H.all_gather_matmul(_r(4, 8), [_r(8, 3)], 5, g),
        "unknown_group": lambda: H.matmul_all_reduce(_r(4, 8), _r(8, 4), "sum", "no-such-group"),
    }
    return calls[which]


def bad_everywhere(which: str) -> None:
    _bad_call(which)()


def bad_on_one_rank(which: str, bad_rank: int) -> None:
    if dist.get_rank() == bad_rank:
        _bad_call(which)()
    else:  # a good call of the same operator
        g = dist.group.WORLD
        if which in ("k_mismatch", "empty_bs", "unsupported_pair", "bad_dim"):
            H.all_gather_matmul(_r(4, 8), [_r(8, 3)], 0, g)
        elif which in ("scatter_not_divisible", "bad_reduce_op"):
            H.matmul_reduce_scatter(_r(4, 8), _r(8, 4), "sum", 1, g)
        else:
            H.matmul_all_reduce(_r(4, 8), _r(8, 4), "sum", g)


def disagree(which: str, odd_rank: int) -> None:
    """Locally valid calls that differ on ``odd_rank``, as first calls: the pool's ranks may have agreed on
    the other ranks' call in an earlier test (random shapes elsewhere can hit these), and a cached agreement
    skips the exchange by design (hocket.ops.agreement), which here would leave the odd rank exchanging alone;
    so does a call prepared before (hocket.ops.dispatch), so both caches are cleared."""
    from hocket.ops import dispatch
    from hocket.ops.agreement import clear_agreement_cache

    clear_agreement_cache()
    dispatch.clear_prepared_cache()
    g = dist.group.WORLD
    odd = dist.get_rank() == odd_rank
    if which == "k":
        k = 16 if odd else 8
        H.matmul_all_reduce(_r(4, k), _r(k, 4), "sum", g)
    elif which == "dtype":
        dt = torch.float64 if odd else torch.float32
        H.matmul_all_reduce(_r(4, 8, dtype=dt), _r(8, 4, dtype=dt), "sum", g)
    elif which == "plan":
        H.matmul_reduce_scatter(_r(4, 8), _r(8, 4), "sum", 1, g, plan="ring" if odd else "chunked")
    elif which == "return_A":
        H.all_gather_matmul(_r(4, 8), [_r(8, 3)], 0, g, return_A=not odd)
    elif which == "reduce_op":
        H.matmul_all_reduce(_r(4, 8), _r(8, 4), "avg" if odd else "sum", g)
    elif which == "disable":
        before = os.environ.pop("HOCKET_DISABLE", None)
        if odd:
            os.environ["HOCKET_DISABLE"] = "1"
        try:
            H.matmul_all_reduce(_r(4, 8), _r(8, 4), "sum", g, plan="chunked")
        finally:
            os.environ.pop("HOCKET_DISABLE", None)
            if before is not None:
                os.environ["HOCKET_DISABLE"] = before
    else:
        raise KeyError(which)


def diverge_after_first_call(odd_rank: int) -> None:
    """With HOCKET_AGREEMENT=always, a rank that changes K on a later call is caught clearly."""
    g = dist.group.WORLD
    os.environ["HOCKET_AGREEMENT"] = "always"
    try:
        A, B = _r(4, 8), _r(8, 4)
        H.matmul_all_reduce(A, B, "sum", g, plan="chunked")
        H.matmul_all_reduce(A, B, "sum", g, plan="chunked")
        k = 12 if dist.get_rank() == odd_rank else 8
        H.matmul_all_reduce(_r(4, k), _r(k, 4), "sum", g, plan="chunked")
    finally:
        os.environ.pop("HOCKET_AGREEMENT", None)


def healthy(seed: int) -> bool:
    """A correct call after an error: every rank gets the same all-reduced result."""
    gen = torch.Generator().manual_seed(seed + dist.get_rank())
    A, B = torch.randn(6, 5, generator=gen), torch.randn(5, 3, generator=gen)
    out = H.matmul_all_reduce(A, B, "sum", dist.group.WORLD, plan="ring")
    expected = A @ B
    dist.all_reduce(expected)
    return bool(torch.allclose(out, expected, atol=1e-5))


def planners_disagree() -> list[str]:
    """Each rank's planner would pick another plan for the same Site; every rank must run rank 0's."""
    from hocket.ops import dispatch, planning
    from hocket.ops.sites import site_for_call
    from hocket.core.plan import Plan

    g, rank, w = dist.group.WORLD, dist.get_rank(), dist.get_world_size()
    A, B = torch.randn(2 * w + 1, 6), torch.randn(6, 5)
    site = site_for_call("mm_ar", A=A, Bs=[B], world=w, ranks=tuple(range(w)))
    planning.clear_plan_cache()
    dispatch.clear_prepared_cache()
    planning._CHOSEN[site.key] = Plan(strategy="ring") if rank == 0 else Plan(strategy="chunked", chunks=rank + 1)
    try:
        out = H.matmul_all_reduce(A, B, "sum", g)
    finally:
        planning.clear_plan_cache()
    expected = A @ B
    dist.all_reduce(expected)
    assert torch.allclose(out, expected, atol=1e-5)
    return [p.plan.describe() for p in dispatch._PREPARED.values() if p.site == site]
