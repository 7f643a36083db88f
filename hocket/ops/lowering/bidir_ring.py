"""``bidir_ring``: the ring of :mod:`hocket.ops.lowering.ring` in both directions at once.

Every block's rows are halved: the first half travels rank -> rank+1, the second
rank -> rank-1, so each link carries half the bytes in each direction per step.
"""

from __future__ import annotations

from functools import partial

from hocket.ops.executors import register_executors
from hocket.ops.lowering.ring import (
    gather_matmul,
    matmul_all_reduce,
    matmul_scatter,
    uneven_ring_gather,
    uneven_ring_scatter,
)
from hocket.ops.lowering.runtime import bind_executors
from hocket.ops.lowering.uneven import register_uneven

EXECUTORS = bind_executors(ag_mm=gather_matmul, mm_rs=matmul_scatter, mm_ar=matmul_all_reduce,
                           bidirectional=True)

register_executors("bidir_ring", EXECUTORS)

register_uneven("bidir_ring", "ag_mm", partial(uneven_ring_gather, bidirectional=True))
register_uneven("bidir_ring", "mm_rs", partial(uneven_ring_scatter, bidirectional=True))
