"""Bounded waits, the transport table and the resource contexts (no processes needed)."""

from __future__ import annotations

import pytest
import torch

from hocket.ops.context import ContextRegistry, OpContext, recording_buffers
from hocket.transport.pending import Pending, TransportError
from hocket.transport.registry import available_transports, get_transport, register_transport


class StuckWork:
    def __init__(self):
        self.timeouts = []

    def wait(self, timeout=None):
        self.timeouts.append(timeout)
        raise RuntimeError("Timed out waiting 2000ms for recv operation to complete")


def test_timeout_becomes_a_clear_transport_error(monkeypatch):
    monkeypatch.setenv("HOCKET_TIMEOUT_S", "2.5")
    work = StuckWork()
    pending = Pending([work], what="all-gather", group_name="7", on_cuda=False)
    with pytest.raises(TransportError) as info:
        pending.wait()
    msg = str(info.value)
    assert "all-gather" in msg and "'7'" in msg and "2.5 s" in msg and "HOCKET_TIMEOUT_S" in msg
    assert work.timeouts[0].total_seconds() == pytest.approx(2.5)
    pending.wait()  # a handle is consumed by its first wait
    assert len(work.timeouts) == 1


def test_unknown_transport_is_named_and_new_ones_register():
    with pytest.raises(ValueError, match="copy_engine"):
        get_transport("copy_engine", group=None)
    register_transport("test_only", lambda group: ("made", group))
    try:
        assert get_transport("test_only", "g") == ("made", "g")
        assert "test_only" in available_transports()
    finally:
        from hocket.transport import registry

        registry._FACTORIES.pop("test_only")


def test_context_reuses_buffers_by_role_and_shape_and_closes():
    ctx = OpContext(group_name="g", device=torch.device("cpu"), dtype=torch.bfloat16, max_buffers=3)
    a = ctx.buffer("stage0", (4, 5))
    assert ctx.buffer("stage0", [4, 5]) is a and a.dtype == torch.bfloat16
    assert ctx.buffer("stage1", (4, 5)) is not a
    assert ctx.buffer("acc", (4, 5), torch.float32).dtype == torch.float32
    ctx.buffer("other", (1,))  # evicts the least recently used (stage0 was used before stage1)
    assert ctx.buffer("stage0", (4, 5)) is not a
    assert ctx.nbytes > 0
    ctx.close()
    assert ctx.closed and ctx.nbytes == 0
    with pytest.raises(RuntimeError, match="closed"):
        ctx.buffer("stage0", (4, 5))


def test_a_zeroed_buffer_is_zero_when_made_and_then_keeps_what_callers_write():
    ctx = OpContext(group_name="g", device=torch.device("cpu"), dtype=torch.float32, max_buffers=2)
    z = ctx.buffer("own", (3, 4), zeroed=True)
    assert torch.count_nonzero(z) == 0
    z[0].fill_(7.0)  # the same buffer on the next call, not zeroed again (no fill on the hot path)
    again = ctx.buffer("own", (3, 4), zeroed=True)
    assert again is z and torch.count_nonzero(again[0] - 7.0) == 0 and torch.count_nonzero(again[1:]) == 0
    ctx.buffer("a", (1,))
    ctx.buffer("b", (1,))  # evicts "own": made again, zeroed again
    fresh = ctx.buffer("own", (3, 4), zeroed=True)
    assert fresh is not z and torch.count_nonzero(fresh) == 0


def test_buffers_recorded_while_capturing_outlive_their_eviction():
    """What CapturedCall relies on: the buffers handed out inside recording_buffers() stay the caller's
    even after the context drops them (a graph keeps replaying their addresses)."""
    ctx = OpContext(group_name="g", device=torch.device("cpu"), dtype=torch.float32, max_buffers=2)
    before = ctx.buffer("stage", (4, 4))
    with recording_buffers() as got, recording_buffers() as inner:
        staged = ctx.buffer("stage", (4, 4))
        ring = ctx.buffer("ring", (8,))
    assert staged is before and [id(t) for t in got] == [id(staged), id(ring)] == [id(t) for t in inner]
    ctx.buffer("other", (2,))
    ctx.buffer("more", (3,))  # both recorded buffers are evicted from the context
    assert ctx.buffer("stage", (4, 4)) is not staged and ctx.buffer("ring", (8,)) is not ring
    assert got[0] is staged and got[1] is ring  # the recording still holds the originals
    ctx.buffer("after", (5,))
    assert len(got) == 2  # nothing is recorded once the block has closed


def test_registry_keys_contexts_by_group_device_dtype():
    reg = ContextRegistry()
    a = reg.get("g1", torch.device("cpu"), torch.float32)
    assert reg.get("g1", torch.device("cpu"), torch.float32) is a
    assert reg.get("g1", torch.device("cpu"), torch.bfloat16) is not a
    reg.get("g2", torch.device("cpu"), torch.float32)
    assert reg.close("g1") == 2 and a.closed
    assert reg.close() == 1
