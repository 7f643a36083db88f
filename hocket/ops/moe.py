"""``hocket.ops.moe_experts``: the routed experts of a MoE layer under expert parallelism, overlapped.

Over ``group`` (``world`` ranks; experts ``r * E_local ... (r + 1) * E_local - 1`` live on rank ``r``):

1. local checks (:mod:`hocket.ops.moe_validation`; the id rules are evaluated on the device), then one
   all-gather that is both the call's agreement and its split sizes (:mod:`hocket.ops.moe_agreement`, every
   call: any bad input raises the same error on every rank, no rank waiting; eagerly one host read of the
   gathered ``world x E`` tokens per expert). ``plan=None`` is chosen from a :class:`~hocket.core.moe.MoeSite`
   of those counts by :func:`hocket.plan.moe.choose_moe_plan`, decided on rank 0 (among ``padded`` plans inside
   :class:`hocket.ops.CapturedCall`);
2. inside a CUDA graph capture (``splits="padded"`` only): no host read at all. The agreement and every rank's
   token count are the last eager call's with the same descriptor (run it eagerly first: ``CapturedCall``'s
   warm-up does), the counts stay on the device and a replay checks the ids there (``torch._assert_async``);
   ``plan=None`` runs the plan that eager call chose;
3. the routed rows packed into the canonical send buffer (:mod:`hocket.ops.moe_layout`), then
   ``torch.ops.hocket.all_to_all_grouped_mm`` (dispatch + ``x @ w_gate_up[e]``), the SwiGLU
   ``silu(h[:, :ffn]) * h[:, ffn:]``, ``torch.ops.hocket.grouped_mm_all_to_all`` (``@ w_down[e]`` + combine)
   (:mod:`hocket.ops.moe_library`, strategies in :mod:`hocket.ops.moe_exec`);
4. ``y_t = sum_j topk_weights[t, j] * out[t, j]`` plus ``shared(x)``.

Under ``torch.compile`` (``torch.compiler.is_compiling()``) the call is
:func:`hocket.ops.moe_traced.traced_moe_experts`: the plan fixed at trace time (``plan=None``: the plan chosen for
uniform routing), the routing exchange one more custom op (``torch.ops.hocket.moe_route``), so the whole call,
forward and backward, is in the compiled graph.

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
from hocket.ops.moe_agreement import exchange_routing, id_flags
from hocket.ops.moe_exec import EXCHANGED, PADDED, SideWork, check_moe_plan, side_work
from hocket.ops.moe_layout import combine_pairs, pack_send
from hocket.ops.moe_validation import check_shapes, id_error
from hocket.ops.planning import planning_captured
from hocket.plan.moe import choose_moe_plan
from hocket.transport.group import GroupHandle, resolve_group

_CHOSEN: dict[tuple, Plan] = {}
_CAPTURE_PLANS: dict[tuple, Plan] = {}
"""(group, descriptor digest) -> the plan the last eager ``plan=None`` call chose (what a capture of it runs)."""


def clear_moe_plans() -> None:
    _CHOSEN.clear()
    _CAPTURE_PLANS.clear()


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


def _plan_for(group: GroupHandle, site: MoeSite, device: torch.device, *, splits: str | None = None) -> Plan:
    key = (group.name, id(group.pg), site.key, splits)
    plan = _CHOSEN.get(key)
    if plan is None:
        plan = settle_plan(group, "moe_experts", lambda: check_moe_plan(choose_moe_plan(site, splits=splits)),
                           device=device)
        plan = _CHOSEN[key] = check_moe_plan(plan)
    return plan


def _capturing(x: object) -> bool:
    """Whether this call is being captured in a CUDA graph (``x`` on a GPU and its stream capturing)."""
    return isinstance(x, torch.Tensor) and x.is_cuda and torch.cuda.is_current_stream_capturing()


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
    a dict, JSON, a strategy name, or None to let hocket choose; ``HOCKET_DISABLE`` runs ``sequential``.
    Inside a CUDA graph capture only ``splits="padded"`` runs (module docstring)."""
    if torch.compiler.is_compiling():
        from hocket.ops.moe_traced import traced_moe_experts

        return traced_moe_experts(x, topk_ids, topk_weights, w_gate_up, w_down, group, shared=shared, plan=plan)
    handle = resolve_group(group)
    world = handle.world
    device = x.device if isinstance(x, torch.Tensor) else torch.device("cpu")
    capturing = _capturing(x)
    local_error: Exception | None = None
    shape = None
    given: Plan | None = None
    off = False
    local = bad = None
    try:
        off = disabled()  # HOCKET_DISABLE: the sequential plan, whatever was asked
        given = Plan(splits=PADDED if capturing else EXCHANGED) if off else as_plan(plan)
        shape = check_shapes(x, topk_ids, topk_weights, w_gate_up, w_down, world, shared)
        if given is not None:
            given = check_moe_plan(given)
        if capturing and given is not None and given.splits != PADDED:
            raise ValueError(f"plan {given.describe()}: splits={given.splits!r} reads the split sizes on the host, "
                             f"which a CUDA graph cannot; capture plan={{..., 'splits': 'padded'}} (or plan=None "
                             f"inside hocket.ops.CapturedCall)")
        local, bad = id_flags(topk_ids, shape.experts)
    except (ValueError, TypeError) as exc:
        if capturing:
            raise
        local_error = exc
    site = {} if shape is None else {"experts_local": shape.e_local, "topk": shape.topk, "hidden": shape.hidden,
                                     "ffn": shape.ffn, "dtype": str(shape.dtype), "device": device.type}
    descriptor = Descriptor(op="moe_experts", site=site, plan=given.to_dict() if given else {"choose": True},
                            flags={"shared": shared is not None, "HOCKET_DISABLE": off},
                            error=f"{type(local_error).__name__}: {local_error}" if local_error else "")
    host = not capturing and (given is None or given.splits == EXCHANGED)
    routing = exchange_routing(handle, descriptor, tokens=shape.tokens if shape else 0, counts=local, bad=bad,
                               experts=shape.experts if shape else 0, device=device, host=host,
                               local_error=local_error, capturing=capturing,
                               id_error=lambda: id_error(topk_ids, shape.experts))
    tokens_all, counts = routing.tokens, routing.counts
    k, e_local, experts, ffn = shape.topk, shape.e_local, shape.experts, shape.ffn
    ids = topk_ids.reshape(-1).to(torch.int64)
    key = (handle.name, id(handle.pg), descriptor.digest())
    if given is not None:
        chosen = given
    elif capturing:
        chosen = _CAPTURE_PLANS.get(key)
        if chosen is None or chosen.splits != PADDED:
            raise ValueError(f"hocket.moe_experts: plan=None inside a CUDA graph capture runs the plan its eager "
                             f"warm-up chose, and that was {chosen.describe() if chosen else 'none'}; capture inside "
                             f"hocket.ops.CapturedCall (its warm-up chooses among padded plans) or pass "
                             f"plan={{..., 'splits': 'padded'}}")
    else:
        msite = MoeSite(kind="a2a_mm", tokens=max(tokens_all), hidden=shape.hidden, ffn=ffn, experts=experts,
                        topk=k, world=world, dtype=str(shape.dtype), counts=tuple(map(tuple, counts.tolist())),
                        shared_ffn=_shared_ffn(shared), ranks=handle.ranks)
        chosen = _plan_for(handle, msite, device, splits=PADDED if planning_captured() else None)
        _CAPTURE_PLANS[key] = chosen
    if chosen.splits == PADDED:
        counts = counts.to(device)
    block = max(tokens_all) * min(k, e_local) if chosen.splits == PADDED else None
    per_dest = None if block is None else local.view(world, e_local).sum(1)
    send, pos = pack_send(x, ids, per_dest, block=block, k=k, e_local=e_local, world=world)
    text = chosen.to_json()
    work = None
    overlap_shared = shared is not None and chosen.strategy != "sequential"
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
    y = combine_pairs(y_send, pos, topk_weights, k)
    if shared is not None:
        if work is not None and work.done:
            value = work.result
            params = [p for p in shared.parameters() if p.requires_grad] if isinstance(shared, torch.nn.Module) else []
            needs = torch.is_grad_enabled() and (x.requires_grad or bool(params))
            y = y + (_Recomputed.apply(shared, value, x, *params) if needs else value)
        else:
            y = y + shared(x)
    return y
