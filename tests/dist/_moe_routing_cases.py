"""Rank-side cases of the MoE routing exchange (hocket.ops.moe_agreement): one collective per call, expert
counts that change between layers, a rank that changes its call after agreed ones, and the capture path (no host
read; checked here on CPU by running the capture branch with ``_capturing`` forced)."""

from __future__ import annotations

import contextlib

import torch
import torch.distributed as dist
from torch.utils._python_dispatch import TorchDispatchMode

import hocket.ops as H
import hocket.ops.moe as moe_module
from hocket.ops.reference import moe_experts_reference
from hocket.transport.torch_dist import TorchDistTransport
from tests.dist._moe_cases import MoeCase, build


class HostReads(TorchDispatchMode):
    """Records every op that reads a tensor's value on the host (``.item()``, ``.tolist()``, ``int(t)``)."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten._local_scalar_dense.default:
            self.reads.append(str(func))
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def counting_gathers():
    """Counts TorchDistTransport.all_gather calls (the agreement and count exchanges go through it)."""
    calls = []
    original = TorchDistTransport.all_gather

    def counted(self, out, inp):
        calls.append(tuple(out.shape))
        return original(self, out, inp)

    TorchDistTransport.all_gather = counted
    try:
        yield calls
    finally:
        TorchDistTransport.all_gather = original


def _inputs(case: MoeCase):
    rank, world = dist.get_rank(), dist.get_world_size()
    xs, ids, ws, wgu, wd = build(case, world)
    ref = moe_experts_reference(xs, ids, ws, wgu, wd)
    return (xs[rank], ids[rank], ws[rank], wgu[rank], wd[rank]), ref[rank]


def _check(y, want, what):
    err = float((y.double() - want.double()).abs().max()) if want.numel() else 0.0
    assert err <= 2e-4 * max(1.0, float(want.abs().max()) if want.numel() else 0.0), f"{what}: error {err:.3e}"


def gathers_per_call(splits: str) -> list[int]:
    """How many all-gathers each of five calls runs (new descriptor first, then agreed ones)."""
    world = dist.get_world_size()
    counts = []
    for i in range(5):
        case = MoeCase(seed=40 + i, tokens=tuple(5 + (r + i) % 3 for r in range(world)), e_local=2, topk=2,
                       routing="uniform")
        args, want = _inputs(case)
        with counting_gathers() as calls:
            y = H.moe_experts(*args, dist.group.WORLD, plan={"strategy": "token_blocks", "chunks": 2,
                                                             "splits": splits})
        _check(y, want, f"call {i}")
        counts.append(len(calls))
    return counts


def alternating_experts() -> int:
    """Layers with 2 and 3 local experts called in turn on one group: every call correct."""
    world = dist.get_world_size()
    done = 0
    for i in range(6):
        case = MoeCase(seed=60 + i, tokens=(4,) * world, e_local=2 + i % 2, topk=2, routing="zipf")
        args, want = _inputs(case)
        _check(H.moe_experts(*args, dist.group.WORLD, plan="sequential"), want, f"call {i}")
        done += 1
    return done


def changes_k_after_agreed(odd: int) -> None:
    """Two agreed calls, then rank ``odd`` routes to one expert fewer: the exchange sees the digests differ."""
    world = dist.get_world_size()
    case = MoeCase(seed=70, tokens=(4,) * world, e_local=2, topk=2, routing="uniform")
    args, _ = _inputs(case)
    for _ in range(2):
        H.moe_experts(*args, dist.group.WORLD)
    x, ids, w, wgu, wd = args
    if dist.get_rank() == odd:
        ids, w = ids[:, :1].contiguous(), w[:, :1].contiguous()
    H.moe_experts(x, ids, w, wgu, wd, dist.group.WORLD)


@contextlib.contextmanager
def forced_capture():
    original = moe_module._capturing
    moe_module._capturing = lambda x: True
    try:
        yield
    finally:
        moe_module._capturing = original


def captured_without_host_reads(plan: object, seed: int) -> int:
    """An eager warm-up, then the same call through the capture branch: the result matches the reference and
    nothing is read on the host (the executors included). Returns the host reads of the eager call (> 0)."""
    world = dist.get_world_size()
    case = MoeCase(seed=seed, tokens=tuple(6 + 2 * r for r in range(world)), e_local=2, topk=2, routing="zipf")
    args, want = _inputs(case)
    with HostReads() as eager:
        _check(H.moe_experts(*args, dist.group.WORLD, plan=plan), want, "eager warm-up")
    fresh = MoeCase(seed=seed + 1, tokens=case.tokens, e_local=2, topk=2, routing="uniform")
    args, want = _inputs(fresh)  # new routing, same shapes: what a replay sees
    with forced_capture(), HostReads() as captured:
        y = H.moe_experts(*args, dist.group.WORLD, plan=plan)
    assert not captured.reads, f"the capture branch read the host {len(captured.reads)} times"
    _check(y, want, "capture branch")
    return len(eager.reads)


def captured_plan_none(seed: int) -> str:
    """plan=None: the warm-up (under captured planning) chooses a padded plan, the capture branch runs it."""
    from hocket.ops.planning import captured_planning

    world = dist.get_world_size()
    case = MoeCase(seed=seed, tokens=(8,) * world, e_local=2, topk=2, routing="uniform")
    args, want = _inputs(case)
    with captured_planning():
        _check(H.moe_experts(*args, dist.group.WORLD), want, "warm-up")
        with forced_capture(), HostReads() as captured:
            y = H.moe_experts(*args, dist.group.WORLD)
    assert not captured.reads
    _check(y, want, "capture branch")
    return moe_module._CAPTURE_PLANS[next(reversed(moe_module._CAPTURE_PLANS))].splits


def captured_refusals(which: str) -> None:
    """The capture branch refuses what a graph cannot hold, on every rank: ``exchanged`` splits, or a call that
    never ran eagerly."""
    world = dist.get_world_size()
    case = MoeCase(seed=90, tokens=(5,) * world, e_local=2, topk=2, routing="uniform")
    args, _ = _inputs(case)
    plan = {"strategy": "sequential", "splits": "exchanged" if which == "exchanged" else "padded"}
    if which == "no_warmup":
        x, ids, w, wgu, wd = args
        args = (x[:3], ids[:3], w[:3], wgu, wd)  # a token count never agreed eagerly
    with forced_capture():
        H.moe_experts(*args, dist.group.WORLD, plan=plan)


def captured_bad_ids(odd: int) -> None:
    """A replay whose ids break a rule on one rank: the device-side check stops every rank (on the CPU,
    ``torch._assert_async`` raises at once)."""
    world = dist.get_world_size()
    case = MoeCase(seed=95, tokens=(5,) * world, e_local=2, topk=2, routing="uniform")
    args, _ = _inputs(case)
    plan = {"strategy": "sequential", "splits": "padded"}
    H.moe_experts(*args, dist.group.WORLD, plan=plan)
    x, ids, w, wgu, wd = args
    if dist.get_rank() == odd:
        ids = ids.clone()
        ids[0, 0] = 2 * world + 3
    with forced_capture():
        H.moe_experts(x, ids, w, wgu, wd, dist.group.WORLD, plan=plan)
