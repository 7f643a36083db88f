"""The relay watchdog that bounds device-side stream waits (hocket.transport.relay_watchdog),
with fake events and a fake clock; one test runs the real thread."""

from __future__ import annotations

import time

import pytest

from hocket.kernels import stream_memops
from hocket.transport.pending import TransportError
from hocket.transport.relay_watchdog import RelayWatchdog


class FakeEvent:
    def __init__(self) -> None:
        self.passed = False

    def query(self) -> bool:
        return self.passed


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def make(timeout_s=5.0):
    clock, released = FakeClock(), []
    dog = RelayWatchdog(name="relay-test", timeout_s=timeout_s, release=lambda: released.append(clock.now),
                        describe=lambda: "rank 1 sent 3, read 2", clock=clock)
    return dog, clock, released


def test_finished_calls_are_forgotten_and_nothing_is_released():
    dog, clock, released = make()
    events = [FakeEvent() for _ in range(3)]
    for i, e in enumerate(events):
        dog.track(f"call {i}", e)
    assert dog.outstanding == 3
    events[0].passed = events[1].passed = True
    dog.poll()
    assert dog.outstanding == 1
    clock.now += 4.0
    events[2].passed = True
    dog.poll()
    assert dog.outstanding == 0 and released == []
    dog.check()


def test_a_call_that_never_finishes_is_released_once_and_raises_with_the_detail():
    dog, clock, released = make(timeout_s=5.0)
    dog.track("host-staged all-gather (messages up to 7)", FakeEvent())
    dog.poll()  # starts its clock
    clock.now += 4.9
    dog.poll()
    assert released == []
    clock.now += 0.2
    dog.poll()
    assert len(released) == 1
    with pytest.raises(TransportError, match=r"all-gather \(messages up to 7\).*5 s.*rank 1 sent 3, read 2"):
        dog.check()
    with pytest.raises(TransportError):  # the relay is unusable from then on
        dog.track("next call", FakeEvent())
    dog.poll()
    assert len(released) == 1


def test_the_clock_of_a_queued_call_starts_when_it_becomes_the_oldest():
    dog, clock, released = make(timeout_s=5.0)
    first, second = FakeEvent(), FakeEvent()
    dog.track("first", first)
    dog.track("second", second)
    dog.poll()
    clock.now += 4.5
    first.passed = True
    dog.poll()  # first done; second becomes the oldest now (t = 104.5)
    clock.now += 4.5
    dog.poll()
    assert released == [] and dog.outstanding == 1
    clock.now += 1.0
    dog.poll()
    assert released and "second" in str(pytest.raises(TransportError, dog.check).value)


@pytest.mark.parametrize("kwargs", [{"timeout_s": 0}, {"timeout_s": -1.0}, {"timeout_s": 1.0, "poll_s": 0}])
def test_bad_bounds_are_rejected(kwargs):
    with pytest.raises(ValueError, match="must be > 0"):
        RelayWatchdog(name="x", release=lambda: None, **kwargs)


@pytest.mark.timeout(30)
def test_the_thread_releases_a_stuck_call_and_wait_idle_returns():
    released = []
    dog = RelayWatchdog(name="threaded", timeout_s=0.2, release=lambda: released.append(1), poll_s=0.01).start()
    try:
        dog.track("stuck call", FakeEvent())
        dog.wait_idle()  # bounded: the stuck call times out
        deadline = time.monotonic() + 10
        while not released and time.monotonic() < deadline:
            time.sleep(0.01)
        assert released == [1]
        with pytest.raises(TransportError, match="stuck call"):
            dog.check()
    finally:
        dog.close()


@pytest.mark.parametrize("value", [-1, 2**32])
def test_stream_memop_values_must_fit_32_bits(value):
    with pytest.raises(ValueError, match="32 unsigned bits"):
        stream_memops._check_value(value)


def test_memops_are_reported_unavailable_without_cuda(monkeypatch):
    monkeypatch.setattr(stream_memops.torch.cuda, "is_available", lambda: False)
    assert stream_memops.available() is False


def test_memops_pass_the_stream_handle_and_raise_only_on_a_driver_error(monkeypatch):
    """The driver calls get the stream's handle, the address and the value; a nonzero CUresult becomes an
    error naming the operation and the fix, a zero one nothing (no message is built per call)."""
    from types import SimpleNamespace

    calls, result = [], {"code": 0}

    def fake(name):
        def call(handle, address, value, flags):
            calls.append((name, handle.value, address, value, flags))
            return result["code"]
        return call

    monkeypatch.setattr(stream_memops, "_driver", lambda: {n: fake(n) for n in ("cuStreamWaitValue32",
                                                                                "cuStreamWriteValue32")})
    stream = SimpleNamespace(cuda_stream=0x1234)
    stream_memops.wait_value_geq(stream, 0x100, 7)
    stream_memops.write_value(stream, 0x104, 8)
    stream_memops.wait_value_eq(stream, 0x108, 0)
    assert calls == [("cuStreamWaitValue32", 0x1234, 0x100, 7, stream_memops.WAIT_GEQ),
                     ("cuStreamWriteValue32", 0x1234, 0x104, 8, stream_memops.WRITE_DEFAULT),
                     ("cuStreamWaitValue32", 0x1234, 0x108, 0, stream_memops.WAIT_EQ)]
    result["code"] = 801
    with pytest.raises(RuntimeError, match=r"cuStreamWaitValue32\(address 0x100, >= 9\).*801.*transport='collective'"):
        stream_memops.wait_value_geq(stream, 0x100, 9)
    with pytest.raises(RuntimeError, match=r"cuStreamWaitValue32\(address 0x108, == 1\)"):
        stream_memops.wait_value_eq(stream, 0x108, 1)
    with pytest.raises(RuntimeError, match=r"cuStreamWriteValue32\(address 0x104, 9\)"):
        stream_memops.write_value(stream, 0x104, 9)
