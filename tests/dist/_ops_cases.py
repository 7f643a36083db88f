"""Rank-side helpers of the tests/dist/test_ops_* files: every rank builds every rank's operands
from the case's seed (so it can compute the one-process reference) and runs its own part."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch._subclasses.fake_tensor import FakeTensorMode

import hocket.ops as H
from hocket.launch.same_case import rank_generator
from hocket.ops.reference import all_gather_matmul_global, matmul_all_reduce_global, matmul_reduce_scatter_global
from hocket.ops.executors import supported


def operand(seed: int, rank: int, shape, dtype: str, *, salt: int = 0) -> torch.Tensor:
    gen = rank_generator(seed * 7 + salt, rank=rank)
    return torch.randn(tuple(shape), generator=gen, dtype=torch.float32).to(getattr(torch, dtype))


def run_case(case: dict) -> list[tuple[str, float]]:
    """Run one operator call of ``case`` on this rank; check against the reference; return (what, error)."""
    w, rank = dist.get_world_size(), dist.get_rank()
    kind, seed, dtype = case["kind"], case["seed"], case["dtype"]
    plan = {"strategy": case["strategy"], "chunks": case.get("chunks", 1)}
    if case.get("split_sizes"):
        plan["split_sizes"] = list(case["split_sizes"])
    shape, dim = list(case["shape"]), case["dim"]
    checked = []

    def check(got, expected, what):
        H.assert_close(got, expected, world=w, what=f"{what} {case}")
        assert got.is_contiguous(), f"{what} is not contiguous ({case})"
        checked.append((what, H.max_error(got, expected)))

    if kind == "ag_mm":
        shards = [operand(seed, r, shape, dtype) for r in range(w)]
        K = shape[-1] * (w if dim % len(shape) == len(shape) - 1 else 1)
        Bs = [operand(seed, rank, (K, n), dtype, salt=1 + i) for i, n in enumerate(case["ns"])]
        A, outs = H.all_gather_matmul(shards[rank], Bs, dim, dist.group.WORLD, return_A=case.get("return_A", True),
                                      plan=plan)
        eA, eouts = all_gather_matmul_global(shards, Bs, dim)
        if case.get("return_A", True):
            check(A, eA, "A")
        else:
            assert A is None
        for i, (o, e) in enumerate(zip(outs, eouts)):
            check(o, e, f"out{i}")
        _check_fake(lambda *t: torch.ops.hocket.all_gather_matmul(
            t[0], list(t[1:]), dim, dist.group.WORLD.group_name, case.get("return_A", True), True, "", "forward"),
            [shards[rank], *Bs], [A, *outs])
    else:
        As = [operand(seed, r, shape, dtype) for r in range(w)]
        Bs = [operand(seed, r, (shape[-1], case["ns"][0]), dtype, salt=1) for r in range(w)]
        if kind == "mm_rs":
            out = H.matmul_reduce_scatter(As[rank], Bs[rank], case["reduce_op"], dim, dist.group.WORLD, plan=plan)
            check(out, matmul_reduce_scatter_global(As, Bs, case["reduce_op"], dim)[rank], "out")
            _check_fake(lambda a, b: torch.ops.hocket.matmul_reduce_scatter(
                a, b, case["reduce_op"], dim, dist.group.WORLD.group_name, "", "forward"), [As[rank], Bs[rank]], [out])
        else:
            out = H.matmul_all_reduce(As[rank], Bs[rank], case["reduce_op"], dist.group.WORLD, plan=plan)
            expected = matmul_all_reduce_global(As, Bs, case["reduce_op"])
            check(out, expected, "out")
            _check_fake(lambda a, b: torch.ops.hocket.matmul_all_reduce(
                a, b, case["reduce_op"], dist.group.WORLD.group_name, "", "forward"), [As[rank], Bs[rank]], [out])
            everyone = [torch.empty_like(out) for _ in range(w)]
            dist.all_gather(everyone, out)
            assert all(torch.equal(everyone[0], o) for o in everyone), "all-reduce results differ between ranks"
    return checked


def _check_fake(call, real_inputs, real_outputs) -> None:
    with FakeTensorMode() as mode:
        fake = call(*[mode.from_tensor(t) for t in real_inputs])
    flat = [fake[0], *fake[1]] if isinstance(fake, tuple) else [fake]
    for f, r in zip(flat, real_outputs):
        if r is None:
            continue
        assert f is not None and f.shape == r.shape and f.stride() == r.stride(), (f.shape, r.shape)


def sweep(kind: str, dtype: str, seed: int) -> int:
    """Every strategy x dim x a few chunk counts for ``kind`` on uneven shapes; returns the number of checks."""
    w = dist.get_world_size()
    count = 0
    for strategy in supported(kind):
        for chunks in (1, 3):
            for shape, dim, ns, extra in _sweep_shapes(kind, w):
                case = dict(kind=kind, strategy=strategy, chunks=chunks, shape=shape, dim=dim, ns=ns, dtype=dtype,
                            seed=seed, **extra)
                count += len(run_case(case))
    return count


def _sweep_shapes(kind: str, w: int):
    if kind == "ag_mm":
        for shape in ((5, 7), (3, 5, 6)):
            for dim in range(len(shape)):
                yield shape, dim, (4, 3), {"return_A": dim != 1}
    elif kind == "mm_rs":
        for shape in ((3 * w, 7), (2 * w, w + 1, 6)):
            for dim in range(len(shape)):
                if dim == len(shape) - 1 or shape[dim] % w == 0:
                    yield shape, dim, (2 * w,), {"reduce_op": "avg" if dim == 1 else "sum"}
    else:
        for shape in ((5, 7), (2, 3, 6), (1, 4)):
            yield shape, 0, (5,), {"reduce_op": "avg" if len(shape) == 3 else "sum"}
