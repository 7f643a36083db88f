"""NCCL SM budgets (``Plan.comm_sms``): communicators created up front, each capped at a number of CTAs.

NCCL fixes how many SMs (CTAs, one per channel) a communicator's kernels may use when the
communicator is created (``ncclConfig_t.maxCTAs``; torch exposes it as
``ProcessGroupNCCL.Options().config.max_ctas``), not per call. So a plan's ``comm_sms`` is served by
one of a few process groups over the same ranks, made once with different caps:

    budgets = create_sm_budgets(group, (8, 16, 32))   # every rank, once, e.g. after init
    ...
    H.all_gather_matmul(..., plan=Plan(strategy="chunked", chunks=2, comm_sms=16))

:func:`budget_group` picks, for a requested ``comm_sms``, the communicator with the largest cap
that does not exceed it (the smallest cap when all exceed it). Where no budgets were created for
a group (gloo, or a caller that did not ask), ``comm_sms`` is not enforced and the group's own
communicator is used; :func:`budget_group` then returns None so callers can say so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.distributed as dist

from hocket.transport.group import GroupHandle


@dataclass(frozen=True, kw_only=True)
class SmBudgets:
    """The capped communicators of one group: ``groups[cap]`` is a GroupHandle over the same ranks."""

    group_name: str
    groups: dict[int, GroupHandle]

    def pick(self, comm_sms: int) -> tuple[int, GroupHandle]:
        caps = sorted(self.groups)
        fitting = [c for c in caps if c <= comm_sms]
        cap = fitting[-1] if fitting else caps[0]
        return cap, self.groups[cap]


class SmBudgetRegistry:
    """The budgets made so far, per group name (explicit create/close, docs/architecture.md's rules of the house)."""

    def __init__(self) -> None:
        self._by_group: dict[str, SmBudgets] = {}

    def create(self, group: GroupHandle, caps: Sequence[int], *, device: torch.device | None = None) -> SmBudgets:
        if "nccl" not in group.backend:
            raise ValueError(f"SM budgets need an NCCL group; group {group.name!r} uses {group.backend!r} "
                             f"(gloo runs on CPU threads, it has no SM budget): create them on the NCCL group")
        bad = [c for c in caps if not isinstance(c, int) or c < 1]
        if not caps or bad:
            raise ValueError(f"caps={tuple(caps)!r} must be ints >= 1 (CTAs per NCCL kernel), e.g. (8, 16, 32)")
        options_type = getattr(dist, "ProcessGroupNCCL", None)
        if options_type is None or not hasattr(options_type.Options(), "config"):
            raise RuntimeError("this torch build exposes no ProcessGroupNCCL.Options().config (ncclConfig_t); "
                               "SM budgets need torch >= 2.1 built with NCCL")
        device = device or torch.device("cuda", torch.cuda.current_device())
        groups = {}
        for cap in sorted(set(caps)):  # every rank creates the same groups in the same order
            options = options_type.Options()
            options.config.max_ctas = cap
            options.config.min_ctas = 1
            pg = dist.new_group(ranks=list(group.ranks), backend="nccl", pg_options=options)
            warm = torch.ones(1, device=device)
            dist.all_reduce(warm, group=pg)  # the communicator exists (and is capped) before the first plan runs
            groups[cap] = GroupHandle(pg=pg, name=f"{group.name}/sms{cap}", rank=group.rank, world=group.world,
                                      ranks=group.ranks, backend=group.backend)
        torch.cuda.synchronize(device)
        budgets = SmBudgets(group_name=group.name, groups=groups)
        self._by_group[group.name] = budgets
        return budgets

    def get(self, group_name: str) -> SmBudgets | None:
        return self._by_group.get(group_name)

    def close(self, group_name: str | None = None) -> int:
        names = [n for n in self._by_group if group_name is None or n == group_name]
        for name in names:
            for handle in self._by_group.pop(name).groups.values():
                dist.destroy_process_group(handle.pg)
        return len(names)


BUDGETS = SmBudgetRegistry()


def create_sm_budgets(group: GroupHandle, caps: Sequence[int] = (8, 16, 32), *,
                      device: torch.device | None = None) -> SmBudgets:
    """Create (collectively: every rank of ``group``, same ``caps``) one capped communicator per cap."""
    return BUDGETS.create(group, caps, device=device)


def budget_group(group: GroupHandle, comm_sms: int | None) -> tuple[int, GroupHandle] | None:
    """(cap, group handle) that serves ``comm_sms`` on ``group``, or None (no budget asked or made)."""
    if comm_sms is None:
        return None
    budgets = BUDGETS.get(group.name)
    return budgets.pick(comm_sms) if budgets is not None else None


def close_sm_budgets(group_name: str | None = None) -> int:
    """Destroy the capped communicators (all, or those of one group); call on every rank."""
    return BUDGETS.close(group_name)
