"""The ``hocket`` torch.library custom ops: schemas, fake (meta) implementations, autograd.

Schemas take the group by name (``group_name: str``) and the plan as a string (a Plan's
JSON, a strategy name, or ``""`` for "choose for me"), so ``torch.compile`` can trace
calls as opaque ops. Fake implementations run the same local checks as the real ones
and return the real shapes and (contiguous) strides, whatever the strategy. Outputs
never alias inputs.
"""

from __future__ import annotations

import math

import torch
import torch.distributed._functional_collectives as funcol
from torch.distributed.distributed_c10d import _get_group_size_by_name

from hocket.ops._layout import gathered_shape
from hocket.ops.all_gather_matmul import run_all_gather_matmul
from hocket.ops.matmul_all_reduce import run_matmul_all_reduce
from hocket.ops.matmul_reduce_scatter import run_matmul_reduce_scatter, run_matmul_reduce_scatter_and_gather
from hocket.ops.validation import (
    check_all_gather_matmul,
    check_dim,
    check_matmul_all_reduce,
    check_matmul_reduce_scatter,
)

AG_MM_SCHEMA = ("(Tensor A_shard, Tensor[] Bs, int gather_dim, str group_name, bool return_A, bool save_gathered, "
                "str plan, str direction) -> (Tensor?, Tensor[])")
MM_RS_SCHEMA = ("(Tensor A, Tensor B, str reduce_op, int scatter_dim, str group_name, str plan, str direction) "
                "-> Tensor")
MM_RS_AG_SCHEMA = ("(Tensor A, Tensor B, str reduce_op, int scatter_dim, Tensor gather_input, int gather_dim, "
                   "str group_name, str plan, str direction) -> (Tensor, Tensor)")
MM_AR_SCHEMA = "(Tensor A, Tensor B, str reduce_op, str group_name, str plan, str direction) -> Tensor"


def _world(group_name: str) -> int:
    try:
        return _get_group_size_by_name(group_name)
    except (RuntimeError, ValueError, KeyError) as exc:
        raise ValueError(f"group={group_name!r} names no live process group ({exc}); initialise torch.distributed "
                         "and pass a ProcessGroup, 1-D DeviceMesh or group name") from None


# torch 2.13 deprecates reduce_scatter_tensor for reduce_scatter_single (same arguments); 2.11 may lack the new name
_funcol_reduce_scatter = getattr(funcol, "reduce_scatter_single", None) or funcol.reduce_scatter_tensor


def _gathered(t: torch.Tensor, dim: int, group_name: str) -> torch.Tensor:
    """``t`` all-gathered along ``dim`` (read only by the caller): on one rank ``t`` itself, no collective."""
    if _world(group_name) == 1:
        return t
    return funcol.wait_tensor(funcol.all_gather_tensor(t.contiguous(), dim, group_name))


def _reduce_scattered(t: torch.Tensor, dim: int, group_name: str) -> torch.Tensor:
    """``t`` summed over the group and scattered along ``dim``: on one rank ``t`` itself, no collective."""
    if _world(group_name) == 1:
        return t
    return funcol.wait_tensor(_funcol_reduce_scatter(t.contiguous(), "sum", dim, group_name))


# -- all_gather_matmul ---------------------------------------------------------------------

all_gather_matmul_op = torch.library.custom_op("hocket::all_gather_matmul", run_all_gather_matmul,
                                               mutates_args=(), schema=AG_MM_SCHEMA)


@all_gather_matmul_op.register_fake
def _all_gather_matmul_fake(A_shard, Bs, gather_dim, group_name, return_A, save_gathered, plan, direction):
    dim = check_all_gather_matmul(A_shard, Bs, gather_dim, _world(group_name))
    full = gathered_shape(tuple(A_shard.shape), dim, _world(group_name))
    A = A_shard.new_empty(full) if return_A else None
    return A, [A_shard.new_empty((*full[:-1], B.shape[1])) for B in Bs]


def _all_gather_matmul_setup(ctx, inputs, output):
    A_shard, Bs, gather_dim, group_name, return_A, save_gathered, plan, direction = inputs
    A_out, _ = output
    ctx.gather_dim = gather_dim % A_shard.dim()
    ctx.group_name = group_name
    ctx.use_saved = bool(save_gathered) and A_out is not None
    ctx.save_for_backward(A_out if ctx.use_saved else A_shard, *Bs)


def _flat(t: torch.Tensor) -> torch.Tensor:
    return t.reshape(math.prod(t.shape[:-1]), t.shape[-1])


def _all_gather_matmul_backward(ctx, grad_A, grad_outs):
    saved, *Bs = ctx.saved_tensors
    need_dA, need_dB = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
    dim, group_name = ctx.gather_dim, ctx.group_name
    pairs = [(g, B) for g, B in zip(grad_outs, Bs) if g is not None]
    A_full = saved if ctx.use_saved else None
    dA = None
    if need_dA and pairs:
        dC = pairs[0][0] if len(pairs) == 1 else torch.cat([g for g, _ in pairs], dim=-1)
        Bt = pairs[0][1].t() if len(pairs) == 1 else torch.cat([B.t() for _, B in pairs], dim=0)
        if need_dB and A_full is None:
            dA, A_full = torch.ops.hocket.matmul_reduce_scatter_and_gather(
                dC, Bt, "sum", dim, saved, dim, group_name, "", "backward")
        else:
            dA = torch.ops.hocket.matmul_reduce_scatter(dC, Bt, "sum", dim, group_name, "", "backward")
    if need_dA and grad_A is not None:
        extra = _reduce_scattered(grad_A, dim, group_name)
        dA = extra if dA is None else dA + extra
    dBs = None
    if need_dB:
        if A_full is None:
            A_full = _gathered(saved, dim, group_name)
        A2 = _flat(A_full)
        dBs = [A2.t() @ _flat(g) if g is not None else None for g in grad_outs]
    return dA, dBs, None, None, None, None, None, None


all_gather_matmul_op.register_autograd(_all_gather_matmul_backward, setup_context=_all_gather_matmul_setup)


# -- matmul_reduce_scatter -----------------------------------------------------------------

matmul_reduce_scatter_op = torch.library.custom_op("hocket::matmul_reduce_scatter", run_matmul_reduce_scatter,
                                                   mutates_args=(), schema=MM_RS_SCHEMA)


def _scattered_shape(A, B, reduce_op, scatter_dim, group_name) -> list[int]:
    world = _world(group_name)
    dim = check_matmul_reduce_scatter(A, B, reduce_op, scatter_dim, world)
    shape = [*A.shape[:-1], B.shape[1]]
    shape[dim] //= world
    return shape


@matmul_reduce_scatter_op.register_fake
def _matmul_reduce_scatter_fake(A, B, reduce_op, scatter_dim, group_name, plan, direction):
    return A.new_empty(_scattered_shape(A, B, reduce_op, scatter_dim, group_name))


def _matmul_reduce_scatter_setup(ctx, inputs, output):
    A, B, reduce_op, scatter_dim, group_name, plan, direction = inputs
    ctx.scatter_dim = scatter_dim % A.dim()
    ctx.group_name = group_name
    ctx.scale = 1.0 / _world(group_name) if reduce_op == "avg" else None
    ctx.save_for_backward(A, B)


def _matmul_reduce_scatter_backward(ctx, grad):
    A, B = ctx.saved_tensors
    need_dA, need_dB = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
    dim, group_name = ctx.scatter_dim, ctx.group_name
    if ctx.scale is not None:
        grad = grad * ctx.scale
    dA = grad_full = None
    if need_dA:
        grad_full, (dA,) = torch.ops.hocket.all_gather_matmul(grad, [B.t()], dim, group_name, need_dB, True, "",
                                                              "backward")
    elif need_dB:
        grad_full = _gathered(grad, dim, group_name)
    dB = _flat(A).t() @ _flat(grad_full) if need_dB else None
    return dA, dB, None, None, None, None, None


matmul_reduce_scatter_op.register_autograd(_matmul_reduce_scatter_backward,
                                           setup_context=_matmul_reduce_scatter_setup)

matmul_reduce_scatter_and_gather_op = torch.library.custom_op(
    "hocket::matmul_reduce_scatter_and_gather", run_matmul_reduce_scatter_and_gather, mutates_args=(),
    schema=MM_RS_AG_SCHEMA)


@matmul_reduce_scatter_and_gather_op.register_fake
def _matmul_reduce_scatter_and_gather_fake(A, B, reduce_op, scatter_dim, gather_input, gather_dim, group_name, plan,
                                           direction):
    out = A.new_empty(_scattered_shape(A, B, reduce_op, scatter_dim, group_name))
    gdim = check_dim("gather_dim", gather_dim, gather_input.dim(), f"gather_input of shape {tuple(gather_input.shape)}")
    return out, gather_input.new_empty(gathered_shape(tuple(gather_input.shape), gdim, _world(group_name)))


# -- matmul_all_reduce ---------------------------------------------------------------------

matmul_all_reduce_op = torch.library.custom_op("hocket::matmul_all_reduce", run_matmul_all_reduce,
                                               mutates_args=(), schema=MM_AR_SCHEMA)


@matmul_all_reduce_op.register_fake
def _matmul_all_reduce_fake(A, B, reduce_op, group_name, plan, direction):
    check_matmul_all_reduce(A, B, reduce_op)
    _world(group_name)
    return A.new_empty((*A.shape[:-1], B.shape[1]))


def _matmul_all_reduce_setup(ctx, inputs, output):
    A, B, reduce_op, group_name, plan, direction = inputs
    ctx.scale = 1.0 / _world(group_name) if reduce_op == "avg" else None
    ctx.save_for_backward(A, B)


def _matmul_all_reduce_backward(ctx, grad):
    A, B = ctx.saved_tensors
    if ctx.scale is not None:
        grad = grad * ctx.scale
    dA = grad @ B.t() if ctx.needs_input_grad[0] else None
    dB = _flat(A).t() @ _flat(grad) if ctx.needs_input_grad[1] else None
    return dA, dB, None, None, None, None


matmul_all_reduce_op.register_autograd(_matmul_all_reduce_backward, setup_context=_matmul_all_reduce_setup)
