"""Graph-pass tests: traced graphs over a fake process group (no communication happens)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import torch.distributed as dist

from hocket.core.plan import Plan
from hocket.graph import GraphPlanner

GRAPH_CLUSTER = "cpu-host"
"""A described cluster, so planning never depends on what this machine's probe finds."""


class FakeWorld:
    """``torch.distributed`` initialised with the ``fake`` backend at a chosen world size."""

    def __init__(self) -> None:
        self.world: int | None = None

    def __call__(self, world: int) -> str:
        """(Re)initialise with ``world`` ranks (this process is rank 0); returns the group name."""
        from torch.testing._internal.distributed.fake_pg import FakeStore

        if self.world != world:
            self.close()
            dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world)
            self.world = world
        return dist.group.WORLD.group_name

    def close(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()
        self.world = None


@pytest.fixture(scope="module")
def fake_world() -> Iterator[FakeWorld]:
    # module scope: the fake group must not outlive tests/graph (later tiers expect no default group)
    if dist.is_initialized():
        pytest.skip("a process group is already initialised in this process")
    world = FakeWorld()
    yield world
    world.close()


def _forced(strategy: str, chunks: int = 2) -> Callable[[object], Plan]:
    return lambda site: Plan(strategy=strategy, chunks=chunks if strategy not in ("sequential", "bulk") else 1)


@pytest.fixture(scope="session")
def planner_for() -> Callable[[str | None], GraphPlanner]:
    """``planner_for("chunked")``: a GraphPlanner that gives every site that plan (None: the planner's own)."""
    def make(strategy: str | None = None) -> GraphPlanner:
        return GraphPlanner(cluster=GRAPH_CLUSTER, plan_for=_forced(strategy) if strategy else None)
    return make
