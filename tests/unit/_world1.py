"""A one-rank gloo process group in the test process, for unit tests of the operators' dispatch."""

from __future__ import annotations

import pytest
import torch.distributed as dist

import hocket.ops as H


def world1_group():
    """Generator behind a module-scoped ``pg`` fixture: the group, then its teardown (skips when this
    process already has a default group)."""
    if dist.is_initialized():
        pytest.skip("a default process group already exists in this process")
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield dist.group.WORLD
    finally:
        H.close_contexts()
        dist.destroy_process_group()
