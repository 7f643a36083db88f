"""What an executor gets besides its tensors: the group, its resource context, its transport."""

from __future__ import annotations

from dataclasses import dataclass

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
