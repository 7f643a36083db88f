"""Resolve what a user passes as ``group`` into one ProcessGroup handle.

Accepted: a ``torch.distributed.ProcessGroup``, a 1-D ``DeviceMesh``, or a group name
(the string ``ProcessGroup.group_name`` returns, which is what hocket's custom-op
schemas carry). Errors name the argument and the fix.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.distributed_c10d import _resolve_process_group


@dataclass(frozen=True, kw_only=True)
class GroupHandle:
    """One resolved process group: the group itself plus facts the ops need."""

    pg: dist.ProcessGroup
    name: str
    rank: int
    """this process's rank inside the group."""
    world: int
    ranks: tuple[int, ...]
    """global rank of every member, in group-rank order."""
    backend: str

    def global_rank(self, group_rank: int) -> int:
        return self.ranks[group_rank % self.world]


def _not_initialised() -> ValueError:
    return ValueError(
        "group: torch.distributed is not initialised; call torch.distributed.init_process_group(...) "
        "(or run under torchrun) before calling a hocket operator"
    )


def _from_name(name: str) -> dist.ProcessGroup:
    try:
        return _resolve_process_group(name)
    except (RuntimeError, ValueError, KeyError) as exc:
        raise ValueError(
            f"group={name!r} names no live process group ({exc}); pass a ProcessGroup, a 1-D DeviceMesh, "
            "or the group_name of a group created with torch.distributed.new_group"
        ) from None


def process_group_of(group: object) -> dist.ProcessGroup:
    """The ProcessGroup behind ``group`` (ProcessGroup, 1-D DeviceMesh or group name)."""
    if not dist.is_available() or not dist.is_initialized():
        raise _not_initialised()
    if isinstance(group, dist.ProcessGroup):
        return group
    if isinstance(group, str):
        return _from_name(group)
    if group is dist.GroupMember.NON_GROUP_MEMBER or (isinstance(group, int) and not isinstance(group, bool)
                                                      and group == dist.GroupMember.NON_GROUP_MEMBER):
        raise ValueError(
            f"group={group!r} is torch.distributed.GroupMember.NON_GROUP_MEMBER: this process (global rank "
            f"{dist.get_rank()}) is not a member of the group it was given (torch.distributed.new_group returns "
            "that value on the ranks outside the group); call the operator only on the group's ranks, e.g. "
            "`if group != dist.GroupMember.NON_GROUP_MEMBER: ...`"
        )
    if group is None:
        raise TypeError("group=None: pass a ProcessGroup (torch.distributed.group.WORLD for every rank), a 1-D "
                        "DeviceMesh or a group name")
    if isinstance(group, DeviceMesh):
        if group.ndim != 1:
            raise ValueError(
                f"group: a DeviceMesh with {group.ndim} dims was given (shape {tuple(group.shape)}); pass a 1-D "
                "mesh, e.g. mesh['tp'], or its ProcessGroup"
            )
        return group.get_group()
    raise TypeError(
        f"group must be a torch.distributed ProcessGroup, a 1-D DeviceMesh or a group name, "
        f"got {type(group).__name__}"
    )


def resolve_group(group: object) -> GroupHandle:
    """Resolve ``group`` and read its rank, size, member ranks and backend."""
    pg = process_group_of(group)
    world = dist.get_world_size(pg)
    rank = dist.get_rank(pg)
    if rank < 0:
        raise ValueError(
            f"group {pg.group_name!r}: this process (global rank {dist.get_rank()}) is not a member; call the "
            "operator only on the ranks of the group"
        )
    ranks = tuple(dist.get_process_group_ranks(pg))
    return GroupHandle(pg=pg, name=pg.group_name, rank=rank, world=world, ranks=ranks,
                       backend=str(dist.get_backend(pg)))


def group_name_of(group: object) -> str:
    """The name hocket's custom-op schemas carry for ``group`` (a name passes through unchecked)."""
    if isinstance(group, str):
        if not group:
            raise ValueError("group='' is empty; pass a ProcessGroup, a 1-D DeviceMesh or a group name")
        return group
    return process_group_of(group).group_name
