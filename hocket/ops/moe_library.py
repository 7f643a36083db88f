"""The two MoE custom ops (namespace ``hocket``): schemas, fake implementations, autograd.

Schemas (layouts: :mod:`hocket.ops.moe_layout`; ``counts`` is the ``world x E`` int64 routing matrix, on the
CPU for ``splits="exchanged"`` and on the data's device for ``splits="padded"``; ``plan`` a Plan's JSON with
``splits`` set; ``topk`` the router's k)::

    hocket::all_to_all_grouped_mm(Tensor send, Tensor counts, Tensor w, Tensor? wgrad_lhs, int topk,
                                  str group_name, str plan, str direction) -> (Tensor out, Tensor received,
                                  Tensor? wgrad)
    hocket::grouped_mm_all_to_all(Tensor x, Tensor counts, Tensor w, Tensor? wgrad_lhs, Tensor? wgrad_rhs,
                                  int topk, str group_name, str plan, str direction) -> (Tensor out, Tensor? wgrad)

* ``all_to_all_grouped_mm`` (kind ``a2a_mm``): ``send [S, k]`` (the canonical send buffer) is dispatched to the
  experts' ranks, ``received [R, k]`` is the canonical receive buffer and ``out [R, n] = received_e @ w[e]`` per
  local expert ``e`` (``w [e_local, k, n]``); ``wgrad [e_local, k', k] = wgrad_lhs_e^T @ received_e`` when
  ``wgrad_lhs [R, k']`` is given (its backward use), else None. ``received`` is not differentiable.
* ``grouped_mm_all_to_all`` (kind ``mm_a2a``): ``x [R, k]`` in the receive layout, ``x_e @ w[e]`` combined back
  to ``out [S, n]`` in the send layout; ``wgrad [e_local, k', n'] = wgrad_lhs_e^T @ wgrad_rhs_e`` when both
  (``[R, k']``, ``[R, n']``) are given.

``R`` and ``S`` depend on the routing under ``splits="exchanged"`` (the fake implementations return
``torch.library.get_ctx().new_dynamic_size()`` rows); under ``"padded"`` both are ``world * L`` (the input's
rows). Autograd: ``a2a_mm``'s input gradient is a ``grouped_mm_all_to_all`` with ``w^T`` whose weight-gradient
GEMM runs in the combine's gap; ``mm_a2a``'s is an ``all_to_all_grouped_mm`` with ``w^T`` whose
weight-gradient GEMMs follow each arrived piece. Outputs never alias inputs.
"""

from __future__ import annotations

import torch

from hocket.core.plan import Plan
from hocket.ops.executors import executor_for
from hocket.ops.moe_exec import EXCHANGED, MoeRuntime, _take_side, check_moe_plan
from hocket.ops.moe_trace import TracedTransport, active
from hocket.transport.group import GroupHandle, process_group_of, resolve_group
from hocket.transport.torch_dist import TorchDistTransport

A2A_MM_SCHEMA = ("(Tensor send, Tensor counts, Tensor w, Tensor? wgrad_lhs, int topk, str group_name, str plan, "
                 "str direction) -> (Tensor, Tensor, Tensor?)")
MM_A2A_SCHEMA = ("(Tensor x, Tensor counts, Tensor w, Tensor? wgrad_lhs, Tensor? wgrad_rhs, int topk, "
                 "str group_name, str plan, str direction) -> (Tensor, Tensor?)")

_PLANS: dict[str, Plan] = {}
_GROUPS: dict[str, GroupHandle] = {}


def plan_of(text: str) -> Plan:
    plan = _PLANS.get(text)
    if plan is None:
        plan = _PLANS[text] = check_moe_plan(Plan.from_json(text) if text else Plan())
    return plan


def group_handle(name: str) -> GroupHandle:
    """The :class:`GroupHandle` of the process group registered as ``name`` (made again when the group was)."""
    pg = process_group_of(name)
    handle = _GROUPS.get(name)
    if handle is None or handle.pg is not pg:  # a group destroyed and made again under its name
        handle = _GROUPS[name] = resolve_group(pg)
    return handle


def transport_for(name: str, group: GroupHandle):
    """The transport object of ``Plan.transport`` for an MoE call (``collective`` or ``host_staged``)."""
    if name == "host_staged" and "gloo" not in group.backend:
        from hocket.transport.host_relay import HostStagedTransport

        transport = HostStagedTransport(group)
    else:  # collective; host_staged on gloo too (its ranks' buffers are host memory already)
        transport = TorchDistTransport(group)
    return TracedTransport(transport) if active() else transport


def _runtime(group_name: str, plan: Plan, side=None) -> MoeRuntime:
    group = group_handle(group_name)
    return MoeRuntime(group=group, transport=transport_for(plan.transport, group), side=side)


def _run_a2a_mm(send, counts, w, wgrad_lhs, topk, group_name, plan, direction):
    p = plan_of(plan)
    side = _take_side() if direction == "forward" else None
    out, received, wgrad = executor_for("a2a_mm", p.strategy)(send, counts, w, wgrad_lhs, topk,
                                                              _runtime(group_name, p, side), p)
    return out, received, wgrad


def _run_mm_a2a(x, counts, w, wgrad_lhs, wgrad_rhs, topk, group_name, plan, direction):
    p = plan_of(plan)
    out, wgrad = executor_for("mm_a2a", p.strategy)(x, counts, w, wgrad_lhs, wgrad_rhs, topk,
                                                    _runtime(group_name, p), p)
    return out, wgrad


all_to_all_grouped_mm_op = torch.library.custom_op("hocket::all_to_all_grouped_mm", _run_a2a_mm, mutates_args=(),
                                                   schema=A2A_MM_SCHEMA)
grouped_mm_all_to_all_op = torch.library.custom_op("hocket::grouped_mm_all_to_all", _run_mm_a2a, mutates_args=(),
                                                   schema=MM_A2A_SCHEMA)


def _rows(first: torch.Tensor, plan: str) -> object:
    if plan_of(plan).splits == EXCHANGED:
        return torch.library.get_ctx().new_dynamic_size()
    return first.shape[0]


@all_to_all_grouped_mm_op.register_fake
def _a2a_mm_fake(send, counts, w, wgrad_lhs, topk, group_name, plan, direction):
    rows = _rows(send, plan)
    out = send.new_empty((rows, w.shape[2]))
    received = send.new_empty((rows, send.shape[1]))
    wgrad = None if wgrad_lhs is None else send.new_empty((w.shape[0], wgrad_lhs.shape[1], send.shape[1]))
    return out, received, wgrad


@grouped_mm_all_to_all_op.register_fake
def _mm_a2a_fake(x, counts, w, wgrad_lhs, wgrad_rhs, topk, group_name, plan, direction):
    rows = _rows(x, plan)
    out = x.new_empty((rows, w.shape[2]))
    wgrad = None
    if wgrad_lhs is not None and wgrad_rhs is not None:
        wgrad = x.new_empty((w.shape[0], wgrad_lhs.shape[1], wgrad_rhs.shape[1]))
    return out, wgrad


def _a2a_mm_setup(ctx, inputs, output):
    send, counts, w, wgrad_lhs, topk, group_name, plan, direction = inputs
    _, received, _ = output
    ctx.args = (topk, group_name, plan)
    ctx.save_for_backward(counts, w, received)
    ctx.mark_non_differentiable(received)


def _a2a_mm_backward(ctx, grad_out, grad_received, grad_wgrad):
    counts, w, received = ctx.saved_tensors
    topk, group_name, plan = ctx.args
    need_send, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[2]
    if not (need_send or need_w):
        return None, None, None, None, None, None, None, None
    grad_out = grad_out.contiguous()
    d_send, d_w = torch.ops.hocket.grouped_mm_all_to_all(grad_out, counts, w.transpose(1, 2),
                                                         received if need_w else None,
                                                         grad_out if need_w else None, topk, group_name, plan,
                                                         "backward")
    return (d_send if need_send else None), None, d_w, None, None, None, None, None


all_to_all_grouped_mm_op.register_autograd(_a2a_mm_backward, setup_context=_a2a_mm_setup)


def _mm_a2a_setup(ctx, inputs, output):
    x, counts, w, wgrad_lhs, wgrad_rhs, topk, group_name, plan, direction = inputs
    ctx.args = (topk, group_name, plan)
    ctx.save_for_backward(x, counts, w)


def _mm_a2a_backward(ctx, grad_out, grad_wgrad):
    x, counts, w = ctx.saved_tensors
    topk, group_name, plan = ctx.args
    need_x, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[2]
    if not (need_x or need_w):
        return None, None, None, None, None, None, None, None, None
    d_x, _, d_w = torch.ops.hocket.all_to_all_grouped_mm(grad_out.contiguous(), counts, w.transpose(1, 2),
                                                         x if need_w else None, topk, group_name, plan, "backward")
    return (d_x if need_x else None), None, d_w, None, None, None, None, None, None


grouped_mm_all_to_all_op.register_autograd(_mm_a2a_backward, setup_context=_mm_a2a_setup)
