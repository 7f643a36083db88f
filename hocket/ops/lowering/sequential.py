"""``sequential``: the unfused reference (one blocking collective, one matmul)."""

from __future__ import annotations

from hocket.ops.lowering.runtime import bind_executors
from hocket.ops.reference import (
    reference_all_gather_matmul,
    reference_matmul_all_reduce,
    reference_matmul_reduce_scatter,
)


def ag_mm(A_shard, Bs, dim, need_A, rt, plan):
    return reference_all_gather_matmul(A_shard, Bs, dim, rt.group, return_A=need_A)


def mm_rs(A, B, reduce_op, dim, rt, plan):
    return reference_matmul_reduce_scatter(A, B, reduce_op, dim, rt.group)


def mm_ar(A, B, reduce_op, rt, plan):
    return reference_matmul_all_reduce(A, B, reduce_op, rt.group)


EXECUTORS = bind_executors(ag_mm=ag_mm, mm_rs=mm_rs, mm_ar=mm_ar)
