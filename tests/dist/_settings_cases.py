"""Rank-side helpers of tests/dist/test_agreement_settings.py: ranks started with different settings."""

from __future__ import annotations

import time

import torch
import torch.distributed as dist

import hocket.ops as H
from hocket.core.sizes import MIB, TransportSizes, using_sizes
from hocket.env import overridden


def _fresh() -> None:
    """Forget earlier agreements and prepared calls: every case is a first call on the group."""
    from hocket.ops import dispatch
    from hocket.ops.agreement import clear_agreement_cache

    clear_agreement_cache()
    dispatch.clear_prepared_cache()


def _call(plan) -> None:
    gen = torch.Generator().manual_seed(7 + dist.get_rank())
    A, B = torch.randn(4, 8, generator=gen), torch.randn(8, 4, generator=gen)
    H.matmul_all_reduce(A, B, "sum", dist.group.WORLD, plan=plan)


def differ(case: dict) -> float:
    """Rank ``case["odd"]`` runs a first call with ``case["env"]`` set (and ``case["piece_mib"]`` as its
    relay message size, where given), the others without; returns the seconds this rank spent in the call
    (it is expected to raise: the seconds are in the error's message then)."""
    _fresh()
    odd = dist.get_rank() == case["odd"]
    env = case.get("env", {}) if odd else {}
    sizes = TransportSizes(piece_bytes=int(case["piece_mib"] * MIB)) if odd and "piece_mib" in case else None
    start = time.monotonic()
    try:
        with overridden(env), using_sizes(sizes):
            _call(case.get("plan"))
    except Exception as exc:
        raise type(exc)(f"{exc} [after {time.monotonic() - start:.2f} s]") from None
    finally:
        _fresh()  # later tests on this pool start from nothing prepared or agreed either
    return time.monotonic() - start


def agree_after(case: dict) -> bool:
    """Every rank runs with ``case["env"]`` for two signatures (a first call on the group, then a new one), then
    a correct call without it: True when all of it completed."""
    _fresh()
    try:
        with overridden(case["env"]):
            _call("chunked")
            _call("sequential")
        _call("ring")
    finally:
        _fresh()
    return True
