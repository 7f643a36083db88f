"""Rank side of tests/dist/test_ops_eager_ranks.py: the public operators' eager fast path against the
custom op (``torch.ops.hocket.*``) on the same inputs, bit for bit."""

from __future__ import annotations

import importlib

import torch
import torch.distributed as dist

import hocket.ops as H
from hocket.launch.same_case import rank_generator


def _operand(seed: int, salt: int, shape) -> torch.Tensor:
    return torch.randn(tuple(shape), generator=rank_generator(seed * 5 + salt, rank=dist.get_rank()))


def compare_paths(case: dict) -> int:
    """Run every operator both ways with ``case``'s plan; return how many fast-path calls were made."""
    w, pg = dist.get_world_size(), dist.group.WORLD
    gn, plan, seed = pg.group_name, case["plan"], case["seed"]
    m, k, n = case["m"], case["k"], case["n"]
    A_shard, B = _operand(seed, 1, (m, k)), _operand(seed, 2, (k, n))
    B2 = _operand(seed, 3, (k, n + 1))
    modules = [importlib.import_module(f"hocket.ops.{name}")
               for name in ("all_gather_matmul", "matmul_reduce_scatter", "matmul_all_reduce")]
    direct = []
    originals = [(mod, name, getattr(mod, name)) for mod, name in zip(
        modules, ("run_all_gather_matmul", "run_matmul_reduce_scatter", "run_matmul_all_reduce"))]
    for mod, name, real in originals:
        setattr(mod, name, lambda *a, _real=real: (direct.append(1), _real(*a))[1])
    try:
        a, outs = H.all_gather_matmul(A_shard, [B, B2], 0, pg, plan=plan)
        a_op, outs_op = torch.ops.hocket.all_gather_matmul(A_shard, [B, B2], 0, gn, True, True, plan, "forward")
        assert torch.equal(a, a_op), case
        assert all(torch.equal(x, y) for x, y in zip(outs, outs_op)), case
        A = _operand(seed, 4, (m * w, k))
        for op in ("sum", "avg"):
            got = H.matmul_reduce_scatter(A, B, op, 0, pg, plan=plan)
            assert torch.equal(got, torch.ops.hocket.matmul_reduce_scatter(A, B, op, 0, gn, plan, "forward")), case
            got = H.matmul_all_reduce(A, B, op, pg, plan=plan)
            assert torch.equal(got, torch.ops.hocket.matmul_all_reduce(A, B, op, gn, plan, "forward")), case
        expected = torch.cat([_peer(seed, r, (m, k)) for r in range(w)]) @ B
        H.assert_close(outs[0], expected, world=w, what=f"fast-path all_gather_matmul {case}")
    finally:
        for mod, name, real in originals:
            setattr(mod, name, real)
    return len(direct)


def _peer(seed: int, rank: int, shape) -> torch.Tensor:
    return torch.randn(tuple(shape), generator=rank_generator(seed * 5 + 1, rank=rank))
