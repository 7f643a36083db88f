"""Symmetric-memory layouts, the copy-engine / host-staged transports' refusals, and the tile_fused
executor's transport check: everything that runs without a GPU."""

from __future__ import annotations

import random

import pytest
import torch

from hocket.core.plan import Plan
from hocket.transport.group import GroupHandle
from hocket.transport.symm_mem import ALIGN_BYTES, plan_layout, symm_memory_available


def test_layout_regions_are_aligned_disjoint_and_in_bounds():
    rng = random.Random()
    dtypes = [torch.int32, torch.bfloat16, torch.float32, torch.uint8, torch.float64]
    regions = [(f"r{i}", [rng.randint(0, 50) for _ in range(rng.randint(1, 3))], rng.choice(dtypes))
               for i in range(rng.randint(1, 8))]
    layout, total = plan_layout(regions)
    spans = sorted((r.offset_bytes, r.offset_bytes + r.nbytes) for r in layout.values())
    for region in layout.values():
        assert region.offset_bytes % ALIGN_BYTES == 0
        assert region.offset_bytes + region.nbytes <= total
    assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(spans, spans[1:]))
    assert [layout[name].shape for name, _, _ in regions] == [tuple(shape) for _, shape, _ in regions]


def test_layout_rejects_duplicate_names_and_negative_dims():
    with pytest.raises(ValueError, match="appears twice"):
        plan_layout([("a", (2,), torch.int32), ("a", (3,), torch.int32)])
    with pytest.raises(ValueError, match="negative dim"):
        plan_layout([("a", (2, -1), torch.int32)])


def _gloo_group() -> GroupHandle:
    return GroupHandle(pg=None, name="g", rank=0, world=2, ranks=(0, 1), backend="gloo")


def test_peer_transports_refuse_gloo_groups_with_the_fix():
    from hocket.transport.copy_engine import CopyEngineTransport
    from hocket.transport.host_relay import HostStagedTransport

    with pytest.raises(ValueError, match="copy_engine.*NCCL.*transport='collective'"):
        CopyEngineTransport(_gloo_group())
    with pytest.raises(ValueError, match="host_staged.*transport='collective'"):
        HostStagedTransport(_gloo_group())


def test_tile_fused_names_the_transport_it_needs():
    from hocket.ops.lowering import tile_fused

    class Rt:
        world, rank = 2, 0

    a = torch.randn(4, 3)
    for fn, args in ((tile_fused.gather_matmul, (a, [torch.randn(3, 2)], 0, False)),
                     (tile_fused.matmul_scatter, (a, torch.randn(3, 2), "sum", 0)),
                     (tile_fused.matmul_all_reduce, (a, torch.randn(3, 2), "sum"))):
        with pytest.raises(ValueError, match="transport='copy_engine'"):
            fn(*args, Rt(), Plan(strategy="tile_fused", chunks=2))


def test_gpu_strategies_register_only_with_symmetric_memory():
    from hocket.ops.executors import supported
    from hocket.transport.registry import available_transports

    registered = "tile_fused" in supported("ag_mm")
    assert registered == symm_memory_available()
    assert ("copy_engine" in available_transports()) == registered
    assert ("host_staged" in available_transports()) == registered
