"""``bidir_ring``: the ring of :mod:`hocket.ops.lowering.ring` in both directions at once.

Every block's rows are halved: the first half travels rank -> rank+1, the second
rank -> rank-1, so each link carries half the bytes in each direction per step.
"""

from __future__ import annotations

from hocket.ops.lowering.ring import gather_matmul, matmul_all_reduce, matmul_scatter


def ag_mm(A_shard, Bs, dim, need_A, rt, plan):
    return gather_matmul(A_shard, Bs, dim, need_A, rt, plan, bidirectional=True)


def mm_rs(A, B, reduce_op, dim, rt, plan):
    return matmul_scatter(A, B, reduce_op, dim, rt, plan, bidirectional=True)


def mm_ar(A, B, reduce_op, rt, plan):
    return matmul_all_reduce(A, B, reduce_op, rt, plan, bidirectional=True)


EXECUTORS = {"ag_mm": ag_mm, "mm_rs": mm_rs, "mm_ar": mm_ar}
