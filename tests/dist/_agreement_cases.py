"""Rank-side helpers of tests/dist/test_agreement_ranks.py."""

from __future__ import annotations

import torch
import torch.distributed as dist

from hocket.ops.agreement import all_ranks_ok, settle_replay
from hocket.transport.group import resolve_group


def ranks_ok(case: dict) -> tuple[bool, bool]:
    """(all_ranks_ok of this rank's entry in ``case["oks"]``, settle_replay of its entry in ``case["replays"]``)."""
    group = resolve_group(dist.group.WORLD)
    rank = dist.get_rank()
    ok = all_ranks_ok(group, case["oks"][rank], device=torch.device("cpu"))
    replay = settle_replay(group, "toy", lambda: case["replays"][rank], device=torch.device("cpu"))
    return ok, replay
