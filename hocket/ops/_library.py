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
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from torch.distributed.distributed_c10d import _get_group_size_by_name, _resolve_process_group

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
                "str plan, str direction, int[] shard_rows=[]) -> (Tensor?, Tensor[])")
MM_RS_SCHEMA = ("(Tensor A, Tensor B, str reduce_op, int scatter_dim, str group_name, str plan, str direction, "
                "int[] shard_rows=[]) -> Tensor")
MM_RS_AG_SCHEMA = ("(Tensor A, Tensor B, str reduce_op, int scatter_dim, Tensor gather_input, int gather_dim, "
                   "str group_name, str plan, str direction, int[] shard_rows=[]) -> (Tensor, Tensor)")
MM_AR_SCHEMA = ("(Tensor A, Tensor B, str reduce_op, str group_name, str plan, str direction, "
                "int[] shard_rows=[]) -> Tensor")
"""``shard_rows``: uneven shards, every rank's size along the gather / scatter dim (``mm_ar``: every rank's
local K); ``[]``: even."""


def _world(group_name: str) -> int:
    try:
        return _get_group_size_by_name(group_name)
    except (RuntimeError, ValueError, KeyError) as exc:
        raise ValueError(f"group={group_name!r} names no live process group ({exc}); initialise torch.distributed "
                         "and pass a ProcessGroup, 1-D DeviceMesh or group name") from None


# torch 2.13 deprecates reduce_scatter_tensor for reduce_scatter_single (same arguments); 2.11 may lack the new name
_funcol_reduce_scatter = getattr(funcol, "reduce_scatter_single", None) or funcol.reduce_scatter_tensor


UNEVEN_BACKWARD_PLAN = "bulk"
"""The plan of the communicating backward of an uneven call (one exact uneven collective beside the GEMMs)
while the call planner cannot plan uneven sites (:func:`_planner_plans_uneven`); else the planner's choice."""


def _planner_plans_uneven() -> bool:
    """Whether the call planner's bucketing keeps an uneven Site (whose ``shard_rows`` add up to its ``m``)."""
    from hocket.core.site import Site
    from hocket.plan.bucket import bucket_site

    try:
        bucket_site(Site(kind="ag_mm", m=3, k=1, n=1, world=2, shard_rows=(2, 1)))
    except ValueError:
        return False
    return True


_PLANS_UNEVEN: list[bool] = []


def _shards(shard_rows) -> tuple:
    """The trailing ``shard_rows`` argument of an op call: left out for even shards."""
    return (list(shard_rows),) if shard_rows else ()


def _no_grad(ctx) -> None:
    """The gradient entry of ``shard_rows`` (a list of ints: one leaf, no gradient). Even calls leave the
    argument out (an empty list would flatten as a list of no tensors), so the backward's tuple is cut to
    the inputs given (``ctx.n_inputs``)."""
    return None


def _backward_plan(shard_rows) -> str:
    if not shard_rows:
        return ""
    if not _PLANS_UNEVEN:
        _PLANS_UNEVEN.append(_planner_plans_uneven())
    return "" if _PLANS_UNEVEN[0] else UNEVEN_BACKWARD_PLAN


def _rank(group_name: str) -> int:
    return dist.get_rank(_resolve_process_group(group_name))


def _gathered(t: torch.Tensor, dim: int, group_name: str, shard_rows=()) -> torch.Tensor:
    """``t`` all-gathered along ``dim`` (read only by the caller): on one rank ``t`` itself, no collective;
    uneven shards (``shard_rows``) padded to the largest, gathered, and the real rows kept (functional
    collectives, so a compiled backward traces it)."""
    if _world(group_name) == 1:
        return t
    if shard_rows:
        top = max(shard_rows)
        padded = torch.nn.functional.pad(t, _pad_spec(t.dim(), dim, top - t.shape[dim]))
        full = funcol.wait_tensor(funcol.all_gather_tensor(padded.contiguous(), dim, group_name))
        return torch.cat([full.narrow(dim, r * top, s) for r, s in enumerate(shard_rows)], dim=dim)
    return funcol.wait_tensor(funcol.all_gather_tensor(t.contiguous(), dim, group_name))


def _pad_spec(ndim: int, dim: int, extra: int) -> list[int]:
    """``torch.nn.functional.pad``'s argument that adds ``extra`` entries at the end of ``dim``."""
    spec = [0, 0] * (ndim - dim)
    spec[-1] = extra
    return spec


def _reduce_scattered(t: torch.Tensor, dim: int, group_name: str, shard_rows=()) -> torch.Tensor:
    """``t`` summed over the group and scattered along ``dim``: on one rank ``t`` itself, no collective;
    uneven shards (``shard_rows``) each padded to the largest, reduce-scattered, and the real rows kept."""
    if _world(group_name) == 1:
        return t
    if shard_rows:
        top, at, blocks = max(shard_rows), 0, []
        for s in shard_rows:
            block = t.narrow(dim, at, s)
            blocks.append(torch.nn.functional.pad(block, _pad_spec(t.dim(), dim, top - s)))
            at += s
        mine = funcol.wait_tensor(_funcol_reduce_scatter(torch.cat(blocks, dim=dim).contiguous(), "sum", dim,
                                                         group_name))
        return mine.narrow(dim, 0, shard_rows[_rank(group_name)]).contiguous()
    return funcol.wait_tensor(_funcol_reduce_scatter(t.contiguous(), "sum", dim, group_name))


# -- all_gather_matmul ---------------------------------------------------------------------

all_gather_matmul_op = torch.library.custom_op("hocket::all_gather_matmul", run_all_gather_matmul,
                                               mutates_args=(), schema=AG_MM_SCHEMA)


@all_gather_matmul_op.register_fake
def _all_gather_matmul_fake(A_shard, Bs, gather_dim, group_name, return_A, save_gathered, plan, direction,
                            shard_rows=()):
    dim = check_all_gather_matmul(A_shard, Bs, gather_dim, _world(group_name), shard_rows)
    full = gathered_shape(tuple(A_shard.shape), dim, _world(group_name))
    if shard_rows:
        full[dim] = sum(shard_rows)
    A = A_shard.new_empty(full) if return_A else None
    return A, [A_shard.new_empty((*full[:-1], B.shape[1])) for B in Bs]


def _all_gather_matmul_setup(ctx, inputs, output):
    A_shard, Bs, gather_dim, group_name, return_A, save_gathered, plan, direction, *rest = inputs
    A_out, _ = output
    ctx.gather_dim = gather_dim % A_shard.dim()
    ctx.group_name = group_name
    ctx.shard_rows = list(rest[0]) if rest else []
    ctx.n_inputs = 8 + bool(ctx.shard_rows)  # one gradient per argument given (even calls leave shard_rows out)
    ctx.use_saved = bool(save_gathered) and A_out is not None
    ctx.save_for_backward(A_out if ctx.use_saved else A_shard, *Bs)


def _flat(t: torch.Tensor) -> torch.Tensor:
    return t.reshape(math.prod(t.shape[:-1]), t.shape[-1])


def _all_gather_matmul_backward(ctx, grad_A, grad_outs):
    saved, *Bs = ctx.saved_tensors
    need_dA, need_dB = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
    dim, group_name, sizes = ctx.gather_dim, ctx.group_name, ctx.shard_rows
    pairs = [(g, B) for g, B in zip(grad_outs, Bs) if g is not None]
    A_full = saved if ctx.use_saved else None
    dA = None
    if need_dA and pairs:
        dC = pairs[0][0] if len(pairs) == 1 else torch.cat([g for g, _ in pairs], dim=-1)
        Bt = pairs[0][1].t() if len(pairs) == 1 else torch.cat([B.t() for _, B in pairs], dim=0)
        if need_dB and A_full is None:
            dA, A_full = torch.ops.hocket.matmul_reduce_scatter_and_gather(
                dC, Bt, "sum", dim, saved, dim, group_name, _backward_plan(sizes), "backward", *_shards(sizes))
        else:
            dA = torch.ops.hocket.matmul_reduce_scatter(dC, Bt, "sum", dim, group_name, _backward_plan(sizes),
                                                        "backward", *_shards(sizes))
    if need_dA and grad_A is not None:
        extra = _reduce_scattered(grad_A, dim, group_name, sizes)
        dA = extra if dA is None else dA + extra
    dBs = None
    if need_dB:
        if A_full is None:
            A_full = _gathered(saved, dim, group_name, sizes)
        A2 = _flat(A_full)
        dBs = [A2.t() @ _flat(g) if g is not None else None for g in grad_outs]
    return (dA, dBs, None, None, None, None, None, None, _no_grad(ctx))[:ctx.n_inputs]


all_gather_matmul_op.register_autograd(_all_gather_matmul_backward, setup_context=_all_gather_matmul_setup)


# -- matmul_reduce_scatter -----------------------------------------------------------------

matmul_reduce_scatter_op = torch.library.custom_op("hocket::matmul_reduce_scatter", run_matmul_reduce_scatter,
                                                   mutates_args=(), schema=MM_RS_SCHEMA)


def _scattered_shape(A, B, reduce_op, scatter_dim, group_name, shard_rows=()) -> list[int]:
    world = _world(group_name)
    dim = check_matmul_reduce_scatter(A, B, reduce_op, scatter_dim, world, shard_rows)
    shape = [*A.shape[:-1], B.shape[1]]
    if shard_rows:
        shape[dim] = shard_rows[_rank(group_name)]
    else:
        shape[dim] //= world
    return shape


@matmul_reduce_scatter_op.register_fake
def _matmul_reduce_scatter_fake(A, B, reduce_op, scatter_dim, group_name, plan, direction, shard_rows=()):
    return A.new_empty(_scattered_shape(A, B, reduce_op, scatter_dim, group_name, shard_rows))


def _matmul_reduce_scatter_setup(ctx, inputs, output):
    A, B, reduce_op, scatter_dim, group_name, plan, direction, *rest = inputs
    ctx.scatter_dim = scatter_dim % A.dim()
    ctx.group_name = group_name
    ctx.shard_rows = list(rest[0]) if rest else []
    ctx.n_inputs = 7 + bool(ctx.shard_rows)
    ctx.scale = 1.0 / _world(group_name) if reduce_op == "avg" else None
    ctx.save_for_backward(A, B)


def _matmul_reduce_scatter_backward(ctx, grad):
    A, B = ctx.saved_tensors
    need_dA, need_dB = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
    dim, group_name, sizes = ctx.scatter_dim, ctx.group_name, ctx.shard_rows
    if ctx.scale is not None:
        grad = grad * ctx.scale
    dA = grad_full = None
    if need_dA:
        grad_full, (dA,) = torch.ops.hocket.all_gather_matmul(grad, [B.t()], dim, group_name, need_dB, True,
                                                              _backward_plan(sizes), "backward", *_shards(sizes))
    elif need_dB:
        grad_full = _gathered(grad, dim, group_name, sizes)
    dB = _flat(A).t() @ _flat(grad_full) if need_dB else None
    return (dA, dB, None, None, None, None, None, _no_grad(ctx))[:ctx.n_inputs]


matmul_reduce_scatter_op.register_autograd(_matmul_reduce_scatter_backward,
                                           setup_context=_matmul_reduce_scatter_setup)

matmul_reduce_scatter_and_gather_op = torch.library.custom_op(
    "hocket::matmul_reduce_scatter_and_gather", run_matmul_reduce_scatter_and_gather, mutates_args=(),
    schema=MM_RS_AG_SCHEMA)


@matmul_reduce_scatter_and_gather_op.register_fake
def _matmul_reduce_scatter_and_gather_fake(A, B, reduce_op, scatter_dim, gather_input, gather_dim, group_name, plan,
                                           direction, shard_rows=()):
    out = A.new_empty(_scattered_shape(A, B, reduce_op, scatter_dim, group_name, shard_rows))
    gdim = check_dim("gather_dim", gather_dim, gather_input.dim(), f"gather_input of shape {tuple(gather_input.shape)}")
    full = gathered_shape(tuple(gather_input.shape), gdim, _world(group_name))
    if shard_rows:
        full[gdim] = sum(shard_rows)
    return out, gather_input.new_empty(full)


# -- matmul_all_reduce ---------------------------------------------------------------------

matmul_all_reduce_op = torch.library.custom_op("hocket::matmul_all_reduce", run_matmul_all_reduce,
                                               mutates_args=(), schema=MM_AR_SCHEMA)


@matmul_all_reduce_op.register_fake
def _matmul_all_reduce_fake(A, B, reduce_op, group_name, plan, direction, shard_rows=()):
    check_matmul_all_reduce(A, B, reduce_op, uneven=bool(shard_rows))
    _world(group_name)
    return A.new_empty((*A.shape[:-1], B.shape[1]))


def _matmul_all_reduce_setup(ctx, inputs, output):
    A, B, reduce_op, group_name, plan, direction, *rest = inputs
    ctx.shard_rows = list(rest[0]) if rest else []
    ctx.n_inputs = 6 + bool(ctx.shard_rows)
    ctx.scale = 1.0 / _world(group_name) if reduce_op == "avg" else None
    ctx.save_for_backward(A, B)


def _matmul_all_reduce_backward(ctx, grad):
    A, B = ctx.saved_tensors
    if ctx.scale is not None:
        grad = grad * ctx.scale
    dA = grad @ B.t() if ctx.needs_input_grad[0] else None
    dB = _flat(A).t() @ _flat(grad) if ctx.needs_input_grad[1] else None
    return (dA, dB, None, None, None, None, _no_grad(ctx))[:ctx.n_inputs]


matmul_all_reduce_op.register_autograd(_matmul_all_reduce_backward, setup_context=_matmul_all_reduce_setup)
