"""``sequential``: the unfused reference (one blocking collective, one matmul).

On a one-rank group the collective moves nothing (the gather, the reduction and the scatter of one rank
are its own tensor), so the executors skip it and return the matmul alone: no collective call, no copy
through the backend. The results are the same tensors the reference computes (the same ``torch.matmul``),
and a gathered ``A`` asked for is a fresh copy, as the reference's is, never the caller's own tensor.
"""

from __future__ import annotations

import torch

from hocket.ops.executors import register_executors
from hocket.ops.lowering.runtime import bind_executors
from hocket.ops.lowering.uneven import register_uneven, sequential_gather, sequential_scatter
from hocket.ops.reference import (
    reference_all_gather_matmul,
    reference_matmul_all_reduce,
    reference_matmul_reduce_scatter,
)


def ag_mm(A_shard, Bs, dim, need_A, rt, plan):
    if rt.world == 1:
        return (A_shard.clone(memory_format=torch.contiguous_format) if need_A else None), \
            [torch.matmul(A_shard, B) for B in Bs]
    return reference_all_gather_matmul(A_shard, Bs, dim, rt.group, return_A=need_A)


def mm_rs(A, B, reduce_op, dim, rt, plan):
    if rt.world == 1:
        return torch.matmul(A, B)  # sum or avg over one rank, scattered to one rank
    return reference_matmul_reduce_scatter(A, B, reduce_op, dim, rt.group)


def mm_ar(A, B, reduce_op, rt, plan):
    if rt.world == 1:
        return torch.matmul(A, B)
    return reference_matmul_all_reduce(A, B, reduce_op, rt.group)


EXECUTORS = bind_executors(ag_mm=ag_mm, mm_rs=mm_rs, mm_ar=mm_ar)

register_executors("sequential", EXECUTORS)

register_uneven("sequential", "ag_mm", sequential_gather)
register_uneven("sequential", "mm_rs", sequential_scatter)
