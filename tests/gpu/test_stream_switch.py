"""hocket.transport.stream_switch.on_stream: the cheap current-stream switch of the transports."""

from __future__ import annotations

import pytest
import torch

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

from hocket.transport.stream_switch import on_stream  # noqa: E402


def test_work_inside_runs_on_the_stream_and_the_previous_stream_comes_back():
    before = torch.cuda.current_stream()
    side = torch.cuda.Stream()
    x = torch.randn(1 << 20, device="cuda")
    with on_stream(side) as s:
        assert s is side and torch.cuda.current_stream() == side
        y = x * 2
        done = side.record_event()
    assert torch.cuda.current_stream() == before
    torch.cuda.current_stream().wait_event(done)
    torch.testing.assert_close(y, x * 2)


def test_exceptions_restore_the_stream():
    before = torch.cuda.current_stream()
    with pytest.raises(ValueError, match="inside"):
        with on_stream(torch.cuda.Stream()):
            raise ValueError("inside")
    assert torch.cuda.current_stream() == before


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")
def test_a_stream_of_another_device_leaves_the_current_device_as_it_was():
    torch.cuda.set_device(0)
    other = torch.cuda.Stream(device=1)
    before_other = torch.cuda.current_stream(1)
    with on_stream(other):
        assert torch.cuda.current_stream(1) == other
    assert torch.cuda.current_device() == 0
    assert torch.cuda.current_stream(1) == before_other
