"""Rank-side MoE cases: ``hocket.ops.moe_experts`` against the single-process reference of the whole layer
(forward and the gradients of tokens, expert weights and routing weights), its event order, and bad inputs.

Every rank builds the same global case (all ranks' tokens, all experts) from the case's seed, runs its own part
and compares it with its part of the reference.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist

import hocket.ops as H
from hocket.launch.same_case import shared_generator
from hocket.ops.moe_trace import recording
from hocket.ops.reference import moe_experts_reference

STRATEGIES = ({"strategy": "sequential"}, {"strategy": "token_blocks", "chunks": 2},
              {"strategy": "token_blocks", "chunks": 3}, {"strategy": "per_source"},
              {"strategy": "expert_groups", "chunks": 2}, {"strategy": "shared_overlap"})
SPLITS = ("exchanged", "padded")
TRANSPORTS = ("collective", "host_staged")


def all_plans() -> list[dict]:
    return [{**s, "splits": sp, "transport": t} for s in STRATEGIES for sp in SPLITS for t in TRANSPORTS]


@dataclass(frozen=True)
class MoeCase:
    seed: int
    tokens: tuple[int, ...]
    """per rank (zero allowed)."""
    e_local: int
    topk: int
    routing: str
    """``uniform``, ``zipf``, ``one_expert`` (every token's first choice is expert 0) or ``sparse`` (only the
    first ``topk`` experts are ever chosen: the others stay empty)."""
    dtype: str = "float32"
    hidden: int = 8
    ffn: int = 8
    shared: bool = False
    plans: tuple = ()


def _ids(gen, tokens: int, experts: int, k: int, routing: str) -> torch.Tensor:
    scores = torch.rand(tokens, experts, generator=gen, dtype=torch.float64)
    if routing == "zipf":
        popularity = 1.0 / torch.arange(1, experts + 1, dtype=torch.float64) ** 1.5
        scores = torch.log(popularity) - torch.log(-torch.log(scores.clamp_min(1e-12)))
    elif routing == "one_expert":
        scores[:, 0] = 10.0
    elif routing == "sparse":
        scores[:, k:] = -1.0
    return torch.topk(scores, k, dim=1).indices if tokens else torch.zeros((0, k), dtype=torch.int64)


def build(case: MoeCase, world: int):
    """Every rank's inputs and experts (the same on every rank: one shared stream)."""
    gen = shared_generator(case.seed)
    dtype = getattr(torch, case.dtype)
    experts = case.e_local * world
    xs, ids, ws, wgu, wd = [], [], [], [], []
    for r in range(world):
        t = case.tokens[r]
        xs.append(torch.randn(t, case.hidden, generator=gen).to(dtype))
        ids.append(_ids(gen, t, experts, case.topk, case.routing))
        ws.append(torch.rand(t, case.topk, generator=gen).to(dtype))
        wgu.append((torch.randn(case.e_local, case.hidden, 2 * case.ffn, generator=gen) / case.hidden ** 0.5).to(dtype))
        wd.append((torch.randn(case.e_local, case.ffn, case.hidden, generator=gen) / case.ffn ** 0.5).to(dtype))
    return xs, ids, ws, wgu, wd


class SharedExpert(torch.nn.Module):
    def __init__(self, hidden: int, dtype: torch.dtype, seed: int) -> None:
        super().__init__()
        gen = shared_generator(seed + 7)
        self.w = torch.nn.Parameter((torch.randn(hidden, hidden, generator=gen) / hidden ** 0.5).to(dtype))

    def forward(self, x):
        return torch.tanh(x @ self.w)


def _loss_weights(outs: list[torch.Tensor], seed: int) -> list[torch.Tensor]:
    gen = shared_generator(seed + 3)
    return [torch.randn(o.shape, generator=gen).to(o.dtype) for o in outs]


def _close(name: str, got: torch.Tensor, want: torch.Tensor, dtype: str, where: str) -> float:
    if want is None:
        want = torch.zeros_like(got)
    want = want.detach()
    got = torch.zeros_like(want) if got is None else got.detach()
    scale = float(want.abs().max()) if want.numel() else 0.0
    err = float((got.double() - want.double()).abs().max()) if want.numel() else 0.0
    tol = (2e-4 if dtype == "float32" else 6e-2) * max(1.0, scale)
    assert err <= tol, f"{where}: {name} differs from the reference by {err:.3e} (scale {scale:.3e}, tol {tol:.1e})"
    return err


def check_against_reference(case: MoeCase) -> int:
    """Run every plan of ``case.plans`` (default: :func:`all_plans`) on this rank; assert the output and every
    gradient match the reference's. Returns how many plans ran."""
    rank, world = dist.get_rank(), dist.get_world_size()
    xs, ids, ws, wgu, wd = build(case, world)
    dtype = getattr(torch, case.dtype)
    ref_in = [[t.double().requires_grad_() for t in group] for group in (xs, ws, wgu, wd)]
    shared_ref = SharedExpert(case.hidden, torch.float64, case.seed) if case.shared else None
    ref = moe_experts_reference(ref_in[0], ids, ref_in[1], ref_in[2], ref_in[3], shared=shared_ref)
    weights = _loss_weights(ref, case.seed)
    loss = sum((o * g.double()).sum() for o, g in zip(ref, weights))
    if loss.requires_grad:
        loss.backward()
    plans = list(case.plans) or all_plans()
    for plan in plans:
        where = f"rank {rank} plan {plan} case {case}"
        mine = [t[rank].clone().requires_grad_() for t in (xs, ws, wgu, wd)]
        shared = SharedExpert(case.hidden, dtype, case.seed) if case.shared else None
        y = H.moe_experts(mine[0], ids[rank], mine[1], mine[2], mine[3], dist.group.WORLD, shared=shared,
                          plan=plan)
        _close("output", y, ref[rank], case.dtype, where)
        loss = (y * weights[rank]).sum()
        if loss.requires_grad:
            loss.backward()
        for name, got, want in zip(("x.grad", "topk_weights.grad", "w_gate_up.grad", "w_down.grad"), mine,
                                   ref_in):
            _close(name, got.grad if got.grad is not None else torch.zeros_like(got), want[rank].grad,
                   case.dtype, where)
        if case.shared:  # this rank's shared expert sees this rank's tokens only
            own = SharedExpert(case.hidden, torch.float64, case.seed)
            (own(ref_in[0][rank].detach()) * weights[rank].double()).sum().backward()
            _close("shared.w.grad", shared.w.grad if shared.w.grad is not None else torch.zeros_like(shared.w),
                   own.w.grad, case.dtype, where)
    return len(plans)


def trace(plan: dict, shared: bool = False, backward: bool = True) -> list[tuple[str, str]]:
    """The (what, label) events of one forward (and backward) call of ``plan`` on this rank."""
    world = dist.get_world_size()
    case = MoeCase(seed=5, tokens=(12,) * world, e_local=2, topk=2, routing="uniform", shared=shared)
    xs, ids, ws, wgu, wd = build(case, world)
    rank = dist.get_rank()
    mine = [t[rank].clone().requires_grad_() for t in (xs, ws, wgu, wd)]
    shared_fn = SharedExpert(case.hidden, torch.float32, case.seed) if shared else None
    with recording() as events:
        y = H.moe_experts(mine[0], ids[rank], mine[1], mine[2], mine[3], dist.group.WORLD, shared=shared_fn,
                          plan=plan)
        if backward:
            events.append(("mark", "backward"))
            y.sum().backward()
    return events


# -- bad inputs ---------------------------------------------------------------------------------------------

def _good(world: int, tokens: int = 4):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(tokens, 8, generator=g)
    e_local = 2
    ids = torch.stack([torch.randperm(e_local * world, generator=g)[:2] for _ in range(tokens)])
    return dict(x=x, topk_ids=ids, topk_weights=torch.rand(tokens, 2, generator=g),
                w_gate_up=torch.randn(e_local, 8, 16, generator=g), w_down=torch.randn(e_local, 8, 8, generator=g))


def _bad(which: str, world: int) -> dict:
    a = _good(world)
    ids = a["topk_ids"]
    if which == "id_out_of_range":
        ids = ids.clone()
        ids[1, 0] = 2 * world
    elif which == "id_negative":
        ids = ids.clone()
        ids[2, 1] = -1
    elif which == "id_float":
        ids = ids.float()
    elif which == "id_twice":
        ids = ids.clone()
        ids[0, 1] = ids[0, 0]
    elif which == "k_above_e":
        ids = torch.arange(2 * world + 1).repeat(4, 1)
        a["topk_weights"] = torch.rand(4, 2 * world + 1)
    elif which == "odd_gate_up":
        a["w_gate_up"] = torch.randn(2, 8, 15)
    elif which == "weight_dtype":
        a["w_down"] = a["w_down"].to(torch.bfloat16)
    elif which == "weights_shape":
        a["topk_weights"] = torch.rand(4, 3)
    elif which == "hidden_mismatch":
        a["w_gate_up"] = torch.randn(2, 6, 16)
    elif which == "bad_plan":
        a["plan"] = {"strategy": "ring"}
    a["topk_ids"] = ids
    return a


def _call(args: dict):
    args = dict(args)
    plan = args.pop("plan", None)
    return H.moe_experts(group=dist.group.WORLD, plan=plan, **args)


def bad_everywhere(which: str) -> None:
    _call(_bad(which, dist.get_world_size()))


def bad_on_one_rank(which: str, bad: int) -> None:
    world = dist.get_world_size()
    _call(_bad(which, world) if dist.get_rank() == bad else _good(world))


def disagree(which: str, odd: int) -> None:
    """Ranks whose calls disagree: ``experts`` (rank ``odd`` holds one expert more: E does not divide),
    ``topk`` (rank ``odd`` routes to one expert fewer) or ``dtype`` (rank ``odd`` runs bfloat16)."""
    world = dist.get_world_size()
    a = _good(world)
    if dist.get_rank() == odd:
        if which == "experts":
            a["w_gate_up"] = torch.randn(3, 8, 16)
            a["w_down"] = torch.randn(3, 8, 8)
        elif which == "topk":
            a["topk_ids"] = a["topk_ids"][:, :1].contiguous()
            a["topk_weights"] = a["topk_weights"][:, :1].contiguous()
        elif which == "dtype":
            a = {k: (v.to(torch.bfloat16) if v.is_floating_point() else v) for k, v in a.items()}
    _call(a)


def healthy(seed: int) -> bool:
    """A good call after a failed one: the group still works (no rank left in a collective)."""
    world = dist.get_world_size()
    a = _good(world, tokens=3 + seed % 3)
    y = _call({**a, "plan": {"strategy": "token_blocks", "chunks": 2}})
    return bool(torch.isfinite(y).all()) and y.shape == a["x"].shape


def all_to_all_rows(transport_name: str, seed: int) -> bool:
    """``all_to_all`` of a transport with uneven splits (zeros included) and with equal ones (None): every block
    lands where ``all_to_all_single``'s contract puts it."""
    from hocket.ops.moe_library import transport_for
    from hocket.transport.group import resolve_group

    group = resolve_group(dist.group.WORLD)
    rank, world = group.rank, group.world
    sizes = [[(s * 3 + d * 5 + seed) % 4 for d in range(world)] for s in range(world)]  # sizes[s][d]: s -> d rows
    send = torch.cat([torch.full((sizes[rank][d], 3), float(100 * rank + d)) for d in range(world)])
    out = torch.empty(sum(sizes[s][rank] for s in range(world)), 3)
    transport = transport_for(transport_name, group)
    transport.all_to_all(out, send, [sizes[s][rank] for s in range(world)], sizes[rank]).wait()
    want = torch.cat([torch.full((sizes[s][rank], 3), float(100 * s + rank)) for s in range(world)])
    equal = torch.arange(world * 2, dtype=torch.float32).unsqueeze(1) + 10 * rank
    got = torch.empty_like(equal)
    transport.all_to_all(got, equal, None, None).wait()
    expect = torch.cat([torch.tensor([[2.0 * rank + 10 * s], [2.0 * rank + 1 + 10 * s]]) for s in range(world)])
    return torch.equal(out, want) and torch.equal(got, expect)


def trace_disabled(plan: dict) -> list[tuple[str, str]]:
    """:func:`trace` of ``plan`` with ``HOCKET_DISABLE=1`` on every rank (restored afterwards)."""
    import os

    before = os.environ.get("HOCKET_DISABLE")
    os.environ["HOCKET_DISABLE"] = "1"
    try:
        return trace(plan)
    finally:
        if before is None:
            os.environ.pop("HOCKET_DISABLE")
        else:
            os.environ["HOCKET_DISABLE"] = before
