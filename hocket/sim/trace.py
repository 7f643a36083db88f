"""Chrome-trace / Perfetto JSON export of a Timeline (deterministic: same input, same bytes).

One process (``pid``) per owner (a rank or a class of identical ranks, e.g. a pipeline
stage), one thread (``tid``) per resource of that owner. Every task becomes one complete
event (``ph: "X"``) per resource it used, with ``ts``/``dur`` in microseconds and the
task's metadata (site name, plan, ...) under ``args``. Process and thread names are
metadata events (``ph: "M"``), as the format expects.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Mapping

from hocket.sim.engine import Timeline

_US_DECIMALS = 3  # nanosecond resolution; rounding keeps the bytes stable


def _us(ms: float) -> float:
    return round(ms * 1000.0, _US_DECIMALS)


def chrome_trace(timeline: Timeline, *, metadata: Mapping[str, object] | None = None) -> dict:
    """Build the trace as a dict (``{"traceEvents": [...], "displayTimeUnit": "ms", ...}``)."""
    g = timeline.graph
    tids: list[int] = []
    per_owner_count = [0] * len(g.owner_names)
    for r, owner in enumerate(g.resource_owner):
        tids.append(per_owner_count[owner])
        per_owner_count[owner] += 1

    meta_events: list[dict] = []
    for pid, name in enumerate(g.owner_names):
        meta_events.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": name}})
        meta_events.append({"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0,
                            "args": {"sort_index": pid}})
    for r, kind in enumerate(g.resource_kind):
        pid = g.resource_owner[r]
        meta_events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tids[r], "args": {"name": kind}})
        meta_events.append({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tids[r],
                            "args": {"sort_index": tids[r]}})

    work_events: list[tuple[tuple[int, int, float, int], dict]] = []
    for t, res in enumerate(g.resources):
        start_ms = timeline.start_ms[t]
        dur_ms = timeline.end_ms[t] - start_ms
        args: dict[str, object] = {"task": t, "work_ms": round(g.work_ms[t], 9)}
        if g.work_ms[t] > 0.0 and dur_ms > 0.0:
            args["slowdown"] = round(dur_ms / g.work_ms[t], 6)
        if g.meta[t]:
            args.update(g.meta[t])
        for r in res:
            pid = g.resource_owner[r]
            event = {
                "name": g.names[t], "cat": g.kinds[t], "ph": "X", "pid": pid, "tid": tids[r],
                "ts": _us(start_ms), "dur": _us(dur_ms), "args": args,
            }
            work_events.append(((pid, tids[r], event["ts"], t), event))
    work_events.sort(key=lambda item: item[0])
    trace: dict[str, object] = {
        "traceEvents": meta_events + [e for _, e in work_events],
        "displayTimeUnit": "ms",
    }
    if metadata:
        trace["otherData"] = dict(metadata)
    return trace


def trace_json(timeline: Timeline, *, metadata: Mapping[str, object] | None = None) -> str:
    """The trace as a JSON string with sorted keys (byte-stable for the same timeline)."""
    return json.dumps(chrome_trace(timeline, metadata=metadata), sort_keys=True, separators=(",", ":"))


def write_trace(timeline: Timeline, path: str | Path, *, metadata: Mapping[str, object] | None = None) -> Path:
    """Write the trace JSON to ``path`` (open it in ui.perfetto.dev or chrome://tracing)."""
    out = Path(path)
    if out.parent and not out.parent.exists():
        raise ValueError(f"trace path {str(out)!r}: folder {str(out.parent)!r} does not exist; create it first")
    out.write_text(trace_json(timeline, metadata=metadata) + "\n", encoding="utf-8")
    return out
