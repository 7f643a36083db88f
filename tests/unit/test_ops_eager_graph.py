"""hocket.ops.eager_graph.EagerGraph's bookkeeping with a stand-in for CapturedCall (no GPU here: the
real graphs replay in tests/gpu/test_eager_graphs_nccl.py), and CPU calls that never replay."""

from __future__ import annotations

import pytest
import torch
from _world1 import world1_group

import hocket.ops as H
from hocket.ops import captured, dispatch, eager_graph
from hocket.ops.eager_graph import EagerGraph, EagerGraphWarning


class FakeCapture:
    """Stands in for CapturedCall: clones the example inputs, runs ``fn`` once as a warm-up, and on each
    call copies the given inputs into its own and runs ``fn`` on those, returning one fixed output object
    per call as a graph returns its own output tensors."""

    made: list = []

    def __init__(self, fn, *inputs, warmup, what):
        self.fn, self.what, self.warmup = fn, what, warmup
        self.inputs = tuple(t.clone() for t in inputs)
        fn(*self.inputs)
        self.output = None
        FakeCapture.made.append(self)

    def __call__(self, *inputs):
        for mine, given in zip(self.inputs, inputs):
            mine.copy_(given)
        result = self.fn(*self.inputs)
        if self.output is None:
            self.output = result
        else:  # a graph writes its outputs in place
            self.output[0].copy_(result[0])
            for o, r in zip(self.output[1], result[1]):
                o.copy_(r)
        return self.output


@pytest.fixture
def fake_capture(monkeypatch):
    FakeCapture.made = []
    monkeypatch.setattr(captured, "CapturedCall", FakeCapture)
    eager_graph.release_all()
    yield FakeCapture.made
    eager_graph.release_all()


def _run(calls):
    def run(a, bs, dim, flag, runtime, plan):
        calls.append((a.clone(), dim, flag, runtime, plan))
        return a * 2, [a @ b for b in bs]
    return run


def test_first_call_is_issued_then_captured_then_replayed_with_fresh_outputs(fake_capture):
    calls = []
    graph = EagerGraph(_run(calls), "toy", torch.device("cpu"), limit=4)
    runtime, plan = object(), object()
    a1, b = torch.randn(3, 4), torch.randn(4, 5)
    out1 = graph(a1, [b], 0, True, runtime, plan)
    assert graph.step is None and not fake_capture and len(calls) == 1  # issued: no capture for one call
    a2 = torch.randn(3, 4)
    out2 = graph(a2, [b], 0, True, runtime, plan)
    assert len(fake_capture) == 1 and fake_capture[0].warmup == 1 and fake_capture[0].what == "toy"
    assert eager_graph.graphs_in_use() == 1
    # the non-tensor arguments reach the run as they were (same objects), the tensors as the graph's inputs
    assert all(c[3] is runtime and c[4] is plan and c[1] == 0 and c[2] is True for c in calls)
    a3 = torch.randn(3, 4)
    out3 = graph(a3, [b], 0, True, runtime, plan)
    assert len(fake_capture) == 1  # captured once
    for out, a in [(out1, a1), (out2, a2), (out3, a3)]:  # every result is its own: later replays left it alone
        torch.testing.assert_close(out[0], a * 2)
        torch.testing.assert_close(out[1][0], a @ b)
    assert out3[1][0] is not fake_capture[0].output[1][0] and out3[0] is not fake_capture[0].output[0]


def test_the_process_limit_leaves_further_signatures_issued(fake_capture):
    first = EagerGraph(_run([]), "one", torch.device("cpu"), limit=1)
    second = EagerGraph(_run([]), "two", torch.device("cpu"), limit=1)
    a, b = torch.randn(2, 3), torch.randn(3, 2)
    for _ in range(3):
        first(a, [b], 0, False, None, None)
        second(a, [b], 0, False, None, None)
    assert first.step is not None and second.step is None and second.eager_only
    assert len(fake_capture) == 1 and eager_graph.graphs_in_use() == 1
    none = EagerGraph(_run([]), "none", torch.device("cpu"), limit=0)
    for _ in range(3):
        torch.testing.assert_close(none(a, [b], 0, False, None, None)[1][0], a @ b)
    assert none.step is None


def test_a_capture_that_fails_leaves_the_signature_eager_with_a_warning(fake_capture, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("capture failed")
    monkeypatch.setattr(captured, "CapturedCall", broken)
    agreed = []
    graph = EagerGraph(_run([]), "toy", torch.device("cpu"), limit=2, agree=lambda ok: agreed.append(ok) or ok)
    a, b = torch.randn(2, 3), torch.randn(3, 2)
    graph(a, [b], 0, False, None, None)
    with pytest.warns(EagerGraphWarning, match=r"toy: the call could not be captured.*RuntimeError: capture failed"):
        out = graph(a, [b], 0, False, None, None)
    torch.testing.assert_close(out[1][0], a @ b)  # the call itself ran eagerly
    assert agreed == [False] and graph.eager_only and graph.step is None and eager_graph.graphs_in_use() == 0
    graph(a, [b], 0, False, None, None)
    assert agreed == [False]  # never tried again


def test_a_rank_that_captured_goes_eager_when_another_could_not(fake_capture):
    graph = EagerGraph(_run([]), "toy", torch.device("cpu"), limit=2, agree=lambda ok: False)
    a, b = torch.randn(2, 3), torch.randn(3, 2)
    graph(a, [b], 0, False, None, None)
    with pytest.warns(EagerGraphWarning, match="failed on another rank"):
        out = graph(a, [b], 0, False, None, None)
    torch.testing.assert_close(out[1][0], a @ b)
    assert len(fake_capture) == 1 and graph.step is None and eager_graph.graphs_in_use() == 0


def test_arguments_of_another_structure_are_a_bug_reported_by_name(fake_capture):
    graph = EagerGraph(_run([]), "hocket::toy[chunked(2)]", torch.device("cpu"), limit=2)
    a, b = torch.randn(2, 3), torch.randn(3, 2)
    graph(a, [b], 0, False, None, None)
    graph(a, [b], 0, False, None, None)
    with pytest.raises(RuntimeError, match=r"hocket::toy\[chunked\(2\)\]: a replayed call's arguments changed"):
        graph(a, [b, b], 0, False, None, None)
    with pytest.raises(RuntimeError, match="changed structure"):
        graph(a, [b], 1, False, None, None)


@pytest.fixture(scope="module")
def pg():
    yield from world1_group()


@pytest.mark.parametrize("mode", ["on", "auto"])
def test_cpu_calls_are_never_replayed(pg, monkeypatch, mode):
    monkeypatch.setenv("HOCKET_EAGER_GRAPHS", mode)
    dispatch.clear_prepared_cache()
    a, b = torch.randn(5, 4), torch.randn(4, 3)
    for _ in range(3):
        _, (out,) = H.all_gather_matmul(a, [b], 0, pg, plan={"strategy": "chunked", "chunks": 2})
        torch.testing.assert_close(out, a @ b)
    assert dispatch._PREPARED and all(p.graph is None for p in dispatch._PREPARED.values())
    dispatch.clear_prepared_cache()


def test_a_bad_flag_fails_the_call_by_name(pg, monkeypatch):
    monkeypatch.setenv("HOCKET_EAGER_GRAPHS", "maybe")
    dispatch.clear_prepared_cache()
    with pytest.raises(ValueError, match="HOCKET_EAGER_GRAPHS='maybe'"):
        H.all_gather_matmul(torch.randn(2, 2), [torch.randn(2, 2)], 0, pg)
