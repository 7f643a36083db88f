"""Serial code must not pass as overlap: an instrumented transport records when each all-to-all is issued and
waited, the executors record their grouped GEMMs and the shared expert, and each strategy's promised order is
asserted on every rank (forward and backward)."""

from __future__ import annotations

import pytest
from _moe_cases import trace


def _split(events):
    mark = events.index(("mark", "backward"))
    return events[:mark], events[mark + 1:]


def _at(events, what, label):
    hits = [i for i, e in enumerate(events) if e == (what, label)]
    assert hits, f"no {what} {label!r} in {events}"
    return hits[0]


def _between(events, what, label, inside):
    return _at(events, "issue", label) < _at(events, *inside) < _at(events, "wait", label)


@pytest.mark.parametrize("splits", ["exchanged", "padded"])
def test_token_blocks_pipeline(pool2, splits):
    for events in pool2.run(trace, {"strategy": "token_blocks", "chunks": 3, "splits": splits}):
        fwd, _ = _split(events)
        for i in range(2):  # block i+1's dispatch issued before block i's GEMM and waited after it
            assert _between(fwd, "issue", f"dispatch:{i + 1}", ("gemm", f"a2a_mm:{i}")), fwd
        for i in range(1, 3):  # block i-1's combine in flight while block i's GEMM runs
            assert _between(fwd, "issue", f"combine:{i - 1}", ("gemm", f"mm_a2a:{i}")), fwd


def test_per_source_own_rows_first(pool4):
    for events in pool4.run(trace, {"strategy": "per_source"}):
        fwd, _ = _split(events)
        own = _at(fwd, "gemm", "a2a_mm:0")
        for j in range(1, 4):  # the peers' rounds are in flight while the own rows compute
            assert _at(fwd, "issue", f"dispatch:{j}") < own < _at(fwd, "wait", f"dispatch:{j}"), fwd
            assert _at(fwd, "wait", f"dispatch:{j}") < _at(fwd, "gemm", f"a2a_mm:{j}")
        assert ("issue", "dispatch:0") not in fwd  # own rows do not travel


def test_expert_groups_arrived_first(pool2):
    for events in pool2.run(trace, {"strategy": "expert_groups", "chunks": 2}):
        fwd, _ = _split(events)
        assert _between(fwd, "issue", "dispatch:1", ("gemm", "a2a_mm:0")), fwd
        assert _between(fwd, "issue", "combine:0", ("gemm", "mm_a2a:1")), fwd


@pytest.mark.parametrize("plan", [{"strategy": "shared_overlap"}, {"strategy": "token_blocks", "chunks": 2},
                                  {"strategy": "per_source"}, {"strategy": "expert_groups", "chunks": 2}])
def test_shared_expert_in_the_dispatch_gap(pool2, plan):
    for events in pool2.run(trace, plan, True):
        fwd, _ = _split(events)
        assert fwd.count(("shared", "shared")) == 1
        label = "dispatch:1" if plan["strategy"] == "per_source" else "dispatch:0"
        assert _between(fwd, "issue", label, ("shared", "shared")), fwd


def test_sequential_is_serial(pool2):
    """The instrumentation can tell: sequential waits for the dispatch before its GEMM, and runs no shared
    expert inside the call."""
    for events in pool2.run(trace, {"strategy": "sequential"}, True):
        fwd, _ = _split(events)
        assert _at(fwd, "wait", "dispatch:0") < _at(fwd, "gemm", "a2a_mm:0")
        assert ("shared", "shared") not in fwd


@pytest.mark.parametrize("plan", [{"strategy": "sequential"}, {"strategy": "token_blocks", "chunks": 2},
                                  {"strategy": "per_source"}, {"strategy": "expert_groups", "chunks": 2},
                                  {"strategy": "shared_overlap", "splits": "padded"}])
def test_backward_weight_grads_in_the_gaps(pool2, plan):
    for events in pool2.run(trace, plan):
        _, bwd = _split(events)
        issued = [e[1] for e in bwd if e[0] == "issue"]
        gaps = [label for label in issued
                if any(e[0] == "wgrad" for e in bwd[_at(bwd, "issue", label):_at(bwd, "wait", label)])]
        assert gaps, f"no weight-gradient GEMM between an all-to-all's issue and wait: {bwd}"
        # a data-gradient GEMM (the combine's first piece) runs before the weight-gradient GEMM
        first = min(i for i, e in enumerate(bwd) if e[0] == "gemm" and e[1].startswith("mm_a2a:"))
        assert first < _at(bwd, "wgrad", "mm_a2a"), bwd


def test_disable_runs_sequential(pool2):
    from _moe_cases import trace_disabled

    for events in pool2.run(trace_disabled, {"strategy": "token_blocks", "chunks": 3}):
        fwd, _ = _split(events)
        assert [e for e in fwd if e[0] == "issue"] == [("issue", "dispatch:0"), ("issue", "combine:0")], fwd
        assert _at(fwd, "wait", "dispatch:0") < _at(fwd, "gemm", "a2a_mm:0")
