"""Rank side of tests/dist/test_chunked_local_first.py: chunked plans with order='local_first'
through the real operators (gloo), every rank checking its result against the one-process reference."""

from __future__ import annotations

import torch
import torch.distributed as dist

import hocket.ops as H
from hocket.launch.same_case import rank_generator
from hocket.ops.reference import all_gather_matmul_global, matmul_reduce_scatter_global


def _operand(seed: int, rank: int, shape, dtype: str, salt: int = 0) -> torch.Tensor:
    gen = rank_generator(seed * 5 + salt, rank=rank)
    return torch.randn(tuple(shape), generator=gen, dtype=torch.float32).to(getattr(torch, dtype))


def run_local_first(case: dict) -> float:
    """Two calls of ``case``'s operator (the second reuses the buffers); returns the worst error."""
    w, rank = dist.get_world_size(), dist.get_rank()
    plan = {"strategy": "chunked", "chunks": case["chunks"], "order": "local_first"}
    shape, dim, dtype, seed = case["shape"], case["dim"], case["dtype"], case["seed"]
    worst = 0.0
    if case["kind"] == "ag_mm":
        shards = [_operand(seed, r, shape, dtype) for r in range(w)]
        K = shape[-1] * (w if dim == len(shape) - 1 else 1)
        Bs = [_operand(seed, rank, (K, n), dtype, 1 + i) for i, n in enumerate(case["ns"])]
        eA, eouts = all_gather_matmul_global(shards, Bs, dim)
        for _ in range(2):
            A, outs = H.all_gather_matmul(shards[rank], Bs, dim, dist.group.WORLD, return_A=True, plan=plan)
            for got, expected in [(A, eA), *zip(outs, eouts)]:
                H.assert_close(got, expected, world=w, what=f"{case}")
                worst = max(worst, H.max_error(got, expected))
    else:
        # fresh inputs on the second call: the staging buffers (whose own blocks are zeroed only when
        # made) are reused, so anything left in them from the first call would show
        for call in range(2):
            As = [_operand(seed + call, r, shape, dtype) for r in range(w)]
            Bs = [_operand(seed + call, r, (shape[-1], case["ns"][0]), dtype, 1) for r in range(w)]
            expected = matmul_reduce_scatter_global(As, Bs, case["reduce_op"], dim)[rank]
            out = H.matmul_reduce_scatter(As[rank], Bs[rank], case["reduce_op"], dim, dist.group.WORLD, plan=plan)
            H.assert_close(out, expected, world=w, what=f"{case}")
            worst = max(worst, H.max_error(out, expected))
    return worst
