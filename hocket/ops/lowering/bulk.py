"""``bulk``: one async collective for the whole operand, then compute (the chunk pipeline with one piece)."""

from __future__ import annotations

from hocket.ops.lowering.chunked import gather_matmul, matmul_all_reduce, matmul_scatter


def ag_mm(A_shard, Bs, dim, need_A, rt, plan):
    return gather_matmul(A_shard, Bs, dim, need_A, rt, 1)


def mm_rs(A, B, reduce_op, dim, rt, plan):
    return matmul_scatter(A, B, reduce_op, dim, rt, 1)


def mm_ar(A, B, reduce_op, rt, plan):
    return matmul_all_reduce(A, B, reduce_op, rt, 1)


EXECUTORS = {"ag_mm": ag_mm, "mm_rs": mm_rs, "mm_ar": mm_ar}
