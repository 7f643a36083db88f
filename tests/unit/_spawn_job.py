"""A small spawn job (two operator calls on gloo) for the clean-exit test of test_issue38_inputs.py."""

from __future__ import annotations


def two_ops(rank: int, world: int) -> bool:
    import torch
    import torch.distributed as dist

    import hocket.ops as H

    a, b = torch.randn(8, 16), torch.randn(16, 4)
    out = H.matmul_all_reduce(a, b, "sum", dist.group.WORLD, plan="chunked")
    expected = a @ b
    dist.all_reduce(expected)
    H.all_gather_matmul(torch.randn(4, 16), [b], 0, dist.group.WORLD, plan="chunked")
    return bool(torch.allclose(out, expected, atol=1e-4))
