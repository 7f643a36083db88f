"""``hocket.ops.moe_experts`` under ``torch.compile``: the whole call as traceable ops.

``moe_experts`` takes this path when ``torch.compiler.is_compiling()``; ``hocket.compile``'s MoE rewrite calls
:func:`traced_moe_experts` directly. The call becomes three ``torch.library`` ops of namespace ``hocket`` and
ordinary ATen ops, so AOTAutograd traces its forward and backward and the inner backend compiles them with the
rest of the graph:

1. at trace time: the shape checks (:func:`hocket.ops.moe_validation.check_shapes`) and the plan. The plan is
   fixed when the graph is traced: the given one, or for ``plan=None`` the plan
   :func:`hocket.plan.moe.choose_moe_plan` chooses for uniform routing at the traced sizes (the counts are data;
   a compiled call does not re-plan per routing); ``HOCKET_DISABLE`` gives ``sequential``. Under Dynamo this host
   work is one constant (``torch._dynamo.assume_constant_result``), so ``fullgraph=True`` holds. A check that
   fails while AOTAutograd traces leaves only the route op in the graph, carrying the error: running it raises
   the error on this rank and :class:`~hocket.ops.agreement.RankInputError` on its peers (no peer waits in a
   later collective); under Dynamo the error is raised at once;
2. ``torch.ops.hocket.moe_route(topk_ids, experts, group_name, descriptor, host) -> counts``: the per-call
   routing exchange of :mod:`hocket.ops.moe_agreement` (the agreement and the split sizes in one all-gather; bad
   expert ids on any rank raise the same error on every rank, no rank waiting). Returns the ``world x E`` int64
   counts, on the CPU with ``host`` (``splits="exchanged"``) and on the ids' device otherwise (``"padded"``);
   its fake implementation returns a tensor of that shape. Run inside a CUDA graph capture (``padded``) it takes
   the exchange's device path: nothing read on the host, so a compiled padded layer can be captured after an eager
   warm-up of the compiled function;
3. the rows packed into the canonical send buffer on the device, then ``hocket.all_to_all_grouped_mm``, the
   SwiGLU and ``hocket.grouped_mm_all_to_all`` (:mod:`hocket.ops.moe_library`, whose fakes give data-dependent
   row counts under ``exchanged``) and the weighted sum over each token's ``k`` choices.

``splits="padded"`` lays each peer's block out as ``tokens * min(k, E_local)`` rows with ``tokens`` this rank's
traced token count, so the route op checks that every rank traced the same count (the error names the fix:
equal tokens per rank under ``torch.compile``, or ``splits="exchanged"``). The shared expert runs after the
routed experts with ordinary autograd (a traced graph has no gap inside the ops to run it in).
"""

from __future__ import annotations

import json

import torch
import torch.nn.functional as F

from hocket.core.moe import MoeSite
from hocket.core.plan import SEQUENTIAL, Plan, as_plan
from hocket.env import disabled
from hocket.ops.agreement import Descriptor
from hocket.ops.moe_agreement import exchange_routing, id_flags
from hocket.ops.moe_exec import EXCHANGED, PADDED, check_moe_plan
from hocket.ops.moe_layout import combine_pairs, pack_send
from hocket.ops.moe_library import group_handle  # (importing it registers the two MoE custom ops)
from hocket.ops.moe_validation import MoeShape, check_shapes, id_error
from hocket.plan.moe import choose_moe_plan
from hocket.transport.group import GroupHandle, resolve_group

ROUTE_SCHEMA = "(Tensor topk_ids, int experts, str group_name, str descriptor, bool host) -> Tensor"
OP = "moe_experts"

def unequal_tokens_message(tokens: list[int]) -> str:
    held = ", ".join(f"rank {r}: {t}" for r, t in enumerate(tokens))
    return (f"hocket.{OP} under torch.compile with splits='padded': the ranks traced different token counts "
            f"({held}), but a compiled padded call lays every peer's block out as this rank's tokens x min(k, "
            f"E_local) rows, so every rank needs the same count. Give every rank the same number of tokens under "
            f"torch.compile (pad the batch), or use plan={{..., 'splits': 'exchanged'}}")


def _route(topk_ids: torch.Tensor, experts: int, group_name: str, descriptor: str, host: bool) -> torch.Tensor:
    group = group_handle(group_name)
    fields = json.loads(descriptor)
    desc = Descriptor(op=fields["op"], site=fields["site"], plan=fields["plan"], flags=fields["flags"],
                      error=fields["error"])
    if desc.error:  # this rank's trace-time checks failed: every rank learns it in the exchange, then raises
        kind, _, message = desc.error.partition(": ")
        local_error = (TypeError if kind == "TypeError" else ValueError)(message)
        exchange_routing(group, desc, tokens=0, counts=None, bad=None, experts=experts, device=topk_ids.device,
                         host=host, local_error=local_error)
        raise local_error  # not reached: the exchange raises on every rank
    counts, bad = id_flags(topk_ids, experts)
    # a compiled graph replayed from a CUDA graph: the padded exchange stays on the device (moe_agreement)
    capturing = not host and topk_ids.is_cuda and torch.cuda.is_current_stream_capturing()
    routing = exchange_routing(group, desc, tokens=int(topk_ids.shape[0]), counts=counts, bad=bad,
                               experts=experts, device=topk_ids.device, host=host,
                               id_error=lambda: id_error(topk_ids, experts), capturing=capturing)
    if not capturing and not host and len(set(routing.tokens)) > 1:
        raise ValueError(unequal_tokens_message(routing.tokens))
    return routing.counts.clone()


moe_route_op = torch.library.custom_op("hocket::moe_route", _route, mutates_args=(), schema=ROUTE_SCHEMA)


@moe_route_op.register_fake
def _route_fake(topk_ids, experts, group_name, descriptor, host):
    world = group_handle(group_name).world
    return topk_ids.new_empty((world, experts), dtype=torch.int64,
                              device=torch.device("cpu") if host else topk_ids.device)


def trace_plan(shape: MoeShape, world: int, ranks: tuple[int, ...], plan: object) -> Plan:
    """The plan a traced call runs (module docstring), checked, with ``splits`` set."""
    if disabled():
        return check_moe_plan(SEQUENTIAL)
    given = as_plan(plan)
    if given is not None:
        return check_moe_plan(given)
    site = MoeSite(kind="a2a_mm", tokens=shape.tokens, hidden=shape.hidden, ffn=shape.ffn, experts=shape.experts,
                   topk=shape.topk, world=world, dtype=str(shape.dtype), ranks=ranks)
    return check_moe_plan(choose_moe_plan(site))


@torch._dynamo.assume_constant_result
def _call_texts(world: int, ranks: tuple[int, ...], sizes: tuple[int, ...], dtype: torch.dtype, device_type: str,
                plan: object, shared: bool) -> tuple[str, str, str, str]:
    """``(plan JSON, descriptor text, splits, error)`` of a traced call: host work on constants, done once while
    tracing (Dynamo keeps the result as a constant instead of tracing the planner and ``json``). ``sizes``:
    :class:`~hocket.ops.moe_validation.MoeShape`'s sizes, in its order; ``error``: a plan that does not run
    (``"<ExceptionType>: <message>"``), else empty."""
    shape = MoeShape(*sizes, dtype)
    try:
        chosen = trace_plan(shape, world, ranks, plan)
    except (ValueError, TypeError) as exc:
        return "", "", EXCHANGED, f"{type(exc).__name__}: {exc}"
    site = {"experts_local": shape.e_local, "topk": shape.topk, "hidden": shape.hidden, "ffn": shape.ffn,
            "dtype": str(shape.dtype), "device": device_type}
    descriptor = Descriptor(op=OP, site=site, plan=chosen.to_dict(),
                            flags={"shared": shared, "HOCKET_DISABLE": disabled(), "compiled": True})
    return chosen.to_json(), descriptor.text(), chosen.splits, ""


@torch._dynamo.assume_constant_result
def _failed_text(error: str) -> str:
    return Descriptor(op=OP, flags={"compiled": True}, error=error).text()


def _failed_call(x: object, topk_ids: object, group: GroupHandle, error: str, exc: BaseException | None):
    """A traced call whose trace-time checks failed on this rank: only the route op, which raises ``error`` on
    this rank and :class:`~hocket.ops.agreement.RankInputError` on its peers when the graph runs (so no peer
    waits in a later collective); the result is zeros that depend on it. Raised at once when ``x`` is not a 2-D
    tensor (no result can be traced) and under Dynamo (which runs the call eagerly then, whose agreement raises
    on every rank, or with ``fullgraph=True`` fails the compile with it)."""
    if not isinstance(x, torch.Tensor) or x.dim() != 2 or torch.compiler.is_dynamo_compiling():
        raise exc if exc is not None else ValueError(error.partition(": ")[2])
    ids = topk_ids if (isinstance(topk_ids, torch.Tensor) and topk_ids.device == x.device
                       and not topk_ids.dtype.is_floating_point and not topk_ids.is_complex()) else None
    ids = x.new_zeros((0, 1), dtype=torch.int64) if ids is None else ids
    counts = torch.ops.hocket.moe_route(ids, 0, group.name, _failed_text(error), False)
    return x.new_zeros(x.shape) + counts.sum().to(x.dtype)


def traced_moe_experts(x: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor,
                       w_gate_up: torch.Tensor, w_down: torch.Tensor, group: object, *, shared=None,
                       plan: object = None) -> torch.Tensor:
    """``moe_experts``'s math and result (``[tokens, hidden]``) as traceable ops (module docstring)."""
    handle = resolve_group(group)
    world = handle.world
    try:
        shape = check_shapes(x, topk_ids, topk_weights, w_gate_up, w_down, world, shared)
    except (ValueError, TypeError) as exc:
        return _failed_call(x, topk_ids, handle, f"{type(exc).__name__}: {exc}", exc)
    sizes = (shape.tokens, shape.hidden, shape.ffn, shape.e_local, shape.experts, shape.topk)
    text, descriptor, splits, error = _call_texts(world, handle.ranks, sizes, shape.dtype, x.device.type, plan,
                                                  shared is not None)
    if error:
        return _failed_call(x, topk_ids, handle, error, None)
    counts = torch.ops.hocket.moe_route(topk_ids, shape.experts, handle.name, descriptor, splits == EXCHANGED)
    k, e_local, ffn, tokens = shape.topk, shape.e_local, shape.ffn, shape.tokens
    ids = topk_ids.reshape(-1).to(torch.int64)
    block = tokens * min(k, e_local) if splits == PADDED else None
    per_dest = None if block is None else counts[handle.rank].view(world, e_local).sum(1)
    send, pos = pack_send(x, ids, per_dest, block=block, k=k, e_local=e_local, world=world)
    h, _, _ = torch.ops.hocket.all_to_all_grouped_mm(send, counts, w_gate_up, None, k, handle.name, text, "forward")
    act = F.silu(h[:, :ffn]) * h[:, ffn:]
    y_send, _ = torch.ops.hocket.grouped_mm_all_to_all(act, counts, w_down, None, None, k, handle.name, text,
                                                       "forward")
    y = combine_pairs(y_send, pos, topk_weights, k)
    if shared is not None:
        y = y + shared(x)
    return y
