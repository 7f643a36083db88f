"""NCCL SM budgets: which capped communicator serves a plan's comm_sms, and what is refused (CPU;
the communicators themselves are made on GPUs by benchmarks/bench_multigpu.py --sm-budgets)."""

import random

import pytest

from hocket.transport.group import GroupHandle
from hocket.transport.registry import get_transport
from hocket.transport.sm_budget import SmBudgets, budget_group, create_sm_budgets


def _handle(name: str, backend: str = "nccl") -> GroupHandle:
    return GroupHandle(pg=None, name=name, rank=0, world=2, ranks=(0, 1), backend=backend)


@pytest.mark.parametrize("trial", range(10))
def test_pick_takes_the_largest_cap_within_the_request(trial):
    caps = sorted(random.sample(range(1, 129), random.randint(1, 5)))
    budgets = SmBudgets(group_name="g", groups={c: _handle(f"g/sms{c}") for c in caps})
    request = random.randint(1, 140)
    cap, handle = budgets.pick(request)
    assert handle.name == f"g/sms{cap}"
    within = [c for c in caps if c <= request]
    assert cap == (max(within) if within else min(caps))


def test_no_budget_made_means_the_groups_own_communicator():
    group = _handle("plain")
    assert budget_group(group, 16) is None and budget_group(group, None) is None
    assert get_transport("collective", group, comm_sms=16).group is group


def test_budgets_refuse_gloo_and_bad_caps():
    with pytest.raises(ValueError, match="NCCL group.*gloo"):
        create_sm_budgets(_handle("cpu", backend="gloo"), (8,))
    with pytest.raises(ValueError, match="caps=.*ints >= 1"):
        create_sm_budgets(_handle("g"), (8, 0))
