"""``hocket.ops.moe_experts``: the routed experts of a MoE layer under expert parallelism, overlapped.

Over ``group`` (``world`` ranks; experts ``r * E_local ... (r + 1) * E_local - 1`` live on rank ``r``):

1. local checks (:mod:`hocket.ops.moe_validation`), then the call's agreement (:mod:`hocket.ops.moe_agreement`,
   every call: any bad input raises the same error on every rank, no rank waiting);
2. this rank's tokens per expert (``world x E`` after one all-gather: the split sizes, a host sync, for
   ``splits="exchanged"`` and for ``plan=None``, whose plan is chosen from a
   :class:`~hocket.core.moe.MoeSite` of those counts by :func:`hocket.plan.moe.choose_moe_plan`, decided on rank 0);
3. the routed rows packed into the canonical send buffer (:mod:`hocket.ops.moe_layout`), then
   ``torch.ops.hocket.all_to_all_grouped_mm`` (dispatch + ``x @ w_gate_up[e]``), the SwiGLU
   ``silu(h[:, :ffn]) * h[:, ffn:]``, ``torch.ops.hocket.grouped_mm_all_to_all`` (``@ w_down[e]`` + combine)
   (:mod:`hocket.ops.moe_library`, strategies in :mod:`hocket.ops.moe_exec`);
4. ``y_t = sum_j topk_weights[t, j] * out[t, j]`` plus ``shared(x)``.

The shared expert: under every strategy but ``sequential`` it runs in the dispatch's gap (inside the first op,
without autograd) and its gradient (to ``x`` and the module's parameters) comes from running it again in the
backward (as activation checkpointing does: one more forward of the shared expert per backward); under
``sequential``, ``torch.compile``, or for a callable that is not an ``nn.Module`` while gradients are on, it runs
after the routed experts, with ordinary autograd.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from hocket.core.moe import MoeSite
from hocket.core.plan import Plan, as_plan
from hocket.env import disabled
from hocket.ops import moe_library  # noqa: F401  (registers the two custom ops)
from hocket.ops.agreement import Descriptor, settle_plan
from hocket.ops.moe_agreement import agree_call
from hocket.ops.moe_exec import EXCHANGED, PADDED, SideWork, check_moe_plan, side_work
from hocket.ops.moe_validation import check_ids, check_shapes
from hocket.plan.moe import choose_moe_plan
from hocket.transport.group import GroupHandle, resolve_group
from hocket.transport.torch_dist import TorchDistTransport

_CHOSEN: dict[tuple[str, int, str], Plan] = {}


def clear_moe_plans() -> None:
    _CHOSEN.clear()


class _Recomputed(torch.autograd.Function):
    """``value`` (``fn(x)`` computed without autograd) with the gradient of ``fn`` at ``x`` and of its
    parameters ``params``, by running ``fn`` again in the backward."""

    @staticmethod
    def forward(ctx, fn, value, x, *params):
        ctx.fn = fn
        ctx.save_for_backward(x, *params)
        return value.detach().clone()

    @staticmethod
    def backward(ctx, grad):
        x, *params = ctx.saved_tensors
        with torch.enable_grad():
            xd = x.detach().requires_grad_(x.requires_grad)
            out = ctx.fn(xd)
            wanted = [t for t in (xd, *params) if t.requires_grad]
            found = iter(torch.autograd.grad(out, wanted, grad, allow_unused=True)) if wanted else iter(())
        grads = [next(found) if t.requires_grad else None for t in (xd, *params)]
        return None, None, *grads


def _shared_ffn(shared) -> int:
    if shared is None:
        return 0
    params = getattr(shared, "parameters", None)
    return 1 if params is None else max(1, sum(p.numel() for p in params()) // 3)


def _gather_counts(group: GroupHandle, local: torch.Tensor, *, host: bool) -> torch.Tensor:
    """``world x E`` counts: on the CPU with ``host`` (the exchanged split sizes), else on ``local``'s device."""
    if group.world == 1:
        table = local.unsqueeze(0).clone()
    else:
        table = local.new_empty((group.world, local.shape[0]))
        TorchDistTransport(group).all_gather(table, local.contiguous()).wait()
    return table.cpu() if host else table


def _plan_for(group: GroupHandle, site: MoeSite, device: torch.device) -> Plan:
    key = (group.name, id(group.pg), site.key)
    plan = _CHOSEN.get(key)
    if plan is None:
        plan = settle_plan(group, "moe_experts", lambda: check_moe_plan(choose_moe_plan(site)), device=device)
        plan = _CHOSEN[key] = check_moe_plan(plan)
    return plan


def moe_experts(x: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor, w_gate_up: torch.Tensor,
                w_down: torch.Tensor, group: object, *, shared=None, plan: object = None) -> torch.Tensor:
    """The routed-experts block of a MoE layer under expert parallelism over ``group``; returns ``[tokens,
    hidden]``.

    ``x [tokens, hidden]``: this rank's tokens (any count, zero included); ``topk_ids``/``topk_weights
    [tokens, k]``: the router's choice (distinct expert ids in ``0 .. E - 1``); ``w_gate_up [E_local, hidden,
    2*ffn]`` (gate columns first, then up) and ``w_down [E_local, ffn, hidden]``: this rank's experts
    (``E = E_local * world``). ``y_t = sum_j topk_weights[t, j] * (silu(h[:ffn]) * h[ffn:]) @ w_down[e_j]``
    with ``h = x_t @ w_gate_up[e_j]``, plus ``shared(x)`` when given. Dropless. ``plan``: a
    :class:`hocket.Plan` (strategy ``sequential``, ``token_blocks``, ``per_source``, ``expert_groups`` or
    ``shared_overlap``; transport ``collective`` or ``host_staged``; ``splits`` ``exchanged`` or ``padded``),
    a dict, JSON, a strategy name, or None to let hocket choose; ``HOCKET_DISABLE`` runs ``sequential``."""
    handle = resolve_group(group)
    world = handle.world
    device = x.device if isinstance(x, torch.Tensor) else torch.device("cpu")
    local_error: Exception | None = None
    shape = None
    given: Plan | None = None
    off = False
    try:
        off = disabled()  # HOCKET_DISABLE: the sequential plan, whatever was asked
        given = Plan(splits=EXCHANGED) if off else as_plan(plan)
        shape = check_shapes(x, topk_ids, topk_weights, w_gate_up, w_down, world, shared)
        check_ids(topk_ids, shape.experts)
        if given is not None:
            given = check_moe_plan(given)
    except (ValueError, TypeError) as exc:
        local_error = exc
    site = {} if shape is None else {"experts_local": shape.e_local, "topk": shape.topk, "hidden": shape.hidden,
                                     "ffn": shape.ffn, "dtype": str(shape.dtype), "device": device.type}
    descriptor = Descriptor(op="moe_experts", site=site, plan=given.to_dict() if given else {"choose": True},
                            flags={"shared": shared is not None, "HOCKET_DISABLE": off},
                            error=f"{type(local_error).__name__}: {local_error}" if local_error else "")
    tokens_all = agree_call(handle, descriptor, tokens=shape.tokens if shape else 0, device=device,
                            local_error=local_error)
    k, e_local, experts, ffn = shape.topk, shape.e_local, shape.experts, shape.ffn
    ids = topk_ids.reshape(-1).to(torch.int64)
    local = torch.zeros(experts, dtype=torch.int64, device=ids.device).scatter_add_(0, ids, torch.ones_like(ids))
    host = given is None or given.splits == EXCHANGED
    counts = _gather_counts(handle, local, host=host)
    if given is None:
        msite = MoeSite(kind="a2a_mm", tokens=max(tokens_all), hidden=shape.hidden, ffn=ffn, experts=experts,
                        topk=k, world=world, dtype=str(shape.dtype), counts=tuple(map(tuple, counts.tolist())),
                        shared_ffn=_shared_ffn(shared), ranks=handle.ranks)
        chosen = _plan_for(handle, msite, device)
    else:
        chosen = given
    if chosen.splits == PADDED:
        counts = counts.to(device)
    send, pos = _pack(x, ids, local, chosen, tokens_all, k, e_local, world, handle.rank)
    text = chosen.to_json()
    work = None
    overlap_shared = shared is not None and chosen.strategy != "sequential" and not torch.compiler.is_compiling()
    if overlap_shared and torch.is_grad_enabled() and not isinstance(shared, torch.nn.Module):
        overlap_shared = False  # a plain callable's parameters are unknown: its gradient needs its own graph
    if overlap_shared:
        def run_shared():
            with torch.no_grad():
                return shared(x.detach())
        work = SideWork(run_shared)
        side_work(work)
    try:
        h, _, _ = torch.ops.hocket.all_to_all_grouped_mm(send, counts, w_gate_up, None, k, handle.name, text,
                                                         "forward")
    finally:
        side_work(None)
    act = F.silu(h[:, :ffn]) * h[:, ffn:]
    y_send, _ = torch.ops.hocket.grouped_mm_all_to_all(act, counts, w_down, None, None, k, handle.name, text,
                                                       "forward")
    tokens = x.shape[0]
    y_pairs = y_send.index_select(0, pos).view(tokens, k, shape.hidden)
    y = (y_pairs * topk_weights.to(x.dtype).unsqueeze(-1)).sum(1)
    if shared is not None:
        if work is not None and work.done:
            value = work.result
            params = [p for p in shared.parameters() if p.requires_grad] if isinstance(shared, torch.nn.Module) else []
            needs = torch.is_grad_enabled() and (x.requires_grad or bool(params))
            y = y + (_Recomputed.apply(shared, value, x, *params) if needs else value)
        else:
            y = y + shared(x)
    return y


def _pack(x, ids, local, plan: Plan, tokens_all, k, e_local, world, rank):
    """``(send, pos)``: the canonical send buffer of this rank's routed rows and, per (token, choice) pair, its
    row in that buffer (:mod:`hocket.ops.moe_layout`)."""
    pairs = ids.shape[0]
    order = torch.argsort(ids, stable=True)
    rows = x.index_select(0, order // k)
    if plan.splits == PADDED:
        block = max(tokens_all) * min(k, e_local)
        per_dest = local.view(world, e_local).sum(1)
        excl = torch.cumsum(per_dest, 0) - per_dest
        dest = ids.index_select(0, order) // e_local
        at = dest * block + torch.arange(pairs, device=x.device) - excl.index_select(0, dest)
        send = x.new_zeros((world * block, x.shape[1])).index_copy(0, at, rows)
    else:
        at = torch.arange(pairs, device=x.device)
        send = rows
    pos = torch.empty_like(at)
    pos[order] = at
    return send, pos
