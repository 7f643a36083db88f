"""``bulk``: one async collective for the whole operand, then compute (the chunk pipeline with one piece)."""

from __future__ import annotations

from functools import partial

from hocket.ops.executors import register_executors
from hocket.ops.lowering import uneven
from hocket.ops.lowering.chunked import gather_matmul, matmul_all_reduce, matmul_scatter
from hocket.ops.lowering.runtime import bind_executors
from hocket.ops.lowering.uneven import register_uneven

EXECUTORS = bind_executors(ag_mm=gather_matmul, mm_rs=matmul_scatter, mm_ar=matmul_all_reduce, chunks=1)

register_executors("bulk", EXECUTORS)

register_uneven("bulk", "ag_mm", partial(uneven.gather_matmul, chunks=1))
register_uneven("bulk", "mm_rs", partial(uneven.matmul_scatter, chunks=1))
