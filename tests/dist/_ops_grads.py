"""Rank-side gradient checks: each rank's gradients from hocket's autograd against plain torch autograd
over every rank's operands in one process (float64), with the global loss = sum of the ranks' losses."""

from __future__ import annotations

import torch
import torch.distributed as dist

import hocket.ops as H
from _ops_cases import operand


def _leaf(t: torch.Tensor) -> torch.Tensor:
    return t.detach().clone().requires_grad_(True)


def grads_case(case: dict) -> int:
    w, rank = dist.get_world_size(), dist.get_rank()
    kind, seed, dtype, dim = case["kind"], case["seed"], case["dtype"], case["dim"]
    shape, plan = list(case["shape"]), {"strategy": case["strategy"], "chunks": case.get("chunks", 2)}
    group = dist.group.WORLD
    checks = 0

    def close(got, expected, what):
        nonlocal checks
        H.assert_close(got, expected.to(got.dtype), world=w, what=f"{what} {case}")
        checks += 1

    if kind == "ag_mm":
        last = dim == len(shape) - 1
        K = shape[-1] * (w if last else 1)
        ns = case["ns"]
        shards = [operand(seed, r, shape, dtype) for r in range(w)]
        Bs = [[operand(seed, r, (K, n), dtype, salt=1 + i) for i, n in enumerate(ns)] for r in range(w)]
        full = list(shape)
        full[dim] *= w
        Gs = [[operand(seed, r, (*full[:-1], n), dtype, salt=10 + i) for i, n in enumerate(ns)] for r in range(w)]
        GA = [operand(seed, r, full, dtype, salt=20) for r in range(w)] if case["use_A"] else None
        # hocket, this rank
        A = _leaf(shards[rank])
        mine = [_leaf(B) for B in Bs[rank]]
        A_out, outs = H.all_gather_matmul(A, mine, dim, group, return_A=case["use_A"], plan=plan,
                                          save_gathered=case["save_gathered"])
        loss = sum((o * g).sum() for o, g in zip(outs, Gs[rank]))
        if case["use_A"]:
            loss = loss + (A_out * GA[rank]).sum()
        loss.backward()
        # reference, every rank at once
        ref_shards = [_leaf(s.double()) for s in shards]
        ref_Bs = [[_leaf(B.double()) for B in row] for row in Bs]
        A_full = torch.cat(ref_shards, dim=dim)
        total = sum((A_full @ B * g.double()).sum() for r in range(w) for B, g in zip(ref_Bs[r], Gs[r]))
        if case["use_A"]:
            total = total + sum((A_full * GA[r].double()).sum() for r in range(w))
        total.backward()
        close(A.grad, ref_shards[rank].grad, "dA_shard")
        for i, B in enumerate(mine):
            close(B.grad, ref_Bs[rank][i].grad, f"dB{i}")
        return checks

    reduce_op = case["reduce_op"]
    n = case["ns"][0]
    As = [operand(seed, r, shape, dtype) for r in range(w)]
    Bs = [operand(seed, r, (shape[-1], n), dtype, salt=1) for r in range(w)]
    out_shape = [*shape[:-1], n]
    A, B = _leaf(As[rank]), _leaf(Bs[rank])
    scale = 1.0 / w if reduce_op == "avg" else 1.0
    if kind == "mm_rs":
        out_shape[dim] //= w
        Gs = [operand(seed, r, out_shape, dtype, salt=10) for r in range(w)]
        out = H.matmul_reduce_scatter(A, B, reduce_op, dim, group, plan=plan)
        (out * Gs[rank]).sum().backward()
        ref_As, ref_Bs = [_leaf(a.double()) for a in As], [_leaf(b.double()) for b in Bs]
        total = sum(a @ b for a, b in zip(ref_As, ref_Bs)) * scale
        sum((blk * g.double()).sum() for blk, g in zip(total.chunk(w, dim=dim), Gs)).backward()
        close(A.grad, ref_As[rank].grad, "dA")
        close(B.grad, ref_Bs[rank].grad, "dB")
        return checks
    # mm_ar: the incoming gradient is taken as replicated (identity backward), avg scales it
    G = operand(seed, rank, out_shape, dtype, salt=10)
    out = H.matmul_all_reduce(A, B, reduce_op, group, plan=plan)
    (out * G).sum().backward()
    ra, rb = _leaf(As[rank].double()), _leaf(Bs[rank].double())
    ((ra @ rb) * scale * G.double()).sum().backward()
    close(A.grad, ra.grad, "dA")
    close(B.grad, rb.grad, "dB")
    return checks


def grads_sweep(dtype: str, seed: int) -> int:
    w = dist.get_world_size()
    count = 0
    for strategy in ("sequential", "chunked", "ring", "bidir_ring"):
        for shape, dim in (((3, 6), 0), ((2, 3, 4), 1), ((2, 3, 4), 2)):
            for save_gathered, use_A in ((True, False), (False, True), (False, False)):
                count += grads_case(dict(kind="ag_mm", strategy=strategy, shape=shape, dim=dim, ns=(5, 2),
                                         dtype=dtype, seed=seed, save_gathered=save_gathered, use_A=use_A))
        for shape, dim in (((2 * w, 5), 0), ((2, w, 3), 1), ((3, 4), 1)):
            count += grads_case(dict(kind="mm_rs", strategy=strategy, shape=shape, dim=dim, ns=(2 * w,),
                                     dtype=dtype, seed=seed, reduce_op="avg" if dim == 1 else "sum"))
    for strategy in ("chunked", "substituted", "ring"):
        for reduce_op in ("sum", "avg"):
            count += grads_case(dict(kind="mm_ar", strategy=strategy, shape=(2, 5, 4), dim=0, ns=(3,), dtype=dtype,
                                     seed=seed, reduce_op=reduce_op))
    return count
