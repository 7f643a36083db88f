"""Discrete-event engine: dependencies, exclusive in-order resources, contention, errors."""

from __future__ import annotations

import math
import random

import pytest

from hocket.sim.engine import TaskGraph, simulate


def _random_graph(rng: random.Random, *, n_tasks: int, owners: int, contention: bool) -> TaskGraph:
    g = TaskGraph()
    res = [g.resource(f"r{o}", kind) for o in range(owners) for kind in ("compute", "link", "copy_engine")]
    for t in range(n_tasks):
        k = rng.randint(1, min(3, len(res)))
        chosen = rng.sample(res, k)
        deps = sorted(rng.sample(range(t), rng.randint(0, min(3, t)))) if t else []
        kind = "compute" if g.resource_kind[chosen[0]] == "compute" else rng.choice(["collective", "copy_engine"])
        slow = {"collective": 1 + rng.random(), "compute": 1 + rng.random() / 2} if contention else None
        g.add(name=f"t{t}", resources=chosen, work_ms=rng.uniform(0.01, 5.0), deps=deps, kind=kind,
              slowdown_by=slow)
    return g


def _list_schedule(g: TaskGraph) -> list[float]:
    """Reference: start = max(deps' ends, previous task on each resource) in insertion order."""
    free = [0.0] * len(g.resource_names)
    end = []
    for t in range(len(g)):
        s = max([end[d] for d in g.deps[t]] + [free[r] for r in g.resources[t]])
        end.append(s + g.work_ms[t])
        for r in g.resources[t]:
            free[r] = end[t]
    return end


@pytest.mark.parametrize("contention", [False, True])
def test_dependencies_respected_and_resources_exclusive(contention):
    rng = random.Random()
    g = _random_graph(rng, n_tasks=rng.randint(40, 120), owners=rng.randint(1, 4), contention=contention)
    tl = simulate(g)
    for t in range(len(g)):
        assert math.isfinite(tl.start_ms[t]) and math.isfinite(tl.end_ms[t])
        assert tl.end_ms[t] >= tl.start_ms[t] + g.work_ms[t] * (1 - 1e-9)  # slowdowns only lengthen
        for d in g.deps[t]:
            assert tl.start_ms[t] >= tl.end_ms[d] - 1e-9
    for r in range(len(g.resource_names)):
        tasks = [t for t in range(len(g)) if r in g.resources[t]]
        for a, b in zip(tasks, tasks[1:]):  # one at a time, in insertion order
            assert tl.start_ms[b] >= tl.end_ms[a] - 1e-9


def test_without_contention_equals_list_schedule():
    rng = random.Random()
    g = _random_graph(rng, n_tasks=rng.randint(50, 150), owners=rng.randint(1, 3), contention=False)
    tl = simulate(g)
    ref = _list_schedule(g)
    assert tl.end_ms == pytest.approx(ref, rel=1e-12, abs=1e-9)
    assert tl.makespan_ms == pytest.approx(max(ref))


def test_hand_computed_pipeline_makespan():
    # comm_i then mm_i (depends on comm_i); link and compute overlap: 2 + 3 + 3 = 8 ms.
    rng = random.Random()
    comm_ms, mm_ms = rng.uniform(1, 2), rng.uniform(2, 4)
    g = TaskGraph()
    c, link = g.resource("rank0", "compute"), g.resource("rank0", "link")
    prev_mm = None
    for i in range(3):
        a = g.add(name=f"comm{i}", resources=[link], work_ms=comm_ms, kind="collective")
        prev_mm = g.add(name=f"mm{i}", resources=[c], work_ms=mm_ms, deps=[a])
    tl = simulate(g)
    assert tl.makespan_ms == pytest.approx(comm_ms + 3 * mm_ms)
    assert tl.end_ms[prev_mm] == tl.makespan_ms
    assert tl.busy_ms()["rank0/link"] == pytest.approx(3 * comm_ms)


def test_contention_slows_overlapping_work_exactly():
    # mm (work w) starts with a transfer of length L running beside it; slowdown f while they overlap.
    rng = random.Random()
    w, length, f = rng.uniform(3, 6), rng.uniform(0.5, 2), rng.uniform(1.1, 2.0)
    g = TaskGraph()
    c, link = g.resource("r", "compute"), g.resource("r", "link")
    g.add(name="xfer", resources=[link], work_ms=length, kind="copy_engine")
    mm = g.add(name="mm", resources=[c], work_ms=w, slowdown_by={"copy_engine": f})
    tl = simulate(g)
    done_during_overlap = length / f
    assert tl.end_ms[mm] == pytest.approx(length + (w - done_during_overlap))
    # a different owner's transfer does not slow it
    g2 = TaskGraph()
    c2, link2 = g2.resource("a", "compute"), g2.resource("b", "link")
    g2.add(name="xfer", resources=[link2], work_ms=length, kind="copy_engine")
    mm2 = g2.add(name="mm", resources=[c2], work_ms=w, slowdown_by={"copy_engine": f})
    assert simulate(g2).end_ms[mm2] == pytest.approx(w)


def test_overlap_can_lose_against_sequential():
    # A transfer that slows compute by more than its own length makes overlap worse than serial.
    g = TaskGraph()
    c, link = g.resource("r", "compute"), g.resource("r", "link")
    g.add(name="xfer", resources=[link], work_ms=1.0, kind="copy_engine", slowdown_by={"compute": 3.0})
    g.add(name="mm", resources=[c], work_ms=4.0, slowdown_by={"copy_engine": 3.0})
    assert simulate(g).makespan_ms > 1.0 + 4.0


def test_collective_is_gated_by_slowest_participant():
    rng = random.Random()
    fast_ms, slow_ms, comm_ms = rng.uniform(1, 2), rng.uniform(3, 5), rng.uniform(0.5, 1)
    g = TaskGraph()
    deps = []
    links = []
    for rank, work in (("fast", fast_ms), ("slow", slow_ms)):
        deps.append(g.add(name=f"mm.{rank}", resources=[g.resource(rank, "compute")], work_ms=work))
        links.append(g.resource(rank, "link"))
    coll = g.add(name="allreduce", resources=links, work_ms=comm_ms, deps=deps, kind="collective")
    tl = simulate(g)
    assert tl.start_ms[coll] == pytest.approx(slow_ms)
    assert tl.end_ms[coll] == pytest.approx(slow_ms + comm_ms)


def test_zero_work_tasks_and_empty_graph():
    assert simulate(TaskGraph()).makespan_ms == 0.0
    g = TaskGraph()
    r = g.resource("r", "compute")
    a = g.add(name="marker", resources=[r], work_ms=0.0)
    b = g.add(name="mm", resources=[r], work_ms=1.5, deps=[a])
    tl = simulate(g)
    assert tl.end_ms[a] == 0.0 and tl.end_ms[b] == pytest.approx(1.5)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(work_ms=-1.0), "work_ms"),
        (dict(work_ms=float("nan")), "work_ms"),
        (dict(work_ms=1.0, deps=[5]), "dependency"),
        (dict(work_ms=1.0, slowdown_by={"collective": 0.5}), "slowdown_by"),
        (dict(work_ms=1.0, resources=[]), "resources"),
        (dict(work_ms=1.0, resources=[99]), "resource id"),
    ],
)
def test_bad_task_input_names_the_argument(kwargs, match):
    g = TaskGraph()
    r = g.resource("r", "compute")
    kwargs = {"resources": [r], **kwargs}
    with pytest.raises(ValueError, match=match):
        g.add(name="bad", **kwargs)
