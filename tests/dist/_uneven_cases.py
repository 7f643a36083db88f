"""Rank-side checks of uneven shards: every rank's outputs and gradients from hocket against plain torch
autograd over every rank's operands in one process (float64), the global loss the sum of the ranks'."""

from __future__ import annotations

import torch
import torch.distributed as dist

import hocket.ops as H
from hocket.launch.same_case import rank_generator


def operand(seed: int, rank: int, shape, dtype: str, *, salt: int = 0) -> torch.Tensor:
    gen = rank_generator(seed * 7 + salt, rank=rank)
    return torch.randn(tuple(shape), generator=gen, dtype=torch.float32).to(getattr(torch, dtype))


def _leaf(t: torch.Tensor) -> torch.Tensor:
    return t.detach().clone().requires_grad_(True)


def _shape_with(shape, dim: int, size: int) -> list[int]:
    out = list(shape)
    out[dim] = size
    return out


def uneven_case(case: dict) -> int:
    """Forward (and, with ``case["grads"]``, gradients) of one uneven call; returns the checks made.

    ``case``: kind, sizes (one per rank: the gather / scatter dim's size, or mm_ar's local K), shape (the
    rank's operand shape with the sharded dim's entry ignored), dim, n, dtype, seed, plan, grads,
    explicit (pass ``shard_rows`` as a list rather than ``"auto"``)."""
    w, rank = dist.get_world_size(), dist.get_rank()
    kind, sizes, dim, n = case["kind"], case["sizes"], case["dim"], case["n"]
    seed, dtype, plan, grads = case["seed"], case["dtype"], case["plan"], case["grads"]
    group = dist.group.WORLD
    checks = 0

    def close(got, expected, what):
        nonlocal checks
        H.assert_close(got, expected.to(got.dtype), world=w, what=f"{what} {case}")
        checks += 1

    if kind == "ag_mm":
        shapes = [_shape_with(case["shape"], dim, s) for s in sizes]
        last = dim == len(case["shape"]) - 1
        K = sum(sizes) if last else case["shape"][-1]
        shards = [operand(seed, r, shapes[r], dtype) for r in range(w)]
        Bs = [operand(seed, r, (K, n), dtype, salt=1) for r in range(w)]
        A = _leaf(shards[rank]) if grads else shards[rank]
        B = _leaf(Bs[rank]) if grads else Bs[rank]
        A_out, (out,) = H.all_gather_matmul(A, [B], dim, group, plan=plan, return_A=True,
                                            shard_rows=sizes if case["explicit"] else "auto",
                                            save_gathered=case.get("save_gathered", True))
        ref_shards = [_leaf(s.double()) for s in shards]
        ref_Bs = [_leaf(b.double()) for b in Bs]
        A_full = torch.cat(ref_shards, dim=dim)
        close(A_out, A_full, "gathered A")
        close(out, A_full @ ref_Bs[rank], "output")
        if grads:
            Gs = [operand(seed, r, tuple(out.shape), dtype, salt=10) for r in range(w)]
            (out * Gs[rank]).sum().backward()
            sum((A_full @ ref_Bs[r] * Gs[r].double()).sum() for r in range(w)).backward()
            close(A.grad, ref_shards[rank].grad, "dA_shard")
            close(B.grad, ref_Bs[rank].grad, "dB")
        return checks

    reduce_op = case.get("reduce_op", "sum")
    scale = 1.0 / w if reduce_op == "avg" else 1.0
    if kind == "mm_rs":
        last = dim == len(case["shape"]) - 1
        shape = [*case["shape"][:-1], 4] if last else _shape_with(case["shape"], dim, sum(sizes))
        if last:  # the scattered dim is N
            n = sum(sizes)
        As = [operand(seed, r, shape, dtype) for r in range(w)]
        Bs = [operand(seed, r, (shape[-1], n), dtype, salt=1) for r in range(w)]
        A = _leaf(As[rank]) if grads else As[rank]
        B = _leaf(Bs[rank]) if grads else Bs[rank]
        out = H.matmul_reduce_scatter(A, B, reduce_op, dim, group, plan=plan, shard_rows=sizes)
        ref_As, ref_Bs = [_leaf(a.double()) for a in As], [_leaf(b.double()) for b in Bs]
        total = sum(a @ b for a, b in zip(ref_As, ref_Bs)) * scale
        blocks = total.split(list(sizes), dim=dim)
        close(out, blocks[rank], "output")
        if grads:
            Gs = [operand(seed, r, tuple(blocks[r].shape), dtype, salt=10) for r in range(w)]
            (out * Gs[rank]).sum().backward()
            sum((blk * g.double()).sum() for blk, g in zip(blocks, Gs)).backward()
            close(A.grad, ref_As[rank].grad, "dA")
            close(B.grad, ref_Bs[rank].grad, "dB")
        return checks
    # mm_ar: each rank's local K is sizes[rank]
    m = case["shape"][0]
    As = [operand(seed, r, (m, sizes[r]), dtype) for r in range(w)]
    Bs = [operand(seed, r, (sizes[r], n), dtype, salt=1) for r in range(w)]
    A = _leaf(As[rank]) if grads else As[rank]
    B = _leaf(Bs[rank]) if grads else Bs[rank]
    out = H.matmul_all_reduce(A, B, reduce_op, group, plan=plan, shard_rows=sizes if case["explicit"] else "auto")
    expected = sum(a.double() @ b.double() for a, b in zip(As, Bs)) * scale
    close(out, expected, "output")
    if grads:
        G = operand(seed, 0, (m, n), dtype, salt=10)  # the replicated incoming gradient
        (out * G).sum().backward()
        close(A.grad, G.double() * scale @ Bs[rank].double().t(), "dA")
        close(B.grad, As[rank].double().t() @ (G.double() * scale), "dB")
    return checks


def bad_shard_rows(case: dict) -> None:
    """Call with the bad ``shard_rows`` of ``case`` (per rank: ``case["per_rank"][rank]``)."""
    rank = dist.get_rank()
    sizes = case["per_rank"][rank]
    kind = case["kind"]
    group = dist.group.WORLD
    if kind == "mm_rs":
        A = torch.ones(6, 4)
        B = torch.ones(4, 3)
        H.matmul_reduce_scatter(A, B, "sum", 0, group, plan=case.get("plan"), shard_rows=sizes)
        return
    rows = case["rows"][rank]
    A = torch.ones(rows, 4)
    H.all_gather_matmul(A, [torch.ones(4, 3)], 0, group, plan=case.get("plan"), shard_rows=sizes)


def uneven_without_sizes(case: dict) -> None:
    """Uneven tensors passed without ``shard_rows``: the agreement refuses them, pointing at the argument."""
    rank = dist.get_rank()
    H.all_gather_matmul(torch.ones(case["rows"][rank], 4), [torch.ones(4, 3)], 0, dist.group.WORLD,
                        plan="sequential")


def refused_strategy(case: dict) -> None:
    """An uneven ag_mm under a plan whose strategy (or order) has no uneven executor."""
    rank, dim = dist.get_rank(), case.get("dim", 0)
    if dim == 0:
        H.all_gather_matmul(torch.ones(case["rows"][rank], 4), [torch.ones(4, 3)], 0, dist.group.WORLD,
                            plan=case["plan"], shard_rows="auto")
        return
    K = sum(case["rows"])
    H.all_gather_matmul(torch.ones(2, case["rows"][rank]), [torch.ones(K, 3)], 1, dist.group.WORLD, plan=case["plan"],
                        shard_rows="auto")




def planned(case: dict) -> str:
    """Run an uneven ag_mm with plan=None; return the plan hocket chose."""
    from hocket.ops.dispatch import _PREPARED

    uneven_case({**case, "plan": None})
    return [p.plan.describe() for p in _PREPARED.values() if p.site is not None and p.site.uneven][-1]


def transport_rows(case: dict) -> int:
    """:mod:`hocket.transport.uneven` both ways against torch.cat / a float64 sum of every rank's blocks."""
    from hocket.transport.group import resolve_group
    from hocket.transport.torch_dist import TorchDistTransport
    from hocket.transport.uneven import all_gather_rows, offsets, reduce_scatter_rows

    rank, w = dist.get_rank(), dist.get_world_size()
    sizes, cols, checks = case["sizes"], 3, 0
    transport = TorchDistTransport(resolve_group(dist.group.WORLD))
    blocks = [operand(case["seed"], r, (sizes[r], cols), "float32") for r in range(w)]
    fulls = [operand(case["seed"], r, (sum(sizes), cols), "float32", salt=5) for r in range(w)]
    starts = offsets(sizes)
    for way in ("exact", "padded"):
        out = torch.full((sum(sizes), cols), float("nan"))
        all_gather_rows(transport, out, blocks[rank], sizes, way=way).wait()
        torch.testing.assert_close(out, torch.cat(blocks), rtol=0, atol=0)
        mine = torch.full((sizes[rank], cols), float("nan"))
        reduce_scatter_rows(transport, mine, fulls[rank], sizes, way=way).wait()
        expected = sum(f.double() for f in fulls)[starts[rank]:starts[rank + 1]].float()
        torch.testing.assert_close(mine, expected)
        checks += 2
    # the unfused uneven references on the live group against their one-process forms
    from hocket.ops.reference import (
        all_gather_matmul_global,
        matmul_reduce_scatter_uneven_global,
        reference_all_gather_matmul_uneven,
        reference_matmul_reduce_scatter_uneven,
    )

    B = operand(case["seed"], 0, (cols, 2), "float32", salt=9)
    A, (out,) = reference_all_gather_matmul_uneven(blocks[rank], [B], 0, dist.group.WORLD, sizes)
    A_ref, (out_ref,) = all_gather_matmul_global(blocks, [B], 0)
    torch.testing.assert_close(out, out_ref)
    Bs = [operand(case["seed"], r, (cols, 2), "float32", salt=11) for r in range(w)]
    got = reference_matmul_reduce_scatter_uneven(fulls[rank], Bs[rank], "avg", 0, dist.group.WORLD, sizes)
    torch.testing.assert_close(got, matmul_reduce_scatter_uneven_global(fulls, Bs, "avg", 0, sizes)[rank])
    return checks + 2


def compiled_uneven(case: dict) -> int:
    """An uneven all_gather_matmul + matmul_reduce_scatter under torch.compile (aot_eager, fullgraph) against
    the eager call: forward, and with ``case["backward"]`` the gradients too."""
    rank = dist.get_rank()
    sizes = case["sizes"]
    group = dist.group.WORLD.group_name  # compiled code takes the group by name
    A = operand(5, rank, (sizes[rank], 4), "float32")
    B = operand(5, rank, (4, 6), "float32", salt=1)
    C = operand(5, rank, (6, 4), "float32", salt=2)

    def step(a, b, c):
        _, (h,) = H.all_gather_matmul(a, [b], 0, group, plan="chunked", return_A=False, shard_rows=sizes)
        return H.matmul_reduce_scatter(h, c, "sum", 0, group, plan="chunked", shard_rows=sizes)

    results = []
    for fn in (step, torch.compile(step, backend="aot_eager", fullgraph=True)):
        a, b, c = _leaf(A), _leaf(B), _leaf(C)
        out = fn(a, b, c)
        if case.get("backward", True):
            out.sum().backward()
        results.append((out.detach(), a.grad, b.grad, c.grad) if case.get("backward", True) else (out.detach(),))
    for got, expected in zip(results[1], results[0]):
        torch.testing.assert_close(got, expected)
    return len(results[0])


def mixed_auto(case: dict) -> None:
    """Rank 0 passes shard_rows='auto', the others the list: every rank raises, none waits."""
    rank = dist.get_rank()
    sizes = case["sizes"]
    H.all_gather_matmul(torch.ones(sizes[rank], 4), [torch.ones(4, 3)], 0, dist.group.WORLD, plan="sequential",
                        shard_rows="auto" if rank == 0 else sizes)
