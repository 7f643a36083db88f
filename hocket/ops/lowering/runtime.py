"""What an executor gets besides its tensors: the group, its resource context, its transport."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from hocket.ops.context import OpContext
from hocket.transport.group import GroupHandle


@dataclass(frozen=True, kw_only=True)
class Runtime:
    group: GroupHandle
    ctx: OpContext
    transport: object
    """moves bytes: ``all_gather``/``reduce_scatter``/``all_reduce``/``exchange`` returning Pending."""

    @property
    def world(self) -> int:
        return self.group.world

    @property
    def rank(self) -> int:
        return self.group.rank


def bind_executors(*, ag_mm: Callable | None = None, mm_rs: Callable | None = None, mm_ar: Callable | None = None,
                   **options) -> dict[str, Callable]:
    """A strategy's executor table: ``kind -> fn`` with ``options`` (e.g. ``bidirectional=True``) bound.

    Executor signatures: ``ag_mm(A_shard, Bs, dim, need_A, rt, plan)``,
    ``mm_rs(A, B, reduce_op, dim, rt, plan)``, ``mm_ar(A, B, reduce_op, rt, plan)``.
    """
    table = {"ag_mm": ag_mm, "mm_rs": mm_rs, "mm_ar": mm_ar}
    return {kind: partial(fn, **options) if options else fn for kind, fn in table.items() if fn is not None}
