"""Chrome-trace export is well-formed and byte-stable; the PNG timeline is written and stable."""

from __future__ import annotations

import json
import math
import random

import pytest

from hocket.sim.engine import TaskGraph, simulate
from hocket.sim.plot import plot_timeline
from hocket.sim.trace import chrome_trace, trace_json, write_trace


def _small_timeline(rng: random.Random):
    g = TaskGraph()
    owners = [f"stage{i}" for i in range(rng.randint(2, 4))]
    prev = None
    for i in range(rng.randint(10, 30)):
        owner = rng.choice(owners)
        kind = rng.choice(["compute", "collective", "copy_engine"])
        res_kind = "compute" if kind == "compute" else ("link" if kind == "collective" else "copy_engine")
        deps = [prev] if prev is not None and rng.random() < 0.6 else []
        prev = g.add(name=f"task{i}", resources=[g.resource(owner, res_kind)], work_ms=rng.uniform(0.001, 3.0),
                     deps=deps, kind=kind, slowdown_by={"collective": 1.2},
                     meta={"site": f"layer{i}.qkv", "plan": {"strategy": "chunked", "chunks": 2}})
    # one collective across two owners
    g.add(name="allreduce", resources=[g.resource(owners[0], "link"), g.resource(owners[1], "link")],
          work_ms=rng.uniform(0.5, 1.0), deps=[prev], kind="collective")
    return simulate(g)


def _check_schema(trace: dict, tl) -> None:
    assert set(trace) >= {"traceEvents", "displayTimeUnit"}
    events = trace["traceEvents"]
    assert isinstance(events, list) and events
    names = {}
    x_events = []
    for e in events:
        assert e["ph"] in ("X", "M")
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int)
        assert isinstance(e["name"], str) and e["name"]
        assert isinstance(e.get("args", {}), dict)
        if e["ph"] == "M":
            assert e["name"] in ("process_name", "thread_name", "process_sort_index", "thread_sort_index")
            if e["name"].endswith("_name"):
                names[(e["name"], e["pid"], e["tid"] if e["name"] == "thread_name" else None)] = e["args"]["name"]
        else:
            x_events.append(e)
            for key in ("ts", "dur"):
                assert isinstance(e[key], (int, float)) and math.isfinite(e[key]) and e[key] >= 0
            assert isinstance(e["cat"], str)
    # every X event's process and thread has a name; one event per (task, resource)
    for e in x_events:
        assert ("process_name", e["pid"], None) in names
        assert ("thread_name", e["pid"], e["tid"]) in names
    g = tl.graph
    assert len(x_events) == sum(len(r) for r in g.resources)
    # ts/dur are microseconds of the engine's milliseconds
    by_task = {e["args"]["task"]: e for e in x_events}
    for t in range(len(g)):
        assert by_task[t]["ts"] == pytest.approx(tl.start_ms[t] * 1000, abs=1e-3)
        assert by_task[t]["dur"] == pytest.approx((tl.end_ms[t] - tl.start_ms[t]) * 1000, abs=2e-3)
    # a resource never shows two overlapping events
    lanes: dict = {}
    for e in x_events:
        lanes.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
    for spans in lanes.values():
        spans.sort()
        for (s0, e0), (s1, _) in zip(spans, spans[1:]):
            assert s1 >= e0 - 2e-3


def test_trace_is_well_formed():
    rng = random.Random()
    tl = _small_timeline(rng)
    trace = json.loads(trace_json(tl, metadata={"command": "test"}))
    _check_schema(trace, tl)
    assert trace["otherData"] == {"command": "test"}
    assert chrome_trace(tl) == json.loads(trace_json(tl))


def test_trace_is_deterministic(tmp_path):
    seed = random.randrange(2**32)
    a = write_trace(_small_timeline(random.Random(seed)), tmp_path / "a.json").read_bytes()
    b = write_trace(_small_timeline(random.Random(seed)), tmp_path / "b.json").read_bytes()
    assert a == b
    c = write_trace(_small_timeline(random.Random(seed + 1)), tmp_path / "c.json").read_bytes()
    assert c != a


def test_png_written_and_deterministic(tmp_path):
    seed = random.randrange(2**32)
    a = plot_timeline(_small_timeline(random.Random(seed)), tmp_path / "a.png").read_bytes()
    b = plot_timeline(_small_timeline(random.Random(seed)), tmp_path / "b.png").read_bytes()
    assert a[:8] == b"\x89PNG\r\n\x1a\n"
    assert a == b


def test_missing_output_folder_is_a_clear_error(tmp_path):
    tl = _small_timeline(random.Random())
    with pytest.raises(ValueError, match="does not exist"):
        write_trace(tl, tmp_path / "nope" / "t.json")
    with pytest.raises(ValueError, match="does not exist"):
        plot_timeline(tl, tmp_path / "nope" / "t.png")
