"""hocket.transport.copy_2d on a GPU: strided blocks to and from pinned host memory, on a side stream."""

from __future__ import annotations

import pytest
import torch

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

from hocket.transport.copy_2d import copy_2d_async  # noqa: E402


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("rows,cols", [((0, 128), (0, 1024)), ((3, 131), (17, 1000)), ((5, 6), (0, 7))])
def test_a_block_lands_in_place_and_nothing_around_it_moves(dtype, rows, cols):
    m, n = 200, 1100
    side = torch.cuda.Stream()
    src = torch.randn(rows[1] - rows[0], cols[1] - cols[0], device="cuda", dtype=dtype)
    host = torch.full((m, n), -7.0, dtype=dtype, pin_memory=True)
    side.wait_stream(torch.cuda.current_stream())
    copy_2d_async(host[rows[0]:rows[1], cols[0]:cols[1]], src, side)
    side.synchronize()
    want = torch.full((m, n), -7.0, dtype=dtype)
    want[rows[0]:rows[1], cols[0]:cols[1]] = src.cpu()
    assert torch.equal(host, want)
    # and back: a block of the host matrix into a strided device view
    dev = torch.full((m, n), 3.0, device="cuda", dtype=dtype)
    copy_2d_async(dev[rows[0]:rows[1], cols[0]:cols[1]], host[rows[0]:rows[1], cols[0]:cols[1]], side)
    side.synchronize()
    want_dev = torch.full((m, n), 3.0, dtype=dtype)
    want_dev[rows[0]:rows[1], cols[0]:cols[1]] = src.cpu()
    assert torch.equal(dev.cpu(), want_dev)
